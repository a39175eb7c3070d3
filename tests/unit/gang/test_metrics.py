"""The scheduler's metrics after a `GangController.step`, with the caches filled by
hand and the fake API server (`FakeKube`) behind the writers: queue depth by project and tier,
GPUs by project, user and kind (guaranteed or borrowed), cycles, and the time
from a job's creation to its whole gang bound."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.gang.controller import DEMAND_WINDOW_S, GangController, held_back_by_own_limits
from controller.gang.metrics import GangMetrics
from controller.gang.record import Admission
from controller.kube.clock import FakeClock
from controller.scheduler.cycle import schedule
from controller.scheduler.policy import policy_configmap
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import Hints, PodUsage, Signal, Telemetry
from controller.scheduler.types import Admit, Pending, Placement, PodPlacement
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import job as sjob
from tests.unit.scheduler.builders import node as snode
from tests.unit.scheduler.builders import policy, policy_doc
from tests.unit.scheduler.builders import running as srunning

from .builders import job, node, pod

Obj = dict[str, Any]
POLICY = policy_doc(projects={"p": {"guaranteed": 4, "max": 8}, "q": {}})
"""Project `p` (4 GPUs guaranteed, at most 8) and `q` (nothing guaranteed, no max)."""
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _in(obj: Obj, namespace: str) -> Obj:
    obj["metadata"]["namespace"] = namespace
    return obj


def held(
    name: str, gang: int, *, on: str, first: int, borrowed: int, user: str, ns: str = "p"
) -> list[Obj]:
    """A Running job with `gang` 1-GPU workers on node `on`, devices `first`.., whose
    record says `borrowed` GPUs were above its project's guarantee; and its pods."""
    devices = range(first, first + gang)
    adm = Admission(
        "Admitted", 1, Placement(tuple(PodPlacement(on, (d,)) for d in devices)), 1000.0,
        borrowed * 1000,
    )  # fmt: skip
    j = job(name, gang, adm=adm, phase="Running")
    j["metadata"]["labels"]["ai.operator/user"] = user
    return [_in(j, ns), *(_in(pod(name, i, node=on), ns) for i in range(gang))]


def waiting(name: str, gang: int, *, tier: str, ns: str = "p") -> Obj:
    return _in(job(name, gang, tier=tier), ns)


def _run(
    objs: list[Obj],
    metrics: GangMetrics,
    *,
    clock: FakeClock | None = None,
    api: FakeKube | None = None,
    until: Callable[[], bool] = lambda: True,
) -> GangController:
    """One step over nodes a and b (8 GPUs each) and `objs`; then, once `until` holds
    (the writes it waits for have landed), the controller is stopped."""
    api = api or FakeKube()
    c = GangController(api, clock=clock or FakeClock(T0), metrics=metrics)
    c.config.assume(policy_configmap(POLICY, c.settings.system_namespace, resourceVersion="1"))
    for n in (node("a"), node("b")):
        c.nodes.assume(n)
    for o in objs:
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
        api.objects[(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])] = o
    try:
        assert c.step() is not None
        deadline = time.monotonic() + 10
        while not until():
            assert time.monotonic() < deadline, "the writes did not land within 10 s"
            time.sleep(0.01)
    finally:
        c.stop()
    return c


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(s.labels.values()): s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == name
    }


