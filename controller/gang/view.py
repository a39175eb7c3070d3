"""From the informers' raw objects to what one scheduling cycle works on.

Nodes become `Node`s (allocatable GPUs, CPU and memory, labels, taints,
readiness); every TrainingJob becomes a `JobView` (its spec, its gang under
the current policy, its recorded decision, its pods); the admitted gangs
become `Running`s; and every other pod bound to a node — another
scheduler's, a gangops pod of an old attempt or an evicted gang still
terminating — holds its GPUs as `Foreign`. The same code builds the
controller's cycle and `gangops explain`'s dry run, so the two cannot
disagree. Pure: dicts in, values out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar, cast

from controller.gang.record import Admission
from controller.jobs.pods import LABEL_ATTEMPT, LABEL_JOB
from controller.jobs.spec import (
    GPU_RESOURCE,
    ContainerDefaults,
    JobSpec,
    SpecError,
    effective_request,
    parse_job,
    to_gang,
)
from controller.nodehealth import FAULT_TAINT, unhealthy_gpus
from controller.quantity import QuantityError, parse_quantity
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Foreign, NodeBase, Snapshot, Usage, node_base
from controller.scheduler.types import (
    MILLI,
    Gang,
    JobId,
    NamespaceQuota,
    Node,
    Placement,
    PodPlacement,
    PodShape,
    Running,
    Taint,
)

__all__ = [
    "JobView",
    "Memo",
    "PodIndex",
    "PodView",
    "SnapshotCache",
    "build_snapshot",
    "container_defaults",
    "job_views",
    "namespace_quotas",
    "node_of",
    "node_ready",
    "pod_requests",
    "pod_terminal",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _quantity(raw: object, *, milli: bool = False) -> int:
    if raw is None:
        return 0
    try:
        q = parse_quantity(raw)  # type: ignore[arg-type]
    except QuantityError:
        return 0
    return int(q * 1000) if milli else int(q)


def node_ready(obj: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True."""
    conds = (obj.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def node_of(obj: Mapping[str, Any]) -> Node:
    """A Node object as the scheduler sees it."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    alloc, capacity = status.get("allocatable") or {}, status.get("capacity") or {}
    labels = meta.get("labels") or {}
    taints = tuple(
        Taint(
            key=str(t.get("key", "")),
            effect=str(t.get("effect", "")),
            value=str(t.get("value") or ""),
        )
        for t in spec.get("taints") or ()
    )
    return Node(
        name=meta["name"],
        gpus=_quantity(alloc.get(GPU_RESOURCE)),
        cpu_milli=_quantity(alloc.get("cpu"), milli=True),
        memory=_quantity(alloc.get("memory")),
        gpu_model=str(labels.get("nvidia.com/gpu.product", "")),
        labels=labels,
        taints=taints,
        # gangops' own fault taint takes the node out whatever a job tolerates (a job
        # tolerating every taint ran on a node an alert action had tainted and an
        # operator had uncordoned)
        schedulable=not spec.get("unschedulable")
        and node_ready(obj)
        and not any(t.key == FAULT_TAINT for t in taints),
        unhealthy=unhealthy_gpus(obj),
        gpu_capacity=_quantity(capacity.get(GPU_RESOURCE)),
    )


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod has finished (its resources are free)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int, int]:
    """(GPUs, CPU millicores, memory bytes) the pod requests, init containers
    counted as Kubernetes counts them (`effective_request`); limits for GPUs
    when requests are absent, as the API server defaults them."""
    spec = pod.get("spec") or {}

    def gpus(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        return _quantity(req.get(GPU_RESOURCE, lim.get(GPU_RESOURCE)))

    def request(name: str, *, milli: bool = False) -> Callable[[Mapping[str, Any]], int]:
        def amount(c: Mapping[str, Any]) -> int:
            req = (c.get("resources") or {}).get("requests") or {}
            return _quantity(req.get(name), milli=milli)

        return amount

    return (
        effective_request(spec, gpus),
        effective_request(spec, request("cpu", milli=True)),
        effective_request(spec, request("memory")),
    )


_QUOTA_KEYS = {
    "gpu_milli": (f"requests.{GPU_RESOURCE}",),
    "cpu_milli": ("requests.cpu", "cpu"),
    "memory": ("requests.memory", "memory"),
    "pods": ("pods", "count/pods"),
}
"""The `hard` keys of a ResourceQuota that limit what pods request."""


def namespace_quotas(quotas: Iterable[Mapping[str, Any]]) -> dict[str, NamespaceQuota]:
    """Each namespace's ResourceQuota ceiling as the API server enforces it: per
    resource the tightest `hard` of the namespace's quotas. Quotas with scopes
    (which hold only some pods) and amounts that do not parse are left out."""
    tightest: dict[str, dict[str, int]] = {}
    for q in quotas:
        spec = q.get("spec") or {}
        if spec.get("scopes") or spec.get("scopeSelector"):
            continue
        ns = str(q["metadata"].get("namespace", ""))
        hard = spec.get("hard") or {}
        limits = tightest.setdefault(ns, {})
        for field_name, keys in _QUOTA_KEYS.items():
            for key in keys:
                if key not in hard:
                    continue
                try:
                    amount = parse_quantity(hard[key])
                except QuantityError:
                    continue
                value = int(amount * (MILLI if field_name.endswith("milli") else 1))
                limits[field_name] = min(limits.get(field_name, value), value)
    return {ns: NamespaceQuota(**limits) for ns, limits in tightest.items() if limits}


def container_defaults(limit_ranges: Iterable[Mapping[str, Any]]) -> dict[str, ContainerDefaults]:
    """Each namespace's LimitRange defaults for a container's CPU and memory
    requests (`defaultRequest` of its `type: Container` limits, which the API server
    fills in from `default`, then `max` or `min`, when a LimitRange is stored). With
    several LimitRanges the first by name that sets a resource gives it, as the
    LimitRanger plugin applies them in turn and never overwrites a request."""
    found: dict[str, dict[str, int]] = {}
    ordered = sorted(
        limit_ranges, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
    )
    for lr in ordered:
        ns = str(lr["metadata"].get("namespace", ""))
        for item in (lr.get("spec") or {}).get("limits") or ():
            if not isinstance(item, Mapping) or item.get("type") != "Container":
                continue
            for name, field_name in (("cpu", "cpu_milli"), ("memory", "memory")):
                raw = (item.get("defaultRequest") or {}).get(name)
                if raw is None or field_name in found.get(ns, {}):
                    continue
                try:
                    amount = parse_quantity(raw)
                except QuantityError:
                    continue
                value = int(amount * MILLI) if name == "cpu" else int(amount)
                found.setdefault(ns, {})[field_name] = value
    return {ns: ContainerDefaults(**d) for ns, d in found.items()}


_T = TypeVar("_T")
_Parsed = tuple[JobSpec | None, Gang | None, str | None, Admission | None]


_CARRIED = frozenset({"node", "pod"})
"""The kinds of `Memo` entry a step with nothing to decide does not read."""


class Memo:
    """What a step parsed from raw objects, kept for the next one: a scheduling step
    reads every node, job and pod, but between two steps only a few change. An
    entry is reused while the object's uid and resourceVersion are the same (and,
    for a job, the policy object is the same); objects without both are parsed
    every time. Entries not used during one step are dropped at the next `next_step`.
    Not thread-safe: one scheduling loop owns it."""

    def __init__(self) -> None:
        self._old: dict[tuple[str, str, str], tuple[object, Any]] = {}
        self._new: dict[tuple[str, str, str], tuple[object, Any]] = {}
        self._inputs: dict[tuple[int, ContainerDefaults], tuple[object, ContainerDefaults]] = {}
        """One (policy, defaults) value per distinct pair, so a job's entry is reused
        by identity while neither changed."""

    def next_step(self) -> None:
        """Start a step: forget what the last-but-one step used and this one did not."""
        self._old, self._new = self._new, {}

    def carry(self) -> None:
        """Keep the last step's node and pod entries for the next, used or not: for a
        step with nothing to decide, which reads the jobs but no node or pod, so that
        the next full step does not parse them all again. The jobs' entries it did
        not use go as usual: those of jobs deleted during a stretch of such steps,
        and of their records before each change, would otherwise pile up."""
        for key, hit in self._old.items():
            if key[0] in _CARRIED:
                self._new.setdefault(key, hit)

    def _memo(self, kind: str, obj: Mapping[str, Any], extra: object, fn: Callable[[], _T]) -> _T:
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not rv:
            return fn()
        key = (kind, str(uid), str(rv))
        hit = self._new.get(key) or self._old.get(key)
        if hit is None or hit[0] is not extra:
            hit = (extra, fn())
        self._new[key] = hit
        return cast(_T, hit[1])

    def node(self, obj: Mapping[str, Any]) -> Node:
        """`node_of(obj)`, memoised."""
        return self._memo("node", obj, None, lambda: node_of(obj))

    def requests(self, pod: Mapping[str, Any]) -> tuple[int, int, int]:
        """`pod_requests(pod)`, memoised."""
        return self._memo("pod", pod, None, lambda: pod_requests(pod))

    def owned(self, uid: str, pods: Mapping[tuple[str, str], Obj]) -> list[Obj]:
        """Those of `pods` (a job's, `PodView.job_pods`) whose owner is the job of this
        uid, by name; memoised while that mapping is the same object (none of them
        changed), so a step costs the jobs whose pods changed, not every pod."""
        mine = self.kept("owned", uid, (pods,))
        if mine is None:
            mine = _owned((o for _, o in sorted(pods.items())), uid)
            self.keep("owned", uid, (pods,), mine)
        return cast(list[Obj], mine)

    def kept(self, kind: str, uid: str, inputs: tuple[object, ...]) -> Any:
        """What `keep` stored for (`kind`, `uid`) from these very `inputs` (each the
        same object), or None."""
        hit = self._new.get((kind, uid, "")) or self._old.get((kind, uid, ""))
        if hit is None:
            return None
        was = cast(tuple[object, ...], hit[0])
        if len(was) != len(inputs) or any(a is not b for a, b in zip(was, inputs, strict=True)):
            return None
        self._new[(kind, uid, "")] = hit
        return hit[1]

    def keep(self, kind: str, uid: str, inputs: tuple[object, ...], value: object) -> None:
        """Store what was made of `inputs` (objects that are replaced, never changed,
        when what they hold changes) for `kept`."""
        self._new[(kind, uid, "")] = (inputs, value)

    def job(
        self,
        obj: Mapping[str, Any],
        policy: SchedulingPolicy,
        defaults: ContainerDefaults | None = None,
    ) -> _Parsed:
        """A job's spec, gang under `policy` and its namespace's `defaults`, error
        and record, memoised."""
        inputs: object = policy
        if defaults is not None:
            key = (id(policy), defaults)
            if key not in self._inputs:
                if len(self._inputs) > 1024:
                    self._inputs.clear()
                self._inputs[key] = (policy, defaults)
            inputs = self._inputs[key]
        return self._memo("job", obj, inputs, lambda: _parse(obj, policy, defaults))


def _parse(
    obj: Mapping[str, Any], policy: SchedulingPolicy, defaults: ContainerDefaults | None = None
) -> _Parsed:
    spec: JobSpec | None = None
    gang: Gang | None = None
    error: str | None = None
    try:
        spec = parse_job(obj, defaults)
        gang = to_gang(spec, policy)
    except SpecError as e:
        error = str(e)
    except Exception as e:  # a bug reading one job must not stop every job's step
        meta = obj.get("metadata") or {}
        log.exception("could not read job=%s/%s", meta.get("namespace", ""), meta.get("name", ""))
        spec, gang = None, None
        error = (
            f"gangops could not read this job ({type(e).__name__}: {e}); "
            "the controller's log has the traceback"
        )
    return spec, gang, error, Admission.from_status(obj.get("status") or {})


@dataclass
class JobView:
    """One TrainingJob, read for the cycle."""

    obj: Obj
    id: JobId
    spec: JobSpec | None
    gang: Gang | None
    error: str | None
    """Why the job cannot be scheduled as written (spec or policy), or None."""
    admission: Admission | None
    pods: list[Obj] = field(default_factory=list)
    """Every pod of the job, of every attempt."""

    @property
    def status(self) -> Mapping[str, Any]:
        """The job's status (empty when none was written yet)."""
        return self.obj.get("status") or {}

    def attempt_pods(self) -> list[Obj]:
        """Pods of the recorded attempt."""
        if self.admission is None:
            return []
        want = str(self.admission.attempt)
        return [p for p in self.pods if p["metadata"].get("labels", {}).get(LABEL_ATTEMPT) == want]


def job_views(
    jobs: Iterable[Obj],
    pods: Iterable[Obj] | PodView,
    policy: SchedulingPolicy,
    *,
    overrides: Mapping[JobId, Admission | None] | None = None,
    memo: Memo | None = None,
    defaults: Mapping[str, ContainerDefaults] | None = None,
) -> list[JobView]:
    """Every job with its spec, gang, record and pods. `overrides` replaces the
    record of jobs whose decision was written (or is being written) but whose
    new status the watch has not delivered yet; `memo` keeps the parsed jobs;
    `defaults` are the namespaces' LimitRange defaults (`container_defaults`),
    which the jobs' pods will get from the API server. `pods` is every pod, or
    the `PodView` the controller keeps from its watch."""
    defaults = defaults or {}
    of_job = pods.of_job if isinstance(pods, PodView) else _grouped(pods)
    out = []
    for obj in jobs:
        meta = obj["metadata"]
        job_id = JobId(f"{meta.get('namespace', '')}/{meta['name']}")
        d = defaults.get(meta.get("namespace", ""))
        spec, gang, error, admission = (
            _parse(obj, policy, d) if memo is None else memo.job(obj, policy, d)
        )
        if overrides is not None and job_id in overrides:
            admission = overrides[job_id]
        namespace, uid = meta.get("namespace", ""), meta.get("uid")
        if memo is not None and isinstance(pods, PodView) and uid:
            mine = memo.owned(str(uid), pods.job_pods(namespace, meta["name"]))
        else:
            mine = _owned(of_job(namespace, meta["name"]), uid)
        out.append(JobView(obj, job_id, spec, gang, error, admission, mine))
    return out


def _owned(pods: Iterable[Obj], uid: object) -> list[Obj]:
    """The pods whose owner is the job of this uid (a job deleted and created again
    under its name has another)."""
    return [
        p
        for p in pods
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences", ()))
    ]


def _grouped(pods: Iterable[Obj]) -> Callable[[str, str], list[Obj]]:
    """`PodView.of_job` over a list of pods."""
    by_job: dict[tuple[str, str], list[Obj]] = {}
    for p in pods:
        meta = p["metadata"]
        name = (meta.get("labels") or {}).get(LABEL_JOB)
        if name:
            by_job.setdefault((meta.get("namespace", ""), name), []).append(p)

    def of_job(namespace: str, name: str) -> list[Obj]:
        return sorted(by_job.get((namespace, name), []), key=lambda p: p["metadata"]["name"])

    return of_job


def build_snapshot(
    nodes: Sequence[Node],
    pods: Iterable[Obj] | PodView,
    running: Sequence[Running],
    owned: Iterable[tuple[str, str]],
    *,
    levels: Sequence[str],
    reserve_tiers: frozenset[str],
    memo: Memo | None = None,
    quotas: Mapping[str, NamespaceQuota] | None = None,
    fragmentation: FragModel | None = None,
) -> Snapshot:
    """The cycle's snapshot: `running` gangs placed as recorded, and every other live
    pod on a node (those not in `owned`, the (namespace, name) of running gangs'
    pods) held as foreign. Foreign GPUs take the lowest device indices and the
    running gangs the next ones, so the two never claim the same device. `memo`
    keeps the pods' requests. `quotas` are the namespaces' ResourceQuota
    ceilings; every other live pod of those namespaces, on a node or not,
    counts against its namespace's quota, as the API server counts it. `pods` is
    every pod, or the `PodView` the controller keeps from its watch (then the work
    grows with the running gangs' pods, not with every pod). `fragmentation` is the
    placement's model of the workload (`workload.Workload`; None: best-fit)."""
    by_name = {n.name: n for n in nodes}
    quotas = quotas or {}
    if isinstance(pods, PodView):
        view = pods
    else:
        view = PodIndex.of(pods, requests=pod_requests if memo is None else memo.requests).freeze()
    foreign, other = view.held(owned, by_name, quotas)
    used: dict[str, int] = {}
    for r in running:
        for where in r.placement.pods:
            used[where.node] = used.get(where.node, 0) + r.gang.pod.gpus
    holds = []
    for name, (gpus, cpu, mem, _) in foreign.items():
        room = max(0, by_name[name].gpus - used.get(name, 0))
        holds.append(Foreign(name, min(gpus, room), cpu, mem))
    next_device = {f.node: f.gpus for f in holds}
    placed = []
    for r in running:
        pods_out = []
        for where in r.placement.pods:
            node = by_name.get(where.node)
            start = next_device.get(where.node, 0)
            count = r.gang.pod.gpus
            top = (node.gpus if node else count) - 1
            devices = tuple(min(start + i, max(top, 0)) for i in range(count))
            next_device[where.node] = start + count
            pods_out.append(PodPlacement(where.node, devices))
        placed.append(Running(r.gang, Placement(tuple(pods_out)), r.started))
    return Snapshot(
        nodes,
        levels=levels,
        running=placed,
        foreign=holds,
        reserve_tiers=reserve_tiers,
        fragmentation=fragmentation,
        namespace_quota=quotas,
        namespace_other=other,
    )


_Held = tuple[int, int, int, int]
"""GPUs (whole, or milli for a namespace), CPU millicores, memory bytes, pods."""
_ZERO: _Held = (0, 0, 0, 0)
_NO_PODS: Mapping[tuple[str, str], Obj] = MappingProxyType({})


def _plus(a: _Held, b: _Held, sign: int) -> _Held:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2], a[3] + sign * b[3])


