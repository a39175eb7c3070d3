"""Reading a TrainingJob: the object from the API server, into the scheduler's `Gang`.

The CRD's OpenAPI schema and CEL rules reject most malformed jobs at the
API server; this module is the second line (objects created before the CRD
was installed, fields the schema cannot check, a template without GPUs) and
it reports problems as sentences for the job's status instead of raising.
Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from controller.quantity import QuantityError, parse_quantity
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import Gang, JobId, PodShape, Requirement, Toleration

__all__ = [
    "GPU_RESOURCE",
    "LABEL_USER",
    "ContainerDefaults",
    "JobSpec",
    "SpecError",
    "effective_request",
    "parse_job",
    "to_gang",
]

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_USER = "ai.operator/user"


class SpecError(ValueError):
    """A TrainingJob that cannot be scheduled as written; the message says why."""


@dataclass(frozen=True)
class ContainerDefaults:
    """The CPU and memory requests a namespace's LimitRange gives a container that
    sets neither a request nor a limit for them (the LimitRanger admission plugin
    fills them in when the pod is created, so the ResourceQuota and the nodes see
    them); None: nothing is filled in."""

    cpu_milli: int | None = None
    memory: int | None = None
    """Bytes."""


@dataclass(frozen=True)
class JobSpec:
    """What the scheduler and the job controller need from a TrainingJob."""

    id: JobId
    namespace: str
    name: str
    uid: str
    generation: int
    user: str
    gang_size: int
    tier: str | None
    gpus_per_worker: int
    min_gpu: int
    max_gpu: int
    backoff_limit: int | None
    created: float
    """creationTimestamp as seconds since the epoch."""
    pod: PodShape

    @property
    def workers(self) -> int:
        """Worker pods of the gang."""
        return self.gang_size // self.gpus_per_worker


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list) or not containers:
        raise SpecError("spec.template.spec.containers must list at least one container")
    return [c for c in containers if isinstance(c, Mapping)]


def effective_request(
    pod_spec: Mapping[str, Any], amount: Callable[[Mapping[str, Any]], int]
) -> int:
    """What a pod asks of one resource, as Kubernetes counts it (scheduling and
    ResourceQuota alike): the larger of the app containers' sum (with the
    sidecars, init containers with `restartPolicy: Always`) and each init
    container's own request (with the sidecars started before it).
    `amount(container)` is one container's request."""
    sidecars = peak = 0
    for c in pod_spec.get("initContainers") or ():
        if not isinstance(c, Mapping):
            continue
        if c.get("restartPolicy") == "Always":
            sidecars += amount(c)
            peak = max(peak, sidecars)
        else:
            peak = max(peak, amount(c) + sidecars)
    apps = sum(amount(c) for c in pod_spec.get("containers") or () if isinstance(c, Mapping))
    return max(apps + sidecars, peak)


def _amount(c: Mapping[str, Any], section: str, name: str) -> int | None:
    """One container's `resources.<section>.<name>` in base units (milli for cpu),
    or None when it does not set it."""
    resources = c.get("resources") or {}
    amounts = resources.get(section) or {} if isinstance(resources, Mapping) else {}
    raw = amounts.get(name) if isinstance(amounts, Mapping) else None
    if raw is None:
        return None
    try:
        q = parse_quantity(raw)
    except QuantityError as e:
        raise SpecError(f"container {c.get('name', '?')}: {section}.{name}: {e}") from None
    return int(q * 1000) if name == "cpu" else int(q)


def _resource(pod_spec: Mapping[str, Any], section: str, name: str) -> int:
    """One resource of the pod (`effective_request`), in base units (milli for cpu)."""
    return effective_request(pod_spec, lambda c: _amount(c, section, name) or 0)


def _request(pod_spec: Mapping[str, Any], name: str, default: int | None) -> int:
    """What the pod will request of `name` (cpu or memory) once the API server has
    made it: a container's request; else its limit (the API server defaults the
    request to the limit); else the namespace LimitRange's `default`."""

    def amount(c: Mapping[str, Any]) -> int:
        for section in ("requests", "limits"):
            value = _amount(c, section, name)
            if value is not None:
                return value
        return default or 0

    return effective_request(pod_spec, amount)


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(raw or ()):
        if isinstance(t, str):
            out.append(Toleration(key=t, operator="Exists"))
        elif isinstance(t, Mapping):
            op = t.get("operator") or "Equal"
            if op not in ("Exists", "Equal"):
                raise SpecError(f"spec.tolerations[{i}].operator must be Exists or Equal")
            out.append(
                Toleration(
                    key=str(t.get("key") or ""),
                    operator=cast(Literal["Exists", "Equal"], op),
                    value=str(t.get("value") or ""),
                    effect=str(t.get("effect") or ""),
                )
            )
        else:
            raise SpecError(f"spec.tolerations[{i}] must be a taint key or a Toleration")
    return tuple(out)