def test_queue_and_gpus_by_project_user_and_kind() -> None:
    m = GangMetrics()
    objs = [
        *held("r1", 3, on="a", first=0, borrowed=0, user="alice"),
        *held("r2", 4, on="a", first=3, borrowed=3, user="bob"),
        *held("r3", 1, on="a", first=7, borrowed=1, user="alice"),
        # A record claiming more borrowed GPUs than the gang has counts the gang's.
        *held("r4", 2, on="b", first=0, borrowed=5, user="alice", ns="q"),
        waiting("w1", 4, tier="normal"),  # p is at its max of 8: all three wait
        waiting("w2", 1, tier="batch"),
        waiting("w3", 2, tier="batch"),
        waiting("w4", 16, tier="high", ns="q"),  # more than the cluster has free
    ]
    c = _run(objs, m)
    assert c.last_result is not None
    assert {d.gang.id: type(d).__name__ for d in c.last_result.decisions} == {
        "p/w1": "Pending", "p/w2": "Pending", "p/w3": "Pending", "q/w4": "Pending",
    }  # fmt: skip
    assert _samples(m.registry, "gangops_queue_depth") == {
        ("p", "normal"): 1, ("p", "batch"): 2, ("q", "high"): 1,
    }  # fmt: skip
    # why each waits: p at its max; q's gang bigger than the free GPUs
    assert _samples(m.registry, "gangops_waiting_jobs") == {
        ("p", "normal", "Quota"): 1, ("p", "batch", "Quota"): 2, ("q", "high", "Capacity"): 1,
    }  # fmt: skip
    assert _samples(m.registry, "gangops_gpus_allocated") == {
        ("p", "alice", "guaranteed"): 3, ("p", "alice", "borrowed"): 1,
        ("p", "bob", "guaranteed"): 1, ("p", "bob", "borrowed"): 3,
        ("q", "alice", "guaranteed"): 0, ("q", "alice", "borrowed"): 2,
    }  # fmt: skip
    assert m.registry.get_sample_value("gangops_scheduling_cycle_seconds_count") == 1

    # Next step (same metrics): bob's job and the batch jobs are gone, so are their labels.
    later = [o for o in objs if o["metadata"]["name"].split("-")[0] not in ("r2", "w2", "w3")]
    _run(later, m)
    assert _samples(m.registry, "gangops_queue_depth") == {("p", "normal"): 1, ("q", "high"): 1}
    assert _samples(m.registry, "gangops_gpus_allocated") == {
        ("p", "alice", "guaranteed"): 3, ("p", "alice", "borrowed"): 1,
        ("q", "alice", "guaranteed"): 0, ("q", "alice", "borrowed"): 2,
    }  # fmt: skip
    assert m.registry.get_sample_value("gangops_scheduling_cycle_seconds_count") == 2

    # Nothing waits and nothing runs: both gauges are empty, not stuck at their last values.
    _run([], m)
    assert _samples(m.registry, "gangops_queue_depth") == {}
    assert _samples(m.registry, "gangops_gpus_allocated") == {}


