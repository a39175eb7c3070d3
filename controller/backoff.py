"""Waits that double after each failure, up to a cap: one rule for every retry loop."""

from __future__ import annotations

__all__ = ["doubled"]


def doubled(base_s: float, failures: int, max_s: float) -> float:
    """`base_s` after the first failure, doubled after each later one, at most `max_s`.
    The doubling is bounded before it is taken: 2 ** 1024 is past a float, and some
    failures repeat for days (a gang whose pods never start, a forge that refuses)."""
    return float(min(base_s * 2.0 ** min(max(failures - 1, 0), 64), max_s))
