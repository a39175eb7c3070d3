"""The scheduler's proposal: the waiting reason read back, in the scheduler's own words."""

from __future__ import annotations

from controller.quota.propose import Shortfall, proposal, shortfall
from controller.scheduler.cycle import quota
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import NamespaceQuota
from tests.unit.scheduler.builders import job, node, policy, running

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")


def _waiting(message: str | None) -> dict[str, str]:
    return {"phase": "Queued", "reason": "Quota", "message": message or ""}


def test_a_project_max_is_read_from_the_schedulers_own_reason() -> None:
    pol = policy({"nlp": {"guaranteed": 4, "max": 8}})
    hog = job("nlp/hog").project("nlp").gang(6).build()
    snap = Snapshot([node("n1"), node("n2")], levels=LEVELS, running=[running(hog, {"n1": 6})])
    why = quota(snap, pol, job("nlp/mine").project("nlp").gang(4).build())
    assert why is not None
    assert shortfall(_waiting(why.reason)) == Shortfall("nlp", None, 2)


def test_a_user_max_is_read_from_the_schedulers_own_reason() -> None:
    pol = policy({"p": {"guaranteed": 8, "users": {"alice": (1, 2)}}})
    snap = Snapshot([node("n1")], levels=LEVELS, running=[])
    why = quota(snap, pol, job("p/a").project("p").user("alice").gang(3).build())
    assert why is not None
    assert shortfall(_waiting(why.reason)) == Shortfall("p", "alice", 1)


def test_other_reasons_are_not_helped_by_a_pull_request() -> None:
    assert shortfall(_waiting("namespace nlp at its ResourceQuota: 2 of 4 GPUs")) is None
    assert shortfall({"reason": "Capacity", "message": "hold 6 of 8"}) is None
    done = {
        **_waiting("project p at max: 4 of 4 GPUs in use, this job needs 4"),
        "phase": "Running",
    }
    assert shortfall(done) is None


def test_the_proposal_is_charged_to_the_jobs_owner_and_links_the_job() -> None:
    tj = {
        "metadata": {"name": "bert", "namespace": "nlp", "labels": {"ai.operator/user": "bob"}},
        "status": _waiting(
            "user bob at max in project nlp: 30 of 32 GPUs in use, this job needs 8"
        ),
    }
    short = shortfall(tj["status"])  # type: ignore[arg-type]
    assert short == Shortfall("nlp", "bob", 6)
    obj = proposal(tj, short)
    assert obj["metadata"]["name"] == "bert-quota"
    assert obj["metadata"]["labels"] == {"ai.operator/user": "bob"}
    assert obj["metadata"]["annotations"] == {"gangops.ai/proposed-for": "bert"}
    assert obj["spec"]["user"] == "bob" and obj["spec"]["amount"] == 6
    assert obj["spec"]["trainingJob"] == "bert"


def test_a_namespace_at_its_resource_quota_is_read_from_the_schedulers_own_reason() -> None:
    pol = policy({"nlp": {"guaranteed": 4, "max": 8}})
    hog = job("nlp/hog").project("nlp").gang(4).build()
    snap = Snapshot(
        [node("n1")],
        levels=LEVELS,
        running=[running(hog, {"n1": 4})],
        namespace_quota={"nlp": NamespaceQuota(gpu_milli=4_000)},
    )
    why = quota(snap, pol, job("nlp/mine").project("nlp").gang(2).build())
    assert why is not None and why.reason.startswith("namespace nlp at its ResourceQuota")
    assert shortfall(_waiting(why.reason)) == Shortfall("", None, 2, "nlp")
