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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

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
from controller.nodehealth import unhealthy_gpus
from controller.quantity import QuantityError, parse_quantity
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Foreign, Snapshot, Usage
from controller.scheduler.types import (
    MILLI,
    Gang,
    JobId,
    NamespaceQuota,
    Node,
    Placement,
    PodPlacement,
    Running,
    Taint,
)

__all__ = [
    "JobView",
    "Memo",
    "build_snapshot",
    "container_defaults",
    "job_views",
    "namespace_quotas",
    "node_of",
    "node_ready",
    "pod_requests",
    "pod_terminal",
]

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
    alloc = status.get("allocatable") or {}
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
        schedulable=not spec.get("unschedulable") and node_ready(obj),
        unhealthy=unhealthy_gpus(obj),
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
    pods: Iterable[Obj],
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
    which the jobs' pods will get from the API server."""
    defaults = defaults or {}
    by_job: dict[tuple[str, str], list[Obj]] = {}
    for p in pods:
        meta = p["metadata"]
        name = (meta.get("labels") or {}).get(LABEL_JOB)
        if name:
            by_job.setdefault((meta.get("namespace", ""), name), []).append(p)
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
        mine = [
            p
            for p in by_job.get((meta.get("namespace", ""), meta["name"]), [])
            if any(
                r.get("uid") == meta.get("uid") for r in p["metadata"].get("ownerReferences", ())
            )
        ]
        out.append(JobView(obj, job_id, spec, gang, error, admission, mine))
    return out


def build_snapshot(
    nodes: Sequence[Node],
    pods: Iterable[Obj],
    running: Sequence[Running],
    owned: set[tuple[str, str]],
    *,
    levels: Sequence[str],
    reserve_tiers: frozenset[str],
    memo: Memo | None = None,
    quotas: Mapping[str, NamespaceQuota] | None = None,
) -> Snapshot:
    """The cycle's snapshot: `running` gangs placed as recorded, and every other live
    pod on a node (those not in `owned`, the (namespace, name) of running gangs'
    pods) held as foreign. Foreign GPUs take the lowest device indices and the
    running gangs the next ones, so the two never claim the same device. `memo`
    keeps the pods' requests. `quotas` are the namespaces' ResourceQuota
    ceilings; every other live pod of those namespaces, on a node or not,
    counts against its namespace's quota, as the API server counts it."""
    requests = pod_requests if memo is None else memo.requests
    by_name = {n.name: n for n in nodes}
    quotas = quotas or {}
    foreign: dict[str, list[int]] = {}
    other: dict[str, Usage] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        meta = p["metadata"]
        if pod_terminal(p) or (meta.get("namespace", ""), meta["name"]) in owned:
            continue
        ns = meta.get("namespace", "")
        if ns in quotas:
            g, c, m = requests(p)
            u = other.get(ns, (0, 0, 0, 0))
            other[ns] = (u[0] + g * MILLI, u[1] + c, u[2] + m, u[3] + 1)
        if not node or node not in by_name:
            continue
        gpus, cpu, mem = requests(p)
        held = foreign.setdefault(node, [0, 0, 0])
        held[0] += gpus
        held[1] += cpu
        held[2] += mem
    used: dict[str, int] = {}
    for r in running:
        for where in r.placement.pods:
            used[where.node] = used.get(where.node, 0) + r.gang.pod.gpus
    holds = []
    for name, (gpus, cpu, mem) in foreign.items():
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
        namespace_quota=quotas,
        namespace_other=other,
    )
