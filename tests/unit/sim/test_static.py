"""The multi-tenant comparison: static islands that cover the cluster with
the same mix of hardware, jobs no island can hold reported rather than left
queued, and the accounting both schedulers share."""

from __future__ import annotations

from typing import Any

from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI, Node, PodShape
from controller.sim.engine import RunResult, simulate
from controller.sim.schedulers import islands, make_scheduler
from controller.sim.tenants import assign_tenants, open_policy_doc
from controller.sim.traces import TraceJob

NODES = [Node(f"n{i}", 4) for i in range(4)]


def _doc(guarantees: dict[str, int], *, capacity: int = 16) -> dict[str, Any]:
    doc = open_policy_doc(capacity)
    doc["tiers"] = [
        {"name": "normal", "value": 10000, "preemptible": False,
         "preemptionPolicy": "PreemptLowerPriority"},
        {"name": "batch", "value": 1000, "preemptible": True, "preemptionPolicy": "Never"},
    ]  # fmt: skip
    doc["cluster"]["preemption"] = {"enabled": True, "minRuntimeSeconds": 0, "maxPerHour": 100}
    template = doc["projects"][0]
    doc["projects"] = [
        {
            **template,
            "name": name,
            "namespaces": [name],
            "quota": {"guaranteed": {"gpu": gpus}, "max": {}},
            "jobs": {"maxGPU": None, "tiers": ["normal", "batch"], "defaultTier": "normal"},
        }
        for name, gpus in guarantees.items()
    ]
    return doc


def _job(name: str, project: str, gpus: int, submit: float = 0.0, *, duration: float = 100.0,
         tier: str = "normal") -> TraceJob:  # fmt: skip
    return TraceJob(name, submit, duration, gpus, PodShape(gpus=1), project=project, tier=tier)


def _run(name: str, doc: dict[str, Any], jobs: list[TraceJob]) -> RunResult:
    sched = make_scheduler(name, NODES, doc, fragmentation=None, seed=1)
    policy = SchedulingPolicy.from_dict(doc)
    return simulate(jobs, sched, policy, capacity_milli=16 * MILLI, tick=1.0)


def test_islands_share_every_class_of_node_and_cover_the_cluster() -> None:
    big = [Node(f"n{i}", 8, cpu_milli=128_000) for i in range(4)]
    small = [Node(f"n{i}", 8, cpu_milli=32_000) for i in range(4, 8)]
    # guarantees add up to half the cluster: the rest is shared out too
    split = islands(big + small, {"a": 12, "b": 4})
    assert {p: sum(n.gpus for n in ns) for p, ns in split.items()} == {"a": 48, "b": 16}
    assert sorted(n.cpu_milli for n in split["b"]) == [32_000, 128_000]
    assert sorted(n.name for ns in split.values() for n in ns) == sorted(
        n.name for n in big + small
    )


def test_islands_carry_what_a_class_cannot_split_to_the_next() -> None:
    nodes = [Node(f"e{i}", 8) for i in range(3)] + [Node(f"f{i}", 2) for i in range(6)]
    split = islands(nodes, {"a": 1, "b": 1})
    assert {p: sum(n.gpus for n in ns) for p, ns in split.items()} == {"a": 18, "b": 18}


def test_a_job_larger_than_its_island_is_rejected_and_reported() -> None:
    doc = _doc({"a": 4, "b": 4})  # two islands of 8 GPUs
    jobs = [_job("big", "a", 12), _job("small", "a", 4, 5.0)]
    static = _run("static", doc, jobs)
    assert static.rejected == 1 and static.never_started == 1
    assert static.makespan == 105.0  # not held open by the job that cannot run
    assert static.delays == [0.0]
    gangops = _run("gangops", doc, jobs)
    assert gangops.rejected == 0 and gangops.never_started == 0


def test_a_job_larger_than_the_cluster_is_rejected_by_gangops_too() -> None:
    r = _run("gangops", _doc({"a": 4, "b": 4}), [_job("huge", "a", 20), _job("ok", "b", 4)])
    assert r.rejected == 1 and r.makespan == 100.0


def test_preempted_runs_count_as_allocated_and_as_lost() -> None:
    doc = _doc({"a": 8, "b": 8})
    jobs = [_job("borrower", "b", 16, tier="batch"), _job("owner", "a", 8, 50.0)]
    r = _run("gangops", doc, jobs)
    assert r.preemptions == 1
    assert r.preempted_gpu_seconds == 16 * 50.0


def test_utilisation_over_the_arrivals_leaves_out_the_drain() -> None:
    doc = _doc({"a": 8, "b": 8})
    jobs = [
        _job("x", "a", 8, 0.0, duration=100.0),
        _job("y", "a", 4, 0.0, duration=1000.0),
        _job("z", "b", 4, 50.0, duration=1000.0),
    ]
    r = _run("gangops", doc, jobs)
    assert r.makespan == 1050.0
    assert abs(r.utilization_arrivals - 12 / 16) < 1e-9  # 12 of 16 GPUs busy while jobs arrive
    assert abs(r.utilization - (800 + 4000 + 4000) / (16 * 1050.0)) < 1e-9


def test_a_job_above_its_users_max_is_rejected_not_left_queued() -> None:
    doc = _doc({"a": 8, "b": 8})
    doc["projects"][0]["users"] = {"default": {"guaranteed": {}, "max": {"gpu": 4}}, "members": []}
    r = _run("gangops", doc, [_job("wide", "a", 8), _job("ok", "b", 4)])
    assert r.rejected == 1 and r.never_started == 1 and r.makespan == 100.0


def test_tenant_mapping_gives_a_job_to_a_user_whose_max_admits_it() -> None:
    doc = _doc({"a": 8})
    doc["projects"][0]["users"] = {
        "default": {"guaranteed": {}, "max": {"gpu": 2}},
        "members": [{"name": "big", "guaranteed": {}, "max": {"gpu": 8}}],
    }
    policy = SchedulingPolicy.from_dict(doc)
    jobs = [TraceJob(f"j{i}", float(i), 10.0, 4, PodShape(gpus=1)) for i in range(20)]
    assert {j.user for j in assign_tenants(jobs, policy, seed=3)} == {"big"}
