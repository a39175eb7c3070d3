"""From raw objects to the cycle's inputs: nodes, foreign pods, running gangs, records."""

from __future__ import annotations

from typing import Any

from controller.gang.lifecycle import plan
from controller.gang.record import Admission, format_time, parse_time
from controller.gang.view import build_snapshot, job_views, node_of, pod_requests
from controller.scheduler.cycle import schedule
from controller.scheduler.types import MILLI, Admit, JobId, Pending, Placement, PodPlacement

from .builders import POLICY, admission, foreign, job, job_id, node, pod


def _cycle(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], pods: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    views = job_views(jobs, pods, POLICY)
    todo = plan(views, {n["metadata"]["name"]: n for n in nodes}, POLICY, now=1001.0)
    snap = build_snapshot(
        [node_of(n) for n in nodes], pods, todo.running, todo.owned,
        levels=POLICY.topology_levels, reserve_tiers=POLICY.reserve_tiers,
    )  # fmt: skip
    return snap, schedule(snap, todo.queue, POLICY, now=1001.0, nominated=todo.nominated)


def test_seed_scenario_gang_of_8_on_two_nodes_with_4_free_not_the_one_with_3() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [foreign("x", "a", 4), foreign("y", "b", 4), foreign("z", "c", 5)]
    _, result = _cycle(nodes, [job("seed", 8)], pods)
    (d,) = result.decisions
    assert isinstance(d, Admit) and d.placement.nodes() == {"a": 4, "b": 4}


def test_finished_foreign_pods_free_their_gpus_and_running_gangs_are_not_counted_twice() -> None:
    nodes = [node("a")]
    running = job("r", 4, adm=admission("a", "a", "a", "a"), phase="Running")
    pods = [pod("r", i, node="a") for i in range(4)] + [foreign("done", "a", 4, phase="Succeeded")]
    snap, result = _cycle(nodes, [running, job("next", 4)], pods)
    assert isinstance(result.decisions[0], Admit)
    assert snap.by_name["a"].whole == 0


def test_pods_of_an_old_attempt_still_hold_their_gpus_until_gone() -> None:
    nodes = [node("a")]
    old = [pod("r", i, node="a", attempt=1, deleting=True) for i in range(6)]
    _, result = _cycle(nodes, [job("r", 4)], old)
    (d,) = result.decisions
    assert isinstance(d, Pending) and d.code == "Capacity"


def test_nodes_not_ready_or_cordoned_are_not_schedulable_and_taints_are_read() -> None:
    assert not node_of(node("n", ready=False)).schedulable
    cordoned = node("n")
    cordoned["spec"] = {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    n = node_of(cordoned)
    assert not n.schedulable and n.taints[0].key == "k"
    ok = node_of(node("n", 4, **{"nvidia.com/gpu.product": "H100"}))
    assert (ok.gpus, ok.gpu_model, ok.cpu_milli, ok.schedulable) == (4, "H100", 96_000, True)


def test_pod_requests_read_gpu_limits_when_requests_are_absent() -> None:
    p = foreign("x", "a", 3)
    p["spec"]["containers"].append({"name": "s", "resources": {"requests": {"cpu": "500m"}}})
    assert pod_requests(p) == (3, 500, 0)


def test_pods_of_another_job_with_the_same_name_label_are_not_its_own() -> None:
    stranger = pod("j", 0, node="a", owner=False)
    (v,) = job_views([job("j")], [stranger], POLICY)
    assert v.pods == []


def test_the_record_round_trips_and_malformed_ones_read_as_none() -> None:
    adm = Admission(
        "Nominated", 3, Placement((PodPlacement("a", (0, 1)),)), 1234.5, 2 * MILLI,
        ((JobId("p/x"), 2),),
    )  # fmt: skip
    assert Admission.from_status({"admission": adm.to_dict()}) == adm
    assert Admission.from_status({"admission": {"state": "Admitted"}}) is None
    assert Admission.from_status({"admission": {**adm.to_dict(), "state": "Maybe"}}) is None
    assert Admission.from_status({}) is None
    assert parse_time(format_time(1234.5)) == 1234.5
    assert parse_time("yesterday") is None


def test_an_override_replaces_the_record_until_the_write_lands() -> None:
    adm = admission("a")
    (v,) = job_views([job("j", 1)], [], POLICY, overrides={job_id("j"): adm})
    assert v.admission == adm
