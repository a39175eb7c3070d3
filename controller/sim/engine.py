"""The discrete-event simulator: a virtual clock driving a scheduler.

Events are job arrivals and completions. After the events of a moment, the
scheduler runs one cycle over every pending job (in submission order; the
gangops cycle orders them itself); cycles are coalesced onto a tick (default
10 s of virtual time), like the controller's periodic cycle. A started job
runs for its trace duration and then releases its GPUs; a preempted job goes
back to the queue and starts over (its progress is lost). An elastic job
(`min_gpu`/`max_gpu`) grown or shrunk by the scheduler keeps its progress and
scales linearly: its work is its duration times its submitted workers, in
worker-seconds, done at its current number of workers (a resize is a restart
from a checkpoint taken at that moment). Nothing here reads
the wall clock except the progress callback's caller.

With a `Truth` (`--telemetry`, `--faults`), the engine also keeps what really
happens on the GPUs, whatever the scheduler knows: a simulated device plugin
(`faults.Devices`) gives each started pod physical GPUs, healthy ones first,
and a job that had to get one out of service at that moment (the fault schedule)
is counted in `jobs_on_unhealthy_gpus`; such a run does no useful work (on a GPU
off the bus a job crashes or hangs), so it holds its GPUs for its duration, as
planned, and its GPU-seconds count in `lost_gpu_seconds` with the runs cut short
by preemption. `idle_gpu_seconds` are GPU-seconds held while the job's replayed
utilisation was under 5 % (`telemetry.Replayed`). A fault under a job already
running is not modelled: it would hit every scheduler alike.

`--arrivals-only` (FGD's fragmentation experiment): jobs arrive one by one
and never leave; a job that does not fit on arrival is dropped; the figure is
the share of GPUs allocated as the arrived demand grows.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from controller.scheduler.cycle import GROW_INTERVAL_S
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import NodeState
from controller.scheduler.types import MILLI, Gang, JobId, PodShape
from controller.sim.faults import Devices, FaultSchedule
from controller.sim.schedulers import Scheduler
from controller.sim.telemetry import Replayed
from controller.sim.traces import TraceJob

__all__ = ["RunResult", "Truth", "gang_of", "simulate", "simulate_arrivals"]

SERIES_POINTS = 600
"""Utilisation samples kept for the plots."""
_T = TypeVar("_T")
FRAG_SHAPES = 16
"""Distinct pending request shapes checked when measuring fragmentation."""


@dataclass
class RunResult:
    """What one scheduler did with one trace."""

    scheduler: str
    capacity_milli: int
    jobs: int
    makespan: float = 0.0
    utilization: float = 0.0
    """Allocated GPU-time over capacity times the makespan."""
    utilization_arrivals: float = 0.0
    """Allocated GPU-time while jobs still arrive (first to last submission)
    over capacity times that span: the level the stream sustains, without the
    drain after the last arrival that the makespan includes."""
    delays: list[float] = field(default_factory=list)
    """Queueing delay (first start minus submission) of every job that started."""
    delay_by_job: dict[str, float] = field(default_factory=dict)
    """The same delays by job id (the quota what-if compares two runs job by job)."""
    preempted_jobs: list[str] = field(default_factory=list)
    """The id of each job preempted, once per preemption."""
    jcts: list[float] = field(default_factory=list)
    """Completion minus submission of every job that finished."""
    never_started: int = 0
    rejected: int = 0
    """Jobs the scheduler can never run (refused by the policy, or larger than
    every node set they may use): dropped from the queue at once, counted here,
    and in `never_started`."""
    preemptions: int = 0
    resizes: int = 0
    """Elastic jobs grown onto idle GPUs or shrunk for a waiting gang."""
    preempted_gpu_seconds: float = 0.0
    """GPU-seconds of runs cut short by preemption: counted in `utilization`
    (the GPUs were allocated) but lost, since a preempted job starts over."""
    gang_timeouts: int = 0
    """Gangs that held part of their GPUs longer than the gang timeout."""
    partial_gpu_seconds: float = 0.0
    """GPU-seconds held by half-placed gangs."""
    deadlocked: bool = False
    """The run ended with half-placed gangs holding GPUs that the rest of the queue needs."""
    fragmentation: float = 0.0
    """Share of free GPUs on nodes where no pending request fits (mean over cycles)."""
    fairness: float | None = None
    """Jain's index of each project's GPU-time share relative to its guarantee share."""
    util_series: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the first arrival, share of capacity allocated), sampled
    about `SERIES_POINTS` times over the run."""
    project_series: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """(seconds since the first arrival, project -> share of capacity its
    running jobs hold), at the moments of `util_series` (half-placed gangs,
    which `util_series` counts, are in no project's share)."""
    guarantees: dict[str, float] = field(default_factory=dict)
    """Each project's guaranteed share of capacity, by the policy."""
    alloc_curve: list[tuple[float, float]] = field(default_factory=list)
    """Arrivals-only: (arrived demand, allocated) as shares of capacity."""
    allocation_at_full: float | None = None
    """Arrivals-only: percent of capacity allocated when arrived demand reaches 100 %."""
    dropped: int = 0
    """Arrivals-only: jobs that did not fit on arrival."""
    on_unhealthy: set[str] = field(default_factory=set)
    """Jobs the device plugin had to give a GPU out of service (with a `Truth`)."""
    idle_gpu_seconds: float | None = None
    """GPU-seconds held while the replayed utilisation was under 5 % (with a replay)."""
    lost_gpu_seconds: float = 0.0
    """GPU-seconds of work lost: runs cut short by preemption, and runs on GPUs out
    of service."""
    lost_busy_gpu_seconds: float | None = None
    """Of the runs cut short by preemption, the GPU-seconds their replayed utilisation
    was at or over 5 %: the work a victim really loses, which friendly reclamation
    (idle victims first) keeps small (with a replay)."""
    forecast: dict[str, object] | None = None
    """The demand forecast's scores (`telemetry.Feed.score`), when the scheduler used one."""


