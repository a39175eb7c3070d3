"""Benchmark of the status writes a long queue costs: waiting jobs' messages in the
overloaded simulation, written at every change against held to `--message-refresh`.

The simulator runs the sweep's overloaded row (`sim.overloaded`: three passes of
openb at twice the cluster's capacity, thousands of gangs queued for hours of
simulated time) through the real core; every waiting decision of every cycle is
fed to two writers that apply the controller's rule (`lifecycle.message_due`, the
function `gangops run` decides with) for the phase-less part of a waiting job's
status: one with a refresh of 0 (every change written: the controller before the
refresh), one with the default refresh. A write is a job's first reason, a new
reason, or a message `message_due` lets through. The simulator's cycle is 10 s of
simulated time; the controller steps at least once a second, so at every change it
would write more often than counted here, while the refresh bounds it the same.

Threshold: the refresh writes at least `RATIO_MIN` times less. Measured 2026-12-04
on the 2-core development machine (`.venv/bin/python -m tests.perf messages`,
`fd5fa48`): 382,726 writes at every change (375,144 of 406,873 waiting decisions
changed the message of the cycle before: the GPUs left outside the reserve move
with every admission), 23,013 with the 300 s refresh: 16.6x. The threshold, 5x,
leaves room for placement changes that move the queue.

Run: `make bench` (or `.venv/bin/python -m tests.perf messages`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import controller.sim.schedulers as schedulers
from controller.gang.lifecycle import MESSAGE_REFRESH_S, message_due
from controller.scheduler.cycle import CycleResult
from controller.scheduler.types import JobId, Pending
from controller.sim.run import run as simulate
from tests.perf.harness import Result
from tests.perf.sim import inputs, overloaded

__all__ = ["Writer", "run"]

RATIO_MIN = 5.0


@dataclass
class Writer:
    """What the controller would have written for each waiting job, with `refresh_s`."""

    refresh_s: float
    writes: int = 0
    said: dict[JobId, tuple[str, str, float]] = field(default_factory=dict)
    """Per waiting job: the reason, message and time last written."""

    def see(self, result: CycleResult, now: float) -> None:
        for d in result.decisions:
            if not isinstance(d, Pending):
                self.said.pop(d.gang.id, None)  # admitted: its next wait starts afresh
                continue
            before = self.said.get(d.gang.id)
            if before is not None and before[0] == d.code:
                due = message_due(
                    d.code, before[1], before[2], d.reason, now=now, refresh_s=self.refresh_s
                )
                if not due:
                    continue
            self.writes += 1
            self.said[d.gang.id] = (d.code, d.reason, now)


@contextlib.contextmanager
def _watching(writers: list[Writer]) -> Iterator[None]:
    """The simulator's `schedule` (the core's), with every result shown to `writers`."""
    core = schedulers.schedule

    def schedule(*args: Any, **kwargs: Any) -> CycleResult:
        result = core(*args, **kwargs)
        for w in writers:
            w.see(result, kwargs["now"])
        return result

    schedulers.schedule = schedule  # type: ignore[assignment]
    try:
        yield
    finally:
        schedulers.schedule = core  # type: ignore[assignment]


def run() -> list[Result]:
    """Entry point for `tests.perf.__main__`."""
    found = inputs()
    if found is None:
        return []
    nodes, pods = found
    every, held = Writer(0.0), Writer(MESSAGE_REFRESH_S)
    with _watching([every, held]):
        simulate(overloaded(nodes, pods))
    ratio = every.writes / max(held.writes, 1)
    print(
        f"messages: overloaded row, waiting jobs' status writes: {every.writes:,} at every "
        f"change, {held.writes:,} with a {MESSAGE_REFRESH_S:g} s refresh (x{ratio:.1f} fewer)"
    )
    return [
        Result(
            "messages: waiting-job status writes, every change / refresh",
            ratio,
            "x",
            RATIO_MIN,
            higher_is_better=True,
        )
    ]
