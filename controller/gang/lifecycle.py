"""What each TrainingJob needs next, read from its record, its pods and the nodes.

The job controller's half of a step: for every job, from what the API
server shows, decide nothing about placement (that is the scheduler's) but
say what the job's recorded decision needs to move on:

- an `Admitted` gang whose pods are missing or unbound is `launch`ed; once
  every worker runs it is `running`; once every worker succeeded it has
  `succeeded`;
- a worker that failed, or whose node is gone or not Ready, `restart`s the
  whole gang (counted against backoffLimit);
- a gang whose job carries a restart request newer than its admission (an alert
  action's `gangops.ai/restart-requested`: a GPU it holds is failing) is
  `relocate`d: restarted away from the fault after a backoff, not counted against
  backoffLimit (the job is not at fault);
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
nominations); `plan` returns all this as the step's `Agenda`. `decide` runs
`plan`, the snapshot and the scheduling cycle in one; the controller and
`gangops explain` both call it.

Last, it turns what was decided into `Write`s, each one job's whole write
for the binder to carry out (`action_write` for an `Action`, `cycle_writes`
for the cycle's decisions): the status with the record (an admission, a
resize, a nomination) or the record cleared (a release), then the pods to
launch or delete. The rules that used to hide in the writers live here: the
rollback delay, restart or `BackoffLimitExceeded`, the shrunk record and its
borrowed share, what counts as a preemption. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from controller.backoff import doubled
from controller.gang.record import Admission, Shape, format_time, parse_time, status_number
from controller.gang.view import (
    JobView,
    Memo,
    PodView,
    SnapshotCache,
    build_snapshot,
    node_of,
    node_ready,
    pod_terminal,
)
from controller.gang.workload import Workload
from controller.jobs.pods import LABEL_ATTEMPT
from controller.jobs.spec import SpecError, to_gang
from controller.jobs.status import Phase
from controller.nodehealth import RESTART_ANNOTATION, parse_request
from controller.scheduler.cycle import GROW_INTERVAL_S, CycleResult, schedule
from controller.scheduler.forecast import Forecast
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import (
    Hints,
    Telemetry,
    job_utilisation,
    protect_from_forecasts,
    with_health,
)
from controller.scheduler.types import (
    Admit,
    Gang,
    JobId,
    NamespaceQuota,
    Pending,
    Placement,
    Preempt,
    Running,
    format_gpus,
)

__all__ = [
    "MESSAGE_REFRESH_S",
    "Action",
    "ActionKind",
    "Agenda",
    "Write",
    "WriteKind",
    "action_write",
    "cycle_writes",
    "decide",
    "message_due",
    "plan",
    "refused_write",
    "rollback_delay",
]

ActionKind = Literal[
    "launch",
    "running",
    "succeeded",
    "restart",
    "relocate",
    "respec",
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
class Agenda:
    """The jobs sorted for one step's cycle, and what the job controller must do."""

    running: list[Running] = field(default_factory=list)
    owned: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of the running gangs' current pods."""
    queue: list[Gang] = field(default_factory=list)
    nominated: dict[JobId, Placement] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    backing_off: list[JobId] = field(default_factory=list)
    preemptions_last_hour: int = 0
    """Evictions, and shrinks below a job's gangSize, in the last hour."""
    releasing: dict[JobId, int] = field(default_factory=dict)
    """Running gangs a nomination evicts or shrinks that have not been yet: the
    workers each keeps (0: evicted)."""
    in_flight: list[Gang] = field(default_factory=list)
    """Nominees with a write of their own in flight: not decided this step, but
    their nodes stay held (`nominated`) and their GPUs counted as a waiting
    nominee's are (`cycle.schedule`)."""
    awaiting: set[JobId] = field(default_factory=set)
    """Nominees some of whose victims or shrunk gangs still run as they were: not
    admitted until those have released their GPUs (`cycle.schedule`)."""

    @property
    def protected(self) -> frozenset[JobId]:
        """The gangs of `releasing`: never chosen again until that has happened."""
        return frozenset(self.releasing)


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