@dataclass
class Truth:
    """What really happens on the GPUs, whatever the scheduler knows."""

    devices: Devices
    faults: FaultSchedule | None = None
    replay: Replayed | None = None


def gang_of(job: TraceJob, policy: SchedulingPolicy) -> Gang:
    """The core's request for a trace job."""
    tier = policy.tiers.get(job.tier or "")
    return Gang(
        id=JobId(job.id),
        project=job.project or "",
        user=job.user or "",
        tier=job.tier or "",
        priority=tier.value if tier else 0,
        created=job.submit,
        workers=job.workers,
        pod=job.pod,
        preemptible=tier.preemptible if tier else False,
        may_preempt=tier.may_preempt if tier else False,
        min_workers=job.min_workers,
        max_workers=job.max_workers,
        expected_duration=job.duration,
    )


def _fragmented(nodes: Iterable[NodeState], shapes: Sequence[PodShape]) -> tuple[int, int]:
    """(free milli-GPUs on nodes where none of `shapes` fits, all free milli-GPUs).
    Without shapes (a workload of no pods) no free GPU strands a pod: none is a
    fragment."""
    frag = free = 0
    for ns in nodes:
        left = sum(ns.free)
        if not left:
            continue
        free += left
        usable = not shapes or any(
            (not s.gpu_models or ns.node.gpu_model in s.gpu_models) and ns.slots(s) > 0
            for s in shapes
        )
        if not usable:
            frag += left
    return frag, free


def _thin(series: list[_T], points: int) -> list[_T]:
    if len(series) <= points:
        return series
    step = len(series) / points
    return [series[int(i * step)] for i in range(points)] + [series[-1]]


def _jain(policy: SchedulingPolicy, usage: dict[str, float]) -> float | None:
    projects = [p for p in policy.projects.values() if p.guaranteed > 0]
    total_use = sum(usage.get(p.name, 0.0) for p in projects)
    total_g = sum(p.guaranteed for p in projects)
    if len(projects) < 2 or total_use <= 0:
        return None
    x = [(usage.get(p.name, 0.0) / total_use) / (p.guaranteed / total_g) for p in projects]
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