def _add(totals: dict[str, _Held], name: str, held: _Held, sign: int) -> None:
    """`totals[name] += sign * held`, the entry dropped once it counts no pod."""
    left = _plus(totals.get(name, _ZERO), held, sign)
    if left[3]:
        totals[name] = left
    else:
        totals.pop(name, None)


def _same(a: Running, b: Running) -> bool:
    return a is b or (
        (a.gang is b.gang or a.gang == b.gang)
        and (a.placement is b.placement or a.placement == b.placement)
        and a.started == b.started
    )


class _NodeEntry(NamedTuple):
    """One node as the last snapshot had it, and what that was built from."""

    node: Node | None
    """None: a node the running gangs name but the cluster does not list."""
    foreign: _Held | None
    """What the live pods outside the running gangs hold there."""
    devices: Mapping[tuple[JobId, int], tuple[int, ...]]
    """The devices of each running pod there: (gang, index in its placement)."""
    base: NodeBase | None
    """The node with all of that taken (schedulable nodes only)."""


class SnapshotCache:
    """`build_snapshot` across steps: the same snapshot, built from what changed.

    Between two steps few nodes, pods and running gangs change, yet a snapshot
    built anew takes every node, holds every foreign pod and places every running
    pod on its devices again. This keeps, per node, what the last snapshot was
    built from (the `Node`, what foreign pods hold there, the running pods there
    in order) and the node as it came out (`snapshot.node_base`), and builds again
    only the nodes where one of those changed: nodes whose object changed (a new
    `Node`), whose pods changed (the pod index's change log, and the pods that
    entered or left `owned`), and those of running gangs admitted, changed or
    gone. What foreign pods hold is kept the same way, from the pod index's
    changes. Each step's `Snapshot` starts from copies of the kept nodes
    (`Snapshot.resumed`), so what the cycle assumes and forgets never reaches
    them. Gangs that keep running must keep their order (which gives devices on
    a shared node); when they do not, or a step fails half-way, it starts over.
    Not thread-safe: one scheduling loop owns it."""

    def __init__(self) -> None:
        self._reset(())

    def _reset(self, levels: Sequence[str]) -> None:
        self._levels = tuple(levels)
        self._view: PodView | None = None
        self._owned: frozenset[tuple[str, str]] = frozenset()
        self._by_node: dict[str, _Held] = {}
        """What live pods outside `_owned` hold, per node (any node)."""
        self._by_ns: dict[str, _Held] = {}
        """The same per namespace (milli-GPUs)."""
        self._entries: dict[str, _NodeEntry] = {}
        self._gangs: dict[JobId, tuple[Running, Running]] = {}
        """Each running gang as given and as placed (devices counted), in order."""
        self._on: dict[str, dict[JobId, None]] = {}
        """Per node, the running gangs with a pod there."""

    def build(
        self,
        nodes: Sequence[Node],
        pods: PodView,
        running: Sequence[Running],
        owned: Iterable[tuple[str, str]],
        *,
        levels: Sequence[str],
        reserve_tiers: frozenset[str],
        quotas: Mapping[str, NamespaceQuota] | None = None,
        fragmentation: FragModel | None = None,
    ) -> Snapshot:
        """What `build_snapshot(nodes, pods, running, owned, ...)` returns."""
        try:
            return self._build(
                nodes, pods, running, frozenset(owned), levels=tuple(levels),
                reserve_tiers=reserve_tiers, quotas=quotas or {}, fragmentation=fragmentation,
            )  # fmt: skip
        except BaseException:
            self._reset(())
            raise

    def _build(
        self,
        nodes: Sequence[Node],
        pods: PodView,
        running: Sequence[Running],
        owned: frozenset[tuple[str, str]],
        *,
        levels: tuple[str, ...],
        reserve_tiers: frozenset[str],
        quotas: Mapping[str, NamespaceQuota],
        fragmentation: FragModel | None,
    ) -> Snapshot:
        by_name = {n.name: n for n in nodes}
        now = {r.gang.id: r for r in running}
        if len(by_name) != len(nodes) or len(now) != len(running):
            self._reset(())  # a name twice: left to the plain build, which takes both
            return build_snapshot(nodes, pods, running, owned, levels=levels,
                                  reserve_tiers=reserve_tiers, quotas=quotas,
                                  fragmentation=fragmentation)  # fmt: skip
        if levels != self._levels:
            self._reset(levels)
        self._hold(pods, owned)
        old = self._gangs
        changed = {g for g, r in now.items() if g not in old or not _same(old[g][0], r)}
        order = list(now)
        kept = [g for g in old if g in now and g not in changed]
        if kept != [g for g in order if g in old and g not in changed]:
            self._reset(levels)  # running gangs reordered: their devices may move
            return self._build(nodes, pods, running, owned, levels=levels,
                               reserve_tiers=reserve_tiers, quotas=quotas,
                               fragmentation=fragmentation)  # fmt: skip
        dirty: set[str] = set()
        for g in changed | (old.keys() - now.keys()):
            if g in old:
                for w in old[g][0].placement.pods:
                    dirty.add(w.node)
                    self._on[w.node].pop(g, None)
            if g in now:
                for w in now[g].placement.pods:
                    dirty.add(w.node)
                    self._on.setdefault(w.node, {})[g] = None
        entries, foreign = self._entries, self._by_node
        for n in nodes:
            e = entries.get(n.name)
            if e is None or (e.node is not n and e.node != n) or e.foreign != foreign.get(n.name):
                dirty.add(n.name)
        dirty.update(name for name in entries.keys() - by_name.keys() if entries[name].node)
        if dirty:
            pos = {g: i for i, g in enumerate(order)}
            for name in dirty:
                self._node(name, by_name.get(name), now, pos, levels)
        placed: dict[JobId, tuple[Running, Running]] = {}
        again = changed.union(*(self._on.get(name, ()) for name in dirty))
        for g, r in now.items():
            if g not in again:
                placed[g] = old[g]
                continue
            where = tuple(
                PodPlacement(w.node, entries[w.node].devices[(g, i)])
                for i, w in enumerate(r.placement.pods)
            )
            placed[g] = (r, Running(r.gang, Placement(where), r.started))
        self._gangs = placed
        other = {
            ns: self._by_ns[ns] for ns in pods.namespaces if ns in quotas and ns in self._by_ns
        }
        bases = []
        for n in nodes:
            base = entries[n.name].base
            if base is not None:
                bases.append(base)
        return Snapshot.resumed(
            bases,
            levels=levels,
            running=[p for _, p in placed.values()],
            reserve_tiers=reserve_tiers,
            fragmentation=fragmentation,
            namespace_quota=quotas,
            namespace_other=other,
        )

    def _node(
        self,
        name: str,
        node: Node | None,
        now: Mapping[JobId, Running],
        pos: Mapping[JobId, int],
        levels: Sequence[str],
    ) -> None:
        """Build node `name` again: foreign GPUs on the lowest devices, then the
        running pods there in the gangs' order, as `build_snapshot` does."""
        gangs = sorted(self._on.get(name, ()), key=pos.__getitem__)
        if node is None and not gangs:
            self._entries.pop(name, None)
            self._on.pop(name, None)
            return
        keys: list[tuple[JobId, int]] = []
        shapes: list[PodShape] = []
        for g in gangs:
            r = now[g]
            for i, w in enumerate(r.placement.pods):
                if w.node == name:
                    keys.append((g, i))
                    shapes.append(r.gang.pod)
        held = self._by_node.get(name) if node is not None else None
        hold = None
        if node is not None and held is not None:
            room = max(0, node.gpus - sum(s.gpus for s in shapes))
            hold = Foreign(name, min(held[0], room), held[1], held[2])
        start = hold.gpus if hold is not None else 0
        devices: list[tuple[int, ...]] = []
        for shape in shapes:
            count = shape.gpus
            top = (node.gpus if node else count) - 1
            devices.append(tuple(min(start + i, max(top, 0)) for i in range(count)))
            start += count
        base = None
        if node is not None and node.schedulable:
            taken = zip(shapes, devices, strict=True)
            base = node_base(node, levels=levels, foreign=hold, pods=taken)
        self._entries[name] = _NodeEntry(node, held, dict(zip(keys, devices, strict=True)), base)

    def _hold(self, view: PodView, owned: frozenset[tuple[str, str]]) -> None:
        """Bring what the live pods outside `owned` hold up to `view`: from the pods
        changed since the last view and those that entered or left `owned`, or, when
        the index cannot say what changed, from every pod."""
        last = self._view
        changed = None if last is None else view.changed_since(last)
        if last is None or changed is None:
            self._by_node, self._by_ns = dict(view.nodes), dict(view.namespaces)
            for key in owned:
                self._count(key, view.pods.get(key), -1)
        else:
            for key in changed | (owned ^ self._owned):
                if key not in self._owned:
                    self._count(key, last.pods.get(key), -1)
                if key not in owned:
                    self._count(key, view.pods.get(key), +1)
        self._view, self._owned = view, owned

    def _count(self, key: tuple[str, str], p: _Pod | None, sign: int) -> None:
        if p is None or p.held is None:
            return
        if p.node is not None:
            _add(self._by_node, p.node, p.held, sign)
        g, c, m, n = p.held
        _add(self._by_ns, key[0], (g * MILLI, c, m, n), sign)


