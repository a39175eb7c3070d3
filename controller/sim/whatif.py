"""The quota request's what-if: the recent workload replayed with and without the change.

A reviewer of a quota pull request asks who would wait less and who might be
preempted. The simulator answers with the same scheduling core the
controller runs (`simulate` with `GangopsScheduler`), twice over the same
jobs and nodes: the compiled policy as it is, and with the project's max
raised (or lowered) by the request. Nothing else: no second scheduler. Pure.
"""

from __future__ import annotations

import copy
import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from controller.jobs.spec import SpecError, parse_job
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import Node
from controller.sim.engine import RunResult, simulate
from controller.sim.schedulers import GangopsScheduler
from controller.sim.traces import TraceJob

__all__ = ["quota_what_if", "recent_workload"]

_SHOWN = 5


def _raised(doc: Mapping[str, Any], project: str, delta_gpus: int) -> dict[str, Any]:
    out = copy.deepcopy(dict(doc))
    for p in out.get("projects", []):
        if p.get("name") == project:
            limit = (p.get("quota") or {}).get("max") or {}
            if limit.get("gpu") is not None:
                limit["gpu"] = max(0, int(limit["gpu"]) + delta_gpus)
            if (p.get("jobs") or {}).get("maxGPU") is not None and delta_gpus > 0:
                p["jobs"]["maxGPU"] = int(p["jobs"]["maxGPU"]) + delta_gpus
    return out


def _run(jobs: Sequence[TraceJob], nodes: Sequence[Node], doc: Mapping[str, Any]) -> RunResult:
    policy = SchedulingPolicy.from_dict(doc)
    scheduler = GangopsScheduler(nodes, policy, None)
    return simulate(jobs, scheduler, policy, capacity_milli=sum(n.gpus for n in nodes) * 1000)


def _mean(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.0f} s" if values else "-"


def quota_what_if(
    jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    doc: Mapping[str, Any],
    *,
    project: str,
    delta_gpus: int,
) -> str:
    """Markdown: the workload's waits and preemptions now and with the change, and
    the jobs that would wait less or be preempted more."""
    if not jobs:
        return "No recent workload to replay."
    now, then = _run(jobs, nodes, doc), _run(jobs, nodes, _raised(doc, project, delta_gpus))
    mine = {j.id for j in jobs if j.project == project}
    rows = [
        "| | jobs started | mean wait | mean wait, this project | preemptions |",
        "|---|---|---|---|---|",
    ]
    for label, r in (("now", now), ("with the change", then)):
        own = [d for j, d in r.delay_by_job.items() if j in mine]
        rows.append(
            f"| {label} | {len(r.delay_by_job)} of {len(jobs)} | {_mean(r.delays)} "
            f"| {_mean(own)} | {r.preemptions} |"
        )
    faster = sorted(
        (
            (now.delay_by_job[j] - then.delay_by_job[j], j)
            for j in then.delay_by_job
            if j in now.delay_by_job and then.delay_by_job[j] < now.delay_by_job[j] - 1
        ),
        reverse=True,
    )
    started = [j for j in then.delay_by_job if j not in now.delay_by_job]
    newly = sorted(set(then.preempted_jobs) - set(now.preempted_jobs))
    lines = [
        f"Replayed {len(jobs)} recent jobs on {len(nodes)} nodes with the scheduler's own "
        f"core, project `{project}`'s max {'+' if delta_gpus >= 0 else ''}{delta_gpus} GPUs:",
        "",
        *rows,
        "",
    ]
    if faster or started:
        waits = [f"`{j}` ({d:.0f} s less)" for d, j in faster[:_SHOWN]]
        waits += [f"`{j}` (starts at all)" for j in started[:_SHOWN]]
        more = len(faster) + len(started) - len(waits)
        lines.append(
            "Would wait less: " + ", ".join(waits) + (f", and {more} more" if more > 0 else "")
        )
    else:
        lines.append("Would wait less: nobody.")
    if newly:
        lines.append(
            "Might be preempted (not preempted now): " + ", ".join(f"`{j}`" for j in newly[:_SHOWN])
        )
    else:
        lines.append("Might be preempted: nobody who is not already.")
    return "\n".join(lines) + "\n"


def recent_workload(
    jobs: Sequence[Mapping[str, Any]],
    doc: Mapping[str, Any],
    *,
    now: float,
    default_duration_s: float = 3600.0,
) -> list[TraceJob]:
    """The cluster's TrainingJobs as a trace: submitted at their creation, running
    for as long as they ran (until now for those still running; those that have
    not started run `default_duration_s`). Jobs the policy gives no project are
    left out."""
    policy = SchedulingPolicy.from_dict(doc)
    out = []
    for obj in jobs:
        try:
            spec = parse_job(obj)
        except SpecError:
            continue
        project = policy.project_of_namespace(spec.namespace)
        if project is None:
            continue
        status = obj.get("status") or {}
        started = parse_time(status.get("startedAt"))
        ended = parse_time(_last_transition(status)) if status.get("phase") in _DONE else None
        duration = default_duration_s
        if started is not None:
            duration = max(1.0, (ended or now) - started)
        out.append(
            TraceJob(
                id=str(spec.id),
                submit=spec.created,
                duration=duration,
                workers=spec.workers,
                pod=spec.pod,
                tier=spec.tier or project.default_tier,
                project=project.name,
                user=spec.user,
            )
        )
    out.sort(key=lambda j: j.submit)
    return out


_DONE = ("Succeeded", "Failed")


def _last_transition(status: Mapping[str, Any]) -> str | None:
    times = [c.get("lastTransitionTime") for c in status.get("conditions") or []]
    return max((t for t in times if t), default=None)


def parse_time(raw: object) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch; None when absent or unreadable."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        t = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
