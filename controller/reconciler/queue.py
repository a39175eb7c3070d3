"""The reconciler's work queue: PolicySource names, each due at a time.

Routing puts names in (an event: now; a poll or a retry: later); the worker
takes the next due one. A name is never worked on twice at once, and a name
queued again keeps the earlier of its two times; a fetch asked for by any of
the adds is remembered until the name is taken. Time comes from the
injected clock, so due times are tested without sleeping.
"""

from __future__ import annotations

import threading

from controller.kube.clock import Clock

__all__ = ["WorkQueue"]


class WorkQueue:
    """Source names, each due at a time; a name is never worked on twice at once, and
    adding a name that is already queued keeps the earlier time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._cv = threading.Condition()
        self._due: dict[str, float] = {}
        self._fetch: set[str] = set()
        self._active: set[str] = set()

    def add(self, name: str, *, after: float = 0.0, fetch: bool = False) -> None:
        with self._cv:
            at = self._clock.monotonic() + after
            if fetch:
                self._fetch.add(name)
            if name not in self._due or at < self._due[name]:
                self._due[name] = at
                self._cv.notify()

    def get(self, stop: threading.Event) -> tuple[str, bool] | None:
        """The next due name and whether a fetch was asked for; None once `stop` is set."""
        with self._cv:
            while not stop.is_set():
                now = self._clock.monotonic()
                waiting = {n: at for n, at in self._due.items() if n not in self._active}
                if waiting:
                    name = min(waiting, key=waiting.__getitem__)
                    if waiting[name] <= now:
                        del self._due[name]
                        self._active.add(name)
                        fetch = name in self._fetch
                        self._fetch.discard(name)
                        return name, fetch
                wait = min(waiting.values()) - now if waiting else 1.0
                self._cv.wait(min(max(wait, 0.005), 1.0))
            return None

    def done(self, name: str) -> None:
        with self._cv:
            self._active.discard(name)
            self._cv.notify()

    def wake(self) -> None:
        """Wake a waiting `get` (to see that it should stop)."""
        with self._cv:
            self._cv.notify_all()
