"""Every NVML call under a deadline, without ever waiting on a hung driver.

A call runs on a worker thread; the caller waits at most the deadline. A call that
does not return in time leaves its *lane* (one per GPU, one for NVML itself) busy
until it does: the next round does not call into that lane again, so a GPU whose
driver hangs costs one parked thread, never one per round, and the other GPUs go on
being read. Python cannot kill a thread stuck in C; parking it is what is possible.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Hung", "Lanes", "Outcome"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Hung:
    """The lane's call did not return within the deadline (`since`: when it started)."""

    since: float
    new: bool
    """True for the round the call timed out in; False while it is still stuck."""


@dataclass(frozen=True)
class Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None
    hung: Hung | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.hung is None


class Lanes:
    """Calls grouped by lane, each under `deadline_s`."""

    def __init__(self, deadline_s: float, *, workers: int, name: str = "nvml") -> None:
        self.deadline_s = deadline_s
        self._pool = _DaemonPool(workers, name)
        self._lock = threading.Lock()
        self._stuck: dict[Hashable, float] = {}

    def stuck(self) -> dict[Hashable, float]:
        """Lanes whose call has not returned, with when it started."""
        with self._lock:
            return dict(self._stuck)

    def run(self, lane: Hashable, call: Callable[[], T]) -> Outcome[T]:
        return self.run_all({lane: call})[lane]

    def run_all(self, calls: Mapping[K, Callable[[], T]]) -> dict[K, Outcome[T]]:
        """Run each lane's call in parallel and wait for all, at most the deadline."""
        started = time.monotonic()
        out: dict[K, Outcome[T]] = {}
        pending: dict[K, Future[T]] = {}
        for lane, call in calls.items():
            with self._lock:
                since = self._stuck.get(lane)
            if since is not None:
                out[lane] = Outcome(hung=Hung(since=since, new=False))
                continue
            pending[lane] = self._pool.submit(call)
        end = started + self.deadline_s
        for lane, future in pending.items():
            try:
                out[lane] = Outcome(value=future.result(timeout=max(0.0, end - time.monotonic())))
            except TimeoutError:
                self._park(lane, future, started)
                out[lane] = Outcome(hung=Hung(since=started, new=True))
            except Exception as e:
                out[lane] = Outcome(error=e)
        return out

    def _park(self, lane: Hashable, future: Future[T], started: float) -> None:
        with self._lock:
            self._stuck[lane] = started
        self._pool.replace_worker()  # the parked one may never come back

        def unpark(_: Future[T]) -> None:
            with self._lock:
                self._stuck.pop(lane, None)
            self._pool.retire_worker()  # the parked one is back: keep the count

        future.add_done_callback(unpark)

    def close(self) -> None:
        """Stop the workers; threads parked in a hung call are left behind (daemons,
        so they never hold the process up at exit)."""
        self._pool.close()


class _DaemonPool:
    """A fixed number of daemon worker threads (concurrent.futures' pool joins its
    threads at exit, so one stuck in NVML would keep the process from exiting)."""

    def __init__(self, workers: int, name: str) -> None:
        self._q: queue.SimpleQueue[tuple[Future[object], Callable[[], object]] | None] = (
            queue.SimpleQueue()
        )
        self._name = name
        self._count = 0
        self._lock = threading.Lock()
        for _ in range(workers):
            self.replace_worker()

    def replace_worker(self) -> None:
        with self._lock:
            self._count += 1
            n = self._count
        threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True).start()

    def retire_worker(self) -> None:
        self._q.put(None)

    def submit(self, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._q.put((future, call))  # type: ignore[arg-type]
        return future

    def close(self) -> None:
        with self._lock:
            n = self._count
        for _ in range(n):
            self._q.put(None)

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as e:
                future.set_exception(e)
