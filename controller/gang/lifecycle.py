"""What each TrainingJob needs next, read from its record, its pods and the nodes.

The job controller's half of a step: for every job, from what the API
server shows, decide nothing about placement (that is the scheduler's) but
say what the job's recorded decision needs to move on:

- an `Admitted` gang whose pods are missing or unbound is `launch`ed; once
  every worker runs it is `running`; once every worker succeeded it has
  `succeeded`;
- a worker that failed, or whose node is gone or not Ready, `restart`s the
  whole gang (counted against backoffLimit);
- a gang not running within the gang timeout is rolled back (`rollback`);
- a `Nominated` gang's victims still holding their GPUs are `evict`ed, and
  the elastic gangs it shrinks still at the attempt it shrank are `shrink`ed
  (this finishes a preemption a crash interrupted); a nomination older than
  the gang timeout `expire`s;
- pods of an attempt that is no longer current are `cleanup`ed, and a gang's
  new attempt (after a resize) is launched only once they are gone, so two
  attempts never hold the same GPUs.

It also sorts the jobs for the cycle: the gangs that hold GPUs (`running`,
with the pods they own) and the gangs that wait (`queue`, with their
nominations). `cycle` runs `plan`, the snapshot and the scheduling cycle in
one; the controller and `gangops explain` both call it. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from controller.gang.record import Admission, parse_time
from controller.gang.view import JobView, Memo, build_snapshot, node_of, node_ready, pod_terminal
from controller.jobs.pods import LABEL_ATTEMPT
from controller.scheduler.cycle import GROW_INTERVAL_S, CycleResult, schedule
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang, JobId, Placement, Running

__all__ = ["Action", "ActionKind", "Plan", "cycle", "plan"]

ActionKind = Literal[
    "launch",
    "running",
    "succeeded",
    "restart",
    "rollback",
    "evict",
    "shrink",
    "expire",
    "invalid",
    "cleanup",
]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Action:
    """One thing a job needs written."""

    kind: ActionKind
    job: JobView
    message: str = ""
    by: JobId | None = None
    """For `evict` and `shrink`: the preemptor."""
    workers: int = 0
    """For `shrink`: the workers the gang keeps."""
    pods: tuple[Obj, ...] = ()
    """For `cleanup`: the pods to delete."""


@dataclass
class Plan:
    """The jobs sorted for one cycle, and what the job controller must do."""

    running: list[Running] = field(default_factory=list)
    owned: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of the running gangs' current pods."""
    queue: list[Gang] = field(default_factory=list)
    nominated: dict[JobId, Placement] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    backing_off: list[JobId] = field(default_factory=list)
    preemptions_last_hour: int = 0
    """Evictions, and shrinks below a job's gangSize, in the last hour."""
    protected: set[JobId] = field(default_factory=set)
    """Running gangs a nomination evicts or shrinks that have not been yet."""


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _node_lost(pod: Obj, nodes: Mapping[str, Obj]) -> str | None:
    name = (pod.get("spec") or {}).get("nodeName")
    if not name or pod_terminal(pod):
        return None
    node = nodes.get(name)
    if node is None:
        return f"node {name} of worker {pod['metadata']['name']} is gone"
    if not node_ready(node):
        return f"node {name} of worker {pod['metadata']['name']} is not Ready"
    return None


def _held(gang: Gang, adm: Admission) -> Gang:
    """The gang at the size its record holds (an elastic gang may have been resized)."""
    size = len(adm.placement.pods)
    return gang if size == gang.workers else gang.resized(size)


def _still_at(v: JobView | None, attempt: int) -> JobView | None:
    """`v` if it is still admitted at `attempt`."""
    if v is None or v.admission is None:
        return None
    return v if (v.admission.state, v.admission.attempt) == ("Admitted", attempt) else None


def _admitted(
    v: JobView, out: Plan, nodes: Mapping[str, Obj], policy: SchedulingPolicy, now: float
) -> None:
    adm = v.admission
    assert adm is not None and v.gang is not None
    pods = v.attempt_pods()
    expected = len(adm.placement.pods)
    # The gang holds its GPUs and its quota until its record is cleared, whatever
    # happens to its pods: the records alone never admit more than the quota.
    out.running.append(Running(_held(v.gang, adm), adm.placement, adm.at))
    out.owned.update((p["metadata"].get("namespace", ""), p["metadata"]["name"]) for p in pods)
    for p in pods:
        if (p.get("status") or {}).get("phase") == "Failed":
            why = (p.get("status") or {}).get("reason") or "Failed"
            out.actions.append(
                Action("restart", v, f"worker {p['metadata']['name']} failed ({why})")
            )
            return
        lost = _node_lost(p, nodes)
        if lost:
            out.actions.append(Action("restart", v, lost))
            return
    live = [p for p in pods if not _deleting(p)]
    if v.status.get("phase") == "Running" and len(live) < expected:
        out.actions.append(Action("restart", v, "a worker pod was deleted"))
        return
    phases = [(p.get("status") or {}).get("phase") for p in live]
    if len(live) == expected and all(ph == "Succeeded" for ph in phases):
        out.actions.append(Action("succeeded", v, "every worker succeeded"))
        return
    if len(live) == expected and all(ph in ("Running", "Succeeded") for ph in phases):
        if v.status.get("phase") != "Running":
            out.actions.append(Action("running", v, f"all {expected} workers are running"))
        return
    if now - adm.at > policy.gang_timeout_seconds:
        started = sum(1 for ph in phases if ph in ("Running", "Succeeded"))
        out.actions.append(
            Action(
                "rollback",
                v,
                f"only {started} of {expected} workers were running "
                f"{policy.gang_timeout_seconds:g}s after admission (gang timeout)",
            )
        )
        return
    bound = sum(1 for p in live if (p.get("spec") or {}).get("nodeName"))
    if len(live) < expected or bound < expected:
        current, mine = str(adm.attempt), adm.placement.nodes()
        if any(
            p["metadata"].get("labels", {}).get(LABEL_ATTEMPT) != current
            and not pod_terminal(p)
            and (p.get("spec") or {}).get("nodeName") in mine
            and node_ready(nodes.get(p["spec"]["nodeName"]) or {})
            for p in v.pods
        ):
            # An earlier attempt's pods still hold GPUs this one is placed on
            # (being cleaned up). Pods on a lost node hold nothing it needs.
            return
        out.actions.append(Action("launch", v))