class _Pod(NamedTuple):
    """What the snapshot needs of one pod, read once when it changes."""

    obj: Obj
    job: tuple[str, str] | None
    """(namespace, job name) from the pod's job label, if any."""
    node: str | None
    """The node it is bound to, if any."""
    held: _Held | None
    """(GPUs, CPU, memory, 1) it holds while it has not finished; None once it has."""


@dataclass(frozen=True)
class PodView:
    """The pods as one instant of the watch saw them (`PodIndex.freeze`): immutable,
    so a step reads it while the watch goes on."""

    pods: Mapping[tuple[str, str], _Pod]
    jobs: Mapping[tuple[str, str], Mapping[tuple[str, str], Obj]]
    nodes: Mapping[str, _Held]
    namespaces: Mapping[str, _Held]
    log: Sequence[tuple[str, str]] = field(default=(), compare=False, repr=False)
    """The index's log of changed pods (it only grows; a new one is started now
    and then): `changed_since` reads it."""
    seen: int = field(default=0, compare=False, repr=False)
    """How much of `log` this view includes."""

    def changed_since(self, older: PodView) -> set[tuple[str, str]] | None:
        """The pods that may differ between `older` (a view of the same index, taken
        before) and this one; None when the index cannot tell (a new log was started
        in between, or another index)."""
        if older.log is not self.log or older.seen > self.seen:
            return None
        return set(self.log[older.seen : self.seen])

    def of_job(self, namespace: str, name: str) -> list[Obj]:
        """The pods labelled with this job's name (any owner: `job_views` checks), by
        name: the same order however the pods came and went."""
        return [o for _, o in sorted(self.job_pods(namespace, name).items())]

    def job_pods(self, namespace: str, name: str) -> Mapping[tuple[str, str], Obj]:
        """The pods labelled with this job's name, by key: the same mapping, by
        identity, in every view until one of them changes (`PodIndex.put` replaces
        it), so what is read from it can be kept (`Memo.owned`)."""
        return self.jobs.get((namespace, name), _NO_PODS)

    def held(
        self,
        owned: Iterable[tuple[str, str]],
        nodes: Container[str],
        quotas: Container[str],
    ) -> tuple[dict[str, _Held], dict[str, Usage]]:
        """What the live pods outside `owned` hold: per node among `nodes` (GPUs, CPU,
        memory, pods), and per namespace among `quotas` (milli-GPUs, CPU, memory,
        pods), namespaces and nodes where none is left out. The totals are kept
        as the pods change, so this costs what `owned` holds, not every pod."""
        by_node = {n: h for n, h in self.nodes.items() if n in nodes}
        by_ns = {ns: h for ns, h in self.namespaces.items() if ns in quotas}
        for key in owned:
            p = self.pods.get(key)
            if p is None or p.held is None:
                continue
            if p.node is not None and p.node in by_node:
                by_node[p.node] = _plus(by_node[p.node], p.held, -1)
            if key[0] in by_ns:
                g, c, m, n = p.held
                by_ns[key[0]] = _plus(by_ns[key[0]], (g * MILLI, c, m, n), -1)
        return (
            {n: h for n, h in by_node.items() if h[3]},
            {ns: h for ns, h in by_ns.items() if h[3]},
        )


