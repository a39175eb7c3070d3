"""The simulator on tiny clusters: gangs all-or-nothing, the fifo-greedy
deadlock, preemption requeues, and the arrivals-only figure."""

from __future__ import annotations

from controller.scheduler.fragmentation import FragModel, typical_pods
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI, Node, PodShape
from controller.sim.engine import simulate, simulate_arrivals
from controller.sim.run import prepare_arrivals
from controller.sim.schedulers import islands, make_scheduler
from controller.sim.tenants import open_policy_doc
from controller.sim.traces import TraceJob

NODES = [Node("n0", 4), Node("n1", 4)]
CAPACITY = 8 * MILLI


def _gang(name: str, gpus: int, submit: float = 0.0, duration: float = 100.0) -> TraceJob:
    return TraceJob(name, submit, duration, gpus, PodShape(gpus=1), project="trace", tier="normal")


def _run(name: str, jobs: list[TraceJob]):  # type: ignore[no-untyped-def]
    doc = open_policy_doc(8)
    policy = SchedulingPolicy.from_dict(doc)
    sched = make_scheduler(name, NODES, doc, fragmentation=None, seed=1)
    return simulate(jobs, sched, policy, capacity_milli=CAPACITY, tick=1.0)


def test_half_placed_gangs_deadlock_fifo_greedy_but_not_gangops() -> None:
    jobs = [_gang("a", 6), _gang("b", 6)]
    greedy = _run("fifo-greedy", jobs)
    assert greedy.deadlocked
    assert greedy.never_started == 2
    gangops = _run("gangops", jobs)
    assert not gangops.deadlocked and gangops.never_started == 0
    assert sorted(gangops.delays) == [0.0, 100.0]
    assert gangops.gang_timeouts == 0 and gangops.partial_gpu_seconds == 0


def test_partial_gangs_hold_gpus_and_time_out_under_fifo_greedy() -> None:
    jobs = [_gang("long", 4, duration=1000.0), _gang("a", 3, 1.0), _gang("b", 3, 1.0)]
    greedy = _run("fifo-greedy", jobs)
    assert greedy.partial_gpu_seconds > 0
    assert greedy.gang_timeouts >= 1
    assert _run("gangops", jobs).partial_gpu_seconds == 0


def test_utilisation_and_delays() -> None:
    r = _run("gangops", [_gang("a", 8, 0, 100.0), _gang("b", 8, 0, 100.0)])
    assert r.makespan == 200.0
    assert abs(r.utilization - 1.0) < 1e-9
    assert sorted(r.delays) == [0.0, 100.0]
    assert sorted(r.jcts) == [100.0, 200.0]


def test_arrivals_only_counts_allocation_at_full_arrival() -> None:
    share = PodShape(gpu_milli=400)
    pods = [TraceJob(f"p{i}", i, None, 1, share, project="trace", tier="normal") for i in range(24)]
    doc = open_policy_doc(8)
    policy = SchedulingPolicy.from_dict(doc)
    model = FragModel(typical_pods(j.pod for j in pods))
    sched = make_scheduler("gangops", NODES, doc, fragmentation=model, seed=1)
    r = simulate_arrivals(pods, sched, policy, capacity_milli=CAPACITY, shapes=[pods[0].pod])
    # two 0.4-GPU shares per device: 16 of 24 fit; at 20 arrivals (100 %) 6.4 of 8 GPUs
    assert r.dropped == 8
    assert r.allocation_at_full == 80.0
    assert r.fragmentation == 1.0  # what is left (0.2 per device) fits no request


def test_prepare_arrivals_inflates_and_shuffles_reproducibly() -> None:
    jobs = [_gang(f"j{i}", 1) for i in range(4)]
    a = prepare_arrivals(jobs, CAPACITY, seed=3, tune=1.5, order="shuffled")
    assert sum(j.gpu_milli for j in a) == 12 * MILLI
    assert [j.id for j in a] == [
        j.id for j in prepare_arrivals(jobs, CAPACITY, seed=3, tune=1.5, order="shuffled")
    ]
    assert [j.id for j in prepare_arrivals(jobs, CAPACITY, seed=3, tune=0, order="trace")] == [
        "j0",
        "j1",
        "j2",
        "j3",
    ]


def test_islands_follow_guarantees() -> None:
    nodes = [Node(f"n{i}", 8) for i in range(4)]
    split = islands(nodes, {"a": 3, "b": 1})
    assert {p: len(ns) for p, ns in split.items()} == {"a": 3, "b": 1}


def _elastic(name: str, workers: int, lo: int, hi: int, submit: float, duration: float) -> TraceJob:
    return TraceJob(
        name, submit, duration, workers, PodShape(gpus=1), min_workers=lo, max_workers=hi,
        project="trace", tier="normal",
    )  # fmt: skip


def test_an_elastic_job_grows_onto_idle_gpus_and_finishes_sooner() -> None:
    # 2 workers x 1200 s = 2,400 worker-seconds; at 600 s (the grow interval) it
    # grows to all 8 GPUs: the 1,200 worker-seconds left take 150 s.
    r = _run("gangops", [_elastic("e", 2, 1, 8, 0.0, 1200.0)])
    assert r.resizes == 1
    assert r.jcts == [750.0]
    assert abs(r.utilization * r.makespan - (2 * 600 + 8 * 150) / 8) < 1e-6


def test_a_waiting_job_takes_back_what_an_elastic_job_grew_by() -> None:
    # Grown to 8 at 600 s; at 700 s a 4-GPU job arrives and gets 4 of them back:
    # 2*600 + 8*100 = 2,000 worker-seconds done, 400 left at 4 workers: ends at 800.
    jobs = [_elastic("e", 2, 1, 8, 0.0, 1200.0), _gang("b", 4, 700.0, 50.0)]
    r = _run("gangops", jobs)
    assert r.resizes == 2 and r.preemptions == 0
    assert sorted(r.jcts) == [50.0, 800.0]
    assert r.delays == [0.0, 0.0]


def test_a_pending_wake_up_does_not_stretch_the_run() -> None:
    r = _run("gangops", [_elastic("e", 2, 1, 8, 0.0, 100.0)])
    assert r.makespan == 100.0 and r.resizes == 0
