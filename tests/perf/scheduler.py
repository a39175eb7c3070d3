"""Benchmark of the pure scheduling core, in process (issue: the gang scheduler).

1,000 nodes x 8 GPUs (125 NVLink domains of 8 nodes, 25 racks, 5 zones),
5,000 pending gangs of mixed sizes (1-64 GPUs; gangs of 8 or more GPUs use
8-GPU workers half of the time and 1-GPU workers otherwise), five projects
with guarantees and borrowing, four tiers: one `schedule()` call decides
every gang. Figures: pods decided per second (every pod of every gang gets
a decision: placed, or left pending with its reason), pods placed per
second, and per-gang decision time percentiles.

Threshold: at least 2,000 pods decided per second (from the issue). Measured
2026-12-02 on the 2-core development machine: see `make bench` output; the
seeded workload makes runs comparable. Since issue 16 the rate is in CPU time.

At scale (issue 16): the same seeded workload on 5,000 nodes x 8 GPUs with
20,000 pending gangs, one `schedule()`: at least 20,000 pods decided per CPU
second (the issue's target), per-gang p99 reported against a guard.

Telemetry (issue 13): the cost of a scheduling step with telemetry over the same
step without, measured in the same run (a ratio, so the machine's speed cancels
out), in CPU time of the process (the development machine is shared, and wall time
there moves by 30 % between runs). The cluster holds the first `RUNNING` gangs of
the queue and 1 node in 20 has one GPU out of service; a step decides the next
`STEP`. Without telemetry the health comes from the agent's Node annotation (as it
does without Prometheus); with it, the step merges it from the `Telemetry`
(`with_health`), derives `job_utilisation` for every running gang from a
`PodUsage` for every pod and `protect_from_forecasts` for every project, and the
cycle gets those `Hints`. The hints are chosen so that they do not change the
decisions (every gang equally busy, one milli-GPU protected per project, a
cluster that does not fill: every borrowing gang runs the lending check, which
never binds; checked), because hints that change decisions change the work: on a
full cluster a protection blocks each borrowing gang before its victim search and
makes the step several times cheaper, and one preemption more or less moves it by
more than 5 %. Threshold: at most 1.05 (the issue). Each side is the best of
`TELEMETRY_REPEATS` interleaved runs. Measured 2026-12-03 on the 2-core
development machine (shared with three other sessions), `.venv/bin/python -m
tests.perf scheduler`, four runs: x0.897, x1.057, x0.999, x0.983 (steps of
0.085-0.131 s); the noise is larger than the effect. Without the CPU clock the
same runs gave 0.87-1.25.

Run: `make bench` (or `.venv/bin/python -m tests.perf scheduler`).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from controller.policy.validate import check_scheduling_policy
from controller.scheduler.cycle import schedule
from controller.scheduler.forecast import Forecast
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import (
    Hints,
    PodUsage,
    Signal,
    Telemetry,
    job_utilisation,
    protect_from_forecasts,
    with_health,
)
from controller.scheduler.types import Admit, Gang, JobId, Node, PodShape, Running
from tests.perf.harness import Result

__all__ = ["run"]

NODES, GPUS, JOBS = 1000, 8, 5000
PODS_PER_SECOND_MIN = 2000.0
BIG_NODES, BIG_JOBS = 5000, 20_000
"""Issue 16's scale: 5,000 nodes x 8 GPUs, 20,000 pending gangs, one `schedule()`."""
BIG_PODS_PER_SECOND_MIN = 20_000.0
"""Issue 16's target at that scale, in CPU time (about 36,000-58,000 pods/s were
measured at 1,000 nodes); measured 25,400-27,800 (docs/performance.md)."""
BIG_P99_MAX_MS = 20.0
"""Per-gang decision p99 at that scale (wall time): a guard; measured 1.8 ms at load
4 and up to 15 ms at load 8 (docs/performance.md)."""
TELEMETRY_RATIO_MAX = 1.05
TELEMETRY_REPEATS = 15
RUNNING, STEP = 300, 400
"""Gangs already running when the timed step starts (about 2,600 GPUs: every project
below its guarantee, so each has idle guarantee to protect), and gangs the step
decides (about 3,500 GPUs more: projects borrow, the cluster does not fill)."""
LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")
TIERS = (("critical", 1_000_000, False), ("high", 100_000, False), ("normal", 10_000, False),
         ("batch", 1_000, True))  # fmt: skip
PROJECTS = ("nlp", "vision", "speech", "research", "platform")


