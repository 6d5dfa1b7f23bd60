"""The trial settings' parsers (trial_instrumentation.parsers) on their own: each setting's value
from an argument or an environment variable's text, both sides of every bound, what is refused
and what the message says (issue 36: the parsers mutation target; property-based where a
value is read back)."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trial_instrumentation import names
from trial_instrumentation import parsers as p

LONGEST = names.MAX_LABEL_LENGTH  # 256


def test_a_long_value_is_shown_cut_with_its_length_a_short_one_as_it_is() -> None:
    assert p.shown("x" * 48) == repr("x" * 48)
    assert p.shown("abc") == "'abc'" and p.shown("") == "''"
    assert p.shown("x" * 49) == f"{'x' * 48!r}... (49 characters)"
    assert p.shown(["a"]) == "['a']"
    long_list = ["a" * 30, "b" * 30, "c" * 30]
    assert p.shown(long_list) == repr(long_list)[:48] + "..."
    exactly = ["a" * 46, "b" * 42]  # its repr is 96 characters: shown whole
    assert len(repr(exactly)) == 96 and p.shown(exactly) == repr(exactly)
    assert p.shown(["a" * 46, "b" * 43]) == repr(["a" * 46])[:-2] + "..."


@pytest.mark.parametrize(("value", "kept"), [
    ("http://pushgateway:9091", "http://pushgateway:9091"),
    ("https://pg.example/", "https://pg.example"), ("http://h:9091//", "http://h:9091"),
    ("http://[::1]:9091", "http://[::1]:9091")])
def test_a_url_is_http_or_https_with_a_host(value: str, kept: str) -> None:
    assert p.url(value) == kept


@pytest.mark.parametrize("value", ["pushgateway:9091", "ftp://h", "http://", "http://:9091",
                                   "http://h:99999", "http://h:port", ""])
def test_anything_else_is_not_a_url(value: str) -> None:
    with pytest.raises(ValueError):
        p.url(value)


def test_durations_above_zero_and_a_push_interval_of_at_least_a_tenth() -> None:
    assert p.positive_duration("1ms") == 0.001 and p.positive_duration(5) == 5.0
    for bad in ("0s", 0, -1, "inf", float("nan")):
        with pytest.raises(ValueError, match="must be a duration > 0"):
            p.positive_duration(bad)
    assert p.push_interval("100ms") == 0.1 and p.push_interval("1m") == 60.0
    with pytest.raises(ValueError, match=r"must be at least 0\.1s \(names\.MIN_PUSH_INTERVAL\)"):
        p.push_interval("99ms")


@given(st.integers(min_value=-10**30, max_value=10**30), st.integers(min_value=-5, max_value=5))
def test_an_integer_at_least_the_minimum_whatever_its_size(value: int, minimum: int) -> None:
    parse = p.int_at_least(minimum)
    for given_ in (value, str(value), float(value) if abs(value) < 2**53 else value):
        if value >= minimum:
            assert parse(given_) == value
        else:
            with pytest.raises(ValueError, match=f"must be an integer >= {minimum}"):
                parse(given_)


@pytest.mark.parametrize("value", [1.5, True, False, float("inf")])
def test_what_is_not_a_whole_number_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        p.int_at_least(0)(value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be an integer >= -5"):
        p.int_at_least(-5)(-1.5)  # rounds up to -1: above the minimum, still not whole


@pytest.mark.parametrize("value", ["1.5", "one", "", "0x10", float("nan")])
def test_text_that_is_no_integer_literal_is_refused_as_int_says(value: object) -> None:
    with pytest.raises(ValueError):
        p.int_at_least(0)(value)  # type: ignore[arg-type]


def test_a_label_integer_is_bounded_like_any_label() -> None:
    assert p.label_int(0)("7") == 7
    assert p.label_int(1)(10**255) == 10**255  # 256 digits
    with pytest.raises(ValueError, match="at most 256 characters .* not 257"):
        p.label_int(1)(10**256)
    with pytest.raises(ValueError, match=">= 1"):
        p.label_int(1)(0)


@pytest.mark.parametrize(("value", "ok"), [(0, True), (65535, True), ("9091", True),
                                           (65536, False), (-1, False)])
def test_a_port_is_0_to_65535(value: int | str, ok: bool) -> None:
    if ok:
        assert p.port(value) == int(value)
    else:
        with pytest.raises(ValueError):
            p.port(value)
    with pytest.raises(ValueError, match=r"must be a TCP port, 0\.\.65535"):
        p.port(65536)


def test_labels_are_non_empty_without_a_slash_and_at_most_256_characters() -> None:
    assert p.label("exp-1") == "exp-1" and p.label(7) == "7"  # type: ignore[arg-type]
    assert p.label("x" * LONGEST) == "x" * LONGEST
    for bad in ("", "a/b", "/"):
        with pytest.raises(ValueError, match="non-empty and contain no '/'"):
            p.label(bad)
    with pytest.raises(ValueError, match=f"at most {LONGEST} characters"):
        p.label("x" * (LONGEST + 1))
    assert p.label_value("") == "" and p.label_value("a/b") == "a/b"
    assert p.label_value("x" * LONGEST) == "x" * LONGEST
    with pytest.raises(ValueError, match=f"not {LONGEST + 1}"):
        p.label_value("x" * (LONGEST + 1))


def test_a_schedulers_name_is_made_a_label_not_refused() -> None:
    assert p.scheduler_label("train/ablation/3") == "train-ablation-3"
    assert p.scheduler_label("j" * 300) == "j" * LONGEST
    assert p.scheduler_label(1234) == "1234"  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # an empty one still says nothing
        p.scheduler_label("")


def test_gpu_uuids_are_nvml_ones_sorted_once_each() -> None:
    assert p.gpu_uuids("GPU-b1, GPU-a2,,GPU-b1 ") == ("GPU-a2", "GPU-b1")
    assert p.gpu_uuids(["MIG-1f-2e", "GPU-AB"]) == ("GPU-AB", "MIG-1f-2e")
    assert p.gpu_uuids("") == () and p.gpu_uuids([]) == ()
    for bad in ("GPU-xyz", "gpu-1", "1", "GPU-", "GPU-1 GPU-2"):
        with pytest.raises(ValueError, match="expected NVML UUIDs like GPU-8c9b1f3e-"):
            p.gpu_uuids(bad)
    with pytest.raises(ValueError, match=r"not \['GPU-xyz'\]"):
        p.gpu_uuids("GPU-1,GPU-xyz")
    with pytest.raises(ValueError, match="at most 256 characters"):
        p.gpu_uuids("GPU-" + "a" * 253)
    assert p.gpu_uuids("GPU-" + "a" * 252) == ("GPU-" + "a" * 252,)


def test_a_timing_mode_is_one_of_the_modes() -> None:
    for mode in names.TIMING_MODES:
        assert p.timing_mode(mode) == mode
    with pytest.raises(ValueError, match=r"expected one of \['wall'"):
        p.timing_mode("WALL")


def test_bucket_bounds_rising_and_positive_or_none() -> None:
    assert p.buckets([0.5, 1]) == (0.5, 1.0)
    with pytest.raises(p.NamedError, match="argument buckets="):
        p.buckets([1, 0.5])
    assert p.phase_buckets(" None ") == () and p.phase_buckets([]) == ()
    assert p.phase_buckets("0.01, 0.1,1") == (0.01, 0.1, 1.0)
    assert p.phase_buckets((0.2, 0.4)) == (0.2, 0.4)
    for bad in ("0.1,x", "off", "x"):  # words after "none" too
        with pytest.raises(ValueError, match=r"expected 'none' or comma-separated bucket"):
            p.phase_buckets(bad)
    with pytest.raises(ValueError, match="the bounds must be strictly increasing"):
        p.phase_buckets("1,1")


def test_profile_steps_are_1_to_100() -> None:
    assert p.profile_steps("1") == 1 and p.profile_steps(100) == 100
    for bad in (0, 101):
        with pytest.raises(ValueError):
            p.profile_steps(bad)
    with pytest.raises(ValueError, match="must be at most 100"):
        p.profile_steps(101)


@pytest.mark.parametrize(("value", "number"), [
    ("none", None), (" NONE ", None), ("USR2", signal.SIGUSR2), ("sigusr1", signal.SIGUSR1),
    ("SIGTERM", signal.SIGTERM), (str(int(signal.SIGUSR1)), signal.SIGUSR1)])
def test_a_signal_by_name_or_number_or_none(value: str, number: int | None) -> None:
    found = p.signal_number(value)
    assert found == number and (found is None or type(found) is int)


@pytest.mark.parametrize("value", ["USR9", "SIGNOPE", "", "-1"])
def test_an_unknown_signal_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        p.signal_number(value)


def test_megabytes_are_mebibytes_above_zero() -> None:
    assert p.megabytes("1") == 1_048_576 and p.megabytes("0.5") == 524_288
    assert p.megabytes("2.75") == 2_883_584
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(ValueError, match="must be a size in MB > 0"):
            p.megabytes(bad)
