"""A seeded workload generator shaped like the public traces, for the demo.

The public traces are not in the repository, so `make demo` simulates a
workload of the project's own. Its shape follows the traces' published
statistics, scaled to the cluster:

- gang sizes 1/2/4/8/16/32 GPUs with weights 45/15/15/15/6/4 (Tiresias and
  Philly: most jobs are single-GPU, most GPU-time is in large gangs);
  gangs above 8 GPUs use 8-GPU workers, smaller ones one worker;
- durations log-normal, median 20 minutes, heavy tail capped at 12 hours;
- arrivals Poisson, in bursts per project (sessions, as in `tenants`), the
  rate set so the offered load is `load` x capacity;
- projects, users and tiers from the policies (the job's project default tier).

Output is gangops' trace CSV (`traces.GANGOPS_COLUMNS`), so a generated
workload can be saved, edited and replayed.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Sequence

from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import PodShape
from controller.sim.tenants import assign_tenants
from controller.sim.traces import GANGOPS_COLUMNS, TraceJob

__all__ = ["generate", "to_csv"]

SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (45, 15, 15, 15, 6, 4)
MEDIAN_S = 1200.0
SIGMA = 1.2
MAX_S = 12 * 3600.0


def generate(
    *, jobs: int, capacity_gpus: int, policy: SchedulingPolicy, seed: int, load: float = 0.9
) -> list[TraceJob]:
    """`jobs` jobs for a cluster of `capacity_gpus`, tenants from `policy`."""
    rng = random.Random(seed)
    limit = max(
        (p.job_max // 1000 for p in policy.projects.values() if p.job_max is not None),
        default=max(SIZES),
    )
    sizes = [s for s in SIZES if s <= max(1, min(limit, capacity_gpus))]
    weights = WEIGHTS[: len(sizes)]
    drawn = []
    for _ in range(jobs):
        size = rng.choices(sizes, weights)[0]
        duration = min(MAX_S, MEDIAN_S * math.exp(rng.gauss(0.0, SIGMA)))
        drawn.append((size, round(duration)))
    work = sum(s * d for s, d in drawn)
    rate = jobs * load * capacity_gpus / work if work else 1.0
    t = 0.0
    out = []
    for i, (size, duration) in enumerate(drawn):
        t += rng.expovariate(rate)
        per = 8 if size > 8 else size
        out.append(
            TraceJob(
                id=f"gen-{i:05d}",
                submit=round(t, 1),
                duration=float(duration),
                workers=size // per,
                pod=PodShape(gpus=per),
            )
        )
    return assign_tenants(out, policy, seed=seed)


def to_csv(jobs: Sequence[TraceJob]) -> str:
    """`jobs` in gangops' trace CSV."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(GANGOPS_COLUMNS)
    for j in jobs:
        size = j.workers * j.pod.gpus
        w.writerow([
            # repr: the shortest text that reads back as the same float (`:g` kept six
            # digits, so a saved trace did not replay as the run that wrote it)
            j.id, repr(j.submit), "" if j.duration is None else repr(j.duration), size,
            (j.min_workers or j.workers) * j.pod.gpus, (j.max_workers or j.workers) * j.pod.gpus,
            j.pod.gpus, j.pod.gpu_milli, j.tier or "", j.project or "", j.user or "",
        ])  # fmt: skip
    return buf.getvalue()
