"""Reading a TrainingJob: the object from the API server, into the scheduler's `Gang`.

The CRD's OpenAPI schema and CEL rules reject most malformed jobs at the
API server; this module is the second line (objects created before the CRD
was installed, fields the schema cannot check, a template without GPUs) and
it reports problems as sentences for the job's status (`SpecError`), never
another exception: the CRD declares little of the pod template and keeps the
rest as written, so every field read here is checked for its shape first. What
it accepts, `jobs/pods.py` builds a Service and pods from that the API server
accepts as far as the job decides (a name that makes a Service name and worker
hostnames, template labels and `env` of the right shape, no scheduling gates),
and the scheduler places where the kubelet will run them (required node
affinity read as Kubernetes reads it; `matchFields` refused).
Pure: values in, values out.
"""

from __future__ import annotations

import re
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
    "MAX_NAME",
    "ContainerDefaults",
    "JobSpec",
    "SpecError",
    "effective_request",
    "parse_job",
    "to_gang",
]

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_USER = "ai.operator/user"
MAX_NAME = 50
"""The longest TrainingJob name gangops runs. The job's headless Service takes its
name, and a worker's hostname is `<name>-<attempt>-<rank>` (jobs/pods.py), a DNS
label of at most 63 characters: 50 leave room for an attempt of up to six digits
(attempts count restarts, resizes and evictions alike) and a rank of up to five."""
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
"""What a Service name must be (and so a job's name): lower-case letters, digits
and `-`, starting with a letter and ending with a letter or digit."""
_TEMPLATE = "spec.template.spec"
_TERMS = f"{_TEMPLATE}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


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
    tolerations: tuple[tuple[tuple[str, str | int], ...], ...] = ()
    """`spec.tolerations` as the workers' pod tolerations (a taint key alone is
    `{key, operator: Exists}`), each as its (field, value) pairs."""
    asked: tuple[int, int] = (0, 0)
    """(CPU millicores, memory bytes) a worker's template asks for itself, without
    the namespace's LimitRange defaults (`pod` has them): what its owner wrote."""

    @property
    def workers(self) -> int:
        """Worker pods of the gang."""
        return self.gang_size // self.gpus_per_worker


def _found(value: object) -> str:
    """What a value of the wrong shape is, in words."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else type(value).__name__


def _map(value: object, where: str) -> Mapping[str, Any]:
    """`value` when it is an object (absent: empty), else `SpecError`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be an object, found {_found(value)}")
    return value


def _strings(value: object, where: str) -> Mapping[str, str]:
    """`value` when it maps names to strings (labels, a node selector), else `SpecError`."""
    out = _map(value, where)
    for k, v in out.items():
        if not isinstance(v, str):
            raise SpecError(f"{where}[{k!r}] must be a string, found {_found(v)}")
    return out


def _maps(value: object, where: str) -> list[Mapping[str, Any]]:
    """`value` when it is a list of objects (absent: empty), else `SpecError`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(f"{where} must be a list, found {_found(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise SpecError(f"{where}[{i}] must be an object, found {_found(item)}")
    return value


def _string(value: object, where: str) -> str:
    """`value` when it is a string (absent: empty), else `SpecError`."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError(f"{where} must be a string, found {_found(value)}")
    return value


def _check_name(name: str) -> None:
    """The job's name makes valid Service and pod names (`MAX_NAME`)."""
    if not _DNS1035_LABEL.fullmatch(name):
        raise SpecError(
            f"the name {name!r} cannot name the job's Service: use lower-case letters, digits "
            "and '-', starting with a letter and ending with a letter or digit (no dots)"
        )
    if len(name) > MAX_NAME:
        raise SpecError(
            f"the name is {len(name)} characters; at most {MAX_NAME} leave room for the "
            "workers' hostnames (<name>-<attempt>-<rank>, at most 63)"
        )