def _policy_doc(nodes: int = NODES) -> dict[str, Any]:
    """The compiled policy; built by hand, so held to its schema (outside the timing)."""
    share = nodes * GPUS // len(PROJECTS)
    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": {},
            "reserve": {"gpu": 0, "tiers": []},
            "gang": {"timeoutSeconds": 300, "backoffLimit": 3},
            "preemption": {"enabled": True, "minRuntimeSeconds": 600, "maxPerHour": 20},
            "fairShare": {"enabled": True, "borrowing": True},
            "topology": {"levels": list(LEVELS)},
        },
        "tiers": [
            {
                "name": n,
                "value": v,
                "preemptible": p,
                "preemptionPolicy": "PreemptLowerPriority",
                "globalDefault": False,
            }
            for n, v, p in TIERS
        ],
        "projects": [
            {
                "name": p,
                "namespaces": [p],
                "quota": {"guaranteed": {"gpu": share // 2}, "max": {"gpu": share * 2}},
                "users": {"default": {"guaranteed": {}, "max": {}}, "members": []},
                "jobs": {"maxGPU": 64, "tiers": [t[0] for t in TIERS], "defaultTier": "normal"},
            }
            for p in PROJECTS
        ],
    }
    check_scheduling_policy(doc)
    return doc


def _nodes(count: int = NODES) -> list[Node]:
    return [
        Node(
            name=f"node-{i:04d}",
            gpus=GPUS,
            labels={
                LEVELS[0]: f"clique-{i // 8}",
                LEVELS[1]: f"rack-{i // 40}",
                LEVELS[2]: f"zone-{i // 200}",
            },
        )
        for i in range(count)
    ]


def _queue(rng: random.Random, jobs: int = JOBS) -> list[Gang]:
    sizes = [1, 2, 4, 8, 16, 32, 64]
    weights = [30, 15, 15, 20, 10, 6, 4]
    out = []
    for i in range(jobs):
        size = rng.choices(sizes, weights)[0]
        per = 8 if size >= 8 and rng.random() < 0.5 else (1 if size >= 8 else size)
        tier, value, preemptible = rng.choice(TIERS)
        out.append(
            Gang(
                id=JobId(f"ns/job-{i}"),
                project=rng.choice(PROJECTS),
                user=f"user-{rng.randrange(20)}",
                tier=tier,
                priority=value,
                created=float(i),
                workers=size // per,
                pod=PodShape(gpus=per),
                preemptible=preemptible,
            )
        )
    return out


def _telemetry_ratio(doc: dict[str, Any], queue: list[Gang]) -> tuple[float, float, float]:
    """(step with telemetry / step without, best seconds without, best with)."""
    policy = SchedulingPolicy.from_dict(doc)
    unhealthy = {f"node-{k:04d}": frozenset({k % GPUS}) for k in range(0, NODES, 20)}
    t_nodes = _nodes()
    a_nodes = [replace(n, unhealthy=unhealthy.get(n.name, frozenset())) for n in t_nodes]
    warm = Snapshot(a_nodes, levels=LEVELS)
    admitted = schedule(warm, queue[:RUNNING], policy, now=0.0).decisions
    running = [Running(d.gang, d.placement, 0.0) for d in admitted if isinstance(d, Admit)]
    now = 3600.0  # the cluster as it stands an hour later
    usage = PodUsage(avg_1m=50.0, avg_5m=50.0, avg_15m=50.0, p95_5m=60.0, trend_per_min=0.0)
    names = {r.gang.id: [(r.gang.project, f"{r.gang.id}-{i}") for i in range(r.gang.workers)]
             for r in running}  # fmt: skip
    t = Telemetry(
        health=Signal(now - 5),
        usage=Signal(now - 5),
        unhealthy=unhealthy,
        pods={pod: usage for pods in names.values() for pod in pods},
    )
    jobs = {r.gang.id: (r.started, names[r.gang.id]) for r in running}
    guaranteed = {p.name: p.guaranteed for p in policy.projects.values()}
    # one milli-GPU each: every borrowing gang runs the lending check, which never binds
    forecasts = {
        p: Forecast(0.0, 0.0, 0.0, float(warm.project_usage.get(p, 0) + 1), 60) for p in PROJECTS
    }
    results: dict[str, list[Any]] = {}

    def without() -> None:
        # health without Prometheus: the agent's Node annotation (Node.unhealthy)
        snap = Snapshot(a_nodes, levels=LEVELS, running=running)
        results["without"] = schedule(
            snap, queue[RUNNING : RUNNING + STEP], policy, now=now
        ).decisions

    def with_telemetry() -> None:
        snap = Snapshot(with_health(t_nodes, t), levels=LEVELS, running=running)
        hints = Hints(
            utilisation=job_utilisation(t, jobs, now),
            protect=protect_from_forecasts(forecasts, snap.project_usage, guaranteed),
        )
        assert len(hints.utilisation) == len(running) and len(hints.protect) == len(PROJECTS)
        results["with"] = schedule(
            snap, queue[RUNNING : RUNNING + STEP], policy, now=now, hints=hints
        ).decisions

    best = {without: float("inf"), with_telemetry: float("inf")}
    for _ in range(TELEMETRY_REPEATS):
        for step in (without, with_telemetry):
            t0 = time.process_time()
            step()
            best[step] = min(best[step], time.process_time() - t0)
    same = [type(d) for d in results["with"]] == [type(d) for d in results["without"]]
    assert same, "the hints were chosen not to change the decisions, so the work is the same"
    return best[with_telemetry] / best[without], best[without], best[with_telemetry]


def _throughput(nodes: int, jobs: int, repeats: int) -> tuple[float, int, int, list[float]]:
    """One `schedule()` over `jobs` seeded pending gangs on `nodes` empty 8-GPU nodes,
    best of `repeats`: (CPU seconds, pods decided, pods placed, sorted per-gang wall
    seconds). CPU time, because the machine is shared and its wall time moves with
    the other sessions' load (9-16 s of wall against 3.6 s of CPU at 5,000 nodes)."""
    rng = random.Random(42)
    queue = _queue(rng, jobs)
    pods = sum(g.workers for g in queue)
    doc = _policy_doc(nodes)
    best: tuple[float, int, list[float]] | None = None
    for _ in range(repeats):
        snap = Snapshot(_nodes(nodes), levels=LEVELS)
        t0 = time.process_time()
        policy = SchedulingPolicy.from_dict(doc)
        result = schedule(snap, queue, policy, now=0.0, timer=time.perf_counter)
        elapsed = time.process_time() - t0
        placed = sum(d.gang.workers for d in result.decisions if isinstance(d, Admit))
        if best is None or elapsed < best[0]:
            best = (elapsed, placed, sorted(result.decision_seconds))
    assert best is not None
    return best[0], pods, best[1], best[2]


def _pct(per_gang: list[float], q: float) -> float:
    """The `q` quantile of per-gang seconds, in milliseconds."""
    return per_gang[min(len(per_gang) - 1, int(q * len(per_gang)))] * 1000


def run() -> list[Result]:
    """Run the benchmark and return its figures."""
    elapsed, pods, placed, per_gang = _throughput(NODES, JOBS, 3)
    print(
        f"scheduler: {JOBS} gangs ({pods} pods) on {NODES}x{GPUS} GPUs in {elapsed:.3f} s CPU; "
        f"{placed} pods placed; per-gang decision p50 {_pct(per_gang, 0.5):.3f} ms, "
        f"p95 {_pct(per_gang, 0.95):.3f} ms, p99 {_pct(per_gang, 0.99):.3f} ms, "
        f"max {per_gang[-1] * 1000:.3f} ms"
    )
    ratio, plain, telemetry = _telemetry_ratio(_policy_doc(), _queue(random.Random(42)))
    print(
        f"scheduler: a step over {STEP} gangs with telemetry {telemetry:.3f} s, "
        f"without {plain:.3f} s (best of {TELEMETRY_REPEATS}): x{ratio:.3f}"
    )
    big_s, big_pods, big_placed, big_gang = _throughput(BIG_NODES, BIG_JOBS, 1)
    print(
        f"scheduler at scale: {BIG_JOBS} gangs ({big_pods} pods) on {BIG_NODES}x{GPUS} GPUs "
        f"in {big_s:.3f} s CPU ({big_pods / big_s:.0f} pods decided/s); {big_placed} pods "
        f"placed; per-gang decision p50 {_pct(big_gang, 0.5):.3f} ms, "
        f"p99 {_pct(big_gang, 0.99):.3f} ms, max {big_gang[-1] * 1000:.3f} ms"
    )
    return [
        Result("scheduler: step with telemetry / without", ratio, "x", TELEMETRY_RATIO_MAX),
        Result(
            "scheduler: pods decided per second",
            pods / elapsed,
            "/s",
            PODS_PER_SECOND_MIN,
            higher_is_better=True,
        ),
        Result(
            "scheduler: pods placed per second",
            placed / elapsed,
            "/s",
            PODS_PER_SECOND_MIN,
            higher_is_better=True,
        ),
        Result(
            f"scheduler {BIG_NODES}x{GPUS}, {BIG_JOBS} gangs: pods decided/s",
            big_pods / big_s,
            "/s",
            BIG_PODS_PER_SECOND_MIN,
            higher_is_better=True,
        ),
        Result(
            f"scheduler {BIG_NODES}x{GPUS}, {BIG_JOBS} gangs: per-gang p99",
            _pct(big_gang, 0.99),
            "ms",
            BIG_P99_MAX_MS,
        ),
    ]
