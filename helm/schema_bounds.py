"""Regular expressions for "a quantity or a duration of at least N", for the values schema.

JSON schema compares numbers, not Kubernetes quantities (``64Mi``, ``0.5Gi``, ``250m``) or
durations (``90s``, ``1.5h``): a floor on them is a pattern. Each unit's part is exact: a
number written with that unit matches when its value times the unit is at least the floor (a
floor that is no whole number of a unit is rounded up to ``PLACES`` decimals of it).

>>> import re
>>> memory = re.compile(quantity_at_least(64 * 2**20, MEMORY_UNITS))
>>> [bool(memory.match(v)) for v in ("64Mi", "63.9Mi", "67108864", "67108863", "0.0625Gi",
...                                  "0.06Gi", "65536Ki", "68M", "67M", "1Ti", "6.4e7")]
[True, False, True, False, True, False, True, True, False, True, False]
>>> cpu = re.compile(quantity_at_least(10, CPU_UNITS))
>>> [bool(cpu.match(v)) for v in ("10m", "9m", "9.5m", "0.01", "0.009", "1", "250m", "1m")]
[True, False, False, True, False, True, True, False]
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

PLACES = 6
# Kubernetes quantity suffixes (resource.Quantity) and what they multiply: bytes, millicores.
MEMORY_UNITS: Mapping[str, int] = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
CPU_UNITS: Mapping[str, int] = {"m": 1, "": 1000}


def integer_at_least(n: int) -> str:
    """Whole numbers >= ``n`` (leading zeros allowed).

    >>> import re
    >>> [bool(re.fullmatch(integer_at_least(60), v)) for v in ("60", "059", "61", "99", "100")]
    [True, False, True, True, True]
    """
    if n <= 0:
        return "[0-9]+"
    digits = str(n)
    options = [f"[1-9][0-9]{{{len(digits)},}}"]  # more digits
    for i, digit in enumerate(digits):  # as many digits: a larger one at position i
        if digit != "9":
            options.append(f"{digits[:i]}[{int(digit) + 1}-9][0-9]{{{len(digits) - i - 1}}}")
    options.append(digits)
    return f"0*(?:{'|'.join(options)})"


def fraction_at_least(digits: str) -> str:
    """The digits after a decimal point of a fraction >= ``0.digits``."""
    options = [f"{digits[:i]}[{int(d) + 1}-9][0-9]*" for i, d in enumerate(digits) if d != "9"]
    return "|".join([*options, f"{digits}[0-9]*"])


def number_at_least(floor: Fraction) -> str:
    """Decimal numbers (``12``, ``12.5``, ``0.25``) whose value is >= ``floor`` (rounded up to
    ``PLACES`` decimals)."""
    whole = int(floor)
    rest = floor - whole
    if rest == 0:
        return f"{integer_at_least(whole)}(?:\\.[0-9]+)?"
    scaled = -(-rest.numerator * 10**PLACES // rest.denominator)  # ceil
    if scaled == 10**PLACES:  # rounded up to the next whole number
        return f"{integer_at_least(whole + 1)}(?:\\.[0-9]+)?"
    digits = str(scaled).rjust(PLACES, "0").rstrip("0")
    head = f"0*{whole}" if whole else "0*"
    return (f"{integer_at_least(whole + 1)}(?:\\.[0-9]+)?|"
            f"{head}\\.(?:{fraction_at_least(digits)})")


def quantity_at_least(floor: float, units: Mapping[str, float]) -> str:
    """A whole-string pattern for a number with one of ``units`` worth at least ``floor``."""
    parts = [f"(?:{number_at_least(Fraction(floor) / Fraction(factor))}){unit}"
             for unit, factor in sorted(units.items(), key=lambda u: -len(u[0]))]
    return f"^(?:{'|'.join(parts)})$"


def number_above_zero() -> str:
    """Decimal numbers whose value is above 0.

    >>> import re
    >>> [bool(re.fullmatch(number_above_zero(), v)) for v in ("0", "0.0", "00", "0.01", "2", "10")]
    [False, False, False, True, True, True]
    """
    return "[0-9]*[1-9][0-9]*(?:\\.[0-9]+)?|[0-9]*\\.[0-9]*[1-9][0-9]*"
