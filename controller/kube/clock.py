"""Time, injected: every timeout, backoff, lease and poll interval reads it here.

The elector, the informer's backoff and the reconciler's requeue timers take a
`Clock`, so unit tests drive them with `FakeClock` instead of sleeping, and
nothing in the controller calls `time` directly.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """The three readings the controller needs, and a way to wait."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, lease validity)."""
        ...

    def now(self) -> dt.datetime:
        """Wall-clock time in UTC (timestamps written into objects)."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set or `seconds` pass; True if it was set."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told to; `wait` advances it instead of sleeping."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._mono = 1000.0
        self._start = start or dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> dt.datetime:
        return self._start + dt.timedelta(seconds=self._mono - 1000.0)

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self._mono += seconds

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.advance(max(0.0, seconds))
        return event.is_set()
