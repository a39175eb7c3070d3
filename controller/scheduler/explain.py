"""`gangops explain`: why one gang waits, in full, and what would let it run.

It takes a finished dry-run cycle (the same `cycle.schedule` the scheduler
runs, on a snapshot of the live cluster) and says: the gang's position in
the queue and what orders it there, the decision and its reason, and what
would have to change — usage that must end (the running gangs that count
against the same quota, or that hold the GPUs it needs), or the policy
field to raise. Pure: text out.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.scheduler.cycle import CycleResult
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import (
    Admit,
    Gang,
    JobId,
    Pending,
    Preempt,
    Running,
    format_gpus,
    namespace_of,
)

__all__ = ["explain"]


def _running_list(runs: list[Running], limit: int = 8) -> list[str]:
    runs = sorted(runs, key=lambda r: (-r.gang.gpu_total, r.gang.id))
    lines = [
        f"    - {r.gang.id}: {format_gpus(r.gang.gpu_total)} GPUs, tier {r.gang.tier}"
        f"{' (preemptible)' if r.gang.preemptible else ''}, user {r.gang.user}"
        for r in runs[:limit]
    ]
    if len(runs) > limit:
        lines.append(f"    - ... and {len(runs) - limit} more")
    return lines


def explain(job: JobId, *, result: CycleResult, snap: Snapshot, policy: SchedulingPolicy) -> str:
    """The full story of `job` in the cycle that produced `result` (whose
    decisions were assumed into `snap`)."""
    decision = next((d for d in result.decisions if d.gang.id == job), None)
    if decision is None:
        if job in snap.running:
            r = snap.running[job]
            nodes = ", ".join(f"{n} x{c}" for n, c in sorted(r.placement.nodes().items()))
            return f"{job} is admitted and placed: {nodes}.\n"
        return f"{job} is not queued: it is unknown, finished, or not a gangops job.\n"
    g = decision.gang
    head = f"{job}: {format_gpus(g.gpu_total)} GPUs ({g.workers} workers), tier {g.tier}, "
    out = [head + f"project {g.project}, user {g.user}"]
    position = result.order.index(job) + 1
    ahead = [d.gang for d in result.decisions[: position - 1]]
    higher = sum(1 for a in ahead if a.priority > g.priority)
    out.append(
        f"Queue position {position} of {len(result.order)}: {higher} ahead in higher tiers, "
        f"{len(ahead) - higher} in its own tier ahead by fair share or age."
    )
    if isinstance(decision, Admit):
        out.append("Decision: admitted this cycle; it will be placed as planned.")
        return "\n".join(out) + "\n"
    if isinstance(decision, Preempt):
        out.append(f"Decision: {decision.reason}; it runs once they have stopped.")
        return "\n".join(out) + "\n"
    out.append(f"Decision: waiting ({decision.code}): {decision.reason}.")
    out += _what_would_change(decision, g, result, snap, policy)
    return "\n".join(out) + "\n"


def _quota_change(
    decision: Pending,
    g: Gang,
    snap: Snapshot,
    policy: SchedulingPolicy,
    protect: Mapping[str, int],
) -> list[str]:
    """What lifts the limit that holds `g` back: the one the cycle named when it
    decided (`Pending.held`), not the limits asked again here, so the two cannot
    disagree. The figures are the cycle's, as its reason gives them; the running
    work listed is the snapshot's after the cycle. For the lending forecast,
    `protect` is the idle guarantee each project is forecast to want back
    (`Hints.protect`)."""
    held = decision.held
    if held is None:
        return [f"  - what the reason names ({decision.reason})."]
    project = policy.projects[g.project]
    mine = [r for r in snap.running.values() if r.gang.project == g.project]
    over, bound = format_gpus(held.over), format_gpus(held.bound)
    match held.limit:
        case "lending":
            kept = sorted((p, m) for p, m in protect.items() if p != g.project)
            who = ", ".join(f"{p} ({format_gpus(m)})" for p, m in kept) or "other projects"
            return [
                "  - the idle guarantee it would borrow is forecast to be asked for soon by "
                f"{who}: it runs once that forecast falls or more GPUs are idle, or within "
                f"project {g.project}'s own guarantee ({format_gpus(project.guaranteed)}), "
                "or when the guarantee is raised in the policies; lending by forecast is "
                "`gangops run --forecast-horizon` (0: off)."
            ]
        case "namespace":
            ns = namespace_of(g.id)
            return [
                f"  - pods of namespace {ns} end (any scheduler's count), or its "
                "ResourceQuota is raised. Running in the namespace:",
                *_running_list([r for r in snap.running.values() if namespace_of(r.gang.id) == ns]),
            ]
        case "project":
            return [
                f"  - {over} GPUs of project {g.project}'s running work end, or its max "
                f"({bound}) is raised in the policies. Running in the project:",
                *_running_list(mine),
            ]
        case "user":
            return [
                f"  - {over} GPUs of user {g.user}'s running work in {g.project} end, or the "
                f"user's max ({bound}) is raised in the policies. Running for this user:",
                *_running_list([r for r in mine if r.gang.user == g.user]),
            ]
        case "guarantee":
            return [
                f"  - {over} GPUs of project {g.project}'s running work end, or its guarantee "
                f"({bound}) is raised in the policies, or borrowing is enabled "
                "(fairShare.borrowing). Running in the project:",
                *_running_list(mine),
            ]


def _what_would_change(
    decision: Pending, g: Gang, result: CycleResult, snap: Snapshot, policy: SchedulingPolicy
) -> list[str]:
    project = policy.projects.get(g.project)
    if decision.code == "Refused" or project is None:
        return [
            "What would have to change: the job or the policies (this job cannot run "
            "as written under them; see the reason)."
        ]
    if decision.code == "Quota":
        lines = _quota_change(decision, g, snap, policy, result.hints.protect)
        return ["What would have to change, any of:", *lines]
    blockers = [
        r
        for r in snap.running.values()
        if any(n in {ns.name for ns in snap.candidates(g.pod)} for n in r.placement.nodes())
    ]
    lines = ["What would have to change:"]
    if decision.code == "Reserved" and result.reserved_for is not None:
        lines.append(
            f"  - {result.reserved_for} (ahead in the queue) holds the free GPUs on "
            f"{', '.join(sorted(result.reserved_nodes))}; this job runs after it starts, "
            "or at once if it were preemptible."
        )
    preemptible = [r for r in blockers if r.gang.preemptible and r.gang.priority < g.priority]
    if preemptible and g.may_preempt:
        lines.append(
            "  - preemptible work of lower tiers is running but cannot be evicted yet "
            f"(minRuntimeSeconds {policy.min_runtime_seconds:g}, maxPerHour "
            f"{policy.max_preemptions_per_hour}):"
        )
        lines += _running_list(preemptible)
    lines.append("  - running work on the nodes it may use ends. Largest holders:")
    lines += _running_list(blockers)
    return lines