class PodIndex:
    """Every pod, with the totals a snapshot needs kept up to date as pods change
    (`put`, `remove`), so a step need not walk every pod: per node and per
    namespace what the live pods hold, and each job's pods. The controller's pod
    informer calls it on every change of its cache, under the cache's lock
    (`Informer(on_store=...)`), and a step takes a `freeze` under the same lock;
    `PodIndex.of` builds one from a list (`gangops explain`, tests). Pure."""

    def __init__(
        self, requests: Callable[[Mapping[str, Any]], tuple[int, int, int]] = pod_requests
    ) -> None:
        self._requests = requests
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._jobs: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._nodes: dict[str, _Held] = {}
        self._namespaces: dict[str, _Held] = {}
        self._log: list[tuple[str, str]] = []
        """Every pod put or removed since the log was started (`PodView.changed_since`)."""

    @classmethod
    def of(
        cls,
        pods: Iterable[Obj],
        *,
        requests: Callable[[Mapping[str, Any]], tuple[int, int, int]] = pod_requests,
    ) -> PodIndex:
        """An index of these pods, built from scratch."""
        index = cls(requests)
        for p in pods:
            index.put(p)
        return index

    def update(self, key: tuple[str, str], obj: Obj | None) -> None:
        """The cache now holds `obj` under `key` (None: nothing)."""
        if obj is None:
            self.remove(key)
        else:
            self.put(obj)

    def put(self, obj: Obj) -> None:
        """A pod was added or changed."""
        meta = obj["metadata"]
        key = (meta.get("namespace", "") or "", meta["name"])
        self.remove(key)
        self._logged(key)
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        node = (obj.get("spec") or {}).get("nodeName") or None
        held: _Held | None = None
        if not pod_terminal(obj):
            g, c, m = self._requests(obj)
            held = (g, c, m, 1)
            if node is not None:
                self._nodes[node] = _plus(self._nodes.get(node, _ZERO), held, +1)
            ns_held = (g * MILLI, c, m, 1)
            self._namespaces[key[0]] = _plus(self._namespaces.get(key[0], _ZERO), ns_held, +1)
        job_key = (key[0], job) if job else None
        if job_key is not None:
            self._jobs[job_key] = {**self._jobs.get(job_key, {}), key: obj}  # copy on write
        self._pods[key] = _Pod(obj, job_key, node, held)

    def remove(self, key: tuple[str, str]) -> None:
        """A pod was deleted (nothing happens if it was not there)."""
        p = self._pods.pop(key, None)
        if p is None:
            return
        self._logged(key)
        if p.held is not None:
            if p.node is not None:
                self._drop(self._nodes, p.node, p.held)
            g, c, m, n = p.held
            self._drop(self._namespaces, key[0], (g * MILLI, c, m, n))
        if p.job is not None:
            rest = {k: o for k, o in self._jobs[p.job].items() if k != key}
            if rest:
                self._jobs[p.job] = rest
            else:
                del self._jobs[p.job]

    def _logged(self, key: tuple[str, str]) -> None:
        """Log a change of pod `key`. The log starts again once it is longer than
        there are pods (reading it would cost more than a walk over them), so it
        stays bounded even while no step reads it."""
        if len(self._log) > max(len(self._pods), 1024):
            self._log = []
        self._log.append(key)

    @staticmethod
    def _drop(totals: dict[str, _Held], name: str, held: _Held) -> None:
        left = _plus(totals[name], held, -1)
        if left[3]:
            totals[name] = left
        else:
            del totals[name]

    def freeze(self) -> PodView:
        """The pods as they are now, immutable (shallow copies: every value is
        replaced, never changed, on an update), with the change log so far."""
        return PodView(
            dict(self._pods), dict(self._jobs), dict(self._nodes), dict(self._namespaces),
            self._log, len(self._log),
        )  # fmt: skip
