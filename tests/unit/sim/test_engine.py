"""The simulator on tiny clusters: gangs all-or-nothing, the fifo-greedy
deadlock, preemption requeues, and the arrivals-only figure."""

from __future__ import annotations

from pathlib import Path

from controller.scheduler.fragmentation import FragModel, typical_pods
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI, Node, PodShape
from controller.sim.engine import _at_full, simulate, simulate_arrivals
from controller.sim.run import Experiment, prepare_arrivals, run
from controller.sim.schedulers import islands, make_scheduler
from controller.sim.tenants import open_policy_doc
from controller.sim.traces import TraceJob

NODES = [Node("n0", 4), Node("n1", 4)]
ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "clusters" / "local" / "cluster.yaml"
POLICIES = ROOT / "policies"
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


def test_a_grown_job_ends_the_run_when_it_ends() -> None:
    # Its completion at 1,200 s became void when it grew; that event once moved the
    # clock, so the makespan was 1,200 s and the utilisation 0.31 instead of 0.5.
    r = _run("gangops", [_elastic("e", 2, 1, 8, 0.0, 1200.0)])
    assert r.jcts == [750.0] and r.makespan == 750.0
    assert abs(r.utilization - (2 * 600 + 8 * 150) / (8 * 750)) < 1e-9
    assert r.util_series[-1][0] == 750.0


def test_the_run_ends_at_its_last_completion_not_at_the_next_tick() -> None:
    doc = open_policy_doc(8)
    sched = make_scheduler("gangops", NODES, doc, fragmentation=None, seed=1)
    jobs = [_gang("a", 8, 0.0, 205.0)]
    r = simulate(jobs, sched, SchedulingPolicy.from_dict(doc), capacity_milli=CAPACITY, tick=10.0)
    assert r.makespan == 205.0 and abs(r.utilization - 1.0) < 1e-9


def test_a_tick_not_exact_in_binary_ends() -> None:
    # ceil(7.2 / 0.3) * 0.3 is a hair under 7.2: the cycle took no event, for ever
    doc = open_policy_doc(8)
    sched = make_scheduler("gangops", NODES, doc, fragmentation=None, seed=1)
    jobs = [_gang("a", 1, 4.0, 3.0)]
    r = simulate(jobs, sched, SchedulingPolicy.from_dict(doc), capacity_milli=CAPACITY, tick=0.3)
    assert r.jcts and abs(r.jcts[0] - 3.2) < 1e-9


def test_a_preempted_elastic_job_loses_every_size_it_held(tmp_path: Path) -> None:
    # e runs 8 GPUs over 0-600 s, 16 over 600-1200 and 8 over 1200-1800, and is
    # evicted at 1,800 s, starting over from its whole work: 19,200 GPU-s lost (its
    # size then times its whole run, 8 x 1,800 = 14,400, was charged), with
    # 1,200 GPU-s for each one-GPU job evicted at 1,200 s.
    rows = ["job_id,submit_time,duration,gang_size,min_gpu,max_gpu,tier,project,user",
            "e,0,5000,8,8,16,batch,research,frank"]  # fmt: skip
    rows += [f"r{i},0,5000,1,,,normal,research,frank" for i in range(48)]
    rows += [f"v{i},1200,1000,8,,,normal,vision,carol" for i in range(3)]
    rows += [f"n{i},1200,1000,8,,,normal,nlp,alice" for i in range(4)]
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    runs, _ = run(Experiment(CLUSTER, trace, policies=POLICIES, schedulers=("gangops",)))
    r = runs[0].runs[0]
    assert "e" in r.preempted_jobs and r.resizes == 3
    small = len(r.preempted_jobs) - 1
    assert r.preempted_gpu_seconds == 8 * 600 + 16 * 600 + 8 * 600 + 1200 * small
    assert r.lost_gpu_seconds == r.preempted_gpu_seconds


def test_arrivals_only_frees_the_pods_of_a_gang_it_drops() -> None:
    # fifo-greedy binds pods one at a time: gang b got 1 of its 3 pods and was
    # dropped, and that pod held its GPU for good, so c was turned away too
    jobs = [_gang("a", 3), _gang("b", 3, 1.0), _gang("c", 1, 2.0)]
    doc = open_policy_doc(4)
    policy = SchedulingPolicy.from_dict(doc)
    sched = make_scheduler("fifo-greedy", [Node("n0", 4)], doc, fragmentation=None, seed=1)
    r = simulate_arrivals(jobs, sched, policy, capacity_milli=4 * MILLI, shapes=[])
    assert r.dropped == 1 and r.utilization == 1.0
    assert not sched.partial()


def test_arrivals_only_takes_a_trace_without_gpu_demand_as_it_is() -> None:
    cpu = [TraceJob(f"c{i}", i, None, 1, PodShape(gpus=0, cpu_milli=1000)) for i in range(2)]
    assert prepare_arrivals(cpu, CAPACITY, seed=1, tune=1.3, order="trace") == cpu


def test_arrivals_only_reads_the_allocation_at_100_percent_between_arrivals() -> None:
    # 3 GPUs a gang on 8: arrivals at 37.5, 75 and 112.5 %, none within half a
    # point of 100 %; the third does not fit, so 75 % is allocated as 100 % arrives
    jobs = [_gang(f"g{i}", 3, float(i)) for i in range(3)]
    doc = open_policy_doc(8)
    policy = SchedulingPolicy.from_dict(doc)
    sched = make_scheduler("gangops", NODES, doc, fragmentation=None, seed=1)
    r = simulate_arrivals(jobs, sched, policy, capacity_milli=CAPACITY, shapes=[])
    assert r.dropped == 1 and r.allocation_at_full == 75.0
    # read off the straight line between the arrivals either side of 100 %
    assert _at_full([(0.5, 0.5), (1.5, 1.0)]) == [0.75]
    assert _at_full([(0.2, 0.2), (0.9, 0.9)]) == []


def test_arrivals_only_of_no_pods_has_no_fragmentation() -> None:
    doc = open_policy_doc(8)
    policy = SchedulingPolicy.from_dict(doc)
    sched = make_scheduler("gangops", NODES, doc, fragmentation=None, seed=1)
    r = simulate_arrivals([], sched, policy, capacity_milli=CAPACITY, shapes=[])
    assert r.fragmentation == 0.0 and r.allocation_at_full is None