def _as_admitted(v: JobView, policy: SchedulingPolicy) -> Gang:
    """The gang its record admitted, for a job whose spec was edited since: the spec
    as admitted (its tier, size and what each worker asks for; CPU and memory the
    template left to the namespace's defaults: as the edited spec gets them) made a
    gang as any other (`to_gang`), at its size (no elastic range); with a tier the
    policies no longer hold, the edited one. What its pods hold, and its quota
    counts, until its record is cleared."""
    g, adm, spec = v.gang, v.admission, v.spec
    assert g is not None and adm is not None and adm.shape is not None and spec is not None
    shape = adm.shape
    cpu, memory = spec.asked
    pod = replace(
        spec.pod,
        gpus=shape.gpus,
        gpu_milli=shape.gpu_milli,
        cpu_milli=shape.cpu_milli or (spec.pod.cpu_milli if not cpu else 0),
        memory=shape.memory or (spec.pod.memory if not memory else 0),
    )
    admitted = replace(
        spec,
        tier=shape.tier or None,
        gang_size=shape.workers * shape.gpus,
        gpus_per_worker=shape.gpus,
        pod=pod,
    )
    try:
        gang = to_gang(admitted, policy)
    except SpecError:  # its tier is gone from the policies
        gang = to_gang(replace(admitted, tier=spec.tier), policy)
    # neither grown nor shrunk: it is released this step (or once its write lands)
    return replace(gang, min_workers=None, max_workers=None)


def _shape(v: JobView) -> Shape | None:
    """What a record made now admits of `v`."""
    return Shape.of(v.spec) if v.spec is not None else None


def _edited(v: JobView) -> str:
    """What its owner changed of what its record admitted, in words ('' when nothing,
    or for a record that keeps no shape)."""
    adm = v.admission
    if adm is None or adm.shape is None or v.spec is None:
        return ""
    return adm.shape.differs(Shape.of(v.spec))


