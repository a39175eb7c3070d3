"""The controller's loop: when a step runs with nothing prompting it."""

from __future__ import annotations

import itertools
import threading

from controller.gang.controller import GangController, GangSettings
from controller.kube.clock import FakeClock
from controller.scheduler.cycle import CycleResult
from tests.unit.kube.fakes import FakeKube


def _starts(step_s: float, settings: GangSettings, steps: int = 4) -> list[float]:
    """When each of `steps` steps started (fake clock) with nothing happening, each
    step taking `step_s`."""
    clock = FakeClock()
    c = GangController(FakeKube(), clock=clock, settings=settings)
    c._informers = lambda: []  # type: ignore[method-assign]  # nothing to sync
    starts: list[float] = []
    done = threading.Event()

    def step() -> CycleResult | None:
        starts.append(clock.monotonic())
        clock.advance(step_s)
        if len(starts) == steps:
            c._stop.set()
            done.set()
        return None

    c.step = step  # type: ignore[method-assign]
    worker = threading.Thread(target=c._work, daemon=True)
    worker.start()
    assert done.wait(10), "the loop did not step"
    worker.join(10)
    return starts


def test_steps_nothing_prompted_take_at_most_a_tenth_of_a_core() -> None:
    """A step over 5,000 queued gangs at 5,000 nodes takes about 0.3 s; stepping
    once a tick whatever happens spent a fifth of a core re-deciding a queue nothing
    had changed. The tick stretches so that such steps take about a tenth; a cheap
    step still comes once a tick."""
    slow = _starts(0.3, GangSettings())
    gaps = [b - a for a, b in itertools.pairwise(slow)]
    assert all(abs(g - (0.3 + 2.7 + 0.3)) < 1e-6 for g in gaps), gaps  # step, tick, pause
    assert 0.3 / gaps[0] < 0.1
    fast = _starts(0.01, GangSettings())
    assert all(abs(b - a - (0.01 + 1.0 + 0.05)) < 1e-6 for a, b in itertools.pairwise(fast))
    fixed = _starts(0.3, GangSettings(idle_cpu=0))
    assert all(abs(b - a - (0.3 + 1.0 + 0.3)) < 1e-6 for a, b in itertools.pairwise(fixed))
