"""Kubernetes resource quantities, parsed exactly.

Policies and cluster descriptions carry CPU, memory and GPU amounts in the
Kubernetes quantity syntax ("500m", "2Ti", "1.5", "1e3"). The validator must
reject what the API server would reject, and the compiler must add and split
them without floating-point drift, so quantities are kept as `Fraction`s.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["MAX_AMOUNT", "QuantityError", "format_quantity", "parse_quantity", "too_large"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)


MAX_AMOUNT = {"cpu": Fraction(2**63 - 1, 1000), "memory": Fraction(2**63 - 1)}
"""The most of each resource Kubernetes can hold: it counts CPU in millicores
(`Quantity.MilliValue`) and memory in bytes (`Quantity.Value`), both int64. A
larger amount is no ceiling there (the API server even stores a plain number of
22 digits or more as a different, small one), so policies may not ask for it."""


def too_large(resource: str, amount: Fraction) -> str | None:
    """Why `amount` of `resource` ("cpu", "memory") is more than Kubernetes can hold,
    or None when it is not (or the resource has no such bound here)."""
    limit = MAX_AMOUNT.get(resource)
    if limit is None or amount <= limit:
        return None
    if resource == "cpu":
        return "more than Kubernetes can hold (2^63-1 millicores, about 9.2e15 cores)"
    return "more than Kubernetes can hold (2^63-1 bytes, just under 8Ei)"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity into an exact number of base units.

    Integers are accepted as they are (YAML `gpu: 8`); floats only when they
    are finite. Raises `QuantityError` with the reason otherwise.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a finite number")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"expected a quantity string, found {type(value).__name__}")
    m = _RE.match(value.strip()) if len(value) <= 64 else None
    if m is None:
        raise QuantityError(
            f"{value!r} is not a Kubernetes quantity (examples: 8, 500m, 64Gi, 2Ti, 1e3)"
        )
    number = Fraction(m["num"])
    if m["exp"] is not None:
        exp = int(m["exp"])
        if abs(exp) > 30:
            raise QuantityError(f"{value!r}: exponent out of range")
        number *= Fraction(10) ** exp
    suffix = m["suffix"] or ""
    number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -number if m["sign"] == "-" else number


def format_quantity(amount: Fraction, *, binary: bool = False) -> str:
    """Render an exact amount as a canonical Kubernetes quantity string.

    Memory-like amounts (`binary=True`) use the largest binary suffix that
    divides them exactly; others use whole units or milli-units.
    """
    if amount.denominator == 1:
        whole = amount.numerator
        if binary and whole:
            for suffix, factor in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
                if whole % factor == 0:
                    return f"{whole // factor}{suffix}"
        return str(whole)
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    # Kubernetes rounds sub-milli amounts up; so do we, to never under-promise.
    ceil = -(-milli.numerator // milli.denominator)
    return f"{ceil}m"
