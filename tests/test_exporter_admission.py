"""exporter.admission without a server: who gets a connection, who is refused and whose
connection is taken back, at each cap's edge (the live exporter's tests are
tests/test_exporter_http_hostile.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.admission import Admission, client_key


@pytest.mark.parametrize(("address", "key"), [
    ("10.0.0.7", "10.0.0.7"),
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("::ffff:192.168.3.4", "192.168.3.4"),
    ("fe80::1%eth0", "fe80::/64"),
    ("10.0.0.7%x", "10.0.0.7"),
    ("", ""),
    ("not an address", "not an address"),
    ("/run/exporter.sock", "/run/exporter.sock"),
])
def test_a_client_is_its_ipv4_address_or_its_ipv6_64(address: str, key: str) -> None:
    assert client_key(address) == key


def test_two_addresses_of_one_64_are_one_client_and_two_64s_two() -> None:
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:1")
    assert client_key("2001:db8::1") != client_key("2001:db8:0:1::1")


@pytest.mark.parametrize(("limits", "ok"), [((1, 1), True), ((0, 1), False), ((1, 0), False),
                                            ((-1, 5), False), ((5, -1), False)])
def test_each_limit_is_at_least_one(limits: tuple[int, int], ok: bool) -> None:
    if ok:
        admission = Admission(*limits)
        assert (admission.max_connections, admission.per_client) == limits
        assert admission.admit("a", 1) and not admission.admit("b", 2)
    else:
        with pytest.raises(ValueError, match=r"^connection limits must be >= 1$"):
            Admission(*limits)


def test_a_client_at_its_own_cap_is_refused_and_nothing_is_taken() -> None:
    admission = Admission(max_connections=10, per_client=2)
    assert [admission.admit("c1", n) for n in ("a", "b", "c")] == [True, True, False]
    assert (admission.held("c1"), admission.total, admission.evicted) == (2, 2, [])
    assert admission.admit("c2", "d") and admission.total == 3


def test_a_full_house_takes_the_oldest_connection_of_the_heaviest_client() -> None:
    admission = Admission(max_connections=4, per_client=3)
    assert admission.admit("light", "l1")
    assert all(admission.admit("heavy", n) for n in ("h1", "h2", "h3"))
    assert admission.admit("new", "n1")
    assert admission.evicted == ["h1"] and admission.total == 4
    assert [admission.held(c) for c in ("light", "heavy", "new")] == [1, 2, 1]
    assert admission.admit("newer", "n2")  # heavy still holds 2, more than 0 + 1
    assert admission.evicted == ["h1", "h2"]
    assert [admission.held(c) for c in ("light", "heavy", "newer")] == [1, 1, 1]


def test_no_connection_is_taken_from_a_client_holding_no_more_than_the_newcomer_would() -> None:
    admission = Admission(max_connections=3, per_client=3)
    assert admission.admit("c1", "a") and admission.admit("c1", "b") and admission.admit("c2", "c")
    assert not admission.admit("c2", "d")  # c1's 2 is not more than c2's 1 + 1
    assert admission.evicted == [] and admission.total == 3
    assert admission.admit("c3", "e")  # c1's 2 is more than 0 + 1
    assert admission.evicted == ["a"] and admission.held("c1") == 1
    assert not admission.admit("c4", "f")  # everyone holds 1 now
    assert admission.total == 3 and admission.held("c4") == 0


def test_the_global_cap_counts_from_its_edge() -> None:
    admission = Admission(max_connections=2, per_client=2)
    assert admission.admit("c1", "a") and admission.admit("c2", "b")
    assert not admission.admit("c3", "c") and admission.total == 2


def test_the_oldest_is_by_admission_order_after_releases() -> None:
    admission = Admission(max_connections=3, per_client=3)
    for n in ("a", "b", "c"):
        admission.admit("c1", n)
    admission.release("c1", "a")
    admission.admit("c1", "a")  # now the newest
    assert admission.admit("c2", "x") and admission.evicted == ["b"]


def test_release_forgets_once_and_ignores_what_it_does_not_hold() -> None:
    admission = Admission(max_connections=5, per_client=3)
    admission.admit("c1", "a")
    admission.admit("c1", "b")
    admission.release("c1", "a")
    assert (admission.held("c1"), admission.total) == (1, 1)
    admission.release("c1", "a")
    admission.release("c1", "zzz")
    admission.release("nobody", "b")
    assert (admission.held("c1"), admission.total) == (1, 1)
    admission.release("c1", "b")
    assert (admission.held("c1"), admission.total) == (0, 0)
    admission.release("c1", "b")
    assert admission.total == 0


def test_an_evicted_connection_is_released_once() -> None:
    admission = Admission(max_connections=2, per_client=2)
    admission.admit("c1", "a")
    admission.admit("c1", "b")
    assert admission.admit("c2", "c") and admission.evicted == ["a"]
    admission.release("c1", "a")  # the caller closes it: already forgotten
    assert admission.total == 2 and admission.held("c1") == 1


def test_a_client_that_let_go_of_everything_is_no_candidate() -> None:
    """With its entry gone, the heaviest is a client that holds something."""
    admission = Admission(max_connections=3, per_client=3)
    admission.admit("gone", "g")
    admission.release("gone", "g")
    for n in ("a", "b", "c"):
        admission.admit("c1", n)
    assert admission.admit("gone", "g2") and admission.evicted == ["a"]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3),
       st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 6)), max_size=20))
def test_the_caps_always_hold_and_the_count_is_what_is_held(
        max_connections: int, per_client: int, ops: list[tuple[bool, int, int]]) -> None:
    """A connection is (its client, a number), as sockets are each their own."""
    admission = Admission(max_connections, per_client)
    held: dict[str, set[tuple[str, int]]] = {}
    for admit, client_no, number in ops:
        client = f"c{client_no}"
        connection = (client, number)
        mine = held.setdefault(client, set())
        if admit and connection not in mine:
            got = admission.admit(client, connection)
            for taken in admission.evicted:
                assert isinstance(taken, tuple)
                owner = taken[0]
                assert owner != client and len(held[owner]) > len(mine) + 1
                held[owner].discard(taken)
            assert len(admission.evicted) <= 1
            admission.evicted.clear()
            if got:
                mine.add(connection)
        elif not admit:
            admission.release(client, connection)
            mine.discard(connection)
        assert admission.total == sum(len(c) for c in held.values()) <= max_connections
        assert all(admission.held(c) == len(conns) <= per_client for c, conns in held.items())


def test_a_client_holding_as_much_as_the_heaviest_takes_nothing_from_itself() -> None:
    admission = Admission(max_connections=3, per_client=3)
    assert admission.admit("c1", "a") and admission.admit("c1", "b") and admission.admit("c2", "c")
    assert not admission.admit("c1", "d")  # c1 is the heaviest: 2 is not more than its 2 + 1
    assert admission.evicted == [] and admission.held("c1") == 2


def test_caps_above_256_are_compared_by_value() -> None:
    """CPython keeps one object for each int up to 256 only: a count of 300 is equal to the
    cap of 300, not the same object."""
    admission = Admission(max_connections=600, per_client=300)
    assert all(admission.admit("c1", ("c1", n)) for n in range(300))
    assert not admission.admit("c1", ("c1", 300))
    assert all(admission.admit("c2", ("c2", n)) for n in range(300))
    assert admission.total == 600
    assert admission.admit("c3", ("c3", 0)) and admission.evicted == [("c1", 0)]
    assert admission.total == 600
