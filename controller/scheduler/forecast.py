"""Sliding-window demand forecast: how many GPUs a project (or user) will ask for over
the next horizon, with an uncertainty band. Pure: a history in, a forecast out.

The method: over the recent window, for every past moment t, how much the demand
rose within the following horizon, `max(d[t..t+H]) - d[t]`; the forecast is today's
demand plus the median of those rises, and the band's top is today's demand plus
their `quantile` (0.9 by default). Why this one:

- it answers the question the scheduler asks ("will the owner want this idle
  guarantee back within H?"): the *peak* within the horizon, not the mean;
- it is calibrated by construction: on a workload whose ups and downs over the
  window look like the next horizon's, the top of the band is exceeded about
  1 - quantile of the time (the simulator measures the coverage);
- it assumes no distribution and no season, so bursty queues (what GPU clusters
  have) do not break it, and it costs one pass over the window.

The baseline it is compared with (`seasonal_naive`) repeats what happened one season
(a day) earlier.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DemandHistory", "Forecast", "forecast", "seasonal_naive"]


@dataclass(frozen=True)
class Forecast:
    """Demand over the horizon (same unit as the history: milli-GPUs in the core)."""

    now: float
    point: float
    low: float
    high: float
    samples: int
    """Past moments the band was learned from (0: none, the forecast is `now`)."""


def forecast(
    history: Sequence[tuple[float, float]],
    *,
    horizon_s: float,
    quantile: float = 0.9,
) -> Forecast:
    """The demand forecast from `history` ((time, demand) ascending; the last is now)."""
    if not history:
        return Forecast(0.0, 0.0, 0.0, 0.0, 0)
    times = [t for t, _ in history]
    values = [v for _, v in history]
    current = values[-1]
    end = times[-1] - horizon_s
    rises: list[float] = []
    falls: list[float] = []
    # max and min over [t, t + H] for each t with a full horizon behind now, by a
    # monotonic deque over the window (one pass).
    hi: deque[int] = deque()
    lo: deque[int] = deque()
    j = 0
    for i, t in enumerate(times):
        if t > end:
            break
        while j < len(times) and times[j] <= t + horizon_s:
            while hi and values[hi[-1]] <= values[j]:
                hi.pop()
            hi.append(j)
            while lo and values[lo[-1]] >= values[j]:
                lo.pop()
            lo.append(j)
            j += 1
        while hi[0] < i:
            hi.popleft()
        while lo[0] < i:
            lo.popleft()
        rises.append(values[hi[0]] - values[i])
        falls.append(values[lo[0]] - values[i])
    if not rises:
        return Forecast(current, current, current, current, 0)
    rises.sort()
    falls.sort()
    return Forecast(
        now=current,
        point=current + _q(rises, 0.5),
        low=max(0.0, current + _q(falls, 1 - quantile)),
        high=current + _q(rises, quantile),
        samples=len(rises),
    )


def _q(sorted_values: Sequence[float], q: float) -> float:
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def seasonal_naive(
    history: Sequence[tuple[float, float]], *, horizon_s: float, season_s: float = 86_400.0
) -> Forecast | None:
    """The baseline: the peak demand over [now - season, now - season + H], i.e. what
    happened one season earlier. None without a season of history."""
    if not history or history[-1][0] - history[0][0] < season_s:
        return None
    times = [t for t, _ in history]
    now = times[-1]
    a = bisect.bisect_left(times, now - season_s)
    b = bisect.bisect_right(times, now - season_s + horizon_s)
    window = [v for _, v in history[a:b]] or [history[a][1]]
    peak = max(window)
    return Forecast(history[-1][1], peak, min(window), peak, len(window))


class DemandHistory:
    """Demand samples per key (project, or project/user) over a sliding window. Owned
    by the caller (the controller's loop, the simulator)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._series: dict[str, deque[tuple[float, float]]] = {}

    def add(self, key: str, t: float, demand: float) -> None:
        s = self._series.setdefault(key, deque())
        if s and t <= s[-1][0]:
            if t == s[-1][0]:
                s[-1] = (t, demand)
            return
        s.append((t, demand))
        while s and s[0][0] < t - self.window_s:
            s.popleft()

    def series(self, key: str) -> list[tuple[float, float]]:
        return list(self._series.get(key, ()))

    def names(self) -> list[str]:
        return list(self._series)

    def drop_quiet(self) -> None:
        """Forget the keys whose every sample in the window is 0: a project or user
        that asked for nothing for a whole window (so users who left do not stay)."""
        for key in [k for k, s in self._series.items() if all(v == 0 for _, v in s)]:
            del self._series[key]
