"""What each job needs next (`lifecycle.plan`), as tables: jobs, pods and nodes in;
the actions, the gangs holding GPUs and the queue out."""

from __future__ import annotations

from typing import Any

import pytest

from controller.gang.lifecycle import plan
from controller.gang.view import job_views

from .builders import NS, POLICY, admission, job, job_id, node, pod

NODES = {n["metadata"]["name"]: n for n in (node("a"), node("b"), node("down", ready=False))}
T0 = 1000.0


def _plan(jobs: list[dict[str, Any]], pods: list[dict[str, Any]], now: float = T0 + 1, **kw: Any):  # type: ignore[no-untyped-def]
    return plan(job_views(jobs, pods, POLICY), NODES, POLICY, now=now, **kw)


ADM = admission("a", "b")
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
    from controller.gang.record import Admission

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
    assert out.preemptions_last_hour == 1
    assert out.protected == {job_id("lo")}  # even with its own write in flight
    assert [a.kind for a in out.actions] == []
