"""One scheduling cycle: order the queue, then admit, preempt or explain.

The phases, each a function:

1. `order` — tier (higher first), then fair share (the project's, then the
   user's usage over guarantee, lower first), then age, then name;
2. for each gang in that order: `_refused` (can never run under this policy
   or its namespace's ResourceQuota), `quota` (the namespace's ResourceQuota
   as the API server enforces it, project max, user max, borrowing, the
   reserve), placement
   (`placement.place`, avoiding GPUs held for others), and when it does not
   fit, `_preempt` (victim search on the snapshot with undo);
3. the first gang blocked by capacity reserves the nodes it will need, so
   smaller gangs cannot starve it: later gangs may use those nodes only if
   they are preemptible or will finish before it could start;
4. when nothing is left waiting for capacity, `_grow` gives idle GPUs to
   running elastic gangs (up to their `maxGPU`, within quota).

Elastic gangs (`minGPU < gangSize` or `gangSize < maxGPU`): a blocked gang
first tries `_shrink` — take back the workers elastic gangs were grown by
(from gangs of its tier or lower), then shrink preemptible lower-tier gangs
down to their `minGPU` — before `_preempt` evicts whole gangs. A resized gang
keeps the first workers of its placement and restarts at the new size (the
controller records the new size, then replaces the pods), so it counts
as admitted anew: it is protected for `minRuntimeSeconds`, and grown at most
once per `grow_interval`.

Every decision is assumed into the snapshot at once, so later gangs in the
same cycle see it. Pure: the caller passes the time and everything else.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain

from controller.scheduler.placement import fits, place, shortfall
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot, gang_usage
from controller.scheduler.telemetry import IDLE_PERCENT, Hints
from controller.scheduler.types import (
    MILLI,
    Admit,
    Decision,
    Gang,
    JobId,
    Pending,
    Placement,
    Preempt,
    QuotaHold,
    Resize,
    Running,
    format_gpus,
    namespace_of,
)

__all__ = ["GROW_INTERVAL_S", "CycleResult", "namespace_quota", "order", "quota", "schedule"]

GROW_INTERVAL_S = 600.0
"""Least time between two resizes of one gang by growth: each resize restarts the
job from its checkpoint, so growing by a worker whenever one frees would cost
more progress than the GPUs bring."""


@dataclass
class CycleResult:
    """What one cycle decided."""

    decisions: list[Decision] = field(default_factory=list)
    order: list[JobId] = field(default_factory=list)
    """Queue order this cycle (position in the queue, for `explain`)."""
    reserved_for: JobId | None = None
    reserved_nodes: frozenset[str] = frozenset()
    decision_seconds: list[float] = field(default_factory=list)
    """Time each decision took, in queue order, when a timer was given."""
    resizes: list[Resize] = field(default_factory=list)
    """Running elastic gangs grown onto idle GPUs this cycle."""
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Time each phase took (`schedule`: the decisions, `grow`), when a timer was given."""
    hints: Hints = field(default_factory=Hints)
    """What telemetry added to this cycle (empty: requests alone)."""


def _ratio(used: int, guaranteed: int) -> float:
    if guaranteed > 0:
        return used / guaranteed
    return float("inf") if used > 0 else 0.0


def order(snap: Snapshot, policy: SchedulingPolicy, queue: Sequence[Gang]) -> list[Gang]:
    """Tier, then fair share (project, then user), then age, then name."""

    def key(g: Gang) -> tuple[int, float, float, float, str]:
        share = user_share = 0.0
        project = policy.projects.get(g.project)
        if policy.fair_share and project is not None:
            share = _ratio(snap.project_usage.get(g.project, 0), project.guaranteed)
            user_share = _ratio(
                snap.user_usage.get((g.project, g.user), 0), project.user(g.user).guaranteed
            )
        return (-g.priority, share, user_share, g.created, g.id)

    return sorted(queue, key=key)


_QUOTA_UNITS: tuple[tuple[str, Callable[[int], str]], ...] = (
    ("GPUs", format_gpus),
    ("CPU", lambda milli: f"{milli / 1000:g}"),
    ("bytes of memory", str),
    ("pods", str),
)
"""The resources of a namespace's quota, in `Usage` order: name, and how to write one."""


def namespace_quota(snap: Snapshot, g: Gang, *, alone: bool) -> str | None:
    """Why the API server's ResourceQuotas of `g`'s namespace would refuse some of
    its pods: now (what the namespace's pods request already, plus `g`), or,
    `alone`, ever (`g` by itself is over a limit)."""
    ns = namespace_of(g.id)
    limits = snap.namespace_quota.get(ns) if ns is not None else None
    if limits is None:
        return None
    used = (0, 0, 0, 0) if alone else snap.namespace_usage.get(ns or "", (0, 0, 0, 0))
    for (name, fmt), hard, have, need in zip(
        _QUOTA_UNITS, limits.hard(), used, gang_usage(g), strict=True
    ):
        if hard is None or have + need <= hard:
            continue
        if alone:
            return (
                f"asks for {fmt(need)} {name}, more than namespace {ns}'s ResourceQuota "
                f"allows ({fmt(hard)})"
            )
        return (
            f"namespace {ns} at its ResourceQuota: {fmt(have)} of {fmt(hard)} {name} "
            f"requested, this job needs {fmt(need)}"
        )
    return None


