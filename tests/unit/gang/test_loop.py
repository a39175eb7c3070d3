"""The controller's loop: when a step runs with nothing prompting it, and what a step
writes for a queue whose reasons only change their figures."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from controller.gang.controller import GangController, GangSettings
from controller.gang.lifecycle import Write
from controller.jobs.pods import LABEL_JOB
from controller.kube.clock import FakeClock
from controller.scheduler.cycle import CycleResult
from controller.scheduler.policy import policy_configmap
from controller.scheduler.telemetry import Signal, Telemetry
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import foreign, job, job_id, node


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
    # A step slowed by a slow API call or a busy machine stretches the tick at most
    # ten times: what only time brings (a backoff's end) does not wait a minute.
    stuck = _starts(6.0, GangSettings())
    assert all(abs(b - a - (6.0 + 10.0 + 6.0)) < 1e-6 for a, b in itertools.pairwise(stuck))
    fixed = _starts(0.3, GangSettings(idle_cpu=0))
    assert all(abs(b - a - (0.3 + 1.0 + 0.3)) < 1e-6 for a, b in itertools.pairwise(fixed))


def _on_node_a(c: GangController, submit: Callable[..., bool]) -> None:
    """`c` over project `p` and node `a`, its writes handed to `submit`."""
    c._submit = submit  # type: ignore[method-assign]
    c.config.assume(
        policy_configmap(policy_doc(projects={"p": {}}), c.settings.system_namespace,
                         resourceVersion="1")
    )  # fmt: skip
    c.nodes.assume(node("a"))


def _second_step_writes(settings: GangSettings) -> tuple[Write, list[Write]]:
    """A job of 16 one-GPU workers waits on a node of 8 GPUs; its first reason is
    written, then another scheduler's pod takes 2 of the GPUs and a second step runs
    5 s later. Returns the first write and what the second step hands out."""
    c = GangController(FakeKube(), clock=FakeClock(), settings=settings)
    writes: list[Write] = []

    def submit(w: Write, *, assume: object = None) -> bool:
        if not w.empty:
            writes.append(w)
        return True

    _on_node_a(c, submit)
    c.jobs.assume(job("big", 16))
    c.step()
    (first,) = writes
    said = job("big", 16, phase=first.phase, reason=first.reason, message=first.message,
               observedGeneration=1, **first.fields)  # fmt: skip
    said["metadata"]["resourceVersion"] = "2"
    c.jobs.assume(said)  # as the binder wrote it
    c.pods.assume(foreign("x", "a", 2))
    writes.clear()
    c._clock.advance(5)  # type: ignore[attr-defined]
    c.step()
    return first, writes


def test_a_step_holds_back_a_waiting_message_whose_figures_moved_until_the_refresh() -> None:
    first, again = _second_step_writes(GangSettings())
    assert "hold 8 of 16" in first.message and "messageAt" in first.fields
    assert again == []  # "hold 6 of 16" waits for the refresh
    first, again = _second_step_writes(GangSettings(message_refresh_s=0))
    (w,) = again
    assert w.reason == first.reason and "hold 6 of 16" in w.message


def test_a_waiting_jobs_status_names_the_kind_of_telemetry_failure_not_its_text() -> None:
    """Found by a review: the note carried the last Prometheus error's text, which
    names Prometheus's address and changes wording with each failure (refused, timed
    out, HTTP 503), and each change rewrote every waiting job's status at once. The
    note names the kind in a word; a new kind waits for the message refresh."""
    clock = FakeClock()
    c = GangController(FakeKube(), clock=clock, telemetry=lambda: said["t"])
    writes: list[Write] = []

    def submit(w: Write, *, assume: object = None) -> bool:
        if not w.empty:
            writes.append(w)
        return True

    def lost(reason: str, error: str) -> Telemetry:
        read = clock.now().timestamp() - 600
        return Telemetry(health=Signal(read), usage=Signal(read, error=error, reason=reason))

    def step() -> list[Write]:
        writes.clear()
        c.step()
        for w in writes:  # landed, as the binder writes them
            obj = job(w.job.id.split("/")[1], 16, phase=w.phase, reason=w.reason,
                      message=w.message, observedGeneration=1, **w.fields)  # fmt: skip
            obj["metadata"]["resourceVersion"] = str(int(clock.monotonic()))
            c.jobs.assume(obj)
        return list(writes)

    _on_node_a(c, submit)
    for name in ("j0", "j1", "j2"):
        c.jobs.assume(job(name, 16))  # 16 GPUs: each waits on a node of 8
    prom = "Prometheus at http://prom.monitoring:9090"
    said = {"t": lost("unreachable", f"{prom}: URLError(ConnectionRefusedError(111))")}
    first = step()
    assert len(first) == 3
    for w in first:
        assert w.message.endswith(
            "(telemetry unavailable: unreachable; scheduling by requests alone)"
        )
        assert "prom.monitoring" not in w.message
    for reason, error in (("timeout", f"{prom}: no answer in 5s"), ("error", f"{prom}: HTTP 503")):
        said["t"] = lost(reason, error)
        clock.advance(15)
        assert step() == [], reason
    clock.advance(c.settings.message_refresh_s)
    assert [w.message.endswith("(telemetry unavailable: error; scheduling by requests alone)")
            for w in step()] == [True, True, True]  # fmt: skip


def test_another_schedulers_pod_wakes_the_loop_only_while_a_gang_could_use_gpus() -> None:
    """Beside kube-scheduler binding a thousand pods, each of their events woke a
    step that could decide nothing (no gang waiting), about a quarter of a core."""
    api = FakeKube()
    c = GangController(api, clock=FakeClock())
    c.config.assume(
        policy_configmap(policy_doc(projects={"p": {}}), c.settings.system_namespace,
                         resourceVersion="1")
    )  # fmt: skip
    c.nodes.assume(node("a"))

    def watched(pod: dict[str, object]) -> bool:
        """The pod cache's watch delivers `pod`: did it wake the loop?"""
        c._wake.clear()
        c.pods.assume(pod)
        c.pods._emit("ADDED", pod)  # what its watch hands the handler
        return c._wake.is_set()

    ours = foreign("w0", "a", 1)
    ours["metadata"]["labels"] = {LABEL_JOB: "big"}
    try:
        assert watched(foreign("x", "a", 2)), "before any step, every pod wakes the loop"
        c.step()  # nothing queued
        assert not watched(foreign("y", "a", 2)), "woken for a pod no gang could use"
        assert watched(ours), "a pod of a job must wake the loop"
        big = job("big", 16)  # node "a" has 8 GPUs: it waits
        c.jobs.assume(big)
        api.objects[("TrainingJob", "p", "big")] = big
        c.step()
        c._pool.shutdown(wait=True)  # its reason written
        assert watched(foreign("z", "a", 1)), "GPUs another scheduler takes matter to a gang"
        # A step taken while the waiting job's write is in flight sees no gang that
        # could use GPUs. If a pod frees GPUs after the next step read the pods (the
        # write done, the job waiting again), nothing wakes the loop for it: that
        # step must, rather than leave it to the tick.
        c._busy.add(job_id("big"))
        c.step()
        c._busy.clear()
        read = c.pods.locked

        def read_then_freed(fn: Callable[[], object]) -> object:
            out = read(fn)
            assert not watched({**foreign("z", "a", 1), "status": {"phase": "Succeeded"}})
            return out

        c.pods.locked = read_then_freed  # type: ignore[method-assign,assignment]
        c._wake.clear()
        c.step()  # its reason is written already: no write wakes the loop
        assert c._wake.is_set(), "GPUs freed unseen while a gang waits for them"
        c.pods.locked = read  # type: ignore[method-assign]
        c._wake.clear()
        c.step()
        assert not c._wake.is_set(), "woken again with nothing unseen"
    finally:
        c.stop()
