"""Missed scrapes, counted from the gaps between a target's scrape times (the pure
part of `scrape_health`): jitter is not a miss, a skipped tick is."""

from __future__ import annotations

import pytest

from controller.devcluster.prometheus import _missed


@pytest.mark.parametrize(
    ("times", "end", "missed"),
    [
        ([0.0, 1.0, 2.0, 3.0], 3.4, 0),  # on time
        ([0.0, 1.3, 1.9, 3.2], 3.9, 0),  # jitter either way
        ([0.0, 1.0, 3.0, 4.0], 4.5, 1),  # one tick skipped
        ([0.0, 4.0], 4.2, 3),  # three skipped
        ([0.0, 1.0], 4.0, 2),  # stopped before the end of the window
        ([], 10.0, 0),  # never scraped in the window: not this measure's business
    ],
)
def test_gaps_of_n_intervals_are_n_minus_one_misses(
    times: list[float], end: float, missed: int
) -> None:
    assert _missed(times, interval_s=1.0, end=end) == missed


def test_the_interval_scales_the_gaps() -> None:
    assert _missed([0.0, 15.0, 45.0], interval_s=15.0, end=50.0) == 1
