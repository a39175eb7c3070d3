"""What each job needs next (`lifecycle.plan`), as tables: jobs, pods and nodes in;
the actions, the gangs holding GPUs and the queue out."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from controller.gang.lifecycle import (
    Write,
    action_write,
    cycle_writes,
    decide,
    plan,
    rollback_delay,
)
from controller.gang.record import Admission, Shape, format_time
from controller.gang.view import JobView, job_views
from controller.jobs.spec import ContainerDefaults, parse_job
from controller.nodehealth import RESTART_ANNOTATION
from controller.scheduler.cycle import CycleResult
from controller.scheduler.types import Admit, Pending, Placement, PodPlacement, Preempt, Resize
from tests.unit.scheduler.builders import policy as scheduler_policy

from .builders import NS, POLICY, admission, foreign, job, job_id, node, pod

NODES = {n["metadata"]["name"]: n for n in (node("a"), node("b"), node("down", ready=False))}
T0 = 1000.0


def _plan(jobs: list[dict[str, Any]], pods: list[dict[str, Any]], now: float = T0 + 1, **kw: Any):  # type: ignore[no-untyped-def]
    return plan(job_views(jobs, pods, POLICY), NODES, POLICY, now=now, **kw)


ADM = admission("a", "b")
SHAPE = Shape("normal", 2, 1, 1000, 0, 0)
SHAPED = admission("a", "b", shape=SHAPE)
"""A record that keeps what it admitted: `job("j")` as built."""


def _charged_as_admitted(out: Any) -> None:
    """The edited `j` runs in the cycle as its record admitted it (2 workers of 1
    GPU, tier normal: SHAPE), its pods its own."""
    (r,) = out.running
    assert (r.gang.workers, r.gang.pod.gpus, r.gang.tier) == (2, 1, "normal")
    assert (r.gang.min_workers, r.gang.max_workers) == (None, None)  # released, not resized
    assert out.owned == {(NS, "j-1-0"), (NS, "j-1-1")}


def _edited(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`obj` with its spec edited by its owner (`spec` fields replaced), its
    generation moved as the API server moves it."""
    meta = {**obj["metadata"], "generation": obj["metadata"]["generation"] + 1}
    return {**obj, "metadata": meta, "spec": {**obj["spec"], **spec}}


RUNNING_AB = [pod("j", 0, node="a"), pod("j", 1, node="b")]


def _asked(obj: dict[str, Any], at: float) -> dict[str, Any]:
    """`obj` with an alert action's restart request made at `at`."""
    why = "GangopsGPUMemoryLeak on node a"
    obj["metadata"]["annotations"] = {RESTART_ANNOTATION: f"{format_time(at)} {why}"}
    return obj