def _affinity(pod_spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    affinity = pod_spec.get("affinity") or {}
    node = affinity.get("nodeAffinity") or {} if isinstance(affinity, Mapping) else {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [] if isinstance(required, Mapping) else []
    out = []
    for term in terms:
        reqs = []
        for e in term.get("matchExpressions") or ():
            op = e.get("operator")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                raise SpecError(f"node affinity operator {op!r} is not supported")
            reqs.append(Requirement(str(e["key"]), op, tuple(map(str, e.get("values") or ()))))
        out.append(tuple(reqs))
    return tuple(out)


def _timestamp(raw: Any) -> float:
    if not isinstance(raw, str) or not raw:
        return 0.0
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


def parse_job(obj: Mapping[str, Any], defaults: ContainerDefaults | None = None) -> JobSpec:
    """The scheduling-relevant parts of a TrainingJob, or `SpecError`; `defaults`
    are its namespace's LimitRange defaults, which its pods will get."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError("spec is missing")
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    user = (meta.get("labels") or {}).get(LABEL_USER)
    if not user:
        raise SpecError(f"label {LABEL_USER} is missing (it names the user charged for the job)")
    gang = spec.get("gangSize")
    if isinstance(gang, bool) or not isinstance(gang, int) or gang < 1:
        raise SpecError("spec.gangSize must be a positive integer")
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise SpecError("spec.template (the worker pod template) is missing")
    _containers(template)
    pod_spec = template.get("spec") or {}
    per_worker = _resource(pod_spec, "limits", GPU_RESOURCE) or _resource(
        pod_spec, "requests", GPU_RESOURCE
    )
    if per_worker < 1:
        raise SpecError(f"the worker template asks for no GPUs (set {GPU_RESOURCE} limits)")
    if gang % per_worker:
        raise SpecError(
            f"gangSize {gang} is not a multiple of the {per_worker} GPUs each worker asks for"
        )
    defaults = defaults or ContainerDefaults()
    profile = spec.get("resourceProfile") or {}
    min_gpu, max_gpu = profile.get("minGPU", gang), profile.get("maxGPU", gang)
    if not min_gpu <= gang <= max_gpu:
        raise SpecError(
            f"need minGPU <= gangSize <= maxGPU; found {min_gpu} <= {gang} <= {max_gpu}"
        )
    selector = pod_spec.get("nodeSelector") or {}
    return JobSpec(
        id=JobId(f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 0)),
        user=str(user),
        gang_size=gang,
        tier=spec.get("priority"),
        gpus_per_worker=per_worker,
        min_gpu=int(min_gpu),
        max_gpu=int(max_gpu),
        backoff_limit=spec.get("backoffLimit"),
        created=_timestamp(meta.get("creationTimestamp")),
        pod=PodShape(
            gpus=per_worker,
            cpu_milli=_request(pod_spec, "cpu", defaults.cpu_milli),
            memory=_request(pod_spec, "memory", defaults.memory),
            node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
            affinity=_affinity(pod_spec),
            tolerations=_tolerations(spec.get("tolerations"))
            + _tolerations(
                [t for t in pod_spec.get("tolerations") or () if isinstance(t, Mapping)]
            ),
        ),
    )


def to_gang(job: JobSpec, policy: SchedulingPolicy) -> Gang:
    """The gang the scheduler queues for `job`, or `SpecError` when the
    policies give it no project or an unknown tier."""
    project = policy.project_of_namespace(job.namespace)
    if project is None:
        raise SpecError(f"namespace {job.namespace} belongs to no project in the policies")
    tier_name = job.tier or project.default_tier
    if tier_name is None:
        raise SpecError(f"spec.priority is not set and project {project.name} has no tier")
    tier = policy.tiers.get(tier_name)
    if tier is None:
        raise SpecError(f"tier {tier_name!r} does not exist")
    return Gang(
        id=job.id,
        project=project.name,
        user=job.user,
        tier=tier.name,
        priority=tier.value,
        created=job.created,
        workers=job.workers,
        pod=job.pod,
        preemptible=tier.preemptible,
        may_preempt=tier.may_preempt,
        # whole workers inside minGPU..maxGPU (a floor of 3 GPUs in 2-GPU workers is 2 workers)
        min_workers=-(-job.min_gpu // job.gpus_per_worker),
        max_workers=job.max_gpu // job.gpus_per_worker,
    )
