"""`explain` tells the whole story of one waiting gang."""

from __future__ import annotations

import pytest

from controller.scheduler.cycle import schedule
from controller.scheduler.explain import explain
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import Hints
from controller.scheduler.types import MILLI, JobId, NamespaceQuota
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


_QUOTA_CASES = {
    "namespace quota": (
        policy({"p": {"guaranteed": 16}}), {"p": NamespaceQuota(gpu_milli=8 * MILLI)}, None,
        "pods of namespace p end (any scheduler's count), or its ResourceQuota is raised",
    ),
    "borrowing off": (
        policy({"p": {"guaranteed": 8}}, borrowing=False), {}, None,
        "4 GPUs of project p's running work end, or its guarantee (8) is raised in the "
        "policies, or borrowing is enabled",
    ),
    "lending forecast": (
        policy({"p": {"guaranteed": 4}, "b": {"guaranteed": 8}}), {}, Hints(protect={"b": 8_000}),
        "by b (8): it runs once that forecast falls or more GPUs are idle",
    ),
    "user max": (
        policy({"p": {"guaranteed": 16, "users": {"u": (0, 10)}}}), {}, None,
        "2 GPUs of user u's running work in p end, or the user's max (10) is raised",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_QUOTA_CASES))
def test_quota_blocked_job_names_the_limit_that_holds_it(case: str) -> None:
    """Found by a review: a job held back by its namespace's ResourceQuota, by
    borrowing being disabled, or by the lending forecast was told to raise the
    user's max, which none of them had."""
    pol, quotas, hints, expected = _QUOTA_CASES[case]
    old = job("p/old").gang(8).build()
    snap = Snapshot(
        [node("n0"), node("n1")], levels=LEVELS, running=[running(old, {"n0": 8})],
        namespace_quota=quotas,
    )  # fmt: skip
    result = schedule(snap, [job("p/new").gang(4).build()], pol, now=0.0, hints=hints)
    text = explain(JobId("p/new"), result=result, snap=snap, policy=pol)
    assert "waiting (Quota)" in text and expected in text, text
    assert "the user's max" not in text or case == "user max", text


_AFTER_CASES = {
    "user max, then gangs of other users fill the project": (
        policy({"p": {"guaranteed": 16, "max": 16, "users": {"u": (0, 8)}}}), {},
        job("p/other").user("v").gang(7).build(),
        "2 GPUs of user u's running work in p end, or the user's max (8) is raised",
    ),
    "project max, then a gang of another project fills the namespace": (
        policy({"p": {"max": 8}, "q": {}}), {"p": NamespaceQuota(gpu_milli=10 * MILLI)},
        job("p/small").project("q").gang(2).build(),
        "2 GPUs of project p's running work end, or its max (8) is raised",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_AFTER_CASES))
def test_the_limit_named_is_the_one_the_cycle_decided_on(case: str) -> None:
    """Found by a review: `explain` asked the quota limits again, on the snapshot
    after the cycle. A gang admitted behind the one explained can fill another
    limit, which `explain` then named (and its figures) while the reason above it
    named the one that held the gang when it was decided."""
    pol, quotas, behind, expected = _AFTER_CASES[case]
    old = job("p/old").gang(6).build()
    snap = Snapshot(
        [node("n0"), node("n1")], levels=LEVELS, running=[running(old, {"n0": 6})],
        namespace_quota=quotas,
    )  # fmt: skip
    new = job("p/new").tier("high").gang(4).build()
    result = schedule(snap, [new, behind], pol, now=0.0)
    assert behind.id in snap.running, result.decisions
    text = explain(new.id, result=result, snap=snap, policy=pol)
    assert expected in text, text