def test_a_gang_bound_is_timed_from_its_jobs_creation() -> None:
    m = GangMetrics()
    clock = FakeClock(T0)
    clock.advance(7.5)
    api = FakeKube()
    new = waiting("new", 2, tier="high")
    new["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    bound = "gangops_gang_bound_seconds_count"
    _run([new], m, clock=clock, api=api, until=lambda: _samples(m.registry, bound) != {})
    nodes = {
        o["metadata"]["name"]: api.bound.get(
            f"p/{o['metadata']['name']}", o["spec"].get("nodeName")
        )
        for (kind, _, _), o in api.objects.items()
        if kind == "Pod"
    }
    assert set(nodes) == {"new-1-0", "new-1-1"} and None not in nodes.values()
    assert _samples(m.registry, bound) == {("high",): 1}
    assert m.registry.get_sample_value("gangops_gang_bound_seconds_sum", {"tier": "high"}) == 7.5


def test_a_scrape_during_an_update_sees_the_last_whole_set_not_a_half_cleared_one() -> None:
    m = GangMetrics()
    depth = {("p", "high"): 1, ("p", "batch"): 2, ("q", "high"): 3}
    gpus = {("p", "alice", "guaranteed"): 4.0, ("p", "alice", "borrowed"): 2.0}
    m.set_queue(depth)
    m.set_allocated(gpus)
    done = threading.Event()

    def update() -> None:
        while not done.is_set():
            m.set_queue(depth)
            m.set_allocated(gpus)

    updater = threading.Thread(target=update)
    updater.start()
    seen: list[tuple[int, int]] = []
    try:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            q = _samples(m.registry, "gangops_queue_depth")
            a = _samples(m.registry, "gangops_gpus_allocated")
            seen.append((len(q), len(a)))
    finally:
        done.set()
        updater.join()
    assert len(seen) > 100 and set(seen) == {(3, 2)}


def test_a_job_admitted_in_a_step_counts_at_once_not_one_step_late() -> None:
    m = GangMetrics()
    api = FakeKube()
    bound = "gangops_gang_bound_seconds_count"
    _run(
        [waiting("now", 2, tier="normal", ns="q")],
        m,
        api=api,
        until=lambda: _samples(m.registry, bound) != {},
    )
    assert _samples(m.registry, "gangops_queue_depth") == {}
    assert _samples(m.registry, "gangops_gpus_allocated") == {
        ("q", "alice", "guaranteed"): 0, ("q", "alice", "borrowed"): 2,
    }  # fmt: skip


def test_a_gang_bound_again_after_it_ran_is_not_timed_again() -> None:
    m = GangMetrics()
    api = FakeKube()
    again = waiting("again", 2, tier="high")
    again["status"] = {"startedAt": "2024-12-31T23:00:00Z", "restarts": 1, "attempts": 1}
    done = lambda: any(k[0] == "Pod" for k in api.objects)  # noqa: E731
    _run([again], m, api=api, until=lambda: done() and not _busy(api))
    assert _samples(m.registry, "gangops_gang_bound_seconds_count") == {}


def _busy(api: FakeKube) -> bool:
    return sum(1 for k in api.objects if k[0] == "Pod") < 2


def test_each_phase_of_a_step_is_timed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    m = GangMetrics()
    with caplog.at_level(logging.DEBUG, logger="controller.gang.controller"):
        _run([waiting("w", 1, tier="normal")], m)
    phases = ("plan", "snapshot", "schedule", "grow", "write")
    counts = {
        p: m.registry.get_sample_value("gangops_scheduling_phase_seconds_count", {"phase": p})
        for p in phases
    }
    assert counts == dict.fromkeys(phases, 1)
    (line,) = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("scheduling step")
    ]
    assert [w.split("=")[0] for w in line.split()[2:7]] == [f"{p}_s" for p in phases]


def test_idle_but_held_gpus_by_project_and_user_from_telemetry() -> None:
    """Running jobs whose GPUs the telemetry saw under 5 % for 5 minutes count as
    idle-but-held, per project and user; a busy one does not."""
    now = T0.timestamp()

    def usage(percent: float) -> PodUsage:
        return PodUsage(avg_1m=percent, avg_5m=percent, avg_15m=percent, p95_5m=percent,
                        trend_per_min=0.0)  # fmt: skip

    objs = [
        *held("r1", 3, on="a", first=0, borrowed=0, user="alice"),
        *held("r2", 4, on="a", first=3, borrowed=0, user="bob"),
    ]
    pods = {("p", f"r1-1-{i}"): usage(1.0) for i in range(3)}
    pods |= {("p", f"r2-1-{i}"): usage(80.0) for i in range(4)}
    t = Telemetry(health=Signal(now - 5), usage=Signal(now - 5), pods=pods)
    m = GangMetrics()
    api = FakeKube()
    c = GangController(api, clock=FakeClock(T0), metrics=m, telemetry=lambda: t)
    c.config.assume(
        policy_configmap(POLICY, c.settings.system_namespace, resourceVersion="1")
    )  # fmt: skip
    c.nodes.assume(node("a"))
    for o in objs:
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
    try:
        assert c.step() is not None
    finally:
        c.stop()
    assert _samples(m.registry, "gangops_idle_gpus") == {("p", "alice"): 3}