def plan(
    views: Sequence[JobView],
    nodes: Mapping[str, Obj],
    policy: SchedulingPolicy,
    *,
    now: float,
    busy: frozenset[JobId] = frozenset(),
) -> Plan:
    """Sort `views` for a cycle at time `now` (epoch seconds). Jobs in `busy` have
    writes in flight: they only count for what they hold."""
    out = Plan()
    by_id = {v.id: v for v in views}
    for v in views:
        status = v.status
        for key in ("preemptedAt", "shrunkAt"):
            at = parse_time(status.get(key))
            if at is not None and now - at < 3600:
                out.preemptions_last_hour += 1
        if _deleting(v.obj) or status.get("phase") in ("Succeeded", "Failed"):
            continue
        adm = v.admission
        if v.id in busy:
            if adm is not None and adm.state == "Admitted" and v.gang is not None:
                out.running.append(Running(_held(v.gang, adm), adm.placement, adm.at))
                out.owned.update(
                    (p["metadata"].get("namespace", ""), p["metadata"]["name"])
                    for p in v.attempt_pods()
                )
            continue
        current = str(adm.attempt) if adm is not None and adm.state == "Admitted" else None
        stale = tuple(
            p
            for p in v.pods
            if p["metadata"].get("labels", {}).get(LABEL_ATTEMPT) != current
            and not pod_terminal(p)
            and not _deleting(p)
        )
        if stale:
            out.actions.append(Action("cleanup", v, pods=stale))
        if v.gang is None:
            # A job admitted under an older policy or spec keeps what it holds (its
            # pods count as foreign) and is not requeued while its record stands.
            if adm is None and (status.get("reason"), status.get("message")) != (
                "InvalidSpec",
                v.error,
            ):
                out.actions.append(Action("invalid", v, v.error or ""))
            continue
        if adm is not None and adm.state == "Admitted":
            _admitted(v, out, nodes, policy, now)
            continue
        if adm is not None:  # Nominated
            if now - adm.at > policy.gang_timeout_seconds:
                out.actions.append(
                    Action("expire", v, "the GPUs it preempted for were not freed in time")
                )
                continue
            for victim, attempt in adm.victims:
                vv = _still_at(by_id.get(victim), attempt)
                if vv is not None:
                    out.protected.add(vv.id)
                    if vv.id not in busy:
                        out.actions.append(Action("evict", vv, by=v.id))
            for victim, attempt, keep in adm.shrinks:
                vv = _still_at(by_id.get(victim), attempt)
                if vv is not None:
                    out.protected.add(vv.id)
                    if vv.id not in busy:
                        out.actions.append(Action("shrink", vv, by=v.id, workers=keep))
            out.nominated[v.id] = adm.placement
            out.queue.append(v.gang)
            continue
        not_before = parse_time(status.get("notBefore"))
        if not_before is not None and not_before > now:
            out.backing_off.append(v.id)
            continue
        out.queue.append(v.gang)
    return out


def cycle(
    views: Sequence[JobView],
    nodes: Mapping[str, Obj],
    pods: Iterable[Obj],
    policy: SchedulingPolicy,
    *,
    now: float,
    busy: frozenset[JobId] = frozenset(),
    memo: Memo | None = None,
    timer: Callable[[], float] | None = None,
    grow_interval: float = GROW_INTERVAL_S,
) -> tuple[Plan, Snapshot, CycleResult]:
    """One scheduling step's reading of the cluster and its decisions: `plan`,
    the snapshot, then the cycle. The controller and `gangops explain` both call
    this, so what explain shows is what the scheduler would decide."""
    todo = plan(views, nodes, policy, now=now, busy=busy)
    parse = node_of if memo is None else memo.node
    snap = build_snapshot(
        [parse(o) for o in nodes.values()],
        pods,
        todo.running,
        todo.owned,
        levels=policy.topology_levels,
        reserve_tiers=policy.reserve_tiers,
        memo=memo,
    )
    result = schedule(
        snap,
        todo.queue,
        policy,
        now=now,
        preemptions_last_hour=todo.preemptions_last_hour,
        nominated=todo.nominated,
        timer=timer,
        grow_interval=grow_interval,
        protected=frozenset(todo.protected),
    )
    return todo, snap, result