def _pod_spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template's pod spec, checked for what gangops reads and copies into the
    workers (jobs/pods.py): the CRD declares little of the template and keeps the
    rest as written, so a malformed field would otherwise break the scheduler or the
    launch instead of getting a sentence."""
    meta = _map(template.get("metadata"), "spec.template.metadata")
    _strings(meta.get("labels"), "spec.template.metadata.labels")
    _strings(meta.get("annotations"), "spec.template.metadata.annotations")
    spec = _map(template.get("spec"), _TEMPLATE)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError(f"{_TEMPLATE}.containers must list at least one container")
    for i, c in enumerate(_maps(containers, f"{_TEMPLATE}.containers")):
        where = f"{_TEMPLATE}.containers[{i}].env"
        for j, e in enumerate(_maps(c.get("env"), where)):
            if not _string(e.get("name"), f"{where}[{j}].name"):
                raise SpecError(f"{where}[{j}].name is missing")
    _maps(spec.get("initContainers"), f"{_TEMPLATE}.initContainers")
    if spec.get("schedulingGates"):
        raise SpecError(
            f"{_TEMPLATE}.schedulingGates: gangops creates its workers bound to their nodes, "
            "and the API server refuses a bound pod with scheduling gates; remove them"
        )
    return spec


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


def _tolerations(raw: object, where: str) -> tuple[Toleration, ...]:
    """The tolerations at `where` (`spec.tolerations`, which also take a taint key
    alone, or the template's), as the scheduler matches them."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"{where} must be a list, found {_found(raw)}")
    out = []
    for i, t in enumerate(raw):
        if isinstance(t, str) and where == "spec.tolerations":
            out.append(Toleration(key=t, operator="Exists"))
        elif isinstance(t, Mapping):
            at = f"{where}[{i}]"
            op = t.get("operator") or "Equal"
            if op not in ("Exists", "Equal"):
                raise SpecError(f"{at}.operator must be Exists or Equal")
            seconds = t.get("tolerationSeconds")
            if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
                raise SpecError(f"{at}.tolerationSeconds must be an integer")
            out.append(
                Toleration(
                    key=_string(t.get("key"), f"{at}.key"),
                    operator=cast(Literal["Exists", "Equal"], op),
                    value=_string(t.get("value"), f"{at}.value"),
                    effect=_string(t.get("effect"), f"{at}.effect"),
                )
            )
        elif where == "spec.tolerations":
            raise SpecError(f"{where}[{i}] must be a taint key or a Toleration")
        else:
            raise SpecError(f"{where}[{i}] must be a Toleration (an object)")
    return tuple(out)


def _pod_tolerations(raw: object) -> tuple[tuple[tuple[str, str | int], ...], ...]:
    """`spec.tolerations` (checked by `_tolerations`) as pod tolerations, each as its
    (field, value) pairs: a taint key alone is `{key, operator: Exists}`."""
    out: list[tuple[tuple[str, str | int], ...]] = []
    for t in raw if isinstance(raw, list) else ():
        if isinstance(t, str):
            out.append((("key", t), ("operator", "Exists")))
        elif isinstance(t, Mapping):
            fields = ("key", "operator", "value", "effect", "tolerationSeconds")
            out.append(tuple((k, t[k]) for k in fields if t.get(k) is not None))
    return tuple(out)


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _requirement(e: Mapping[str, Any], at: str) -> Requirement:
    """One `matchExpressions` entry, checked as the API server checks a pod's."""
    key = _string(e.get("key"), f"{at}.key")
    if not key:
        raise SpecError(f"{at}.key is missing")
    op = e.get("operator")
    if op not in _OPERATORS:
        raise SpecError(f"{at}.operator {op!r} is not one of {', '.join(_OPERATORS)}")
    values = e.get("values")
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SpecError(f"{at}.values must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise SpecError(f"{at}: operator {op} needs values")
    if op in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{at}: operator {op} takes no values")
    if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise SpecError(f"{at}: operator {op} needs one integer value")
    return Requirement(key, op, tuple(values))


def _affinity(pod_spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    """The required node affinity: any one term, each term all its requirements.
    A term with no requirement matches no node (Kubernetes' NodeSelectorTerm), so it
    is left out, and a job whose terms are all empty is refused: it could run
    nowhere. `matchFields` is refused (gangops places by labels)."""
    affinity = _map(pod_spec.get("affinity"), f"{_TEMPLATE}.affinity")
    node = _map(affinity.get("nodeAffinity"), f"{_TEMPLATE}.affinity.nodeAffinity")
    raw = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if raw is None:
        return ()
    required = _map(raw, _TERMS)
    terms = _maps(required.get("nodeSelectorTerms"), f"{_TERMS}.nodeSelectorTerms")
    if not terms:
        raise SpecError(f"{_TERMS}.nodeSelectorTerms must list at least one term")
    out = []
    for i, term in enumerate(terms):
        at = f"{_TERMS}.nodeSelectorTerms[{i}]"
        if term.get("matchFields"):
            raise SpecError(
                f"{at}.matchFields is not supported: gangops places by node labels; to pin "
                "a node by name use matchExpressions on kubernetes.io/hostname"
            )
        exprs = _maps(term.get("matchExpressions"), f"{at}.matchExpressions")
        reqs = tuple(_requirement(e, f"{at}.matchExpressions[{j}]") for j, e in enumerate(exprs))
        if reqs:
            out.append(reqs)
    if not out:
        raise SpecError(
            f"{_TERMS}.nodeSelectorTerms: every term is empty, and an empty term matches no "
            "node, so the workers could run nowhere"
        )
    return tuple(out)


def _timestamp(raw: Any) -> float:
    if not isinstance(raw, str) or not raw:
        return 0.0
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


def _int(value: object, where: str) -> int:
    """`value` when it is a whole number (not negative), else `SpecError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{where} must be a whole number, found {value!r}")
    return value


def _worker_gpus(pod_spec: Mapping[str, Any]) -> int:
    """The GPUs of one worker: its containers' and sidecars' `nvidia.com/gpu` limits
    (requests where no container sets a limit), as the CRD's rule sums them. An
    init container may use the worker's GPUs (a check before training) but not ask
    for more than the containers do: it would change the worker's GPUs as
    Kubernetes counts them (`effective_request`) behind the CRD's back."""
    section = "limits" if _resource(pod_spec, "limits", GPU_RESOURCE) else "requests"

    def gpus(c: Mapping[str, Any]) -> int:
        return _amount(c, section, GPU_RESOURCE) or 0

    apps = sum(gpus(c) for c in pod_spec.get("containers") or ())
    for c in pod_spec.get("initContainers") or ():
        if c.get("restartPolicy") != "Always" and gpus(c) > apps:
            raise SpecError(
                f"init container {c.get('name', '?')} asks for {gpus(c)} GPUs, more than "
                f"the {apps} of the worker's containers: an init container may use the "
                "worker's GPUs, not add to them (a sidecar, restartPolicy Always, adds)"
            )
    return effective_request(pod_spec, gpus)


def parse_job(obj: Mapping[str, Any], defaults: ContainerDefaults | None = None) -> JobSpec:
    """The scheduling-relevant parts of a TrainingJob, or `SpecError`; `defaults`
    are its namespace's LimitRange defaults, which its pods will get. Whatever it
    accepts, `worker_pods` and `headless_service` build objects from."""
    meta = _map(obj.get("metadata"), "metadata")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError("spec is missing")
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    status = obj.get("status")
    if not (isinstance(status, Mapping) and status.get("admission")):
        # Checked before a job first runs: one admitted under a longer name before
        # this check (51 to 59 characters ran) keeps being finished and restarted.
        _check_name(name)
    user = _map(meta.get("labels"), "metadata.labels").get(LABEL_USER)
    if not user:
        raise SpecError(f"label {LABEL_USER} is missing (it names the user charged for the job)")
    gang = spec.get("gangSize")
    if isinstance(gang, bool) or not isinstance(gang, int) or gang < 1:
        raise SpecError("spec.gangSize must be a positive integer")
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise SpecError("spec.template (the worker pod template) is missing")
    pod_spec = _pod_spec(template)
    per_worker = _worker_gpus(pod_spec)
    if per_worker < 1:
        raise SpecError(f"the worker template asks for no GPUs (set {GPU_RESOURCE} limits)")
    if gang % per_worker:
        raise SpecError(
            f"gangSize {gang} is not a multiple of the {per_worker} GPUs each worker asks for"
        )
    defaults = defaults or ContainerDefaults()
    profile = _map(spec.get("resourceProfile"), "spec.resourceProfile")
    min_gpu = _int(profile.get("minGPU", gang), "spec.resourceProfile.minGPU")
    max_gpu = _int(profile.get("maxGPU", gang), "spec.resourceProfile.maxGPU")
    if not min_gpu <= gang <= max_gpu:
        raise SpecError(
            f"need minGPU <= gangSize <= maxGPU; found {min_gpu} <= {gang} <= {max_gpu}"
        )
    backoff = spec.get("backoffLimit")
    priority = spec.get("priority")
    selector = _strings(pod_spec.get("nodeSelector"), f"{_TEMPLATE}.nodeSelector")
    return JobSpec(
        id=JobId(f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 0)),
        user=str(user),
        gang_size=gang,
        tier=_string(priority, "spec.priority") or None,
        gpus_per_worker=per_worker,
        min_gpu=min_gpu,
        max_gpu=max_gpu,
        backoff_limit=None if backoff is None else _int(backoff, "spec.backoffLimit"),
        created=_timestamp(meta.get("creationTimestamp")),
        pod=PodShape(
            gpus=per_worker,
            cpu_milli=_request(pod_spec, "cpu", defaults.cpu_milli),
            memory=_request(pod_spec, "memory", defaults.memory),
            node_selector=tuple(sorted(selector.items())),
            affinity=_affinity(pod_spec),
            tolerations=_tolerations(spec.get("tolerations"), "spec.tolerations")
            + _tolerations(pod_spec.get("tolerations"), f"{_TEMPLATE}.tolerations"),
        ),
        tolerations=_pod_tolerations(spec.get("tolerations")),
        asked=(_request(pod_spec, "cpu", None), _request(pod_spec, "memory", None)),
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
