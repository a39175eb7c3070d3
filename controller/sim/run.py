"""One simulation request, end to end: inputs, workload, every scheduler.

`Experiment` is what `gangops simulate` parses its flags into; `run` loads
the cluster, trace and policies, maps the trace onto tenants, and simulates
each scheduler on the same workload. Arrivals-only runs repeat over seeds
(FGD's method: the trace is inflated to `tune` x capacity by resampling its
own pods, then shuffled) and report the mean.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.progress import progress
from controller.scheduler.fragmentation import FragModel, typical_pods
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI, Node, PodShape
from controller.sim.engine import RunResult, Truth, simulate, simulate_arrivals
from controller.sim.faults import Devices, FaultSchedule, load_faults
from controller.sim.schedulers import SCHEDULERS, make_scheduler
from controller.sim.telemetry import Feed, Replayed
from controller.sim.tenants import (
    SESSION_MEAN,
    PolicyError,
    assign_tenants,
    load_policy_doc,
    open_policy_doc,
    scale_policy_doc,
)
from controller.sim.traces import TraceError, TraceJob, load_cluster_file, load_trace
from controller.sim.variants import make_variant
from controller.telemetry_data import load_recording

__all__ = [
    "Experiment",
    "Interrupted",
    "SchedulerRun",
    "policy_doc",
    "prepare_arrivals",
    "run",
    "run_jobs",
]


@dataclass(frozen=True)
class Experiment:
    """Everything a simulation needs."""

    cluster: Path
    trace: Path
    policies: Path | None = None
    schedulers: tuple[str, ...] = SCHEDULERS
    arrivals_only: bool = False
    seed: int = 42
    seeds: int = 1
    """Arrivals-only: runs (seeds seed, seed+1, ...) averaged."""
    tune: float = 1.3
    """Arrivals-only: inflate the workload to this multiple of capacity (0: as is)."""
    order: str = "shuffled"
    """Arrivals-only: `shuffled` (FGD's artifact) or `trace` (file order)."""
    load: float | None = None
    """With departures: re-time arrivals so offered load is this share of capacity."""
    max_duration: float | None = None
    """With departures: cap each job's duration (public traces censor long jobs
    at the end of the trace, and one such job would set the makespan)."""
    tick: float = 10.0
    limit: int | None = None
    """Use only the first `limit` jobs of the trace."""
    repeat: int = 1
    """With departures and `load`: replay `repeat` shuffled passes of the trace
    as one stationary stream (Poisson arrivals at `load`), so the run reaches a
    steady state instead of one burst and its drain."""
    session_mean: float = SESSION_MEAN
    """Mean length, in jobs, of a project's run of consecutive submissions
    when the trace has no tenants (`tenants.assign_tenants`)."""
    telemetry: Path | None = None
    """With departures: recorded GPU telemetry replayed on the jobs (the format of
    ../shared/telemetry/genai2026/)."""
    faults: Path | None = None
    """With departures: scripted GPU faults (`sim.faults`)."""
    use_telemetry: bool = True
    """False (`--no-telemetry`): gangops schedules by requests alone, blind to the
    faults and the replayed usage, which are still measured."""
    variant: str | None = None
    """Reshape the trace as one of `variants.VARIANTS` (FGD's workload shapes),
    drawn with `seed` (the first seed: every seed of a run sees one variant)."""


@dataclass
class SchedulerRun:
    """One scheduler's results (one per seed in arrivals-only mode)."""

    name: str
    runs: list[RunResult] = field(default_factory=list)
    wall_seconds: float = 0.0


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C while schedulers are simulated: the ones that finished (`finished`),
    the ones that did not (`unfinished`), and the inputs' summary, if the caller
    gave one (`run_jobs`)."""

    def __init__(
        self, finished: list[SchedulerRun], unfinished: list[str], summary: dict[str, Any] | None
    ) -> None:
        super().__init__()
        self.finished = finished
        self.unfinished = unfinished
        self.summary = summary


def prepare_arrivals(
    jobs: Sequence[TraceJob], capacity_milli: int, *, seed: int, tune: float, order: str
) -> list[TraceJob]:
    """The arrivals-only workload: `jobs` plus resampled copies until their GPU
    demand reaches `tune` x capacity, in trace order or shuffled (seeded)."""
    rng = random.Random(seed)
    out = list(jobs)
    total = sum(j.gpu_milli for j in out)
    n = 0
    # pods that ask for no GPU never reach the demand: the trace as it is
    while tune > 0 and any(j.gpu_milli > 0 for j in jobs):
        extra = rng.choice(jobs)
        if total + extra.gpu_milli > tune * capacity_milli:
            break
        n += 1
        out.append(replace(extra, id=f"{extra.id}-tuned-{n}"))
        total += extra.gpu_milli
    if order == "shuffled":
        rng.shuffle(out)
    return out


def retime(jobs: Sequence[TraceJob], capacity_milli: int, load: float) -> list[TraceJob]:
    """Arrival times scaled so the offered GPU-time over the arrival span is
    `load` x capacity (durations kept)."""
    timed = [j for j in jobs if j.duration is not None]
    if not timed:
        return list(jobs)
    work = sum(j.gpu_milli * (j.duration or 0.0) for j in timed)
    first = jobs[0].submit
    span = jobs[-1].submit - first
    if span <= 0 or work <= 0:
        return list(jobs)
    factor = work / (load * capacity_milli) / span
    return [replace(j, submit=(j.submit - first) * factor) for j in jobs]


def stationary(
    jobs: Sequence[TraceJob], capacity_milli: int, load: float, *, repeat: int, seed: int
) -> list[TraceJob]:
    """`repeat` shuffled passes of `jobs`, arriving as a Poisson process whose
    offered GPU-time is `load` x capacity (durations kept; ids made unique)."""
    rng = random.Random(seed)
    passes: list[TraceJob] = []
    for k in range(repeat):
        order = list(jobs)
        rng.shuffle(order)
        passes += [replace(j, id=f"{j.id}-pass{k}") for j in order]
    timed = [j for j in passes if j.duration is not None]
    if not timed:
        return passes
    mean_work = sum(j.gpu_milli * (j.duration or 0.0) for j in timed) / len(passes)
    rate = load * capacity_milli / mean_work if mean_work > 0 else 1.0
    t = 0.0
    out = []
    for j in passes:
        out.append(replace(j, submit=t))
        t += rng.expovariate(rate)
    return out


def policy_doc(exp: Experiment, capacity_gpus: int) -> dict[str, Any]:
    """The compiled policy for `exp` scaled to `capacity_gpus` (one open project
    without `policies`); a PolicyError when the policy cannot be built, e.g. for a
    capacity beyond what a compiled policy may hold."""
    try:
        if exp.policies is None:
            return open_policy_doc(capacity_gpus)
        return scale_policy_doc(load_policy_doc(exp.policies), capacity_gpus)
    except PolicyError:
        raise
    except ValueError as e:
        raise PolicyError(f"no policy for a cluster of {capacity_gpus} GPUs: {e}") from None


def run_jobs(
    exp: Experiment,
    nodes: Sequence[Node],
    jobs: Sequence[TraceJob],
    doc: dict[str, Any],
    *,
    show_progress: bool = False,
    summary: dict[str, Any] | None = None,
) -> list[SchedulerRun]:
    """Simulate every scheduler of `exp` on `jobs` (tenants already assigned);
    with `show_progress`, each run's progress goes to stderr (`controller.progress`).
    A Ctrl-C raises `Interrupted` with the runs that finished and `summary`."""
    capacity = sum(n.gpus for n in nodes) * MILLI
    policy = SchedulingPolicy.from_dict(doc)
    replay, faults = _truth_inputs(exp, nodes)
    first = jobs[0].submit if jobs else 0.0
    pods = [j.pod for j in jobs]
    shapes = [
        PodShape(t.gpus, t.gpu_milli, t.cpu_milli, 0, t.gpu_models) for t in typical_pods(pods)
    ]
    seeds = exp.seeds if exp.arrivals_only else 1

    def one(name: str, seed: int) -> RunResult:
        desc = f"simulate {name}" + (f" seed {seed}" if seeds > 1 else "")
        frag = FragModel.of(pods)
        feed = None
        if name == "gangops" and exp.use_telemetry and not exp.arrivals_only and (replay or faults):
            feed = Feed(policy, replay=replay, faults=faults, t0=first)
        sched = make_scheduler(name, nodes, doc, fragmentation=frag, seed=seed, feed=feed)
        if exp.arrivals_only:
            workload = prepare_arrivals(jobs, capacity, seed=seed, tune=exp.tune, order=exp.order)
            with progress(len(workload), desc, unit="jobs", enabled=show_progress) as bar:
                return simulate_arrivals(workload, sched, policy, capacity_milli=capacity,
                                         shapes=shapes, progress=bar.set)  # fmt: skip
        truth = Truth(Devices(nodes), faults, replay) if (replay or faults) else None
        with progress(len(jobs), desc, unit="jobs", enabled=show_progress) as bar:
            r = simulate(jobs, sched, policy, capacity_milli=capacity, tick=exp.tick,
                         progress=bar.set, truth=truth)  # fmt: skip
        if feed is not None:
            r.forecast = feed.score()
        return r

    out: list[SchedulerRun] = []
    try:
        for name in exp.schedulers:
            t0 = time.perf_counter()
            runs = [one(name, exp.seed + k) for k in range(seeds)]
            out.append(SchedulerRun(name, runs, time.perf_counter() - t0))
    except KeyboardInterrupt:
        done = {r.name for r in out}
        unfinished = [n for n in exp.schedulers if n not in done]
        raise Interrupted(out, unfinished, summary) from None
    return out


def _truth_inputs(
    exp: Experiment, nodes: Sequence[Node]
) -> tuple[Replayed | None, FaultSchedule | None]:
    """The replayed recording and the fault schedule (checked against the nodes)."""
    replay = faults = None
    if exp.telemetry is not None:
        try:
            replay = Replayed(load_recording(exp.telemetry))
        except (OSError, ValueError) as e:
            raise TraceError(f"--telemetry: {e}") from None
    if exp.faults is not None:
        faults = load_faults(exp.faults)
        faults.check(nodes)
    return replay, faults


def run(
    exp: Experiment, *, show_progress: bool = False
) -> tuple[list[SchedulerRun], dict[str, Any]]:
    """Load the inputs of `exp` and simulate; also returns the inputs' summary."""
    nodes = load_cluster_file(exp.cluster)
    capacity_gpus = sum(n.gpus for n in nodes)
    jobs = load_trace(exp.trace)
    if exp.limit is not None:
        jobs = jobs[: exp.limit]
    if exp.variant is not None:
        jobs = make_variant(jobs, exp.variant, seed=exp.seed, nodes=nodes)
        if not exp.arrivals_only:
            # in arrival order, as a loaded trace is: `multigpu50` appends its copies
            # (as the published file does, which arrivals-only `--order trace`
            # keeps), and with departures the span of arrivals (--load, utilisation
            # while jobs arrive) runs from the first job to the last
            jobs = sorted(jobs, key=lambda j: j.submit)
    doc = policy_doc(exp, capacity_gpus)
    policy = SchedulingPolicy.from_dict(doc)
    if not exp.arrivals_only and exp.max_duration is not None:
        cap = exp.max_duration
        jobs = [
            j if j.duration is None else replace(j, duration=min(j.duration, cap)) for j in jobs
        ]
    if not exp.arrivals_only and exp.load is not None and exp.repeat > 1:
        jobs = stationary(jobs, capacity_gpus * MILLI, exp.load, repeat=exp.repeat, seed=exp.seed)
    jobs = assign_tenants(jobs, policy, seed=exp.seed, session_mean=exp.session_mean)
    if not exp.arrivals_only and exp.load is not None and exp.repeat <= 1:
        jobs = retime(jobs, capacity_gpus * MILLI, exp.load)
    summary = {
        "cluster": str(exp.cluster),
        "nodes": len(nodes),
        "gpus": capacity_gpus,
        "trace": str(exp.trace)
        + (f" as variant {exp.variant} (seed {exp.seed})" if exp.variant else ""),
        "jobs": len(jobs),
        "mode": "arrivals-only" if exp.arrivals_only else "departures",
        "seeds": exp.seeds if exp.arrivals_only else 1,
    }
    return run_jobs(exp, nodes, jobs, doc, show_progress=show_progress, summary=summary), summary