def test_demand_forecasts_per_project_and_per_user() -> None:
    """Each sample (every 15 s) adds the GPUs held plus queued per project and per user
    to the sliding window; the forecasts are reported; a user whose window holds only
    zeros is forgotten."""
    m, api, clock = GangMetrics(), FakeKube(), FakeClock(T0)
    c = GangController(api, clock=clock, metrics=m)
    c.config.assume(
        policy_configmap(POLICY, c.settings.system_namespace, resourceVersion="1")
    )  # fmt: skip
    c.nodes.assume(node("a"))
    for o in held("r1", 3, on="a", first=0, borrowed=0, user="alice"):
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
    w1 = waiting("w1", 8, tier="batch", ns="q")  # bob's; 5 GPUs are free, none to preempt
    w1["metadata"]["labels"]["ai.operator/user"] = "bob"
    c.jobs.assume(w1)
    api.objects[("TrainingJob", "q", "w1")] = w1

    def step() -> None:
        c.step()
        deadline = time.monotonic() + 10
        while c._busy:  # the status write lands before the next step reads the job
            assert time.monotonic() < deadline
            time.sleep(0.01)
        clock.advance(15)

    try:
        for _ in range(3):
            step()
        got = _samples(m.registry, "gangops_demand_forecast_gpus")
        assert got[("p", "", "point")] == got[("p", "alice", "point")] == 3
        assert got[("q", "", "p90")] == got[("q", "bob", "p90")] == 8
        assert got[("p", "alice", "p90")] >= 3
        c.jobs.forget("w1", "q")
        for _ in range(int(DEMAND_WINDOW_S / 15) + 2):  # a whole window of nothing
            step()
        got = _samples(m.registry, "gangops_demand_forecast_gpus")
        assert ("q", "bob", "point") not in got and ("p", "alice", "point") in got
    finally:
        c.stop()


def _alice_holding_3() -> tuple[GangController, GangMetrics, FakeKube, FakeClock]:
    """A controller whose node `a` runs alice's 3-GPU job `r1` in project `p`."""
    m, api, clock = GangMetrics(), FakeKube(), FakeClock(T0)
    c = GangController(api, clock=clock, metrics=m)
    c.config.assume(policy_configmap(POLICY, c.settings.system_namespace, resourceVersion="1"))
    c.nodes.assume(node("a"))
    for o in held("r1", 3, on="a", first=0, borrowed=0, user="alice"):
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
    return c, m, api, clock


def test_a_gang_its_own_limits_hold_back_is_not_demand_its_project_could_be_lent_back() -> None:
    """Found by a review: lending by forecast protected a project's idle guarantee
    for a gang over its own max (or its user's), which that guarantee could never
    admit, and so held those GPUs idle from every borrower for as long as it waited."""
    c, m, api, _ = _alice_holding_3()
    over = waiting("over", 6, tier="batch")  # 3 + 6 is over p's max of 8
    over["metadata"]["labels"]["ai.operator/user"] = "alice"
    c.jobs.assume(over)
    api.objects[("TrainingJob", "p", "over")] = over
    try:
        got = _demand_after_a_step(c, m)
        assert c.last_result is not None
        assert [(d.gang.id, getattr(d, "code", "")) for d in c.last_result.decisions] == [
            ("p/over", "Quota")
        ]
        assert got[("p", "", "point")] == got[("p", "alice", "point")] == 3, got
    finally:
        c.stop()


def test_cached_objects_count_each_watch_cache() -> None:
    """What the controller's memory grows with, per resource: read from its caches
    when scraped, so a pod that goes is no longer counted."""
    m = GangMetrics()
    objs = [
        *held("r1", 3, on="a", first=0, borrowed=0, user="alice"),
        waiting("w1", 16, tier="batch"),
    ]
    c = _run(objs, m)
    assert _samples(m.registry, "gangops_cached_objects") == {
        ("configmaps",): 1, ("limitranges",): 0, ("nodes",): 2, ("pods",): 3,
        ("resourcequotas",): 0, ("trainingjobs",): 2,
    }  # fmt: skip
    name = c.pods.items()[0]["metadata"]["name"]
    c.pods.forget(name, "p")
    assert _samples(m.registry, "gangops_cached_objects")[("pods",)] == 2