def _refused(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> str | None:
    project = policy.projects.get(g.project)
    if project is None:
        return f"no project owns this job (project {g.project!r} is not in the policies)"
    if g.tier not in project.tiers:
        allowed = ", ".join(sorted(project.tiers)) or "none"
        return f"tier {g.tier!r} is not allowed for project {project.name} (allowed: {allowed})"
    if project.job_max is not None and g.gpu_total > project.job_max:
        return (
            f"asks for {format_gpus(g.gpu_total)} GPUs; project {project.name} allows at most "
            f"{format_gpus(project.job_max)} per job"
        )
    if project.max is not None and g.gpu_total > project.max:
        return (
            f"asks for {format_gpus(g.gpu_total)} GPUs, more than project {project.name}'s max "
            f"of {format_gpus(project.max)}"
        )
    return namespace_quota(snap, g, alone=True)


def quota(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> QuotaHold | None:
    """The limit that keeps the gang from starting now (its namespace's ResourceQuota,
    its project's max, its user's max, its guarantee with borrowing disabled: the
    first that binds), or None when none does. The limit is named as data so that
    nothing asks these again to say which one it was (`explain`)."""
    in_namespace = namespace_quota(snap, g, alone=False)
    if in_namespace is not None:
        return QuotaHold("namespace", in_namespace, bound=0, over=0)
    project = policy.projects[g.project]
    need = g.gpu_total
    used = snap.project_usage.get(g.project, 0)
    if project.max is not None and used + need > project.max:
        return QuotaHold(
            "project",
            f"project {project.name} at max: {format_gpus(used)} of "
            f"{format_gpus(project.max)} GPUs in use, this job needs {format_gpus(need)}",
            bound=project.max,
            over=used + need - project.max,
        )
    user = project.user(g.user)
    user_used = snap.user_usage.get((g.project, g.user), 0)
    if user.max is not None and user_used + need > user.max:
        return QuotaHold(
            "user",
            f"user {g.user} at max in project {project.name}: {format_gpus(user_used)} of "
            f"{format_gpus(user.max)} GPUs in use, this job needs {format_gpus(need)}",
            bound=user.max,
            over=user_used + need - user.max,
        )
    if not policy.borrowing and used + need > project.guaranteed:
        return QuotaHold(
            "guarantee",
            f"project {project.name} at its guarantee ({format_gpus(used)} of "
            f"{format_gpus(project.guaranteed)} GPUs) and borrowing is disabled",
            bound=project.guaranteed,
            over=used + need - project.guaranteed,
        )
    return None


def _outside_reserve(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> str | None:
    """Why the gang would eat into the reserve, or None when it would not."""
    if not policy.reserve or g.tier in policy.reserve_tiers:
        return None
    usable = snap.capacity - policy.reserve
    if snap.outside_reserve + g.gpu_total <= usable:
        return None
    tiers = ", ".join(sorted(policy.reserve_tiers)) or "no tier"
    return (
        f"needs {format_gpus(g.gpu_total)} GPUs; "
        f"{format_gpus(max(0, usable - snap.outside_reserve))} are left outside the reserve "
        f"({format_gpus(policy.reserve)} GPUs held for {tiers})"
    )


def _fit(
    snap: Snapshot, policy: SchedulingPolicy, g: Gang, exclude: frozenset[str]
) -> Placement | None:
    """A placement that also leaves the reserve alone, or None."""
    if _outside_reserve(snap, policy, g) is not None:
        return None
    return place(snap, g, exclude=exclude)


def _busy_level(hints: Hints | None, job: JobId) -> int:
    """0 (idle: under `IDLE_PERCENT` over the window, as `idle_gpus` counts it) .. 11
    (busy, or unknown): above idle, the utilisation in tenths, so small differences
    do not outrank the progress a victim would lose. Idle is a level of its own: on
    real clusters most held GPUs sit under 10 % (the recorded containers'
    mean is 6 %), and a job at 0.2 % is a better victim than one at 8 %."""
    if hints is None:
        return 11
    u = hints.utilisation.get(job)
    if u is None:
        return 11
    return 0 if u < IDLE_PERCENT else min(11, 1 + int(u // 10))


def _lend_limit(
    snap: Snapshot, policy: SchedulingPolicy, hints: Hints, g: Gang
) -> QuotaHold | None:
    """Why `g` may not borrow now: the idle guarantee it would take is what another
    project is forecast to ask for within the horizon. None when it may (or does not
    borrow)."""
    if not hints.protect:
        return None
    project = policy.projects[g.project]
    used = snap.project_usage.get(g.project, 0)
    if used + g.gpu_total <= project.guaranteed:
        return None
    protected = sum(hints.protect.values()) - hints.protect.get(g.project, 0)
    idle = snap.capacity - sum(snap.project_usage.values())
    if idle - g.gpu_total >= protected:
        return None
    kept = {p: m for p, m in hints.protect.items() if p != g.project}
    who = ", ".join(f"{p} ({format_gpus(m)})" for p, m in sorted(kept.items()))
    lendable = max(0, idle - protected)
    return QuotaHold(
        "lending",
        f"would borrow idle guarantee that is forecast to be asked for soon by {who}; "
        f"{format_gpus(lendable)} GPUs may be lent now, it needs {format_gpus(g.gpu_total)}",
        bound=lendable,
        over=g.gpu_total + protected - idle,
    )


def _borrowed(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> int:
    project = policy.projects[g.project]
    used = snap.project_usage.get(g.project, 0)
    return max(0, min(g.gpu_total, used + g.gpu_total - project.guaranteed))


class _Victims:
    """The running gangs that had run `minRuntimeSeconds` when the cycle began: the
    only ones a preemption may pick. Everything the cycle assumes starts now, so
    the set only loses members (a search skips those no longer running as they
    were). A victim search walks `pool`, which leaves out the gangs `_victim_ok`
    would refuse on priority alone, instead of every running gang: with a long
    queue blocked on a full cluster that search ran once per blocked gang over
    every running one."""

    def __init__(self, snap: Snapshot, policy: SchedulingPolicy, now: float) -> None:
        self.old = [
            r
            for r in snap.running.values()
            if r.started < now and now - r.started >= policy.min_runtime_seconds
        ]
        self.preemptible = sorted(
            (r for r in self.old if r.gang.preemptible), key=lambda r: r.gang.priority
        )
        self.priorities = [r.gang.priority for r in self.preemptible]

    def pool(
        self, snap: Snapshot, policy: SchedulingPolicy, g: Gang, holder: bool
    ) -> Sequence[Running]:
        """A superset of the gangs `_victim_ok` accepts for `g`: all of them when `g`'s
        project may reclaim its guarantee from borrowers, else the preemptible ones
        of a lower priority (or equal, for the holder of the reservation)."""
        if _reclaims(snap, policy, g) or _reclaims_user(snap, policy, g):
            return self.old
        top = bisect_right(self.priorities, g.priority if holder else g.priority - 1)
        return self.preemptible[:top]


def _reclaims(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> bool:
    """Whether `g` stays within its project's guarantee (it may take it back). A gang
    that needs no GPUs takes none back."""
    gp = policy.projects[g.project]
    return g.gpu_total > 0 and snap.project_usage.get(g.project, 0) + g.gpu_total <= gp.guaranteed


def _reclaims_user(snap: Snapshot, policy: SchedulingPolicy, g: Gang) -> bool:
    """Whether `g` stays within its user's guarantee (it may take it back from the
    project's other users above theirs). A gang that needs no GPUs takes none back."""
    guaranteed = policy.projects[g.project].user(g.user).guaranteed
    return (
        g.gpu_total > 0 and snap.user_usage.get((g.project, g.user), 0) + g.gpu_total <= guaranteed
    )


@dataclass
class _State:
    """What the cycle accumulates while it walks the queue."""

    budget: int
    nominated: Mapping[JobId, Placement]
    held: dict[str, set[JobId]] = field(default_factory=dict)
    """Node -> the gangs that hold it (nominations, the reservation, a preemptor
    decided this cycle); another gang may not use it. Two nominations may share a
    node: each may use it."""
    held_version: int = 0
    """Bumped whenever `held` or `releasing` changes (`token`)."""
    namespace_held: list[Gang] = field(default_factory=list)
    """What gangs evicted or shrunk this cycle give back, counted again in their
    namespaces' figures for the rest of the cycle: a ResourceQuota counts their pods
    until they are gone (`schedule` takes it out again at the end)."""
    releasing: set[str] = field(default_factory=set)
    """Nodes where a gang evicted or shrunk this cycle runs: its pods keep their GPUs
    until they terminate, so no gang is placed there for the rest of the cycle (the
    snapshot already counts them free: their preemptor is placed as if they were gone)."""
    awaiting: frozenset[JobId] = frozenset()
    """Nominees some of whose victims (or shrunk gangs) still run as they were: not
    admitted until those have released their GPUs."""
    protected: frozenset[JobId] = frozenset()
    """Running gangs an earlier nomination already evicts or shrinks: never
    chosen again until that lands (it would be decided twice)."""
    claimed: set[JobId] = field(default_factory=set)
    """Nominated gangs whose GPUs the snapshot's quota and reserve figures count
    while they wait for their nodes (`Snapshot.count`)."""
    reserved_for: Gang | None = None
    reserved_start: float | None = None
    hints: Hints = field(default_factory=Hints)
    victims: _Victims | None = None
    """Who a preemption may pick this cycle; None when no preemption is possible this
    cycle (`schedule` builds none), so `_preempt` returns before it would look."""
    waiting: dict[tuple[object, ...], tuple[tuple[object, ...], Pending]] = field(
        default_factory=dict
    )
    """Per kind of gang (`_kind`): the last one left waiting, and the snapshot's and
    this state's `token` when it was decided (`_decide`)."""

    def token(self) -> tuple[object, ...]:
        """Changes whenever a field a decision reads changes: the budget, the held
        nodes (only ever added by a reservation, or removed with their holder), the
        reservation and when it starts."""
        holder = None if self.reserved_for is None else self.reserved_for.id
        return (self.budget, self.held_version, holder, self.reserved_start)

    def hold(self, node: str, job: JobId) -> None:
        """`job` holds `node` (beside any other holder)."""
        self.held.setdefault(node, set()).add(job)
        self.held_version += 1

    def release(self, job: JobId) -> None:
        """`job` holds no node any more."""
        for n in [n for n, holders in self.held.items() if job in holders]:
            self.held[n].discard(job)
            if not self.held[n]:
                del self.held[n]
            self.held_version += 1

    def nodes_of(self, job: JobId) -> frozenset[str]:
        """The nodes `job` holds."""
        return frozenset(n for n, holders in self.held.items() if job in holders)


def _excluded(state: _State, g: Gang, now: float) -> frozenset[str]:
    nodes = {n for n, holders in state.held.items() if g.id not in holders}
    if nodes and state.reserved_for is not None:
        may_backfill = g.preemptible or (
            state.reserved_start is not None
            and g.expected_duration is not None
            and now + g.expected_duration <= state.reserved_start
        )
        if may_backfill:
            nodes = {n for n in nodes if state.held[n] != {state.reserved_for.id}}
    return frozenset(nodes | state.releasing) if state.releasing else frozenset(nodes)


def _shared_holds(state: _State, g: Gang) -> frozenset[str]:
    """The nodes `g` holds together with another gang (two nominations)."""
    return frozenset(n for n, holders in state.held.items() if g.id in holders and len(holders) > 1)


def _still_fits(snap: Snapshot, g: Gang, placement: Placement) -> bool:
    """Whether `g` can take `placement` as it stands: each node a candidate with
    room for its pods there, each device free enough for them."""
    if len(placement.pods) != g.workers:
        return False
    need = g.pod.gpu_milli if g.pod.shared else MILLI
    eligible = {ns.name for ns in snap.candidates(g.pod)}
    per_node = Counter(p.node for p in placement.pods)
    per_device = Counter((p.node, d) for p in placement.pods for d in p.devices)
    for name, pods in per_node.items():
        ns = snap.by_name.get(name)
        if ns is None or name not in eligible or ns.slots(g.pod) < pods:
            return False
    for (name, d), pods in per_device.items():
        free = snap.by_name[name].free
        if not 0 <= d < len(free) or free[d] < need * pods:
            return False
    return True


def _victim_ok(
    snap: Snapshot, policy: SchedulingPolicy, g: Gang, r: Running, now: float, holder: bool
) -> tuple[bool, int]:
    """(may this running gang be evicted for `g`, how borrowed it is: 0 when its
    project stays at or above its guarantee without it, 1 when its project borrows
    but losing it would cut into the guarantee, 2 when its project does not borrow).
    Borrowed work goes first, and of it what leaves the lender its guarantee. Read
    from the snapshot as it stands (as victims go, `_lends` asks again)."""
    v = r.gang
    if r.started >= now or now - r.started < policy.min_runtime_seconds:
        return False, 2  # admitted this cycle, or too young to lose its progress
    vp = policy.projects.get(v.project)
    usage = snap.project_usage.get(v.project, 0)
    if vp is None or usage <= vp.guaranteed:
        level = 2
    else:
        level = 0 if usage - v.gpu_total >= vp.guaranteed else 1
    borrowed = level < 2
    if _lender(g, r, holder) is None:  # its tier alone lets `g` evict it
        return True, level
    if v.project != g.project:
        return borrowed and _reclaims(snap, policy, g), level
    # Within the project: a user's guarantee is taken back from users above theirs.
    vg = policy.projects[v.project].user(v.user).guaranteed
    above = snap.user_usage.get((v.project, v.user), 0) > vg
    return v.user != g.user and above and _reclaims_user(snap, policy, g), level


def _preempt(
    snap: Snapshot,
    policy: SchedulingPolicy,
    g: Gang,
    *,
    now: float,
    budget: int,
    exclude: frozenset[str],
    holder: bool,
    protected: frozenset[JobId] = frozenset(),
    hints: Hints | None = None,
    victims: _Victims | None = None,
) -> tuple[list[Running], Placement] | None:
    """Whole gangs to evict so `g` fits, and its placement. The candidates are ranked:
    borrowed work first (of it, what leaves its project its guarantee), then the
    lowest tier, then the idlest GPUs over the telemetry's window (friendly
    reclamation; unknown counts as busy), then the most recently started (least
    progress lost); never the `protected` ones. They are evicted in that order until
    `g` fits (at most `budget`), then every one the placement turns out not to need
    is kept running: no victim can be spared, but the set is not the fewest gangs
    that could make room (two recent gangs may go where one older one would do).
    A reclaim takes a gang only while its lender still lends after the victims
    chosen before it (`_lends`, `_instead`). The snapshot is left as it was found.
    `victims` (`_State.victims`) narrows the search to the gangs that may be
    picked; by default every running gang is looked at."""
    if not policy.preemption_enabled or not g.may_preempt or budget <= 0:
        return None
    ranked = []
    pool = snap.running.values() if victims is None else victims.pool(snap, policy, g, holder)
    for r in pool:
        if r.gang.id in protected or snap.running.get(r.gang.id) is not r:
            continue
        ok, level = _victim_ok(snap, policy, g, r, now, holder)
        if ok:
            idle = _busy_level(hints, r.gang.id)
            ranked.append(((level, r.gang.priority, idle, -r.started, r.gang.id), r))
    if not ranked:
        return None
    ranked.sort(key=lambda kr: kr[0])
    removed: list[Running] = []
    found: Placement | None = None
    for _, r in ranked:
        if len(removed) >= budget:
            break
        if not _lends(snap, policy, g, r, removed, holder):
            found = _instead(snap, policy, g, r, removed, holder=holder, exclude=exclude)
            if found is not None:
                break
            continue
        removed.append(snap.forget(r.gang.id))
        found = _fit(snap, policy, g, exclude)
        if found is not None:
            break
    if found is None:
        for r in reversed(removed):
            snap.assume(r)
        return None
    # Keep running every victim the placement does not actually need.
    needed: list[Running] = [removed[-1]]
    for r in reversed(removed[:-1]):
        snap.assume(r)
        again = _fit(snap, policy, g, exclude)
        if again is None:
            snap.forget(r.gang.id)
            needed.append(r)
        else:
            found = again
    for r in needed:
        snap.assume(r)
    return needed, found


def _lender(g: Gang, r: Running, holder: bool) -> tuple[str, str | None] | None:
    """Whom `r` would be evicted from as a reclaim for `g` (`_victim_ok`): its project
    (another project's borrowed work), or its project and user (a user above their
    guarantee); None when its tier alone lets `g` evict it."""
    v = r.gang
    if v.preemptible and (v.priority < g.priority or (holder and v.priority <= g.priority)):
        return None
    return (v.project, None) if v.project != g.project else (v.project, v.user)


def _lends(
    snap: Snapshot,
    policy: SchedulingPolicy,
    g: Gang,
    r: Running,
    removed: Sequence[Running],
    holder: bool,
) -> bool:
    """Whether `r` (which `_victim_ok` accepted before any victim went) may still go
    once the gangs in `removed` are gone: always when its tier alone lets `g` evict
    it; as a reclaim, only while its lender (`_lender`) stays above its guarantee
    without all its victims but any one of them, so whichever went last went while
    the lender still borrowed (a lender loses what it borrowed and at most the part
    of one gang that straddles its guarantee)."""
    lender = _lender(g, r, holder)
    if lender is None:
        return True
    project, user = lender
    if user is None:
        used = snap.project_usage.get(project, 0)
        guaranteed = policy.projects[project].guaranteed
    else:
        used = snap.user_usage.get((project, user), 0)
        guaranteed = policy.projects[project].user(user).guaranteed
    smallest = min(
        (v.gang.gpu_total for v in removed if _lender(g, v, holder) == lender),
        default=r.gang.gpu_total,
    )
    return used - r.gang.gpu_total + min(smallest, r.gang.gpu_total) > guaranteed


def _instead(
    snap: Snapshot,
    policy: SchedulingPolicy,
    g: Gang,
    r: Running,
    removed: list[Running],
    *,
    holder: bool,
    exclude: frozenset[str],
) -> Placement | None:
    """`r` is a reclaim its lender cannot give after the victims in `removed`
    (`_lends`): put back its lender's victims there, the last chosen first, until it
    can, and evict `r` in their place. The placement that makes room for `g`
    (`removed` then holds `r` instead of them), else None, the snapshot left as it
    was found. A lender gives what it borrowed where that makes room."""
    lender = _lender(g, r, holder)
    if lender is None:
        return None
    kept = list(removed)
    back: list[Running] = []
    for v in reversed(removed):
        if _lender(g, v, holder) != lender:
            continue
        snap.assume(v)
        back.append(v)
        kept.remove(v)
        if _lends(snap, policy, g, r, kept, holder):
            snap.forget(r.gang.id)
            found = _fit(snap, policy, g, exclude)
            if found is not None:
                removed[:] = [*kept, r]
                return found
            snap.assume(r)
            break
    for v in reversed(back):
        snap.forget(v.gang.id)
    return None


_NO_NODES: frozenset[str] = frozenset()
_WAITING = "waiting for the gangs it preempted or shrank to release their GPUs"


def _shrunk(r: Running, workers: int, now: float) -> Running:
    """`r` keeping only its first `workers` workers (restarted now)."""
    return Running(r.gang.resized(workers), Placement(r.placement.pods[:workers]), now)


def _shrink_floor(
    snap: Snapshot, policy: SchedulingPolicy, g: Gang, r: Running, now: float, holder: bool
) -> int | None:
    """The fewest workers running gang `r` may be shrunk to for `g`, or None."""
    v = r.gang
    if v.id == g.id or r.started >= now or now - r.started < policy.min_runtime_seconds:
        return None
    floor = None
    if v.workers > v.submitted_workers and v.priority <= g.priority:
        floor = v.submitted_workers  # what it was grown by: lent, not given
    if v.min_workers is not None and v.min_workers < v.workers:
        ok, _ = _victim_ok(snap, policy, g, r, now, holder)
        if ok and policy.preemption_enabled and g.may_preempt:
            floor = v.min_workers
    return floor


def _shrink(
    snap: Snapshot,
    policy: SchedulingPolicy,
    g: Gang,
    *,
    now: float,
    budget: int,
    exclude: frozenset[str],
    holder: bool,
    project: str | None = None,
    protected: frozenset[JobId] = frozenset(),
    hints: Hints | None = None,
) -> tuple[list[tuple[Running, int]], Placement] | None:
    """Elastic gangs to shrink, and by how much, so `g` fits (its quota included,
    and with `hints` the lending limit):
    grown workers first, then the lowest tier, then the most recently started;
    only gangs of `project` when given (to give back quota). Each gang is shrunk
    by no more workers than needed, and none that the placement turns out not
    to need. (original, workers kept) pairs and the placement; the snapshot is
    left as it was found."""

    def fits() -> Placement | None:
        if quota(snap, policy, g) is not None:
            return None
        if hints is not None and _lend_limit(snap, policy, hints, g) is not None:
            return None
        return _fit(snap, policy, g, exclude)

    ranked = []
    for r in snap.running.values():
        if (project is not None and r.gang.project != project) or r.gang.id in protected:
            continue
        floor = _shrink_floor(snap, policy, g, r, now, holder)
        if floor is not None and floor < r.gang.workers:
            grown = r.gang.workers > r.gang.submitted_workers
            ranked.append(((not grown, r.gang.priority, -r.started, r.gang.id), r, floor))
    ranked.sort(key=lambda x: x[0])
    done: list[tuple[Running, int]] = []
    found: Placement | None = None
    for _, r, floor in ranked:
        if budget <= 0:  # below the submitted size counts as a preemption
            floor = max(floor, r.gang.submitted_workers)
            if floor >= r.gang.workers:
                continue
        snap.forget(r.gang.id)
        keep = r.gang.workers
        while keep > floor and found is None:
            keep -= 1
            snap.assume(_shrunk(r, keep, now))
            found = fits()
            snap.forget(r.gang.id)
        snap.assume(_shrunk(r, keep, now))
        done.append((r, keep))
        budget -= keep < r.gang.submitted_workers
        if found is not None:
            break
    if found is None:
        for r, _ in reversed(done):
            snap.forget(r.gang.id)
            snap.assume(r)
        return None
    # Give back in full every earlier gang the placement does not need.
    needed = [done[-1]]
    for r, keep in reversed(done[:-1]):
        snap.forget(r.gang.id)
        snap.assume(r)
        again = fits()
        if again is None:
            snap.forget(r.gang.id)
            snap.assume(_shrunk(r, keep, now))
            needed.append((r, keep))
        else:
            found = again
    for r, _ in needed:
        snap.forget(r.gang.id)
        snap.assume(r)
    return needed, found


def _shrink_for(
    snap: Snapshot,
    state: _State,
    g: Gang,
    shrinks: tuple[list[tuple[Running, int]], Placement],
    now: float,
) -> Preempt:
    """Apply a `_shrink` result to the snapshot: the decision."""
    done, placement = shrinks
    for r, keep in done:
        snap.forget(r.gang.id)
        snap.assume(_shrunk(r, keep, now))
        _gives_back(snap, state, r, keep)
    snap.assume(Running(g, placement, now))
    _placed(state, g)
    state.budget -= sum(1 for r, keep in done if keep < r.gang.submitted_workers)
    names = ", ".join(
        f"{r.gang.id} from {format_gpus(r.gang.gpu_total)} to "
        f"{format_gpus(keep * r.gang.pod.gpu_total)} GPUs"
        for r, keep in sorted(done, key=lambda rk: rk[0].gang.id)
    )
    return Preempt(
        g,
        (),
        placement,
        f"shrinking elastic {names} to free {format_gpus(g.gpu_total)} GPUs",
        tuple(sorted((r.gang.id, keep) for r, keep in done)),
    )


def _grow(
    snap: Snapshot,
    policy: SchedulingPolicy,
    state: _State,
    decisions: Sequence[Decision],
    now: float,
    interval: float,
) -> list[Resize]:
    """Idle GPUs to running elastic gangs, in queue order, while no gang waits
    for capacity and no GPUs are held for one."""
    waiting = any(
        isinstance(d, Preempt) or (isinstance(d, Pending) and d.code in ("Capacity", "Reserved"))
        for d in decisions
    )
    if waiting or state.held:
        return []
    # A gang waiting for its project's quota would only take the growth back.
    short = {d.gang.project for d in decisions if isinstance(d, Pending) and d.code == "Quota"}
    growable = [
        r.gang
        for r in snap.running.values()
        if r.gang.project not in short
        and r.gang.max_workers is not None
        and r.gang.workers < r.gang.max_workers
        and r.started < now
        and now - r.started >= max(interval, policy.min_runtime_seconds)
    ]
    out: list[Resize] = []
    for g in order(snap, policy, growable):
        r = snap.running[g.id]
        assert g.max_workers is not None
        room = sum(k for _, k in snap.open_slots(g.pod, _NO_NODES))
        extra = min(g.max_workers - g.workers, room)
        job_max = policy.projects[g.project].job_max
        if job_max is not None and g.pod.gpu_total > 0:  # the per-job limit holds for growth
            extra = min(extra, job_max // g.pod.gpu_total - g.workers)
        # the most workers quota and the reserve allow
        while extra > 0 and (
            quota(snap, policy, replace(g, workers=extra)) is not None
            or _outside_reserve(snap, policy, replace(g, workers=extra)) is not None
            or _lend_limit(snap, policy, state.hints, replace(g, workers=extra)) is not None
        ):
            extra -= 1
        more = place(snap, replace(g, workers=extra)) if extra > 0 else None
        if more is None:
            continue
        snap.forget(g.id)
        size = g.workers + extra
        grown = Running(g.resized(size), Placement(r.placement.pods + more.pods), now)
        borrowed = _borrowed(snap, policy, grown.gang)
        snap.assume(grown)
        out.append(
            Resize(
                grown.gang,
                grown.placement,
                f"grown from {format_gpus(g.gpu_total)} to "
                f"{format_gpus(grown.gang.gpu_total)} GPUs on idle capacity (elastic, up to "
                "maxGPU); the gang restarts at the new size",
                borrowed,
            )
        )
    return out


def _reserve(snap: Snapshot, state: _State, g: Gang) -> None:
    """Hold the nodes the top blocked gang will need once they free up."""
    key = (g.pod, g.workers, frozenset(state.held))
    if key not in snap.plans:
        empty = Snapshot(
            (ns.node for ns in snap.candidates(g.pod) if ns.name not in state.held),
            levels=snap.levels,
        )
        plan = place(empty, g)
        snap.plans[key] = None if plan is None else frozenset(plan.nodes())
    nodes = snap.plans[key]
    if nodes is None:
        return
    ends: list[float] = []
    complete = True
    for r in snap.running_on(nodes):
        if r.gang.expected_duration is None:
            complete = False
        else:
            ends.append(r.started + r.gang.expected_duration)
    state.reserved_for = g
    state.reserved_start = max(ends, default=0.0) if complete else None
    for n in nodes:
        state.hold(n, g.id)


def schedule(
    snap: Snapshot,
    queue: Sequence[Gang],
    policy: SchedulingPolicy,
    *,
    now: float,
    preemptions_last_hour: int = 0,
    nominated: Mapping[JobId, Placement] | None = None,
    timer: Callable[[], float] | None = None,
    grow_interval: float = GROW_INTERVAL_S,
    protected: frozenset[JobId] = frozenset(),
    hints: Hints | None = None,
    releasing: Mapping[JobId, int] | None = None,
    in_flight: Sequence[Gang] = (),
    awaiting: frozenset[JobId] = frozenset(),
) -> CycleResult:
    """Run one cycle over `queue` (the pending gangs) and return the decisions.

    `nominated` are placements earlier cycles promised to preemptors whose
    victims may still be terminating; those nodes are held for them, and until
    a nominee is admitted its GPUs count against its quotas and the reserve as
    if it ran, as in the cycle that nominated it: a gang decided after it may not
    take what its admission will need. With a `timer` (a monotonic clock), each
    decision's duration is recorded. Running elastic gangs are grown
    (`result.resizes`) at most once per `grow_interval` seconds each.
    `protected` are running gangs that earlier nominations evict or shrink and
    that have not been yet: they are not chosen again. `releasing` says how
    many workers each of them keeps (0: evicted); what they give back is not
    counted, so that it is not counted twice, for them and for their nominee.
    `in_flight` are nominees (in `nominated`, not in `queue`) that are not decided
    this cycle, a write of theirs being in flight: their nodes stay held and their
    GPUs counted all the same. `awaiting` are nominees some of whose victims or
    shrunk gangs still run as they were: they wait, whatever else would fit, for
    a nominee admitted while its victims run would hold its GPUs beside theirs.

    A preemptor decided in this cycle is placed in the snapshot as if its victims
    were gone (their quota is its), but their pods hold their GPUs until they
    terminate: the nodes they run on are held for it for the rest of the cycle, so
    no gang decided after it is admitted onto GPUs still in use.
    """
    result = CycleResult(hints=hints or Hints())
    budget = max(0, policy.max_preemptions_per_hour - preemptions_last_hour)
    state = _State(
        budget=budget,
        nominated=nominated or {},
        protected=protected,
        hints=hints or Hints(),
        awaiting=awaiting,
        # With no preemption left this cycle (the budget only goes down) no victim
        # is ever looked for: the shortlist is not built.
        victims=_Victims(snap, policy, now) if policy.preemption_enabled and budget > 0 else None,
    )
    for job, placement in state.nominated.items():
        for n in placement.nodes():
            state.hold(n, job)
    for job, keep in (releasing or {}).items():
        r = snap.running.get(job)
        if r is not None and keep < r.gang.workers:
            # its ResourceQuota counts its pods until they are gone
            snap.count(replace(r.gang, workers=r.gang.workers - keep), -1, namespace=False)
    for g in chain(queue, in_flight) if state.nominated else ():
        if g.id in state.nominated and g.id not in snap.running:
            snap.count(g, +1)
            state.claimed.add(g.id)
    started = timer() if timer else 0.0
    ordered = order(snap, policy, queue)
    result.order = [g.id for g in ordered]
    for g in ordered:
        t0 = timer() if timer else 0.0
        decision = _decide(snap, policy, state, g, now)
        result.decisions.append(decision)
        if isinstance(decision, Preempt):
            _retry_waiting(snap, policy, state, result.decisions, now)
        if timer:
            result.decision_seconds.append(timer() - t0)
    for g in state.namespace_held:  # the snapshot as landed (the simulator keeps it)
        snap.count_namespace(g, -1)
    grown = timer() if timer else 0.0
    result.resizes = _grow(snap, policy, state, result.decisions, now, grow_interval)
    if timer:
        result.phase_seconds = {"schedule": grown - started, "grow": timer() - grown}
    if state.reserved_for is not None:
        result.reserved_for = state.reserved_for.id
        result.reserved_nodes = state.nodes_of(state.reserved_for.id)
    return result


def _retry_waiting(
    snap: Snapshot, policy: SchedulingPolicy, state: _State, decisions: list[Decision], now: float
) -> None:
    """A preemption can free more than its preemptor takes; gangs ahead of it
    that were blocked by capacity get the surplus (or preempt in turn) before
    anyone behind it. Restarts from the top after each change, so the queue
    order holds; ends because every change admits a gang or evicts one."""
    changed = True
    while changed:
        changed = False
        for i, d in enumerate(decisions):
            if not (isinstance(d, Pending) and d.code in ("Capacity", "Reserved")):
                continue
            if state.nominated.get(d.gang.id):
                continue
            again = _decide(snap, policy, state, d.gang, now)
            if not isinstance(again, Pending):
                decisions[i] = again
                changed = True
                break


def _admit(
    snap: Snapshot,
    policy: SchedulingPolicy,
    state: _State,
    g: Gang,
    placement: Placement,
    now: float,
) -> Admit:
    borrowed = _borrowed(snap, policy, g)
    snap.assume(Running(g, placement, now))
    _placed(state, g)
    return Admit(g, placement, borrowed)


def _gives_back(snap: Snapshot, state: _State, r: Running, keep: int) -> None:
    """`r` is evicted (`keep` 0) or shrunk to `keep` workers for a preemptor decided
    this cycle: its pods hold their GPUs, and its ResourceQuota counts them, until
    they terminate."""
    state.releasing.update(r.placement.nodes())
    state.held_version += 1
    back = replace(r.gang, workers=r.gang.workers - keep)
    snap.count_namespace(back, +1)
    state.namespace_held.append(back)


def _placed(state: _State, g: Gang) -> None:
    """`g` is placed (admitted, or nominated where it preempts or shrinks others): the
    nodes it held this cycle (its reservation) are free for the gangs after it."""
    state.release(g.id)
    if state.reserved_for is not None and state.reserved_for.id == g.id:
        state.reserved_for = None


def _kind(state: _State, g: Gang, now: float) -> tuple[object, ...]:
    """Everything of `g` a decision reads but its name, age and runtime: two gangs
    of one kind get the same decision from the same snapshot and state (the runtime
    only says whether it may use the reservation's nodes, which is in the kind)."""
    backfill = g.preemptible or (
        state.reserved_start is not None
        and g.expected_duration is not None
        and now + g.expected_duration <= state.reserved_start
    )
    return (
        namespace_of(g.id), g.project, g.user, g.tier, g.priority, g.workers, g.pod,
        g.preemptible, g.may_preempt, g.min_workers, g.max_workers, g.base_workers, backfill,
    )  # fmt: skip


def _decide(
    snap: Snapshot, policy: SchedulingPolicy, state: _State, g: Gang, now: float
) -> Decision:
    """`_decided`, or, when a gang of the same kind was left waiting and since then
    nothing it read has changed (the snapshot's `version`, the state's `token`),
    that gang's reason: a long queue of gangs alike behind a full cluster or a
    spent quota costs a lookup each, not the checks again. A gang that holds
    nodes (a nomination, the reservation) is always decided afresh."""
    if g.id in state.nominated or (
        state.reserved_for is not None and state.reserved_for.id == g.id
    ):
        return _decided(snap, policy, state, g, now)
    kind = _kind(state, g, now)
    before = (snap.version, *state.token())
    seen = state.waiting.get(kind)
    if seen is not None and seen[0] == before:
        return Pending(g, seen[1].reason, seen[1].code, seen[1].held)
    decision = _decided(snap, policy, state, g, now)
    if isinstance(decision, Pending) and (snap.version, *state.token()) == before:
        state.waiting[kind] = (before, decision)
    return decision


def _decided(
    snap: Snapshot, policy: SchedulingPolicy, state: _State, g: Gang, now: float
) -> Decision:
    if g.id in state.claimed:  # a nominee: decided on what it does not hold yet
        if g.id in state.awaiting:
            return Pending(g, _WAITING, "Capacity")
        state.claimed.discard(g.id)
        snap.count(g, -1)
        decision = _decided(snap, policy, state, g, now)
        if not isinstance(decision, Admit):  # `_admit` counted it as running
            snap.count(g, +1)
            state.claimed.add(g.id)
        return decision
    refused = _refused(snap, policy, g)
    if refused is not None:
        return Pending(g, refused, "Refused")
    exclude = _excluded(state, g, now)
    held = quota(snap, policy, g) or _lend_limit(snap, policy, state.hints, g)
    if held is not None:
        if state.nominated.get(g.id):  # its shrinks have not landed yet
            return Pending(g, _WAITING, "Capacity")
        if not snap.shrinkable.get(g.project):
            return Pending(g, held.reason, "Quota", held)
        # The project's (or user's) own elastic gangs give back what they grew by.
        lent = _shrink(
            snap, policy, g, now=now, budget=0, exclude=exclude, holder=False, project=g.project,
            protected=state.protected, hints=state.hints,
        )  # fmt: skip
        if lent is not None:
            return _shrink_for(snap, state, g, lent, now)
        return Pending(g, held.reason, "Quota", held)
    over_reserve = _outside_reserve(snap, policy, g)
    placement = None
    if over_reserve is None:
        promised = state.nominated.get(g.id)
        if promised and _still_fits(snap, g, promised):
            placement = promised  # a nominee takes the devices it was promised
        else:
            # elsewhere, never on a node it shares with another nominee: the devices
            # there it was not promised are the other's
            shared = _shared_holds(state, g) if promised else _NO_NODES
            placement = place(snap, g, exclude=exclude | shared if shared else exclude)
    if placement is not None:
        return _admit(snap, policy, state, g, placement, now)
    if state.nominated.get(g.id):
        return Pending(g, _WAITING, "Capacity")
    holder = state.reserved_for is not None and state.reserved_for.id == g.id
    shrinks = None
    if any(snap.shrinkable.values()):
        shrinks = _shrink(
            snap, policy, g, now=now, budget=state.budget, exclude=exclude, holder=holder,
            protected=state.protected,
        )  # fmt: skip
    if shrinks is not None:
        return _shrink_for(snap, state, g, shrinks, now)
    victims = _preempt(
        snap, policy, g, now=now, budget=state.budget, exclude=exclude, holder=holder,
        protected=state.protected, hints=state.hints, victims=state.victims,
    )  # fmt: skip
    if victims is not None:
        needed, placement = victims
        for r in needed:
            snap.forget(r.gang.id)
            _gives_back(snap, state, r, 0)
        snap.assume(Running(g, placement, now))
        _placed(state, g)
        state.budget -= len(needed)
        names = ", ".join(sorted(r.gang.id for r in needed))
        return Preempt(
            g,
            tuple(sorted(r.gang.id for r in needed)),
            placement,
            f"preempting {names} to free {format_gpus(g.gpu_total)} GPUs",
        )
    # Nothing since `over_reserve` freed GPUs: a failed search gives back all it took.
    reason = over_reserve or shortfall(snap, g, exclude=exclude)
    held_here = exclude and fits(snap, g)
    if held_here:
        return Pending(g, f"{reason}; the free GPUs are held for a gang ahead of it", "Reserved")
    if state.reserved_for is None:
        _reserve(snap, state, g)
    return Pending(g, reason, "Capacity")
