"""helm.schema_bounds against exact arithmetic (Fraction) for floors of every shape: zero, one
digit, nines, whole and fractional, one rounded up to the next whole number; texts with and
without leading zeros and decimals. tests/test_helm_guards.py checks the chart's own floors."""

from __future__ import annotations

import doctest
import re
from fractions import Fraction

import pytest

import helm.schema_bounds as bounds
from helm.schema_bounds import (
    CPU_UNITS,
    MEMORY_UNITS,
    PLACES,
    fraction_at_least,
    integer_at_least,
    number_above_zero,
    number_at_least,
    quantity_at_least,
)

WHOLE = [*range(131), 199, 200, 209, 990, 999, 1000, 1009, 4096, 67108864]
NUMBERS = sorted({*range(260), *(10**k + d for k in range(9) for d in (-1, 0, 1)),
                  *(int(f"{a}{b}{c}") for a in range(1, 10) for b in "09" for c in ("", "9", "0"))})


@pytest.mark.parametrize("floor", WHOLE)
def test_integer_at_least_matches_the_whole_numbers_from_the_floor(floor: int) -> None:
    pattern = re.compile(integer_at_least(floor))
    tried = sorted({*NUMBERS, *range(max(0, floor - 120), floor + 120)})
    assert [n for n in tried if pattern.fullmatch(str(n))] == [n for n in tried if n >= floor]
    for n in (floor, floor + 1, max(floor - 1, 0)):  # leading zeros do not change the value
        assert bool(pattern.fullmatch(f"00{n}")) == (n >= floor)


def test_below_one_every_whole_number_matches() -> None:
    for floor in (0, -1, -40):
        assert integer_at_least(floor) == "[0-9]+"
    assert re.fullmatch(integer_at_least(1), "0") is None


@pytest.mark.parametrize("digits", ["0", "1", "05", "25", "5", "9", "09", "99", "909", "123456"])
def test_fraction_at_least_compares_the_digits_after_the_point(digits: str) -> None:
    pattern = re.compile(fraction_at_least(digits))
    floor = Fraction(f"0.{digits}")
    texts = [f"{n:0{width}d}" for width in (1, 2, 3, 4, 7) for n in range(10**min(width, 3))]
    for text in texts:
        assert bool(pattern.fullmatch(text)) == (Fraction(f"0.{text}") >= floor), (digits, text)


FLOORS = [Fraction(0), Fraction(1), Fraction(7), Fraction(10), Fraction(99), Fraction(1, 2),
          Fraction(1, 4), Fraction(5, 8), Fraction(1, 3), Fraction(2, 3), Fraction(7, 2),
          Fraction(41, 4), Fraction(1, 10**7), Fraction(10**7 - 1, 10**7),
          Fraction(2 * 10**7 - 1, 10**7), Fraction(3 * 10**7 - 1, 10**7), Fraction(1, 10**6),
          Fraction(999999, 10**6)]


def _decimals(limit: int) -> list[str]:
    wholes = [str(n) for n in range(limit)] + ["0" + str(n) for n in range(0, limit, 7)]
    tails = ["", ".0", ".1", ".25", ".3", ".333333", ".333334", ".5", ".625", ".624", ".666666",
             ".666667", ".75", ".9", ".99", ".999999", ".9999999", ".000001", ".0000001"]
    return [w + t for w in wholes for t in tails]


@pytest.mark.parametrize("floor", FLOORS, ids=str)
def test_number_at_least_matches_decimals_worth_the_floor_rounded_up(floor: Fraction) -> None:
    pattern = re.compile(number_at_least(floor))
    rounded = Fraction(-(-floor * 10**PLACES // 1), 10**PLACES)  # up to PLACES decimals
    for text in _decimals(int(floor) + 12):
        assert bool(pattern.fullmatch(text)) == (Fraction(text) >= rounded), (floor, text)


def test_quantity_at_least_takes_each_unit_at_its_worth() -> None:
    memory = re.compile(quantity_at_least(3 * 2**20, MEMORY_UNITS))
    assert [v for v in ("3Mi", "2.99Mi", "3072Ki", "3071Ki", "3145728", "3145727", "0.003Gi",
                        "0.00293Gi", "0.0029296875Gi", "4M", "3M", "1Ti", "3Mb", "3 Mi",
                        "Mi", "3mi")
            if memory.match(v)] == ["3Mi", "3072Ki", "3145728", "0.003Gi", "0.00293Gi", "4M",
                                    "1Ti"]  # 3Mi is 0.0029296875Gi, rounded up to 0.00293
    cpu = re.compile(quantity_at_least(250, CPU_UNITS))
    assert [v for v in ("250m", "249m", "0.25", "0.249", "0.2499", "1", "0", "1m", "250", "0.3m")
            if cpu.match(v)] == ["250m", "0.25", "1", "250"]


def test_number_above_zero() -> None:
    pattern = re.compile(number_above_zero())
    texts = ["0", "00", "0.0", ".0", "0.", "1", "01", "0.5", ".5", "10", "100.000", "0.0001",
             "000.000", "7.25"]
    assert [t for t in texts if pattern.fullmatch(t)] == [
        t for t in texts if t.strip(".") and Fraction(t.rstrip(".") or "0") > 0]


def test_the_modules_examples_hold() -> None:
    result = doctest.testmod(bounds)
    assert result.failed == 0 and result.attempted > 0


# Kubernetes' quantity suffixes (resource.Quantity), written out here rather than read back.
KUBERNETES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
              "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
              "Ei": 2**60}
MILLICORES = {"m": 1, "": 1000}


@pytest.mark.parametrize("units, worth", [(MEMORY_UNITS, KUBERNETES), (CPU_UNITS, MILLICORES)],
                         ids=["memory", "cpu"])
def test_each_suffix_is_worth_what_kubernetes_says(units: dict[str, int],
                                                   worth: dict[str, int]) -> None:
    assert set(units) == set(worth)
    for unit, factor in worth.items():
        pattern = re.compile(quantity_at_least(3 * factor, units))
        assert pattern.match(f"3{unit}") and pattern.match(f"3.5{unit}"), unit
        assert not pattern.match(f"2.9{unit}") and not pattern.match(f"2{unit}"), unit


def test_a_fractional_floor_is_rounded_up_to_six_decimals() -> None:
    third = re.compile(number_at_least(Fraction(1, 3)))
    assert [t for t in ("0.33333", "0.333333", "0.3333334", "0.333334", "0.34")
            if third.fullmatch(t)] == ["0.333334", "0.34"]