def simulate_arrivals(
    jobs: Sequence[TraceJob],
    scheduler: Scheduler,
    policy: SchedulingPolicy,
    *,
    capacity_milli: int,
    shapes: Sequence[PodShape],
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Jobs arrive in the given order and never leave; `progress` is told how
    many have arrived (and been placed or dropped)."""
    result = RunResult(scheduler.name, capacity_milli, len(jobs))
    arrived = used = 0
    curve: list[tuple[float, float]] = []
    at_full: list[float] = []
    frag_done = False
    for i, job in enumerate(jobs):
        gang = gang_of(job, policy)
        arrived += gang.gpu_total
        outcome = scheduler.cycle(float(i), [gang], 0)
        if outcome.started:
            used += gang.gpu_total
        else:
            result.dropped += 1
            if gang.id in scheduler.partial():
                # a pod-at-a-time scheduler keeps the pods it bound; a dropped gang
                # never comes back, so they would hold GPUs no figure counts
                scheduler.release(gang.id)
        a, u = arrived / capacity_milli, used / capacity_milli
        curve.append((a, u))
        if round(a * 100) == 100:
            at_full.append(u)
        elif a > 1.005 and not frag_done:
            frag, free = _fragmented(scheduler.node_states(), shapes)
            result.fragmentation = frag / free if free else 0.0
            frag_done = True
        if progress and i % 200 == 0:
            progress(i + 1)
    if progress:
        progress(len(jobs))
    if not frag_done:
        frag, free = _fragmented(scheduler.node_states(), shapes)
        result.fragmentation = frag / free if free else 0.0
    result.alloc_curve = _thin(curve, SERIES_POINTS)
    result.utilization = used / capacity_milli
    if not at_full:
        at_full = _at_full(curve)
    result.allocation_at_full = 100 * sum(at_full) / len(at_full) if at_full else None
    return result


def _at_full(curve: Sequence[tuple[float, float]]) -> list[float]:
    """The allocation where the arrived demand crosses 100 % of capacity, read
    off the curve between the arrivals on either side, for a cluster so small
    that no arrival lands within half a point of it; none when it never
    reaches 100 %."""
    before = (0.0, 0.0)
    for a, u in curve:
        if a >= 1.0:
            (a0, u0) = before
            return [u0 + (u - u0) * (1.0 - a0) / (a - a0)]
        before = (a, u)
    return []


@dataclass
class _Job:
    gang: Gang
    duration: float | None
    start: float | None = None
    run: int = 0
    partial_since: float | None = None
    timed_out: bool = False
    workers: int = 0
    """Workers it runs with now (elastic jobs change)."""
    work_left: float = 0.0
    """Worker-seconds of work left, as of `seg_start`."""
    seg_start: float = 0.0
    placed_at: float = 0.0
    """When its current placement began (start, restart or resize)."""
    on_bad_gpu: bool = False
    """Its current placement includes a GPU that was out of service."""
    run_held: float = 0.0
    """GPU-seconds its current run held before its current placement (resizes)."""
    run_busy: float = 0.0
    """The busy part of those (with a telemetry replay)."""
    run_bad: float = 0.0
    """The part of those already counted lost, on a GPU out of service."""


def simulate(
    jobs: Sequence[TraceJob],
    scheduler: Scheduler,
    policy: SchedulingPolicy,
    *,
    capacity_milli: int,
    tick: float = 10.0,
    progress: Callable[[int], None] | None = None,
    truth: Truth | None = None,
) -> RunResult:
    """Arrivals, starts, completions and preemptions until the queue drains
    or nothing more can happen; `progress` is told after each cycle how many
    jobs have started or been rejected. With `truth`, placements are checked
    against the fault schedule and idle GPU-time is measured (module docstring)."""
    result = RunResult(scheduler.name, capacity_milli, len(jobs))
    state = {j.id: _Job(gang_of(j, policy), j.duration) for j in jobs}
    events: list[tuple[float, int, int, str, int]] = []
    """(time, kind 0=finish 1=arrival 2=wake-up 3=health change, order, job, run). A
    wake-up or a health change only makes a cycle happen: an elastic job may grow
    once `GROW_INTERVAL_S` has passed since it (re)started, even if nothing else
    happens then; a GPU back in service may start a waiting job."""
    for n, j in enumerate(jobs):
        heapq.heappush(events, (j.submit, 1, n, j.id, 0))
    start_at = jobs[0].submit if jobs else 0.0
    if truth is not None and truth.faults is not None:
        # a GPU going out or coming back makes a cycle happen, as a Node update does
        for c in truth.faults.changes:
            heapq.heappush(events, (start_at + c, 3, 0, "", 0))
        if truth.replay is not None:
            result.idle_gpu_seconds = 0.0
            result.lost_busy_gpu_seconds = 0.0
    elif truth is not None and truth.replay is not None:
        result.idle_gpu_seconds = 0.0
        result.lost_busy_gpu_seconds = 0.0
    pending: dict[JobId, _Job] = {}
    running: set[JobId] = set()
    used = 0
    project_used: dict[str, int] = {}
    usage: dict[str, float] = {}
    preempted_at: list[float] = []
    frag_samples: list[float] = []
    series: list[tuple[float, float]] = []
    project_series: list[tuple[float, dict[str, float]]] = []
    start_time = jobs[0].submit if jobs else 0.0
    last = start_time
    finished: float | None = None
    partial_milli = 0
    timeout = policy.gang_timeout_seconds
    span = (jobs[-1].submit - start_time) if jobs else 0.0
    arrivals_end = start_time + span
    in_arrivals = 0.0
    every = span / SERIES_POINTS if span > 0 else tick
    next_sample = start_time

    def advance(to: float) -> None:
        nonlocal last, in_arrivals
        dt = to - last
        if dt > 0:
            result.utilization += (used + partial_milli) * dt
            in_arrivals += (used + partial_milli) * max(0.0, min(to, arrivals_end) - last)
            result.partial_gpu_seconds += partial_milli * dt / MILLI
            for p, u in project_used.items():
                usage[p] = usage.get(p, 0.0) + u * dt
        last = to

    def place(job: _Job, at: float) -> None:
        """The device plugin binds the job's pods (with a `truth`)."""
        job.placed_at = at
        job.on_bad_gpu = False
        if truth is None:
            return
        placement = scheduler.placement(job.gang.id)
        if placement is None:
            return
        bad = truth.faults.at(at - start_at) if truth.faults is not None else {}
        job.on_bad_gpu = truth.devices.bind(job.gang.id, job.gang.pod, placement.pods, bad)
        if job.on_bad_gpu:
            result.on_unhealthy.add(job.gang.id)

    def unplace(job: _Job, at: float) -> None:
        """The job's current placement ends: what it lost, what it held idle; its
        GPU-seconds (and their busy part) are added to its run's (`run_held`)."""
        span = at - job.placed_at
        held = job.workers * job.gang.pod.gpu_total / MILLI * span
        job.run_held += held
        if job.on_bad_gpu:
            result.lost_gpu_seconds += held
            job.run_bad += held
        if truth is None:
            return
        truth.devices.release(job.gang.id)
        if truth.replay is not None:
            per_pod = job.gang.pod.gpu_total / MILLI
            for i in range(job.workers):
                idle = truth.replay.idle_seconds(job.gang.id, i, 0.0, span)
                if result.idle_gpu_seconds is not None:
                    result.idle_gpu_seconds += per_pod * idle
                if not job.on_bad_gpu:  # else all of it is lost already
                    job.run_busy += per_pod * max(0.0, span - idle)

    def stop(job: _Job) -> None:
        nonlocal used
        running.discard(job.gang.id)
        held = job.workers * job.gang.pod.gpu_total
        used -= held
        project_used[job.gang.project] -= held

    wake_after = max(GROW_INTERVAL_S, policy.min_runtime_seconds)

    def stale(ev: tuple[float, int, int, str, int]) -> bool:
        """A completion or wake-up for a job that has since ended, been preempted or
        resized: nothing happens then (a void completion once moved the clock, and
        the makespan, to when a resized job would have ended)."""
        if ev[1] == 3:  # a health change matters only to jobs waiting to be placed
            return not pending
        return ev[1] in (0, 2) and (ev[3] not in running or state[JobId(ev[3])].run != ev[4])

    while events:
        while events and stale(events[0]):
            heapq.heappop(events)
        if not events:
            break
        t = events[0][0]
        # never before `t`: with a tick not exact in binary (0.3) the product can
        # land a hair below it, and the loop below then takes no event, for ever
        now = max(t, math.ceil(t / tick) * tick) if tick > 0 else t
        advance(min(now, t))
        while events and events[0][0] <= now:
            et, kind, _, jid, run = heapq.heappop(events)
            advance(et)
            if kind == 3:
                continue
            job = state[JobId(jid)]
            if kind == 1:
                pending[job.gang.id] = job
            elif kind >= 2:
                pass
            elif run == job.run and job.gang.id in running:
                scheduler.release(job.gang.id)
                unplace(job, et)
                stop(job)
                result.jcts.append(et - job.gang.created)
                finished = et
        advance(now)
        hour_ago = now - 3600
        recent = sum(1 for p in preempted_at if p > hour_ago)
        queue = sorted(pending.values(), key=lambda j: (j.gang.created, j.gang.id))
        outcome = scheduler.cycle(now, [j.gang for j in queue], recent)
        for rejected in outcome.rejected:
            del pending[rejected]
            result.rejected += 1
        for victim in outcome.preempted:
            job = state[victim]
            unplace(job, now)
            # it starts over: its whole run is lost, every size it held (the part on
            # a GPU out of service is lost already, by unplace)
            result.preempted_gpu_seconds += job.run_held
            result.lost_gpu_seconds += job.run_held - job.run_bad
            if result.lost_busy_gpu_seconds is not None:
                result.lost_busy_gpu_seconds += job.run_busy
            stop(job)
            job.run += 1
            pending[victim] = job
            result.preemptions += 1
            result.preempted_jobs.append(str(victim))
            preempted_at.append(now)
        placed: list[_Job] = []
        for started in outcome.started:
            job = pending.pop(started)
            if job.start is None:
                job.start = now
                result.delays.append(now - job.gang.created)
                result.delay_by_job[str(started)] = now - job.gang.created
            if (
                job.partial_since is not None
                and not job.timed_out
                and now - job.partial_since > timeout
            ):
                job.timed_out = True
                result.gang_timeouts += 1
            job.partial_since = None
            job.run_held = job.run_busy = job.run_bad = 0.0
            running.add(started)
            used += job.gang.gpu_total
            project_used[job.gang.project] = (
                project_used.get(job.gang.project, 0) + job.gang.gpu_total
            )
            job.workers = job.gang.workers
            placed.append(job)
            if job.duration is not None:
                job.work_left, job.seg_start = job.duration * job.workers, now
                heapq.heappush(events, (now + job.duration, 0, 0, started, job.run))
            if job.gang.max_workers is not None:
                heapq.heappush(events, (now + wake_after, 2, 0, started, job.run))
        for resized, workers in outcome.resized:
            job = state[resized]
            if resized not in running or workers == job.workers:
                continue
            if workers < min(job.workers, job.gang.workers):
                preempted_at.append(now)  # below its submitted size: counts as a preemption
            delta = (workers - job.workers) * job.gang.pod.gpu_total
            unplace(job, now)
            used += delta
            project_used[job.gang.project] += delta
            result.resizes += 1
            if job.duration is not None:
                job.work_left -= (now - job.seg_start) * job.workers
                job.seg_start = now
                job.run += 1  # the old completion event is void
                end = now + max(0.0, job.work_left) / workers
                heapq.heappush(events, (end, 0, 0, resized, job.run))
            job.workers = workers
            place(job, now)
            if job.gang.max_workers is not None and workers < job.gang.max_workers:
                heapq.heappush(events, (now + wake_after, 2, 0, resized, job.run))
        for job in placed:  # after the shrinks above have given their GPUs back
            place(job, now)
        partial = scheduler.partial()
        partial_milli = sum(partial.values())
        for jid_, _held in partial.items():
            job = state[jid_]
            if job.partial_since is None:
                job.partial_since = now
            elif not job.timed_out and now - job.partial_since > timeout:
                job.timed_out = True
                result.gang_timeouts += 1
        if now >= next_sample:
            next_sample = now + every
            if pending:
                shapes = list(dict.fromkeys(j.gang.pod for j in pending.values()))[:FRAG_SHAPES]
                frag, free = _fragmented(scheduler.node_states(), shapes)
                if free:
                    frag_samples.append(frag / free)
            series.append((now - start_time, (used + partial_milli) / capacity_milli))
            project_series.append(
                (now - start_time, {p: u / capacity_milli for p, u in project_used.items()})
            )
        if progress:
            progress(len(result.delays) + result.rejected)
    # the run ends with its last completion, not at the cycle after it; with jobs
    # that never end or never start, where nothing more could happen
    end = finished if finished is not None and not running and not pending else last
    for jid_ in list(running):
        unplace(state[jid_], end)
    result.makespan = end - start_time
    if result.makespan > 0:
        result.utilization /= capacity_milli * result.makespan
    else:
        result.utilization = 0.0
    if span > 0:
        result.utilization_arrivals = in_arrivals / (capacity_milli * span)
    result.never_started = sum(1 for j in state.values() if j.start is None)
    result.deadlocked = bool(pending) and partial_milli > 0
    result.fragmentation = sum(frag_samples) / len(frag_samples) if frag_samples else 0.0
    result.fairness = _jain(policy, usage)
    result.util_series = _thin(series, SERIES_POINTS)
    result.project_series = _thin(project_series, SERIES_POINTS)
    result.guarantees = {
        p.name: p.guaranteed / capacity_milli for p in policy.projects.values() if p.guaranteed
    }
    return result
