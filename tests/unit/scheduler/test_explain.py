"""`explain` tells the whole story of one waiting gang."""

from __future__ import annotations

from controller.scheduler.cycle import schedule
from controller.scheduler.explain import explain
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import JobId
from tests.unit.scheduler.builders import job, node, policy, running

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")


def test_quota_blocked_job_names_the_project_usage_to_end() -> None:
    pol = policy({"nlp": {"guaranteed": 4, "max": 8}})
    hog = job("nlp/hog").project("nlp").user("bob").gang(6).build()
    snap = Snapshot([node("n1"), node("n2")], levels=LEVELS, running=[running(hog, {"n1": 6})])
    queue = [
        job("nlp/first").project("nlp").tier("high").gang(1).build(),
        job("nlp/mine").project("nlp").user("alice").gang(4).at(5).build(),
    ]
    result = schedule(snap, queue, pol, now=0.0)
    text = explain(JobId("nlp/mine"), result=result, snap=snap, policy=pol)
    assert "Queue position 2 of 2: 1 ahead in higher tiers" in text
    assert "waiting (Quota): project nlp at max: 7 of 8 GPUs in use, this job needs 4" in text
    assert "3 GPUs of project nlp's running work end, or its max (8) is raised" in text
    assert "nlp/hog: 6 GPUs, tier normal, user bob" in text


def test_capacity_blocked_job_lists_what_holds_its_nodes() -> None:
    big = job("b/sweep").tier("batch").gang(8).build()
    snap = Snapshot([node("n1")], levels=LEVELS, running=[running(big, {"n1": 8}, started=-1)])
    pol = policy(min_runtime=600)
    result = schedule(snap, [job("a/train").tier("high").gang(4).build()], pol, now=0.0)
    text = explain(JobId("a/train"), result=result, snap=snap, policy=pol)
    assert "waiting (Capacity): needs 4 GPUs" in text
    assert "cannot be evicted yet (minRuntimeSeconds 600" in text
    assert "b/sweep: 8 GPUs, tier batch (preemptible)" in text


def test_unknown_and_admitted_jobs() -> None:
    snap = Snapshot([node("n1")], levels=LEVELS)
    result = schedule(snap, [job("a/ok").gang(2).build()], policy(), now=0.0)
    assert "admitted this cycle" in explain(
        JobId("a/ok"), result=result, snap=snap, policy=policy()
    )
    assert "is not queued" in explain(JobId("a/nope"), result=result, snap=snap, policy=policy())