CASES = [
    # (case, jobs, pods, now, actions, holds GPUs, queued)
    ("new job queues", [job("j")], [], T0, [], [], ["j"]),
    ("admitted, no pods yet: launch", [job("j", adm=ADM)], [], T0 + 1, ["launch j"], ["j"], []),
    (
        "one pod unbound: launch",
        [job("j", adm=ADM)],
        [pod("j", 0, node="a"), pod("j", 1, phase="Pending")],
        T0 + 1, ["launch j"], ["j"], [],
    ),
    (
        "all bound, starting: wait",
        [job("j", adm=ADM)],
        [pod("j", 0, node="a", phase="Pending"), pod("j", 1, node="b", phase="Pending")],
        T0 + 1, [], ["j"], [],
    ),
    (
        "all running: running",
        [job("j", adm=ADM, phase="Admitted")],
        [pod("j", 0, node="a"), pod("j", 1, node="b")],
        T0 + 1, ["running j"], ["j"], [],
    ),
    (
        "running and said so: nothing",
        [job("j", adm=ADM, phase="Running")],
        [pod("j", 0, node="a"), pod("j", 1, node="b")],
        T0 + 1, [], ["j"], [],
    ),
    (
        "a worker failed: restart, still holding until the record is cleared",
        [job("j", adm=ADM, phase="Running")],
        [pod("j", 0, node="a", phase="Failed"), pod("j", 1, node="b")],
        T0 + 1, ["restart j"], ["j"], [],
    ),
    (
        "a worker's node is not Ready: restart",
        [job("j", adm=admission("a", "down"), phase="Running")],
        [pod("j", 0, node="a"), pod("j", 1, node="down")],
        T0 + 1, ["restart j"], ["j"], [],
    ),
    (
        "a worker's node is gone: restart",
        [job("j", adm=admission("a", "gone"), phase="Running")],
        [pod("j", 0, node="a"), pod("j", 1, node="gone")],
        T0 + 1, ["restart j"], ["j"], [],
    ),
    (
        "a running gang's pod was deleted: restart",
        [job("j", adm=ADM, phase="Running")],
        [pod("j", 0, node="a")],
        T0 + 1, ["restart j"], ["j"], [],
    ),
    (
        "a restart request newer than the admission: relocate",
        [_asked(job("j", adm=ADM, phase="Running"), T0 + 0.5)], RUNNING_AB, T0 + 1,
        ["relocate j"], ["j"], [],
    ),
    (
        "a restart request dated past now (year 9999: newer than any admission): nothing",
        [_asked(job("j", adm=ADM, phase="Running"), T0 + 10**9)], RUNNING_AB, T0 + 1,
        [], ["j"], [],
    ),
    (
        "a restart request older than the admission (already done): nothing",
        [_asked(job("j", adm=ADM, phase="Running"), T0 - 5)], RUNNING_AB, T0 + 1,
        [], ["j"], [],
    ),
    (
        "every worker succeeded",
        [job("j", adm=ADM, phase="Running")],
        [pod("j", 0, node="a", phase="Succeeded"), pod("j", 1, node="b", phase="Succeeded")],
        T0 + 1, ["succeeded j"], ["j"], [],
    ),
    (
        "not running within the gang timeout: rollback",
        [job("j", adm=ADM)],
        [pod("j", 0, node="a"), pod("j", 1, node="b", phase="Pending")],
        T0 + 61, ["rollback j"], ["j"], [],
    ),
    (
        "pods of an older attempt are cleaned up",
        [job("j", adm=admission("a", "b", attempt=2), phase="Running")],
        [pod("j", 0, node="a", attempt=2), pod("j", 1, node="b", attempt=2),
         pod("j", 0, node="a", attempt=1), pod("j", 1, node="b", attempt=1, phase="Failed")],
        T0 + 1, ["cleanup j"], ["j"], [],
    ),
    (
        "pods without a record are cleaned up (a rollback interrupted by a crash)",
        [job("j")],
        [pod("j", 0, node="a")],
        T0 + 1, ["cleanup j"], [], ["j"],
    ),
    (
        "backing off after a timeout: not queued",
        [job("j", notBefore="1970-01-01T00:16:50Z")],
        [], T0 + 5, [], [], [],
    ),
    (
        "backoff over: queued",
        [job("j", notBefore="1970-01-01T00:16:50Z")],
        [], T0 + 11, [], [], ["j"],
    ),
    (
        "nominated: its victims still holding are evicted; it stays queued",
        [job("hi", tier="high", adm=admission("a", "b", state="Nominated",
                                              victims=((job_id("lo"), 3),))),
         job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running")],
        [pod("lo", 0, node="a", attempt=3), pod("lo", 1, node="b", attempt=3)],
        T0 + 1, ["evict lo"], ["lo"], ["hi"],
    ),
    (
        "nominated: a victim re-admitted since (another attempt) is left alone",
        [job("hi", tier="high", adm=admission("a", "b", state="Nominated",
                                              victims=((job_id("lo"), 3),))),
         job("lo", tier="batch", adm=admission("a", "b", attempt=4), phase="Running")],
        [pod("lo", 0, node="a", attempt=4), pod("lo", 1, node="b", attempt=4)],
        T0 + 1, [], ["lo"], ["hi"],
    ),
    (
        "nominated: an elastic gang it shrinks, still at that attempt, is shrunk",
        [job("hi", tier="high", adm=admission("a", state="Nominated",
                                              shrinks=((job_id("lo"), 3, 1),))),
         job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running")],
        [pod("lo", 0, node="a", attempt=3), pod("lo", 1, node="b", attempt=3)],
        T0 + 1, ["shrink lo"], ["lo"], ["hi"],
    ),
    (
        "resized: the new attempt waits while the old attempt's pods are cleaned up",
        [job("j", adm=admission("a", "b", attempt=2), phase="Admitted")],
        [pod("j", 0, node="a", attempt=1), pod("j", 1, node="b", attempt=1)],
        T0 + 1, ["cleanup j"], ["j"], [],
    ),
    (
        "resized: an old pod stuck on a lost node does not hold the relaunch",
        [job("j", adm=admission("a", "b", attempt=2), phase="Admitted")],
        [pod("j", 0, node="down", attempt=1, deleting=True), pod("j", 0, node="a", attempt=2)],
        T0 + 1, ["launch j"], ["j"], [],
    ),
    (
        "resized: ... and while they terminate",
        [job("j", adm=admission("a", "b", attempt=2), phase="Admitted")],
        [pod("j", 0, node="a", attempt=1, deleting=True)],
        T0 + 1, [], ["j"], [],
    ),
    (
        "a nomination older than the gang timeout expires",
        [job("hi", tier="high", adm=admission("a", "b", state="Nominated"))],
        [], T0 + 61, ["expire hi"], [], [],
    ),
    (
        "an invalid job is reported, not queued",
        [{**job("bad"), "spec": {"gangSize": 2, "template": {"spec": {"containers": [{}]}}}}],
        [], T0, ["invalid bad"], [], [],
    ),
    ("finished jobs are left alone", [job("j", phase="Succeeded")], [], T0, [], [], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("jobs", "pods", "now", "actions", "holding", "queued"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_plan(
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    now: float,
    actions: list[str],
    holding: list[str],
    queued: list[str],
) -> None:
    out = _plan(jobs, pods, now)
    assert [f"{a.kind} {a.job.id.split('/')[1]}" for a in out.actions] == actions
    assert [r.gang.id for r in out.running] == [f"{NS}/{n}" for n in holding]
    assert [g.id for g in out.queue] == [f"{NS}/{n}" for n in queued]


def test_a_job_with_a_write_in_flight_only_counts_what_it_holds() -> None:
    jobs = [job("j", adm=ADM), job("k")]
    out = _plan(jobs, [], T0 + 100, busy=frozenset({job_id("j"), job_id("k")}))
    assert out.actions == [] and out.queue == []
    assert [r.gang.id for r in out.running] == [job_id("j")]


def test_the_running_gangs_own_their_current_pods_only() -> None:
    jobs = [job("j", adm=admission("a", "b", attempt=2), phase="Running")]
    pods = [pod("j", 0, node="a", attempt=2), pod("j", 1, node="b", attempt=2),
            pod("j", 0, node="a", attempt=1, deleting=True)]  # fmt: skip
    out = _plan(jobs, pods)
    assert out.owned == {(NS, "j-2-0"), (NS, "j-2-1")}


def test_preemptions_of_the_last_hour_are_counted_from_the_victims() -> None:
    jobs = [
        job("a", preemptedAt="1970-01-01T00:16:00Z"),
        job("b", preemptedAt="1970-01-01T00:00:01Z"),
    ]
    assert _plan(jobs, [], now=T0 + 3000).preemptions_last_hour == 1


def test_a_resized_gang_holds_what_its_record_says() -> None:
    grown = job("j", gang=2, adm=admission("a", "a", "b", attempt=2), phase="Running")
    out = _plan([grown], [])
    (held,) = out.running
    assert held.gang.workers == 3 and held.gang.submitted_workers == 2


def test_a_nomination_record_keeps_its_shrinks() -> None:
    adm = admission("a", state="Nominated", shrinks=((job_id("lo"), 3, 1),))
    assert Admission.from_status({"admission": adm.to_dict()}) == adm


def test_shrinks_below_gang_size_count_as_preemptions_and_protect_their_targets() -> None:
    jobs = [
        job("a", shrunkAt="1970-01-01T00:16:00Z"),
        job("hi", tier="high", adm=admission("a", state="Nominated",
                                             shrinks=((job_id("lo"), 3, 1),))),
        job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running"),
    ]  # fmt: skip
    out = _plan(jobs, [], now=T0 + 1, busy=frozenset({job_id("lo")}))
    # a's landed shrink, and lo's below its gangSize, decided and not written yet (found
    # by a review: counted only once written, so the next step had the hour's budget
    # again)
    assert out.preemptions_last_hour == 2
    assert out.protected == {job_id("lo")}  # even with its own write in flight
    assert out.releasing == {job_id("lo"): 1}  # the workers it keeps
    assert [a.kind for a in out.actions] == []


def test_a_victim_not_yet_evicted_gives_back_all_it_holds() -> None:
    jobs = [
        job("hi", tier="high", adm=admission("a", "b", state="Nominated",
                                             victims=((job_id("lo"), 3),))),
        job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running"),
        job("other", tier="batch", adm=admission("a", "b", attempt=4), phase="Running"),
    ]  # fmt: skip
    out = _plan(jobs, [], now=T0 + 1)
    assert out.releasing == {job_id("lo"): 0}
    # decided, not landed: it counts against maxPerHour already, and its nominee
    # waits for it whatever else would fit
    assert (out.preemptions_last_hour, out.awaiting) == (1, {job_id("hi")})


def test_a_nominee_with_a_write_in_flight_keeps_its_nodes_and_victims_undecided() -> None:
    jobs = [
        job("hi", tier="high", adm=admission("a", "b", state="Nominated",
                                             victims=((job_id("lo"), 3),))),
        job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running"),
    ]  # fmt: skip
    out = _plan(jobs, [], now=T0 + 1, busy=frozenset({job_id("hi")}))
    assert [g.id for g in out.in_flight] == [job_id("hi")] and out.queue == []
    assert out.nominated == {job_id("hi"): admission("a", "b").placement}
    assert out.releasing == {job_id("lo"): 0}
    assert "evict" not in [a.kind for a in out.actions]  # it waits for hi's own write
    assert "evict" in [a.kind for a in _plan(jobs, [], now=T0 + 1).actions]
    expired = _plan(jobs, [], now=T0 + 61, busy=frozenset({job_id("hi")}))
    assert expired.in_flight == [] and expired.nominated == {} and expired.releasing == {}


def test_a_nominee_counts_against_its_quota_while_a_write_of_its_own_is_in_flight() -> None:
    """n (8 GPUs) is nominated on node a, still held by its victim's pods; x (6) of
    the same project, max 12, must wait for quota also in a step where n is not
    decided because its pending message is being written (found by a review: x was
    admitted on b in that step, and n then waited until it expired)."""
    pol = replace(scheduler_policy({"p": {"guaranteed": 8, "max": 12}}), gang_timeout_seconds=600.0)
    n = job("n", 8, tier="high", adm=admission(*["a"] * 8, state="Nominated"))
    n["status"]["admission"]["pods"] = [{"node": "a", "devices": [d]} for d in range(8)]
    x = job("x", 6, tier="normal")
    pods = [foreign("old", "a", 8), foreign("other", "b", 2)]  # b: 6 free, too few for n
    for busy in (frozenset(), frozenset({job_id("n")})):
        _, _, result = decide(job_views([n, x], pods, pol), NODES, pods, pol, now=1001.0, busy=busy)
        by_id = {d.gang.id: d for d in result.decisions}
        assert (job_id("n") in by_id) == (not busy)
        assert isinstance(by_id[job_id("x")], Pending) and by_id[job_id("x")].code == "Quota"


# ----------------------------------------------------------------- writes

BACKOFF = {"backoff_base_s": 5.0, "backoff_max_s": 300.0}


def _summary(w: Write) -> dict[str, Any]:
    """The parts of a write a row states."""
    out: dict[str, Any] = {
        "kind": w.kind,
        "phase": w.phase,
        "reason": w.reason,
        "message": w.message,
        "conditional": w.conditional,
        "stalled": w.stalled,
        "clear": w.clear,
        "event": w.event,
        "counted": w.counted,
        "preemption": w.preemption,
        "launch": w.launch,
        "delete": sorted(p["metadata"]["name"] for p in w.delete),
        **{f"status.{k}": v for k, v in w.fields.items()},
    }
    if w.record is not None:
        out |= {
            "record": w.record.state,
            "attempt": w.record.attempt,
            "workers": len(w.record.placement.pods),
            "borrowed": w.record.borrowed_milli,
            "victims": w.record.victims,
        }
    return out


def _action_writes(
    jobs: list[dict[str, Any]], pods: list[dict[str, Any]], now: float
) -> list[Write]:
    out = _plan(jobs, pods, now)
    writes = [action_write(a, POLICY, now=now, **BACKOFF) for a in out.actions]
    return [w for w in writes if w is not None]


RUNNING = [pod("j", 0, node="a"), pod("j", 1, node="b")]
LATE = [pod("j", 0, node="a"), pod("j", 1, node="b", phase="Pending")]
FAILED = [pod("j", 0, node="a", phase="Failed"), pod("j", 1, node="b")]
LO = [pod("lo", 0, node="a", attempt=3), pod("lo", 1, node="b", attempt=3)]


def _nominated(**kw: Any) -> dict[str, Any]:
    return job("hi", tier="high", adm=admission("a", state="Nominated", **kw))


WRITE_CASES = [
    # (case, jobs, pods, now, the write's parts that matter)
    (
        "the first rollback requeues after backoffBase",
        [job("j", adm=ADM)], LATE, T0 + 61,
        {"kind": "rollback", "phase": "Queued", "reason": "GangTimeout", "clear": True,
         "status.rollbacks": 1, "status.notBefore": format_time(T0 + 61 + 5),
         "delete": ["j-1-0", "j-1-1"], "counted": True, "event": "Warning"},
    ),
    (
        "each later rollback doubles the delay",
        [job("j", adm=ADM, rollbacks=2)], LATE, T0 + 61,
        {"status.rollbacks": 3, "status.notBefore": format_time(T0 + 61 + 20)},
    ),
    (
        "the rollback delay stops at backoffMax",
        [job("j", adm=ADM, rollbacks=9)], LATE, T0 + 61,
        {"status.rollbacks": 10, "status.notBefore": format_time(T0 + 61 + 300)},
    ),
    (
        "a failed worker restarts the gang, keeping the failed pod for its logs",
        [job("j", adm=ADM, phase="Running", restarts=1)], FAILED, T0 + 1,
        {"kind": "restart", "phase": "Queued", "reason": "Restarting", "status.restarts": 2,
         "clear": True, "delete": ["j-1-1"],
         "message": "worker j-1-0 failed (Failed); restarting the whole gang (restart 2 of 3)"},
    ),
    (
        "a requested relocation restarts the gang after a backoff, not counted as a restart",
        [_asked(job("j", adm=ADM, phase="Running", restarts=3), T0 + 0.5)], RUNNING, T0 + 1,
        {"kind": "restart", "phase": "Queued", "reason": "Relocating", "clear": True,
         "status.relocations": 1, "status.restarts": None,
         "status.notBefore": format_time(T0 + 1 + 5),
         "delete": ["j-1-0", "j-1-1"],
         "message": "GangopsGPUMemoryLeak on node a; restarting the whole gang away from the"
                    " fault in 5s (not counted against backoffLimit)"},
    ),
    (
        "a failure past backoffLimit fails the job: BackoffLimitExceeded",
        [job("j", adm=ADM, phase="Running", restarts=3)], FAILED, T0 + 1,
        {"kind": "failed", "phase": "Failed", "reason": "BackoffLimitExceeded", "clear": True,
         "counted": True},
    ),
    (
        "the job's own backoffLimit wins over the policy's",
        [{**job("j", adm=ADM, phase="Running", restarts=1),
          "spec": {**job("j")["spec"], "backoffLimit": 1}}], FAILED, T0 + 1,
        {"kind": "failed", "reason": "BackoffLimitExceeded",
         "message": "worker j-1-0 failed (Failed); the gang was restarted 1 times "
                    "(backoffLimit 1)"},
    ),
    (
        "an eviction clears the victim's record and counts as a preemption",
        [_nominated(victims=((job_id("lo"), 3),)),
         job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running")],
        LO, T0 + 1,
        {"kind": "preempt", "phase": "Preempted", "reason": "Preempted", "clear": True,
         "preemption": True, "counted": True, "status.preemptedBy": job_id("hi"),
         "status.preemptedAt": format_time(T0 + 1), "delete": ["lo-3-0", "lo-3-1"]},
    ),
    (
        "a shrink below gangSize is the next attempt, counted as a preemption (shrunkAt)",
        [_nominated(shrinks=((job_id("lo"), 3, 1),)),
         job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running")],
        LO, T0 + 1,
        {"kind": "resize", "reason": "Shrinking", "record": "Admitted", "attempt": 4,
         "workers": 1, "preemption": False, "status.shrunkAt": format_time(T0 + 1),
         "message": f"shrunk from 2 to 1 GPUs for {job_id('hi')} (elastic); "
                    "the gang restarts at the new size"},
    ),
    (
        "a shrink gives borrowed GPUs back first, and at gangSize is no preemption",
        [_nominated(shrinks=((job_id("lo"), 3, 2),)),
         job("lo", tier="batch", adm=admission("a", "b", "b", attempt=3, borrowed_milli=1500),
             phase="Running")],
        [*LO, pod("lo", 2, node="b", attempt=3)], T0 + 1,
        {"kind": "resize", "attempt": 4, "workers": 2, "borrowed": 500, "counted": True},
    ),
    (
        "all running: Running, with when it started",
        [job("j", adm=ADM, phase="Admitted")], RUNNING, T0 + 1,
        {"kind": "running", "phase": "Running", "status.startedAt": format_time(T0 + 1),
         "clear": False, "counted": False},
    ),
    (
        "every worker succeeded: the record is cleared",
        [job("j", adm=ADM, phase="Running")],
        [pod("j", 0, node="a", phase="Succeeded"), pod("j", 1, node="b", phase="Succeeded")],
        T0 + 1, {"kind": "succeeded", "phase": "Succeeded", "clear": True, "delete": []},
    ),
    (
        "an expired nomination clears the record and keeps the job Preempted",
        [job("hi", tier="high", adm=admission("a", "b", state="Nominated"), phase="Preempted")],
        [], T0 + 61, {"kind": "expire", "phase": "Preempted", "reason": "NominationExpired",
                      "clear": True},
    ),
    (
        "an invalid spec is Stalled, written whatever the job's resourceVersion",
        [{**job("bad"), "spec": {"gangSize": 2, "template": {"spec": {"containers": [{}]}}}}],
        [], T0, {"kind": "invalid", "phase": "Queued", "reason": "InvalidSpec",
                 "conditional": False, "stalled": True},
    ),
    (
        "a launch writes no status: it creates and binds the pods",
        [job("j", adm=ADM)], [], T0 + 1, {"kind": "launch", "phase": None, "launch": True},
    ),
    (
        "a spec edited while admitted restarts the gang under it, not counted as a restart",
        [_edited(job("j", adm=SHAPED, phase="Running", restarts=3), gangSize=1)], RUNNING,
        T0 + 1,
        {"kind": "restart", "phase": "Queued", "reason": "SpecChanged", "clear": True,
         "status.restarts": None, "delete": ["j-1-0", "j-1-1"],
         "message": "its spec changed while admitted (gangSize (workers) 2 -> 1); the gang "
                    "restarts under the new spec (not counted against backoffLimit)"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("jobs", "pods", "now", "parts"),
    [c[1:] for c in WRITE_CASES],
    ids=[c[0] for c in WRITE_CASES],
)
def test_action_write(
    jobs: list[dict[str, Any]], pods: list[dict[str, Any]], now: float, parts: dict[str, Any]
) -> None:
    (w,) = [w for w in _action_writes(jobs, pods, now) if w.kind != "cleanup"]
    got = _summary(w)
    assert {k: got.get(k) for k in parts} == parts


def test_rollback_delay_doubles_up_to_its_cap() -> None:
    delays = [rollback_delay(n, base_s=5.0, max_s=60.0) for n in range(1, 7)]
    assert delays == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert rollback_delay(1025, base_s=5.0, max_s=60.0) == 60.0  # no OverflowError


def _views(*jobs: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> list[JobView]:
    return job_views(list(jobs), pods or [], POLICY)


def test_an_admission_is_the_next_attempt_with_its_borrowed_share_launched_after_it() -> None:
    views = _views(job("j", attempts=2))
    g = views[0].gang
    assert g is not None
    result = CycleResult(decisions=[Admit(g, ADM.placement, 1000)])
    (w,) = cycle_writes(result, views, now=T0)
    assert _summary(w) | {"message": ""} == _summary(w) | {
        "kind": "admit", "phase": "Admitted", "record": "Admitted", "attempt": 3,
        "borrowed": 1000, "launch": True, "status.attempts": 3, "status.notBefore": None,
        "event": "Normal", "counted": True, "message": "",
    }  # fmt: skip
    assert w.message == "placed on a x1, b x1; 1 GPUs borrowed; starting attempt 3"
    assert w.record == Admission("Admitted", 3, ADM.placement, T0, 1000, shape=SHAPE)
    assert w.record.to_dict()["shape"] == {
        "tier": "normal", "workers": 2, "gpusPerWorker": 1, "gpuMilli": 1000, "cpuMilli": 0,
        "memoryBytes": 0,
    }  # fmt: skip


def test_a_nomination_names_each_victim_with_the_attempt_it_holds() -> None:
    views = _views(
        job("hi", tier="high"),
        job("lo", tier="batch", adm=admission("a", "b", attempt=3), phase="Running"),
        pods=LO,
    )
    hi = views[0].gang
    assert hi is not None
    result = CycleResult(decisions=[Preempt(hi, (job_id("lo"),), ADM.placement, "preempting lo")])
    (w,) = cycle_writes(result, views, now=T0)
    assert (w.kind, w.phase, w.reason, w.counted, w.launch) == (
        "nominate", "Queued", "Preempting", False, False,
    )  # fmt: skip
    assert w.record is not None and w.record.victims == ((job_id("lo"), 3),)
    assert w.message == "preempting lo; it starts once they have released their GPUs"


def test_a_pending_reason_is_written_once() -> None:
    (v,) = _views(job("j"))
    assert v.gang is not None
    pending = CycleResult(decisions=[Pending(v.gang, "no room", "Capacity")])
    (w,) = cycle_writes(pending, [v], now=T0)
    assert (w.phase, w.reason, w.message, w.conditional) == ("Queued", "Capacity", "no room", False)
    said = job("j", phase="Queued", reason="Capacity", message="no room", observedGeneration=1)
    (v2,) = _views(said)
    (again,) = cycle_writes(CycleResult(decisions=[Pending(v.gang, "no room", "Capacity")]),
                            [v2], now=T0)  # fmt: skip
    assert (again.kind, again.phase) == ("pending", None)


def _waiting(message: str, at: float | None, **fields: Any) -> JobView:
    extra = {} if at is None else {"messageAt": format_time(at)}
    said = job("j", phase="Queued", reason="Capacity", message=message, observedGeneration=1,
               **extra, **fields)  # fmt: skip
    (v,) = _views(said)
    return v


def _pending_write(v: JobView, reason: str, code: str = "Capacity", *, now: float) -> Write:
    assert v.gang is not None
    (w,) = cycle_writes(CycleResult(decisions=[Pending(v.gang, reason, code)]), [v], now=now,
                        refresh_s=300.0)  # fmt: skip
    return w


def test_a_waiting_message_whose_figures_move_is_rewritten_at_most_once_per_refresh() -> None:
    """The figures of a waiting job's message (here the GPUs left outside the
    reserve) change with every admission and release anywhere in the cluster: in the
    documented overloaded simulation 375,144 of 406,873 waiting decisions changed
    the message of the cycle before. Written each time, that is a status write per
    waiting job per step; held to one per refresh, the status says when it was
    written (`messageAt`)."""
    first = _pending_write(_views(job("j"))[0], "needs 1 GPUs; 0.09 are left", now=T0)
    assert (first.phase, first.message) == ("Queued", "needs 1 GPUs; 0.09 are left")
    assert first.fields["messageAt"] == format_time(T0)
    v = _waiting("needs 1 GPUs; 0.09 are left", T0)
    soon = _pending_write(v, "needs 1 GPUs; 0.15 are left", now=T0 + 299)
    assert (soon.phase, soon.empty) == (None, True)
    later = _pending_write(v, "needs 1 GPUs; 0.15 are left", now=T0 + 300)
    assert (later.phase, later.reason, later.message) == (
        "Queued", "Capacity", "needs 1 GPUs; 0.15 are left",
    )  # fmt: skip
    assert later.fields["messageAt"] == format_time(T0 + 300)


def test_a_new_reason_or_spec_is_written_at_once_whatever_the_refresh() -> None:
    v = _waiting("needs 1 GPUs; 0.09 are left", T0)
    quota = _pending_write(v, "project p at max", "Quota", now=T0 + 1)
    assert (quota.reason, quota.message) == ("Quota", "project p at max")
    edited = _waiting("needs 1 GPUs; 0.09 are left", T0)
    edited.obj["metadata"]["generation"] = 2
    again = _pending_write(edited, "needs 1 GPUs; 0.15 are left", now=T0 + 1)
    assert again.message == "needs 1 GPUs; 0.15 are left"
    # A Quota reason's figures are written at once: the quota loop reads them to
    # propose how much the max must rise.
    at_max = job("j", phase="Queued", reason="Quota", observedGeneration=1,
                 message="project p at max: 6 of 8 GPUs in use, this job needs 4",
                 messageAt=format_time(T0))  # fmt: skip
    (q,) = _views(at_max)
    fresh = _pending_write(q, "project p at max: 5 of 8 GPUs in use, this job needs 4", "Quota",
                           now=T0 + 1)  # fmt: skip
    assert fresh.message == "project p at max: 5 of 8 GPUs in use, this job needs 4"
    # Other words, not only other figures: a note (telemetry lost), another cause.
    noted = _pending_write(v, "needs 1 GPUs; 0.09 are left (telemetry unavailable)", now=T0 + 1)
    assert noted.message == "needs 1 GPUs; 0.09 are left (telemetry unavailable)"
    # No `messageAt` (written before it existed, or by another phase), or one in the
    # future (another replica's clock): the message is written.
    for at in (None, T0 + 60):
        w = _pending_write(
            _waiting("needs 1 GPUs; 0.09 are left", at), "needs 1 GPUs; 2 are left", now=T0
        )
        assert w.message == "needs 1 GPUs; 2 are left"


def test_a_waiting_message_whose_telemetry_failure_changes_kind_waits_for_the_refresh() -> None:
    """Prometheus that times out and refuses by turns changes the note on every waiting
    job each turn: like a figure, the kind of failure is written at most once per
    refresh (so is the note written before it named a kind, with the error's text)."""
    note = "telemetry unavailable: {}; scheduling by requests alone"
    for before in ("unreachable", "Prometheus at http://prom:9090: URLError(refused; (111))"):
        v = _waiting(f"needs 1 GPUs ({note.format(before)})", T0)
        soon = _pending_write(v, f"needs 1 GPUs ({note.format('timeout')})", now=T0 + 299)
        assert (soon.phase, soon.empty) == (None, True), before
        later = _pending_write(v, f"needs 1 GPUs ({note.format('timeout')})", now=T0 + 300)
        assert later.message == f"needs 1 GPUs ({note.format('timeout')})"
    # The note itself, added or dropped, is other words: written at once.
    v = _waiting(f"needs 1 GPUs ({note.format('timeout')})", T0)
    assert _pending_write(v, "needs 1 GPUs", now=T0 + 1).message == "needs 1 GPUs"


def test_a_preempted_job_says_who_preempted_it_while_it_waits() -> None:
    (v,) = _views(job("j", phase="Preempted", preemptedBy="p/hi"))
    assert v.gang is not None
    (w,) = cycle_writes(CycleResult(decisions=[Pending(v.gang, "no room", "Capacity")]), [v],
                        now=T0)  # fmt: skip
    assert (w.phase, w.message) == ("Preempted", "preempted by p/hi; requeued: no room")


def test_a_growth_is_recorded_as_the_next_attempt_and_assumed() -> None:
    (v,) = _views(job("j", adm=ADM, phase="Running"), pods=RUNNING)
    assert v.gang is not None
    bigger = Placement((*ADM.placement.pods, PodPlacement("b", (5,))))
    result = CycleResult(resizes=[Resize(v.gang.resized(3), bigger, "grown", 1000)])
    (w,) = cycle_writes(result, [v], now=T0)
    assert (w.kind, w.reason, w.message, w.counted) == ("resize", "Growing", "grown", True)
    assert w.record == Admission("Admitted", 2, bigger, T0, 1000)


def test_a_resized_gang_waits_out_its_old_pods_grace_period_before_its_gang_timeout() -> None:
    """Found by a review: a resize keeps its GPUs, so its new pods wait for the old
    ones to go; a grace period long enough to checkpoint on SIGTERM ran down the gang
    timeout (60 s here), and a shrink ended as a rollback of the whole job."""
    shrunk = job("j", 2, adm=admission("a", attempt=2, at=T0), phase="Admitted", reason="Shrinking")
    shrunk["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 600
    old = [pod("j", i, node=n, attempt=1, deleting=True) for i, n in enumerate("ab")]
    views = job_views([shrunk], old, POLICY)
    assert plan(views, NODES, POLICY, now=T0 + 61 + 500).actions == []
    (late,) = plan(views, NODES, POLICY, now=T0 + 60 + 600 + 1).actions
    assert late.kind == "rollback" and "660s after admission" in late.message
    # A restart's new attempt is placed apart from its old pods: no wait added (the
    # review of the fix: every re-admission had got it, a stuck gang held an hour more).
    restarted = job("j", 2, adm=admission("a", "b", attempt=2, at=T0), phase="Admitted")
    restarted["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 600
    (timed_out,) = plan(job_views([restarted], [], POLICY), NODES, POLICY, now=T0 + 61).actions
    assert timed_out.kind == "rollback" and "60s after admission" in timed_out.message


def _unknown_tier(obj: dict[str, Any]) -> dict[str, Any]:
    """The job's owner edits its spec to a tier the policy does not know."""
    obj = copy.deepcopy(obj)
    obj["spec"]["priority"] = "no-such-tier"
    return obj


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        ([pod("j", 0, node="a", phase="Succeeded"), pod("j", 1, node="b", phase="Succeeded")],
         "succeeded"),
        ([pod("j", 0, node="a", phase="Failed"), pod("j", 1, node="b")], "invalid"),
        ([], "invalid"),
        ([pod("j", 0, node="a"), pod("j", 1, node="b")], None),
    ],
    ids=["all-succeeded", "one-failed", "pods-deleted", "running"],
)  # fmt: skip
def test_a_record_whose_spec_no_longer_parses_is_followed_to_its_end(
    pods: list[dict[str, Any]], want: str | None
) -> None:
    """Found by a review: an admitted job whose spec stopped parsing (an edit to an
    unknown tier, a tier removed) was followed no further: it stayed Running after
    its workers succeeded, and a failed worker left its siblings holding GPUs. It
    keeps what it holds while it runs; once its workers stop it is released."""
    jobs = [_unknown_tier(job("j", adm=admission("a", "b"), phase="Running"))]
    views = job_views(jobs, pods, POLICY)
    assert views[0].gang is None
    out = plan(views, NODES, POLICY, now=T0 + 10)
    assert [a.kind for a in out.actions] == ([want] if want else [])
    if want == "invalid":
        (a,) = out.actions
        w = action_write(a, POLICY, now=T0 + 10, backoff_base_s=5, backoff_max_s=60)
        assert w is not None and w.clear and w.reason == "InvalidSpec"
    nominee = _unknown_tier(job("n", tier="high", adm=admission("a", "b", state="Nominated")))
    out = plan(job_views([nominee], [], POLICY), NODES, POLICY, now=T0 + 1)
    assert [a.kind for a in out.actions] == ["expire"]  # could never be admitted


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_job_running_under_a_name_now_refused_for_new_jobs_is_still_tracked(phase: str) -> None:
    """Found by a review: names of 51 to 59 characters ran before they were refused
    (jobs/spec.py MAX_NAME); refusing them for a job already admitted left it untracked:
    never marked Succeeded, never restarted. The check is for jobs not yet admitted."""
    name = "llama-70b-lora-finetune-experiment-2024-06-01-run-03"  # 52 characters
    jobs = [job(name, adm=admission("a", "b"), phase="Running")]
    pods = [pod(name, 0, node="a", phase=phase), pod(name, 1, node="b", phase="Succeeded")]
    out = plan(job_views(jobs, pods, POLICY), NODES, POLICY, now=T0 + 1)
    assert [a.kind for a in out.actions] == ["succeeded" if phase == "Succeeded" else "restart"]
    fresh = job_views([job(name)], [], POLICY)
    assert fresh[0].gang is None and "at most 50" in (fresh[0].error or "")


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        # charged by the edited spec, a running 2-GPU gang counted as 1: its owner's
        # second job went past her max, another's pods were refused by the kubelet
        ({"gangSize": 1}, "gangSize (workers) 2 -> 1"),
        # a tier its project may not use, only ever checked for waiting gangs
        ({"priority": "high"}, "tier normal -> high"),
    ],
)
def test_a_gang_whose_spec_changed_while_admitted_is_released_and_charged_as_admitted(
    edit: dict[str, Any], says: str
) -> None:
    out = _plan([_edited(job("j", adm=SHAPED, phase="Running"), **edit)], RUNNING_AB)
    assert [(a.kind, a.message) for a in out.actions] == [
        ("respec", f"its spec changed while admitted ({says})")
    ]
    # charged as it was admitted (2 workers of 1 GPU, tier normal) until its record
    # is cleared, not as edited
    _charged_as_admitted(out)
    assert out.queue == []


def test_a_record_keeps_its_shape_through_resizes_and_unchanged_specs_run_on() -> None:
    out = _plan([job("j", adm=SHAPED, phase="Running")], RUNNING_AB)
    assert out.actions == [] and [r.gang.id for r in out.running] == [job_id("j")]
    # an elastic range is no part of the shape: changing it restarts nothing (the
    # first version of this test set a `spec.maxGPU` no job has: a review of the day)
    ranged = {"resourceProfile": {"minGPU": 1, "maxGPU": 8}}
    out = _plan([_edited(job("j", adm=SHAPED, phase="Running"), **ranged)], RUNNING_AB)
    assert out.actions == [] and out.running[0].gang.max_workers == 8
    back = Admission.from_status({"admission": SHAPED.to_dict()})
    assert back is not None and back.shape == SHAPED.shape
    bad = {**SHAPED.to_dict(), "shape": {"tier": "normal"}}
    assert Admission.from_status({"admission": bad}) == replace(SHAPED, shape=None)


def test_the_shape_is_the_specs_own_not_what_the_policies_make_of_it() -> None:
    """Found by a review of the day: compared with what the policies made of the spec
    (the project's default tier, its LimitRange's default requests), a new policy
    restarted every running job that relied on either."""
    obj = job("j")
    del obj["spec"]["priority"]
    with_defaults = parse_job(obj, defaults=ContainerDefaults(cpu_milli=1000, memory=1 << 30))
    plain = parse_job(obj)
    assert with_defaults.pod.cpu_milli == 1000  # what the scheduler counts
    assert Shape.of(with_defaults) == Shape.of(plain) == replace(SHAPE, tier="")
    said = Shape.of(plain).differs(SHAPE)
    assert said == "tier (the project's default) -> normal"


def test_an_edited_gang_with_a_write_in_flight_is_not_charged_by_its_new_spec() -> None:
    # found by a review of the day: the busy path skipped the check, and the release
    # itself puts the job there
    out = _plan([_edited(job("j", adm=SHAPED, phase="Running"), gangSize=1)], RUNNING_AB,
                busy=frozenset({job_id("j")}))  # fmt: skip
    assert out.actions == []
    (r,) = out.running
    assert (r.gang.gpu_total, r.gang.tier) == (2000, "normal")


@pytest.mark.parametrize(
    ("phases", "action"),
    [(("Failed", "Running"), "restart"), (("Succeeded", "Succeeded"), "succeeded")],
)
def test_what_an_edited_gangs_pods_did_is_read_first(phases: tuple[str, str], action: str) -> None:
    # found by a review of the day: a failure escaped backoffLimit, and a gang whose
    # workers had all succeeded ran again, when its spec was edited meanwhile
    pods = [
        pod("j", i, node=n, phase=ph) for i, (n, ph) in enumerate(zip("ab", phases, strict=True))
    ]
    out = _plan([_edited(job("j", adm=SHAPED, phase="Running"), gangSize=1)], pods)
    assert [a.kind for a in out.actions] == [action]
    _charged_as_admitted(out)