def _demand_after_a_step(c: GangController, m: GangMetrics) -> dict[tuple[str, ...], float]:
    c.step()
    deadline = time.monotonic() + 10
    while c._busy:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return _samples(m.registry, "gangops_demand_forecast_gpus")


def test_a_waiting_nominee_is_counted_once_in_its_projects_demand() -> None:
    """The cycle counts a nominee's GPUs against its quotas while it waits for its
    victims' pods; demand reads the plan (held + queued), so the nominee, queued,
    counts once, not once more for that claim."""
    c, m, api, clock = _alice_holding_3()
    # bob's 8-GPU gang, nominated for node a, where r1's 3 GPUs are still held
    nomination = Admission(
        "Nominated", 1, Placement(tuple(PodPlacement("a", (d,)) for d in range(8))),
        T0.timestamp(),
    )  # fmt: skip
    w1 = _in(job("w1", 8, tier="high", adm=nomination), "q")
    w1["metadata"]["labels"]["ai.operator/user"] = "bob"
    c.jobs.assume(w1)
    api.objects[("TrainingJob", "q", "w1")] = w1
    try:
        got = _demand_after_a_step(c, m)
        assert got[("q", "", "point")] == got[("q", "bob", "point")] == 8, got
        assert got[("p", "", "point")] == got[("p", "alice", "point")] == 3, got
        clock.advance(15)
        c._busy.add("q/w1")  # a write of its own in flight: not decided, still asking
        c.step()
        c._busy.clear()
        got = _samples(m.registry, "gangops_demand_forecast_gpus")
        assert got[("q", "bob", "point")] == 8, got
    finally:
        c.stop()


def test_a_gang_admitted_in_the_step_is_counted_once_in_its_projects_demand() -> None:
    m, api, clock = GangMetrics(), FakeKube(), FakeClock(T0)
    c = GangController(api, clock=clock, metrics=m)
    c.config.assume(policy_configmap(POLICY, c.settings.system_namespace, resourceVersion="1"))
    c.nodes.assume(node("a"))
    w1 = waiting("w1", 2, tier="batch", ns="q")
    w1["metadata"]["labels"]["ai.operator/user"] = "bob"
    c.jobs.assume(w1)
    api.objects[("TrainingJob", "q", "w1")] = w1
    try:
        got = _demand_after_a_step(c, m)
        assert isinstance(c.last_result.decisions[0], Admit)
        assert got[("q", "", "point")] == got[("q", "bob", "point")] == 2, got
    finally:
        c.stop()


def test_a_gang_held_back_by_another_projects_forecast_is_still_demand() -> None:
    """Found by a review of the fix above: a gang lending by forecast holds back (its
    project would borrow a guarantee its owner is forecast to want back) is Pending
    on Quota too, and was dropped from its project's demand, so that project's own
    idle guarantee was no longer protected."""
    pol = policy({"a": {"guaranteed": 8}, "b": {"guaranteed": 8}, "c": {"max": 8}})
    a_run = sjob("a-run").project("a").gang(4).build()
    c_run = sjob("c-run").project("c").gang(4).build()
    snap = Snapshot([snode("n1", 8), snode("n2", 8)], levels=("topology.kubernetes.io/zone",),
                    running=[srunning(a_run, {"n1": 4}), srunning(c_run, {"n2": 4})])  # fmt: skip
    a_big = sjob("a-big").project("a").gang(8).build()  # 4 + 8 > 8: borrows 4 of b's
    c_big = sjob("c-big").project("c").gang(8).build()  # 4 + 8 over its own max
    hints = Hints(protect={"b": 8_000})
    decisions = schedule(snap, [a_big, c_big], pol, now=0.0, hints=hints).decisions
    got = {
        (d.gang.id, d.code, d.held and d.held.limit) for d in decisions if isinstance(d, Pending)
    }
    assert got == {(a_big.id, "Quota", "lending"), (c_big.id, "Quota", "project")}
    assert held_back_by_own_limits(decisions) == {c_big.id}