REQUEST_SKEW_S = 300.0
"""How far ahead of this process's clock a restart request may be dated (another
replica's, or the alert receiver's, clock) and still count."""


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
    v: JobView,
    out: Agenda,
    nodes: Mapping[str, Obj],
    policy: SchedulingPolicy,
    now: float,
    memo: Memo | None = None,
) -> None:
    adm = v.admission
    assert adm is not None and v.gang is not None
    # Its owner may have edited the spec since: the pods still hold what was
    # admitted, and charged by the edited spec a smaller gang made room that was not
    # there (a tenant's second job past her max, another's pods refused by the
    # kubelet), a new tier one its project may not use. Such a gang is charged as it
    # was admitted (`_as_admitted`) until its record is cleared. What its pods did is
    # read first (a failure is a counted restart, success is success); else it
    # starts again under the spec as it is (`respec`).
    changed = _edited(v)
    # A gang running as recorded stays so until its job, its pods or their nodes
    # change (none of it depends on the time): kept, it costs a lookup a step.
    uid = str(v.obj["metadata"].get("uid") or "")
    inputs: tuple[object, ...] = ()
    if memo is not None and uid and not changed:
        on = (nodes.get((p.get("spec") or {}).get("nodeName") or "") for p in v.pods)
        inputs = (v.obj, v.pods, adm, v.gang, *on)
        steady = memo.kept("running", uid, inputs)
        if steady is not None:
            out.running.append(steady[0])
            out.owned.update(steady[1])
            return
    pods = v.attempt_pods()
    expected = len(adm.placement.pods)
    # The gang holds its GPUs and its quota until its record is cleared, whatever
    # happens to its pods: the records alone never admit more than the quota.
    gang = _as_admitted(v, policy) if changed else v.gang
    running = Running(_held(gang, adm), adm.placement, adm.at)
    owned = tuple((p["metadata"].get("namespace", ""), p["metadata"]["name"]) for p in pods)
    out.running.append(running)
    out.owned.update(owned)
    asked = parse_request(v.obj, RESTART_ANNOTATION)
    # A request dated later than now (past a clock's skew) would be newer than every
    # admission to come, and restart the gang at each: it is not one the alert
    # actions make, which date theirs when they act.
    if asked is not None and adm.at < asked[0] <= now + REQUEST_SKEW_S:
        out.actions.append(Action("relocate", v, asked[1] or "a restart elsewhere was requested"))
        return
    # one not due yet becomes due with the time alone: nothing about this gang is kept
    timeless = asked is None or asked[0] <= adm.at
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
    if changed:
        out.actions.append(Action("respec", v, f"its spec changed while admitted ({changed})"))
        return
    if len(live) == expected and all(ph in ("Running", "Succeeded") for ph in phases):
        if v.status.get("phase") != "Running":
            out.actions.append(Action("running", v, f"all {expected} workers are running"))
        elif memo is not None and inputs and timeless:
            memo.keep("running", uid, inputs, (running, owned))
        return
    limit = policy.gang_timeout_seconds + _handover_s(v)
    if now - adm.at > limit:
        started = sum(1 for ph in phases if ph in ("Running", "Succeeded"))
        out.actions.append(
            Action(
                "rollback",
                v,
                f"only {started} of {expected} workers were running "
                f"{limit:g}s after admission (gang timeout)",
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


HANDOVER_MAX_S = 3600.0
"""The longest grace period `_handover_s` waits out: a gang that cannot start for
another reason is not held for the days a template may ask."""


RESIZING = ("Shrinking", "Growing")
"""The reasons of an elastic gang's new size while it launches (`_resize`)."""


def _handover_s(v: JobView) -> float:
    """How long a resized gang may wait, on top of the gang timeout, for its earlier
    attempt's pods to go before it launches (a resize keeps the GPUs it held, so the
    new pods wait for the old; after a restart or a rollback they are placed apart):
    their termination grace period (the Kubernetes default 30 s), which a training
    job sets long to checkpoint on SIGTERM. Found by a review: that wait ran down
    the gang timeout, and a shrink or a grow ended as a rollback of the whole job."""
    if v.status.get("reason") not in RESIZING:
        return 0.0
    template = ((v.obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    grace = template.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or isinstance(grace, bool):
        return 30.0
    return float(min(max(grace, 0), HANDOVER_MAX_S))


def _ungoverned(v: JobView, adm: Admission, nodes: Mapping[str, Obj]) -> list[Action]:
    """What ends the record of a job whose spec or policy no longer parses (no gang:
    an owner's edit to an unknown tier, a tier or project removed). Its workers all
    succeeded: Succeeded. One failed, was deleted or lost its node: released as
    InvalidSpec, not restarted (it could not be placed again as written). A
    nomination: given up, as it could never be admitted. Found by a review: such a
    record was followed no further, and the job stayed Running for good."""
    why = v.error or "the job no longer parses"
    if adm.state != "Admitted":
        return [Action("expire", v, f"{why}: the nomination is given up")]
    pods = v.attempt_pods()
    live = [p for p in pods if not _deleting(p)]
    phases = [(p.get("status") or {}).get("phase") for p in live]
    if len(live) == len(adm.placement.pods) and all(ph == "Succeeded" for ph in phases):
        return [Action("succeeded", v, "every worker succeeded")]
    stopped = any(
        (p.get("status") or {}).get("phase") == "Failed" or _node_lost(p, nodes) for p in pods
    ) or (v.status.get("phase") == "Running" and len(live) < len(adm.placement.pods))
    if stopped:
        return [Action("invalid", v, f"{why}; its workers stopped, so it is released")]
    return []


def _stale(v: JobView, memo: Memo | None) -> tuple[Obj, ...]:
    """The job's live pods of another attempt than the recorded one (to clean up);
    kept in `memo` while neither its pods nor its record change."""
    adm = v.admission
    uid = str(v.obj["metadata"].get("uid") or "")
    if memo is not None and uid:
        kept = memo.kept("stale", uid, (v.pods, adm))
        if kept is not None:
            return cast(tuple[Obj, ...], kept)
    current = str(adm.attempt) if adm is not None and adm.state == "Admitted" else None
    stale = tuple(
        p
        for p in v.pods
        if p["metadata"].get("labels", {}).get(LABEL_ATTEMPT) != current
        and not pod_terminal(p)
        and not _deleting(p)
    )
    if memo is not None and uid:
        memo.keep("stale", uid, (v.pods, adm), stale)
    return stale


def _nominee(
    v: JobView, adm: Admission, by_id: Mapping[JobId, JobView], busy: frozenset[JobId], out: Agenda
) -> None:
    """A nomination's nodes held, and its victims still at the attempt it chose:
    what each keeps, and its eviction or shrink to write (unless the nominee or the
    victim has a write in flight)."""
    for victim, attempt in adm.victims:
        vv = _still_at(by_id.get(victim), attempt)
        if vv is not None:
            out.releasing[vv.id] = 0
            out.awaiting.add(v.id)
            out.preemptions_last_hour += 1  # decided: it counts before it lands
            if vv.id not in busy and v.id not in busy:
                out.actions.append(Action("evict", vv, by=v.id))
    for victim, attempt, keep in adm.shrinks:
        vv = _still_at(by_id.get(victim), attempt)
        if vv is not None:
            out.releasing[vv.id] = keep
            out.awaiting.add(v.id)
            if vv.gang is not None and keep < vv.gang.workers:  # as `_shrink` counts
                out.preemptions_last_hour += 1
            if vv.id not in busy and v.id not in busy:
                out.actions.append(Action("shrink", vv, by=v.id, workers=keep))
    out.nominated[v.id] = adm.placement


def plan(
    views: Sequence[JobView],
    nodes: Mapping[str, Obj],
    policy: SchedulingPolicy,
    *,
    now: float,
    busy: frozenset[JobId] = frozenset(),
    memo: Memo | None = None,
) -> Agenda:
    """Sort `views` for a cycle at time `now` (epoch seconds). Jobs in `busy` have
    writes in flight: they only count for what they hold. With `memo` (kept across
    steps), what a job's record, pods and nodes alone decide is kept while none of
    them changes (a gang running as recorded, the pods to clean up): the same
    agenda, at the cost of the jobs that changed."""
    out = Agenda()
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
                gang = _as_admitted(v, policy) if _edited(v) else v.gang  # as `_admitted`
                out.running.append(Running(_held(gang, adm), adm.placement, adm.at))
                out.owned.update(
                    (p["metadata"].get("namespace", ""), p["metadata"]["name"])
                    for p in v.attempt_pods()
                )
            elif (  # Nominated, not yet expired: held and counted, not decided
                adm is not None
                and v.gang is not None
                and now - adm.at <= policy.gang_timeout_seconds
            ):
                _nominee(v, adm, by_id, busy, out)
                out.in_flight.append(v.gang)
            continue
        stale = _stale(v, memo)
        if stale:
            out.actions.append(Action("cleanup", v, pods=stale))
        if v.gang is None:
            # A job admitted under an older policy or spec keeps what it holds (its
            # pods count as foreign) and is not requeued while its record stands;
            # its record is still followed to its end (`_ungoverned`).
            if adm is not None:
                out.actions.extend(_ungoverned(v, adm, nodes))
            elif (status.get("reason"), status.get("message")) != ("InvalidSpec", v.error):
                out.actions.append(Action("invalid", v, v.error or ""))
            continue
        if adm is not None and adm.state == "Admitted":
            _admitted(v, out, nodes, policy, now, memo)
            continue
        if adm is not None:  # Nominated
            if now - adm.at > policy.gang_timeout_seconds:
                out.actions.append(
                    Action("expire", v, "the GPUs it preempted for were not freed in time")
                )
                continue
            _nominee(v, adm, by_id, busy, out)
            out.queue.append(v.gang)
            continue
        not_before = parse_time(status.get("notBefore"))
        if not_before is not None and not_before > now:
            out.backing_off.append(v.id)
            continue
        out.queue.append(v.gang)
    return out


def decide(
    views: Sequence[JobView],
    nodes: Mapping[str, Obj],
    pods: Iterable[Obj] | PodView,
    policy: SchedulingPolicy,
    *,
    now: float,
    busy: frozenset[JobId] = frozenset(),
    memo: Memo | None = None,
    timer: Callable[[], float] | None = None,
    grow_interval: float = GROW_INTERVAL_S,
    telemetry: Telemetry | None = None,
    forecasts: Mapping[str, Forecast] | None = None,
    quotas: Mapping[str, NamespaceQuota] | None = None,
    snapshots: SnapshotCache | None = None,
    skip_idle: bool = False,
    workload: Workload | None = None,
) -> tuple[Agenda, Snapshot, CycleResult]:
    """One scheduling step's reading of the cluster and its decisions: `plan`,
    the snapshot (with the namespaces' ResourceQuota ceilings, `quotas`), then
    the cycle. The controller and `gangops explain` both call
    this, so what explain shows is what the scheduler would decide. With a
    `timer`, `result.phase_seconds` says how long plan, snapshot, schedule and
    grow took. `telemetry` adds its unhealthy GPUs to the nodes and the running
    gangs' utilisation to the cycle's hints; `forecasts` (per project, demand in
    milli-GPUs) hold back the idle guarantee their owners will ask for. With
    `snapshots` (kept across steps, `pods` a `PodView`) the snapshot is built from
    what changed since the last step; it is the same snapshot. With `skip_idle`,
    a step with nothing to decide (no gang queued or nominated, no running gang
    that may grow) builds neither the nodes nor the cycle: its decisions are none
    either way, and the snapshot it returns holds the running gangs (their usage)
    but no nodes. At 5,000 nodes that step was most of an idle controller's CPU.
    `workload` gives the model one-pod gangs are placed by, read from `views`
    (None: best-fit)."""
    t0 = timer() if timer else 0.0
    todo = plan(views, nodes, policy, now=now, busy=busy, memo=memo)
    t1 = timer() if timer else 0.0
    if skip_idle and not wants_capacity(todo):
        snap = Snapshot(
            (), levels=policy.topology_levels, running=todo.running,
            reserve_tiers=policy.reserve_tiers,
        )  # fmt: skip
        hints = _hints(views, todo, snap, policy, now, telemetry, forecasts)
        result = CycleResult(hints=hints or Hints())
        if timer:
            result.phase_seconds = {"plan": t1 - t0}
        if memo is not None:
            memo.carry()  # the nodes and pods this step did not read stay parsed
        return todo, snap, result
    frag = workload.model(views) if workload is not None else None
    parse = node_of if memo is None else memo.node
    parsed = [parse(o) for o in nodes.values()]
    if telemetry is not None:
        parsed = with_health(parsed, telemetry)
    if snapshots is not None and isinstance(pods, PodView):
        snap = snapshots.build(
            parsed,
            pods,
            todo.running,
            todo.owned,
            levels=policy.topology_levels,
            reserve_tiers=policy.reserve_tiers,
            quotas=quotas,
            fragmentation=frag,
        )
    else:
        snap = build_snapshot(
            parsed,
            pods,
            todo.running,
            todo.owned,
            levels=policy.topology_levels,
            reserve_tiers=policy.reserve_tiers,
            memo=memo,
            quotas=quotas,
            fragmentation=frag,
        )
    t2 = timer() if timer else 0.0
    result = schedule(
        snap,
        todo.queue,
        policy,
        now=now,
        preemptions_last_hour=todo.preemptions_last_hour,
        nominated=todo.nominated,
        timer=timer,
        grow_interval=grow_interval,
        protected=todo.protected,
        releasing=todo.releasing,
        in_flight=todo.in_flight,
        awaiting=frozenset(todo.awaiting),
        hints=_hints(views, todo, snap, policy, now, telemetry, forecasts),
    )
    if timer:
        result.phase_seconds = {"plan": t1 - t0, "snapshot": t2 - t1, **result.phase_seconds}
    return todo, snap, result


def wants_capacity(todo: Agenda) -> bool:
    """Whether a gang could use GPUs that free up or be kept from GPUs taken: one
    queued or nominated, or a running elastic gang that may grow. When none can, a
    cycle decides nothing whatever the nodes hold (`decide`'s `skip_idle`), so a
    change to pods another scheduler placed cannot change a step's decisions."""
    return bool(todo.queue or todo.nominated or any(_may_grow(r) for r in todo.running))


def _may_grow(r: Running) -> bool:
    """Whether a cycle could grow the running gang `r` (elastic, below its max)."""
    return r.gang.max_workers is not None and r.gang.workers < r.gang.max_workers


def _hints(
    views: Sequence[JobView],
    todo: Agenda,
    snap: Snapshot,
    policy: SchedulingPolicy,
    now: float,
    telemetry: Telemetry | None,
    forecasts: Mapping[str, Forecast] | None,
) -> Hints | None:
    """What telemetry and the demand forecasts add to this cycle (None: nothing)."""
    if telemetry is None and not forecasts:
        return None
    utilisation: dict[JobId, float] = {}
    if telemetry is not None:
        by_id = {v.id: v for v in views}
        jobs = {
            r.gang.id: (
                r.started,
                [
                    (str(p["metadata"].get("namespace", "")), str(p["metadata"]["name"]))
                    for p in by_id[r.gang.id].pods
                    if not pod_terminal(p)
                ],
            )
            for r in todo.running
            if r.gang.id in by_id
        }
        utilisation = job_utilisation(telemetry, jobs, now)
    protect: dict[str, int] = {}
    if forecasts:
        guaranteed = {name: p.guaranteed for name, p in policy.projects.items()}
        protect = protect_from_forecasts(forecasts, snap.project_usage, guaranteed)
    return Hints(utilisation=utilisation, protect=protect)


# ----------------------------------------------------------------- writes

WriteKind = Literal[
    "admit",
    "resize",
    "nominate",
    "pending",
    "running",
    "succeeded",
    "expire",
    "invalid",
    "rollback",
    "preempt",
    "restart",
    "failed",
    "launch",
    "cleanup",
    "refused",
]


@dataclass(frozen=True)
class Write:
    """One job's decided write, in the order the binder carries it out: the status
    (with the record, or with the record cleared), then the pods."""

    kind: WriteKind
    job: JobView
    phase: Phase | None = None
    """The job's new phase; None: no status write (a `launch`, a `cleanup`, a
    `pending` whose status already says so)."""
    reason: str = ""
    message: str = ""
    conditional: bool = True
    """Compare-and-swap on the job's resourceVersion."""
    stalled: bool = False
    record: Admission | None = None
    """The decision written into `status.admission` (admit, resize, nominate)."""
    clear: bool = False
    """Clear `status.admission`: a release moves the record before the pods."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """Other status fields to set (None removes one)."""
    event: Literal["Normal", "Warning"] | None = None
    """The Event recorded on the job once its status is written."""
    counted: bool = False
    """Counted in the decisions metric (under `kind`)."""
    preemption: bool = False
    """Counted in the preemptions metric (an eviction)."""
    launch: bool = False
    """Create and bind the attempt's pods once the record is written."""
    delete: tuple[Obj, ...] = ()
    """Pods deleted once the status is written."""

    @property
    def empty(self) -> bool:
        """Nothing to carry out (a `pending` whose status already says so): not handed
        to the binder, whose finished writes wake the loop for another step."""
        return self.phase is None and not (self.launch or self.delete or self.preemption)


def attempts(v: JobView) -> int:
    """The job's last attempt number (its status, or its record if that is later)."""
    return max(status_number(v.status, "attempts"), v.admission.attempt if v.admission else 0)


def waiting_phase(v: JobView) -> Phase:
    """A waiting job stays `Preempted` once preempted; it is `Queued` otherwise."""
    return "Preempted" if v.status.get("phase") == "Preempted" else "Queued"


def rollback_delay(rollbacks: int, *, base_s: float, max_s: float) -> float:
    """The requeue delay after a gang's `rollbacks`-th timeout: `base_s`, doubled
    for each later one, at most `max_s`."""
    return doubled(base_s, rollbacks, max_s)


def _release(
    kind: WriteKind,
    v: JobView,
    phase: Phase,
    reason: str,
    message: str,
    pods: Sequence[Obj],
    **fields: Any,
) -> Write:
    """Clear the record (compare-and-swap) with the new status, then delete `pods`:
    a crash in between leaves pods no record names, which the next step cleans up."""
    return Write(
        kind, v, phase, reason, message, clear=True, fields=fields, event="Warning",
        counted=True, delete=tuple(pods),
    )  # fmt: skip


def _restart(v: JobView, why: str, policy: SchedulingPolicy) -> Write:
    """Restart the whole gang, or fail it once it has been restarted backoffLimit
    times (the job's own limit, else the policy's). The failed worker is kept for
    its logs; its siblings go with the gang."""
    restarts = status_number(v.status, "restarts") + 1
    limit = policy.backoff_limit
    if v.spec is not None and v.spec.backoff_limit is not None:
        limit = v.spec.backoff_limit
    live = [p for p in v.attempt_pods() if not pod_terminal(p)]
    if restarts > limit:
        return _release(
            "failed", v, "Failed", "BackoffLimitExceeded",
            f"{why}; the gang was restarted {limit} times (backoffLimit {limit})", live,
        )  # fmt: skip
    return _release(
        "restart", v, "Queued", "Restarting",
        f"{why}; restarting the whole gang (restart {restarts} of {limit})", live,
        restarts=restarts,
    )  # fmt: skip


def _shrink(a: Action, now: float) -> Write | None:
    """The elastic gang's next attempt at `a.workers` workers: its first workers
    kept, its borrowed GPUs given back first. Below its gangSize a shrink counts
    against maxPerHour, like an eviction (`shrunkAt`)."""
    v, adm = a.job, a.job.admission
    if adm is None or v.gang is None:
        return None
    old, per = len(adm.placement.pods), v.gang.pod.gpu_total
    smaller = Admission(
        "Admitted",
        attempts(v) + 1,
        Placement(adm.placement.pods[: a.workers]),
        now,
        max(0, adm.borrowed_milli - (old - a.workers) * per),
        shape=adm.shape,
    )
    below = {"shrunkAt": format_time(now)} if a.workers < v.gang.workers else {}
    message = (
        f"shrunk from {format_gpus(old * per)} to {format_gpus(a.workers * per)} GPUs for "
        f"{a.by} (elastic); the gang restarts at the new size"
    )
    return _resize(v, smaller, "Shrinking", message, **below)


def _resize(v: JobView, adm: Admission, reason: str, message: str, **fields: Any) -> Write:
    """An elastic gang's new size, recorded as its next attempt. The old attempt's
    pods are deleted and the new ones created by the next steps (`cleanup`, then
    `launch` once the old pods are gone), as after a crash."""
    return Write(
        "resize", v, "Admitted", reason, message, record=adm,
        fields={"attempts": adm.attempt, **fields}, event="Normal", counted=True,
    )  # fmt: skip


def action_write(
    a: Action,
    policy: SchedulingPolicy,
    *,
    now: float,
    backoff_base_s: float,
    backoff_max_s: float,
) -> Write | None:
    """What `a` writes at time `now` (epoch seconds); None when nothing."""
    v = a.job
    if a.kind == "launch" and v.admission is not None:
        return Write("launch", v, launch=True)
    if a.kind == "running":
        return Write(
            "running", v, "Running", "Running", a.message,
            fields={"startedAt": format_time(now), "refusals": None},
        )  # fmt: skip
    if a.kind == "succeeded":
        return Write("succeeded", v, "Succeeded", "Succeeded", a.message, clear=True)
    if a.kind == "restart":
        return _restart(v, a.message, policy)
    if a.kind == "relocate":
        relocations = status_number(v.status, "relocations") + 1
        delay = rollback_delay(relocations, base_s=backoff_base_s, max_s=backoff_max_s)
        return _release(
            "restart", v, "Queued", "Relocating",
            f"{a.message}; restarting the whole gang away from the fault in {delay:g}s"
            " (not counted against backoffLimit)",
            [p for p in v.attempt_pods() if not pod_terminal(p)],
            relocations=relocations, notBefore=format_time(now + delay),
        )  # fmt: skip
    if a.kind == "respec":
        return _release(
            "restart", v, "Queued", "SpecChanged",
            f"{a.message}; the gang restarts under the new spec (not counted against "
            "backoffLimit)",
            [p for p in v.attempt_pods() if not pod_terminal(p)],
        )  # fmt: skip
    if a.kind == "rollback":
        rollbacks = status_number(v.status, "rollbacks") + 1
        delay = rollback_delay(rollbacks, base_s=backoff_base_s, max_s=backoff_max_s)
        return _release(
            "rollback", v, "Queued", "GangTimeout",
            f"{a.message}; rolled back and requeued, retrying in {delay:g}s",
            v.attempt_pods(), rollbacks=rollbacks, notBefore=format_time(now + delay),
        )  # fmt: skip
    if a.kind == "evict" and a.by is not None and v.gang is not None:
        w = _release(
            "preempt", v, "Preempted", "Preempted", f"preempted by {a.by}; requeued",
            v.attempt_pods(), preemptedAt=format_time(now), preemptedBy=a.by,
        )  # fmt: skip
        return replace(w, preemption=True)
    if a.kind == "shrink":
        return _shrink(a, now)
    if a.kind == "expire":
        return Write("expire", v, waiting_phase(v), "NominationExpired", a.message, clear=True)
    if a.kind == "invalid":  # a record, where there is one, is released with it
        return Write(
            "invalid", v, "Queued", "InvalidSpec", a.message, conditional=False, stalled=True,
            clear=v.admission is not None,
        )  # fmt: skip
    if a.kind == "cleanup":
        return Write("cleanup", v, delete=a.pods)
    return None


def refused_write(
    v: JobView,
    *,
    obj: str,
    status: int,
    message: str,
    now: float,
    backoff_base_s: float,
    backoff_max_s: float,
) -> Write:
    """The API server refused a write of the gang's launch (`obj`, a worker pod or
    its Service, with the HTTP `status` and the API server's `message`): the gang
    gives its GPUs back and is requeued after a delay that doubles with each
    refusal in a row (`refusals`, cleared once the gang runs), with the API
    server's words in its status and a Warning Event. Its pods go with the record
    (`cleanup`). Written whatever the job's resourceVersion: the admission this
    undoes was written a moment ago by the same writer."""
    refusals = status_number(v.status, "refusals") + 1
    delay = rollback_delay(refusals, base_s=backoff_base_s, max_s=backoff_max_s)
    w = _release(
        "refused", v, waiting_phase(v), "LaunchRefused",
        f"the API server refused {obj} ({status}): {message}; the gang gave its GPUs back "
        f"and retries in {delay:g}s (refusal {refusals} in a row)",
        (), refusals=refusals, notBefore=format_time(now + delay),
    )  # fmt: skip
    return replace(w, conditional=False)


MESSAGE_REFRESH_S = 300.0
"""Default least time between two writes of a waiting job's message that differs from
the one written only in its figures (`_pending`)."""
_FIGURE = re.compile(r"\d+(?:\.\d+)?")
"""A figure in a message: what `_pending` holds back for up to the refresh."""
_TELEMETRY_CAUSE = re.compile(r"telemetry unavailable(?:: .*?)?; scheduling by requests alone")
"""The note on a waiting job while telemetry is unusable (`controller._telemetry_note`),
whatever kind of failure it names: held back like a figure, as Prometheus that times
out and refuses by turns would otherwise rewrite every waiting job's status each turn."""


def _words(message: str) -> str:
    """A message without what `message_due` holds back for up to the refresh."""
    quiet = _TELEMETRY_CAUSE.sub("telemetry unavailable; scheduling by requests alone", message)
    return _FIGURE.sub("#", quiet)


def message_due(
    code: str, said: object, said_at: float | None, message: str, *, now: float, refresh_s: float
) -> bool:
    """Whether a waiting job whose status says `said` (written at `said_at`, epoch
    seconds; None: unknown), under the same phase and reason `code`, gets `message`
    written now: when the words differ, or only the figures (or the kind of telemetry
    failure noted) and `refresh_s` has passed (or `said_at` is unknown, or ahead of
    `now`: another replica's clock). A `Quota` reason's figures are written at once:
    the quota loop reads them to propose how much the max must rise
    (`quota.propose.shortfall`), and they move only with the project's or user's own
    admissions and releases."""
    if said == message:
        return False
    if code == "Quota" or said_at is None or not isinstance(said, str):
        return True
    if not 0 <= now - said_at < refresh_s:
        return True
    return _words(said) != _words(message)


def _pending(v: JobView, d: Pending, note: str, now: float, refresh_s: float) -> Write:
    """The reason a gang waits, written unless its status already says so. A new
    phase, reason (`Quota`, `Capacity`, ...), spec or wording (a note added, another
    cause) is written at once; a message that differs only in its figures (GPUs
    free, left outside the reserve, a node's number) at most once per `refresh_s`
    (`status.messageAt`): those move with every admission and release anywhere in
    the cluster, and writing them each step is a status write per waiting job per
    step (`message_due`; a `Quota` reason's figures are written at once)."""
    status = v.status
    phase = waiting_phase(v)
    message = f"{d.reason} ({note})" if note and d.code != "Refused" else d.reason
    if phase == "Preempted" and status.get("preemptedBy"):
        message = f"preempted by {status['preemptedBy']}; requeued: {d.reason}"
    if (status.get("phase"), status.get("reason")) == (phase, d.code) and status.get(
        "observedGeneration"
    ) == v.obj["metadata"].get("generation"):
        said_at = parse_time(status.get("messageAt"))
        said = status.get("message")
        if not message_due(d.code, said, said_at, message, now=now, refresh_s=refresh_s):
            return Write("pending", v)
    return Write(
        "pending", v, phase, d.code, message, conditional=False, stalled=d.code == "Refused",
        fields={"messageAt": format_time(now)},
    )  # fmt: skip


def _admit(v: JobView, d: Admit, now: float) -> Write:
    adm = Admission(
        "Admitted",
        attempts(v) + 1,
        d.placement,
        now,
        d.borrowed_milli,
        shape=_shape(v),
    )
    nodes = ", ".join(f"{n} x{c}" for n, c in sorted(adm.placement.nodes().items()))
    borrowed = f"; {format_gpus(adm.borrowed_milli)} GPUs borrowed" if adm.borrowed_milli else ""
    return Write(
        "admit", v, "Admitted", "Admitted",
        f"placed on {nodes}{borrowed}; starting attempt {adm.attempt}", record=adm,
        fields={"attempts": adm.attempt, "notBefore": None}, event="Normal", counted=True,
        launch=True,
    )  # fmt: skip


def _nominate(v: JobView, d: Preempt, by_id: Mapping[JobId, JobView], now: float) -> Write:
    """The preemptor's nomination, naming each victim and shrunk gang with the
    attempt it holds now (so a re-admitted victim is never evicted for it). The
    victims are evicted by the next steps (`evict`), exactly as after a crash."""

    def attempt(j: JobId) -> int:
        adm = by_id[j].admission
        assert adm is not None  # the cycle only preempts running gangs
        return adm.attempt

    adm = Admission(
        "Nominated",
        attempts(v),
        d.placement,
        now,
        0,
        tuple((j, attempt(j)) for j in d.victims),
        tuple((j, attempt(j), keep) for j, keep in d.shrinks),
        shape=_shape(v),
    )
    return Write(
        "nominate", v, waiting_phase(v), "Preempting",
        f"{d.reason}; it starts once they have released their GPUs", record=adm, event="Normal",
    )  # fmt: skip


def cycle_writes(
    result: CycleResult,
    views: Sequence[JobView],
    *,
    now: float,
    note: str = "",
    refresh_s: float = MESSAGE_REFRESH_S,
) -> list[Write]:
    """The cycle's decisions and growths as writes, in its order: admissions,
    nominations and pending reasons, then growths. A write with a `record` is
    the decision the next steps count until it lands. `note` is added to every
    pending reason (the scheduler's own state, such as telemetry it lacks); a
    waiting job's message whose phase and reason are unchanged is rewritten at
    most once per `refresh_s` (`_pending`)."""
    by_id = {v.id: v for v in views}
    out: list[Write] = []
    for d in result.decisions:
        v = by_id[d.gang.id]
        if isinstance(d, Admit):
            out.append(_admit(v, d, now))
        elif isinstance(d, Preempt):
            out.append(_nominate(v, d, by_id, now))
        else:
            out.append(_pending(v, d, note, now, refresh_s))
    for rz in result.resizes:
        v = by_id[rz.gang.id]
        was = v.admission.shape if v.admission is not None else None
        adm = Admission(
            "Admitted", attempts(v) + 1, rz.placement, now, rz.borrowed_milli, shape=was
        )
        out.append(_resize(v, adm, "Growing", rz.reason))
    return out
