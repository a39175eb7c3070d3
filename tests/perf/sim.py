"""Benchmarks of the simulator on the public openb trace (issue 6).

1. Speed: the full openb default trace (8,152 pods, 1,213 nodes) with
   departures, every scheduler; the gangops run must take under 10 s of CPU
   (issue 16; issue 6 asked for 60 s). Measured on the 2-core development
   machine: gangops about 7-10 s CPU, the baselines 2-6 s each; 3.3 s since
   placement keeps a ranking of the open nodes (2026-12-04, quiet machine,
   docs/performance.md). Then the sweep's overloaded row (`OVERLOADED`),
   gangops alone: under 600 s of CPU (issue 16; it took 1,301 s before the
   victim search was shortlisted; 24.8 s CPU on 2026-12-04). Both speed rows
   time a run that must also have scheduled its jobs (`RUNS_EVERY_JOB`): a
   gangops that turns every job away or starts none is fast, and fails.
2. FGD's fragmentation experiment (arrivals only; the trace inflated to
   1.3 x capacity by resampling and shuffled per seed, as FGD's artifact
   does; allocation when arrived demand reaches 100 %), mean over
   `GANGOPS_BENCH_SEEDS` seeds (default 3; the paper uses 10): `bestfit` and
   `random` within one point of the published 92.86 % and 86.30 %, `gangops`
   at least FGD's 95.23 %. These thresholds are the issue's targets, not
   fitted to our results. gangops measured 95.46/95.45/95.41 % (seeds 42-44;
   bestfit 92.86/92.96/93.01, random 86.46/86.58/86.14); FGD's measure
   alone gave 94.05-94.33 (see docs/simulator.md on CPU and ties).
3. Multi-tenant (docs/simulator.md, "Multi-tenant experiment"): openb with
   departures mapped onto the five projects of policies/, in the documented
   setting `MULTI_TENANT`; prints gangops' and static's utilisation, p50 and
   p99 queueing delay, and a one-line verdict on the issue's claim (at least
   1.4x static's utilisation at equal or lower queueing delay). The 1.4
   threshold row is the issue's claim, not fitted to our results; the sweep
   in docs/simulator.md says where and why it is, or is not, met.

Without the traces every figure is skipped with a message saying where to
put them. Run: `.venv/bin/python -m tests.perf sim` once registered.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from controller.sim.report import figures
from controller.sim.run import Experiment
from controller.sim.run import run as simulate
from controller.sim.schedulers import SCHEDULERS
from controller.sim.traces import TRACES_ENV, trace_path, traces_dir
from tests.perf.harness import Result

__all__ = ["inputs", "overloaded", "run", "run_benchmarks", "timed_row", "verdict"]

GANGOPS_FULL_TRACE_MAX_S = 10.0
"""Issue 16's target for the full openb trace with departures, gangops alone, in CPU
seconds of this process (the simulation is single-threaded; wall time on the shared
machine moves with the other sessions' load). Was 60 s of wall time (issue 6)."""
OVERLOADED = {"load": 2.0, "repeat": 3, "max_duration": 3600.0, "session_mean": 20.0}
"""The sweep's most expensive row (docs/simulator.md): three passes at twice the
cluster's capacity, thousands of gangs queued for hours of simulated time."""
OVERLOADED_MAX_S = 600.0
"""Issue 16: the overloaded sweep in minutes, not the 1,301 s it took; gangops alone,
CPU seconds. Measured 178 s of wall time at load 7-8, then 24.8 s CPU on a quiet
machine once placement cost what changed (2026-12-04, docs/performance.md)."""
RUNS_EVERY_JOB = {"never_started": 0, "rejected": 0}
"""What gangops' run must show for a speed row to count: the full trace with
departures and the overloaded row both started every job and turned none away
(8,152 and 24,456 jobs; measured 2026-12-07 when this check was added). A run
that schedules nothing is fast; its CPU seconds measure nothing."""
PUBLISHED = {"random": 86.30, "bestfit": 92.86, "gangops": 95.23}
"""FGD paper, openb default trace, allocation at 100 % arrived (gangops: FGD's)."""
MULTI_TENANT_RATIO_MIN = 1.4
"""The issue's claim: dynamic quotas raise utilisation 40 % over static islands."""
MULTI_TENANT = {"load": 1.0, "repeat": 3, "max_duration": 3600.0, "session_mean": 20.0}
"""The documented setting (docs/simulator.md): three shuffled passes of openb as
one Poisson stream offering the cluster's capacity, durations capped at 1 h,
sessions of 20 jobs. Overloaded settings queue thousands of gangs and take
several minutes per scheduler; the sweep in the docs covers them."""


def inputs() -> tuple[Path, Path] | None:
    """The openb node and pod lists, or None (and a message) when absent."""
    nodes = trace_path("openb/openb_node_list_gpu_node.csv")
    pods = trace_path("openb/openb_pod_list_default.csv")
    if nodes is None or pods is None:
        print(
            f"sim: skipped: openb trace not found under {traces_dir()} "
            f"(see docs/simulator.md, or set {TRACES_ENV})"
        )
        return None
    return nodes, pods


def run_benchmarks() -> list[Result]:
    """All three benchmarks; an empty list when the traces are absent."""
    found = inputs()
    if found is None:
        return []
    nodes, pods = found
    results: list[Result] = []

    results.append(_full_trace(nodes, pods))
    others, _ = simulate(
        Experiment(nodes, pods, schedulers=tuple(s for s in SCHEDULERS if s != "gangops"))
    )
    for r in others:
        f = figures(r)
        print(
            f"sim: full openb with departures, {r.name}: {r.wall_seconds:.1f} s wall, "
            f"utilisation {f['utilization']:.4f}, p99 delay {f['queueing_delay_p99']} s"
        )
    results.append(_overloaded(nodes, pods))

    seeds = int(os.environ.get("GANGOPS_BENCH_SEEDS", "3"))
    runs, _ = simulate(
        Experiment(
            nodes,
            pods,
            schedulers=("gangops", "bestfit", "random"),
            arrivals_only=True,
            seeds=seeds,
        )
    )
    for r in runs:
        f = figures(r)
        alloc = float(f["gpu_allocation_at_full_arrival"])
        print(
            f"sim: arrivals-only {r.name}: {alloc:.2f} % allocated at 100 % arrived "
            f"(per seed {f['gpu_allocation_at_full_arrival_per_seed']}; published "
            f"{PUBLISHED[r.name]:.2f} %; fragmentation {f['fragmentation']:.3f})"
        )
        if r.name == "gangops":
            results.append(
                Result(
                    "sim: openb alloc@100% gangops (FGD 95.23)",
                    alloc,
                    "%",
                    PUBLISHED["gangops"],
                    higher_is_better=True,
                )
            )
        else:
            results.append(
                Result(
                    f"sim: openb alloc@100% |{r.name} - published|",
                    abs(alloc - PUBLISHED[r.name]),
                    "pt",
                    1.0,
                )
            )

    runs, _ = simulate(
        Experiment(
            nodes,
            pods,
            policies=Path("policies"),
            schedulers=("gangops", "static"),
            load=MULTI_TENANT["load"],
            repeat=int(MULTI_TENANT["repeat"]),
            max_duration=MULTI_TENANT["max_duration"],
            session_mean=MULTI_TENANT["session_mean"],
        )
    )
    f = {r.name: figures(r) for r in runs}
    g, st = f["gangops"], f["static"]
    ratio = g["utilization"] / max(st["utilization"], 1e-9)
    print(
        f"sim: multi-tenant ({', '.join(f'{k} {v:g}' for k, v in MULTI_TENANT.items())}): "
        f"utilisation gangops {g['utilization']:.4f} vs static {st['utilization']:.4f} "
        f"(x{ratio:.2f}; makespan {g['makespan']:g} s vs {st['makespan']:g} s); "
        f"while jobs arrive {g['utilization_arrivals']:.4f} vs {st['utilization_arrivals']:.4f}; "
        f"delay p50 {g['queueing_delay_p50']} s vs {st['queueing_delay_p50']} s, "
        f"p99 {g['queueing_delay_p99']} s vs {st['queueing_delay_p99']} s; "
        f"rejected {g['rejected']} vs {st['rejected']}"
    )
    print(f"sim: multi-tenant verdict: {verdict(g, st)}")
    results.append(
        Result(
            "sim: multi-tenant utilisation gangops/static",
            ratio,
            "x",
            MULTI_TENANT_RATIO_MIN,
            higher_is_better=True,
        )
    )
    return results


def timed_row(name: str, cpu: float, limit: float, run_figures: dict[str, Any]) -> Result:
    """A speed row: `cpu` seconds against `limit`, provided the run timed scheduled its
    jobs as `RUNS_EVERY_JOB` says; otherwise the row fails (value inf) and says why."""
    wrong = {k: run_figures[k] for k, want in RUNS_EVERY_JOB.items() if run_figures[k] != want}
    if wrong:
        print(
            f"sim: {name}: FAIL: the timed run did not schedule its jobs "
            f"({', '.join(f'{k} {v}' for k, v in wrong.items())}; expected "
            f"{', '.join(f'{k} {RUNS_EVERY_JOB[k]}' for k in wrong)}), so its {cpu:.1f} s "
            "CPU measure nothing"
        )
        return Result(name, math.inf, "s", limit)
    return Result(name, cpu, "s", limit)


def _full_trace(nodes: Path, pods: Path) -> Result:
    """The full trace with departures, gangops alone, in CPU seconds."""
    t0 = time.process_time()
    runs, _ = simulate(Experiment(nodes, pods, schedulers=("gangops",)))
    cpu = time.process_time() - t0
    f = figures(runs[0])
    print(
        f"sim: full openb with departures, gangops: {runs[0].wall_seconds:.1f} s wall, "
        f"{cpu:.1f} s CPU, utilisation {f['utilization']:.4f}, p99 delay "
        f"{f['queueing_delay_p99']} s, never started {f['never_started']}, "
        f"rejected {f['rejected']}"
    )
    return timed_row("sim: full openb trace, gangops (CPU s)", cpu, GANGOPS_FULL_TRACE_MAX_S, f)


def overloaded(nodes: Path, pods: Path) -> Experiment:
    """The overloaded multi-tenant row (`OVERLOADED`), gangops alone."""
    return Experiment(
        nodes,
        pods,
        policies=Path("policies"),
        schedulers=("gangops",),
        load=OVERLOADED["load"],
        repeat=int(OVERLOADED["repeat"]),
        max_duration=OVERLOADED["max_duration"],
        session_mean=OVERLOADED["session_mean"],
    )


def _overloaded(nodes: Path, pods: Path) -> Result:
    """The overloaded multi-tenant row, gangops alone, in CPU seconds."""
    t0 = time.process_time()
    runs, _ = simulate(overloaded(nodes, pods))
    cpu = time.process_time() - t0
    f = figures(runs[0])
    print(
        f"sim: overloaded ({', '.join(f'{k} {v:g}' for k, v in OVERLOADED.items())}), "
        f"gangops: {cpu:.1f} s CPU, {runs[0].wall_seconds:.1f} s wall; utilisation "
        f"{f['utilization']:.4f}, delay p99 {f['queueing_delay_p99']} s, never started "
        f"{f['never_started']}, rejected {f['rejected']}"
    )
    return timed_row("sim: overloaded sweep row, gangops (CPU s)", cpu, OVERLOADED_MAX_S, f)


def verdict(gangops: dict[str, Any], static: dict[str, Any]) -> str:
    """One line on the claim, from both schedulers' figures."""
    ratio = gangops["utilization"] / max(static["utilization"], 1e-9)
    arriving = gangops["utilization_arrivals"] / max(static["utilization_arrivals"], 1e-9)
    no_worse = all(gangops[k] <= static[k] for k in ("queueing_delay_p50", "queueing_delay_p99"))
    # delays count started jobs only: one that never started (a starved queue) must
    # not read as a shorter delay
    same_jobs = all(f[k] == 0 for f in (gangops, static) for k in ("rejected", "never_started"))
    holds = ratio >= MULTI_TENANT_RATIO_MIN and no_worse and same_jobs
    why = [
        f"utilisation x{ratio:.2f} over the makespan (claim: x{MULTI_TENANT_RATIO_MIN:g}), "
        f"x{arriving:.2f} while jobs arrive",
        "delays equal or lower" if no_worse else "delays higher (p50 or p99) than static's",
    ]
    if same_jobs:
        why.append("both ran every job, so the first ratio is static's makespan over gangops'")
    else:
        why.append("the two did not run the same jobs (some rejected or never started)")
    return (
        f"claim {'HOLDS' if holds else 'NOT MET'} in this setting: {'; '.join(why)} "
        "(docs/simulator.md, Multi-tenant experiment)"
    )


def run() -> list[Result]:
    """Entry point for `tests.perf.__main__`."""
    return run_benchmarks()
