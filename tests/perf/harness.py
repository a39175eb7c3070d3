"""The few pieces every benchmark shares: a result with its threshold, and a table.

A benchmark returns `Result`s; `make bench` prints them all and exits non-zero
if any misses its threshold. Each threshold lives next to the code that
measures it, with a comment saying how it was set.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Result", "print_table"]


@dataclass(frozen=True)
class Result:
    """One measured figure and the limit it must stay under (or above)."""

    name: str
    value: float
    unit: str
    limit: float
    higher_is_better: bool = False

    @property
    def ok(self) -> bool:
        """True when the figure meets its threshold."""
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit


def print_table(results: list[Result]) -> None:
    """Print the figures as an aligned table with PASS/FAIL per row (nothing for none)."""
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        op = ">=" if r.higher_is_better else "<="
        verdict = "PASS" if r.ok else "FAIL"
        threshold = f"(threshold {op} {r.limit:g})"
        print(f"{r.name:<{width}}  {r.value:>10.3f} {r.unit:<4} {threshold}  {verdict}")
