"""Basic auth against PBKDF2 hashes: the right password passes, every other one fails, and the
cache of verified passwords never lets a wrong one through."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import threading

import pytest

from exporter import webauth
from exporter.webauth import BasicAuth, Verdict, hash_password, parse_hash

ITERATIONS = 1000  # the default's cost is for real configs, not for tests


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def auth() -> BasicAuth:
    return BasicAuth({"prometheus": hash_password("s3cret", iterations=ITERATIONS),
                      "grafana": hash_password("other", iterations=ITERATIONS)})


def test_a_wrong_password_fails_after_the_right_one_was_remembered(auth: BasicAuth) -> None:
    assert auth.check(header("prometheus", "s3cret"))
    assert auth.check(header("prometheus", "s3cret"))  # now from the cache
    assert not auth.check(header("prometheus", "wrong"))
    assert not auth.check(header("prometheus", ""))
    assert not auth.check(header("prometheus", "s3cret "))
    assert auth.check(header("prometheus", "s3cret"))


def test_one_users_password_does_not_open_another(auth: BasicAuth) -> None:
    assert auth.check(header("prometheus", "s3cret"))
    assert not auth.check(header("grafana", "s3cret"))
    assert auth.check(header("grafana", "other"))
    assert not auth.check(header("prometheus", "other"))


def test_an_unknown_user_fails_even_with_the_decoys_password(auth: BasicAuth) -> None:
    # The decoy hash (the first user's) is checked for unknown users so timing matches.
    assert not auth.check(header("nobody", "s3cret"))
    assert not auth.check(header("nobody", "s3cret"))
    assert not auth.check(header("Prometheus", "s3cret"))


@pytest.mark.parametrize("bad", [None, "", "Bearer abc", "Basic", "Basic !!!notbase64",
                                 "Basic " + base64.b64encode(b"prometheus").decode(),
                                 "basic " + base64.b64encode(b"prometheus:s3cret").decode(),
                                 "Basic é"])
def test_malformed_headers_are_refused(auth: BasicAuth, bad: str | None) -> None:
    assert not auth.check(bad)


def test_a_password_with_a_colon_is_split_at_the_first_colon() -> None:
    auth = BasicAuth({"u": hash_password("a:b", iterations=ITERATIONS)})
    assert auth.check(header("u", "a:b")) and not auth.check(header("u", "a"))


def test_the_hash_is_django_pbkdf2_sha256() -> None:
    encoded = hash_password("pw", iterations=1234, salt="salty")
    scheme, iterations, salt, digest = encoded.split("$")
    assert (scheme, iterations, salt) == ("pbkdf2_sha256", "1234", "salty")
    assert base64.b64decode(digest) == hashlib.pbkdf2_hmac("sha256", b"pw", b"salty", 1234)
    assert parse_hash(encoded) == (1234, b"salty", base64.b64decode(digest))
    # A fresh random salt each time: the same password hashes differently.
    assert hash_password("pw", iterations=1) != hash_password("pw", iterations=1)
    assert len(hash_password("pw", iterations=1).split("$")[2]) >= 16


@pytest.mark.parametrize(("encoded", "message"), [
    ("md5$1$salt$AAAA", "expected pbkdf2_sha256$<iterations>$<salt>$<hash>"),
    ("sha1$1$salt$AAAA", "expected pbkdf2_sha256$<iterations>$<salt>$<hash>"),
    ("pbkdf2_sha256$1$salt", "expected pbkdf2_sha256$<iterations>$<salt>$<hash>"),
    ("pbkdf2_sha256$1$salt$AAAA$more", "expected pbkdf2_sha256$<iterations>$<salt>$<hash>"),
    ("pbkdf2_sha256$0$salt$AAAA", "bad iterations or salt"),
    ("pbkdf2_sha256$x$salt$AAAA", "bad iterations or salt"),
    ("pbkdf2_sha256$10$$AAAA", "bad iterations or salt"),
    ("pbkdf2_sha256$10$salt$not base64!", "the hash part is not base64"),
    ("pbkdf2_sha256$10$salt$AAAA*", "the hash part is not base64"),  # not silently dropped
    ("pbkdf2_sha256$2000001$salt$AAAA", "2000001 iterations is over the limit of 2000000"),
    # A 5,000-digit count is quoted cut to 20 characters.
    ("pbkdf2_sha256$" + "9" * 5000 + "$salt$AAAA",
     "9" * 17 + r"\.\.\. iterations is over the limit of 2000000"),  # (a pattern)
    # A digest one byte short or one byte long is no SHA-256 digest.
    ("pbkdf2_sha256$10$salt$" + base64.b64encode(b"x" * 31).decode(),
     "the hash part is 31 bytes, not the 32 of a SHA-256 digest"),
    ("pbkdf2_sha256$10$salt$" + base64.b64encode(b"x" * 33).decode(),
     "the hash part is 33 bytes, not the 32 of a SHA-256 digest"),
])
def test_bad_hashes_say_what_is_wrong(encoded: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("$", r"\$")):
        parse_hash(encoded)


def test_no_users_is_a_programmer_error() -> None:
    with pytest.raises(ValueError, match="at least one user"):
        BasicAuth({})


ZERO_DIGEST = "A" * 43 + "="  # 32 zero bytes, the length of a SHA-256 digest


def test_iterations_from_one_to_the_limit_are_accepted() -> None:
    assert parse_hash(f"pbkdf2_sha256$1$s${ZERO_DIGEST}") == (1, b"s", b"\0" * 32)
    assert parse_hash(f"pbkdf2_sha256$2000000$s${ZERO_DIGEST}")[0] == 2_000_000


def test_new_hashes_use_owasps_iterations_and_a_16_byte_salt() -> None:
    _, iterations, salt, _ = hash_password("pw").split("$")
    assert iterations == "600000"
    assert len(base64.urlsafe_b64decode(salt + "==")) == 16


def test_a_header_with_characters_outside_base64_is_refused(auth: BasicAuth) -> None:
    good = base64.b64encode(b"prometheus:s3cret").decode()
    assert auth.check("Basic " + good)
    assert not auth.check("Basic " + good + "*")


def test_hash_command_prints_a_hash_of_the_password_typed_twice(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    answers = iter(["typed", "typed"])
    monkeypatch.setattr(webauth.getpass, "getpass", lambda prompt: next(answers))
    webauth.main()
    printed = capsys.readouterr().out.strip()
    assert BasicAuth({"u": printed}).check(header("u", "typed"))
    for first, second in (("typed", "typo"), ("typo", "typed")):
        answers = iter([first, second])
        with pytest.raises(SystemExit, match="the passwords differ"):
            webauth.main()


def test_python_m_exporter_webauth_runs_the_hash_command() -> None:
    # No terminal: getpass reads the two lines from stdin (and warns on stderr).
    done = subprocess.run([sys.executable, "-m", "exporter.webauth"], input="pw\npw\n",
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert BasicAuth({"u": done.stdout.strip()}).check(header("u", "pw"))


class Hashes:
    """hashlib stand-in for webauth that counts PBKDF2 rounds (and still computes them)."""

    def __init__(self) -> None:
        self.rounds: list[int] = []

    def pbkdf2_hmac(self, name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
        self.rounds.append(iterations)
        return hashlib.pbkdf2_hmac(name, password, salt, iterations)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> Hashes:
    counting = Hashes()
    monkeypatch.setattr(webauth, "hashlib", counting)
    return counting


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(webauth, "time", fake)
    return fake


def test_every_failed_attempt_costs_the_largest_iteration_count(hashes: Hashes) -> None:
    auth = BasicAuth({"fast": hash_password("a", iterations=100),
                      "slow": hash_password("b", iterations=700)})
    for user, password in (("fast", "wrong"), ("slow", "wrong"), ("ghost", "a"), ("fast", "a")):
        hashes.rounds.clear()
        auth.verify(header(user, password), "c")
        assert sum(hashes.rounds) == 700, (user, hashes.rounds)
    hashes.rounds.clear()
    assert auth.verify(header("fast", "a"), "c") is Verdict.OK and hashes.rounds == []  # cached


def test_the_cache_keeps_the_most_recently_used_pairs_up_to_its_size(hashes: Hashes) -> None:
    users = {f"u{i}": hash_password(f"p{i}", iterations=10) for i in range(3)}
    auth = BasicAuth(users, cached=2)
    for i in (0, 1):
        assert auth.check(header(f"u{i}", f"p{i}"))
    hashes.rounds.clear()
    assert auth.check(header("u0", "p0")) and auth.check(header("u1", "p1"))
    assert hashes.rounds == []  # two pairs fit in a cache of two
    assert auth.check(header("u2", "p2"))  # a third pushes out the least recently used (u0)
    hashes.rounds.clear()
    assert auth.check(header("u1", "p1")) and auth.check(header("u2", "p2"))
    assert hashes.rounds == []
    assert auth.check(header("u0", "p0")) and hashes.rounds == [10]


def test_a_verified_pair_never_opens_a_pair_with_the_same_bytes_split_elsewhere(
        hashes: Hashes) -> None:
    # "a" + "bc" and "ab" + "c" are the same bytes joined: the cache must tell them apart.
    auth = BasicAuth({"a": hash_password("bc", iterations=10),
                      "ab": hash_password("xyz", iterations=30)})
    assert auth.verify(header("a", "bc"), "c") is Verdict.OK
    hashes.rounds.clear()
    assert auth.verify(header("ab", "c"), "c") is Verdict.DENIED
    assert hashes.rounds == [30]  # checked against its own hash, not let in from the cache
    assert auth.verify(header("ab", "xyz"), "c") is Verdict.OK
    hashes.rounds.clear()
    assert auth.verify(header("a", "bxyz"), "c") is Verdict.DENIED  # and the other way round
    assert hashes.rounds == [10, 20]
    hashes.rounds.clear()
    assert auth.verify(header("a", "bc"), "c") is Verdict.OK and hashes.rounds == []


def test_a_renewed_config_keeps_the_verified_passwords_of_unchanged_users_only(
        hashes: Hashes, clock: Clock) -> None:
    def pbkdf2(password: str, salt: str) -> str:
        return hash_password(password, iterations=10, salt=salt)

    old = {"same": pbkdf2("p", "s1"), "up": pbkdf2("p", "s1"), "down": pbkdf2("p", "s2"),
           "gone": pbkdf2("p", "s1")}
    auth = BasicAuth(old, burst=5, per_second=0.0)
    assert [auth.verify(header(user, "p"), "c") for user in old] == [Verdict.OK] * 4
    # Reloaded: "same" read again from the file (an equal hash, another string), "up" and
    # "down" with new passwords (their new hashes sorting after and before the old ones),
    # "gone" removed.
    new = {"same": (old["same"] + " ")[:-1], "up": pbkdf2("q", "s2"), "down": pbkdf2("q", "s1")}
    renewed = auth.renewed(new)
    hashes.rounds.clear()
    assert renewed.verify(header("same", "p"), "d") is Verdict.OK and hashes.rounds == []
    assert [renewed.verify(header(user, "p"), "d") for user in ("up", "down", "gone")] == [
        Verdict.DENIED] * 3
    assert hashes.rounds == [10] * 3  # each hashed again, and refused
    assert renewed.verify(header("up", "q"), "d") is renewed.verify(header("down", "q"), "d") \
        is Verdict.OK
    # The clients' budgets go on: "c" spent 4 of its 5 runs before the reload.
    assert [renewed.verify(header("up", "x"), "c") for _ in range(2)] == [Verdict.DENIED,
                                                                         Verdict.BUSY]
    hashes.rounds.clear()  # the old one is as it was: "gone" still verified there
    assert auth.verify(header("gone", "p"), "c") is Verdict.OK and hashes.rounds == []


def test_a_renewed_config_hashes_one_at_a_time_with_the_one_it_replaced() -> None:
    users = {"u": hash_password("p", iterations=10)}
    auth = BasicAuth(users)
    renewed = auth.renewed(users)
    assert auth._hashing.acquire(blocking=False)  # a hash under way in the old one
    try:
        assert renewed.verify(header("u", "wrong"), "c") is Verdict.BUSY
    finally:
        auth._hashing.release()
    assert renewed.verify(header("u", "wrong"), "c") is Verdict.DENIED


def test_a_client_gets_ten_failed_attempts_then_one_a_second(clock: Clock) -> None:
    auth = BasicAuth({"u": hash_password("p", iterations=10)})  # the defaults
    wrong = header("u", "wrong")
    assert [auth.verify(wrong, "c") for _ in range(11)] == [Verdict.DENIED] * 10 + [Verdict.BUSY]
    clock.now += 0.5  # half a run refilled: not enough
    assert auth.verify(wrong, "c") is Verdict.BUSY
    clock.now += 0.5  # one whole run
    assert auth.verify(wrong, "c") is Verdict.DENIED
    assert auth.verify(wrong, "c") is Verdict.BUSY
    clock.now += 1000  # refills up to the burst, no further
    assert [auth.verify(wrong, "c") for _ in range(11)] == [Verdict.DENIED] * 10 + [Verdict.BUSY]


def test_a_burst_of_one_allows_exactly_one_attempt(clock: Clock) -> None:
    auth = BasicAuth({"u": hash_password("p", iterations=10)}, burst=1, per_second=2.0)
    assert auth.verify(header("u", "x"), "c") is Verdict.DENIED
    assert auth.verify(header("u", "x"), "c") is Verdict.BUSY
    clock.now += 0.5  # per_second=2: one run back after half a second
    assert auth.verify(header("u", "x"), "c") is Verdict.DENIED


def test_budgets_of_4096_clients_are_kept_and_the_oldest_forgotten_beyond(clock: Clock) -> None:
    auth = BasicAuth({"u": hash_password("p", iterations=1)}, burst=1, per_second=0.0)
    wrong = header("u", "x")
    assert auth.verify(wrong, "first") is Verdict.DENIED
    assert auth.verify(wrong, "first") is Verdict.BUSY
    for i in range(4095):
        assert auth.verify(wrong, f"10.0.{i // 256}.{i % 256}") is Verdict.DENIED
    assert auth.verify(wrong, "first") is Verdict.BUSY  # 4096 clients: all remembered
    assert auth.verify(wrong, "one-more") is Verdict.DENIED  # the 4097th...
    assert auth.verify(wrong, "10.0.0.0") is Verdict.DENIED  # ...made it forget the oldest


def test_one_hash_at_a_time_by_default_and_a_second_is_told_busy_not_queued(
        monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck:
        """PBKDF2 that holds the hashing slot until released."""

        def pbkdf2_hmac(self, name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
            entered.set()
            release.wait(10)
            return hashlib.pbkdf2_hmac(name, password, salt, iterations)

    auth = BasicAuth({"u": hash_password("p", iterations=10)})  # the defaults
    monkeypatch.setattr(webauth, "hashlib", Stuck())
    verdicts: dict[str, Verdict] = {}

    def attempt(client: str) -> None:
        verdicts[client] = auth.verify(header("u", "wrong"), client)

    first = threading.Thread(target=attempt, args=("a",), daemon=True)
    second = threading.Thread(target=attempt, args=("b",), daemon=True)
    try:
        first.start()
        assert entered.wait(5), "the first attempt never started hashing"
        second.start()
        second.join(2)  # answered at once, not after the first attempt's hash
        assert verdicts.get("b") is Verdict.BUSY, verdicts
    finally:
        release.set()
        first.join(10)
        second.join(10)
    assert verdicts["a"] is Verdict.DENIED


def test_the_cache_keeps_256_pairs_by_default(hashes: Hashes) -> None:
    users = {f"u{i}": hash_password(f"p{i}", iterations=1) for i in range(257)}
    auth = BasicAuth(users)  # the defaults
    for i in range(257):  # a client each: the per-client budget is not what this is about
        assert auth.check(header(f"u{i}", f"p{i}"), f"c{i}")
    hashes.rounds.clear()
    for i in range(1, 257):  # the 256 most recent pairs are remembered...
        assert auth.check(header(f"u{i}", f"p{i}"), f"c{i}")
    assert hashes.rounds == []
    assert auth.check(header("u0", "p0"), "c0") and hashes.rounds == [1]  # ...the oldest is not


def test_a_budget_refills_for_the_whole_time_since_the_clients_last_attempt(clock: Clock) -> None:
    auth = BasicAuth({"u": hash_password("p", iterations=10)}, burst=1, per_second=0.01)
    assert auth.verify(header("u", "x"), "c") is Verdict.DENIED  # at t=100 s
    assert auth.verify(header("u", "x"), "c") is Verdict.BUSY
    clock.now = 250.0  # 150 s at 0.01 a second: one and a half runs back
    assert auth.verify(header("u", "x"), "c") is Verdict.DENIED


def test_attempts_told_busy_do_not_refill_the_budget_faster(clock: Clock) -> None:
    auth = BasicAuth({"u": hash_password("p", iterations=10)}, burst=1, per_second=1.0)
    wrong = header("u", "x")
    assert auth.verify(wrong, "c") is Verdict.DENIED  # t=100 s: the one run spent
    got = []
    for clock.now in (100.25, 100.5, 100.75, 101.0, 101.0):  # polling while it refills
        got.append(auth.verify(wrong, "c"))
    assert got == [Verdict.BUSY] * 3 + [Verdict.DENIED, Verdict.BUSY]  # one run a second


def test_the_options_are_named_so_a_number_cannot_land_in_the_wrong_one() -> None:
    # burst, per_second, concurrent_hashes and cached are all numbers: by name only.
    users = {"u": hash_password("p", iterations=10)}
    with pytest.raises(TypeError):
        BasicAuth(users, 5)  # type: ignore[misc]
    assert BasicAuth(users=users, burst=5).check(header("u", "p"))


def test_a_user_name_not_in_utf8_is_denied_not_a_crash(auth: BasicAuth) -> None:
    raw = "Basic " + base64.b64encode(b"prom\xffetheus:s3cret").decode()
    assert auth.verify(raw) is Verdict.DENIED
    assert auth.check(header("prometheus", "s3cret"))  # the real user is unaffected
