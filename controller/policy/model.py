"""The typed policy model: what a valid policy set means, free of YAML.

The validator builds these values from schema-valid documents; the semantic
rules, the compiler, the scheduler and the simulator read them. They are
frozen so a `PolicySet` can be shared between threads and cached by revision.
Every object keeps the `Document` it came from, to put diagnostics and
provenance annotations at the right file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from controller.policy.loader import Document
from controller.quantity import format_quantity, parse_quantity

__all__ = [
    "AlertRuleSpec",
    "ClusterPolicy",
    "PolicySet",
    "PriorityTier",
    "Project",
    "QuotaPair",
    "Resources",
    "UserQuota",
    "build_cluster_policy",
    "build_project",
    "build_tier",
    "format_amount",
]

ResourceName = Literal["gpu", "cpu", "memory"]
RESOURCE_NAMES: tuple[ResourceName, ...] = ("gpu", "cpu", "memory")
DEFAULT_TOPOLOGY_LEVELS = (
    "nvidia.com/gpu.clique",
    "topology.kubernetes.io/rack",
    "topology.kubernetes.io/zone",
)


@dataclass(frozen=True)
class Resources:
    """Amounts of each resource; `None` means "not limited at this level"."""

    gpu: int | None = None
    cpu: Fraction | None = None
    """Cores, exact (500m is 1/2)."""
    memory: Fraction | None = None
    """Bytes, exact."""

    def get(self, name: ResourceName) -> Fraction | None:
        """The amount of `name` as an exact number, or None when unset."""
        value = getattr(self, name)
        return None if value is None else Fraction(value)

    def to_dict(self) -> dict[str, str | int]:
        """The set amounts, as the policy language writes them."""
        out: dict[str, str | int] = {}
        if self.gpu is not None:
            out["gpu"] = self.gpu
        if self.cpu is not None:
            out["cpu"] = format_quantity(self.cpu)
        if self.memory is not None:
            out["memory"] = format_quantity(self.memory, binary=True)
        return out


@dataclass(frozen=True)
class QuotaPair:
    """A guarantee and a ceiling."""

    guaranteed: Resources = Resources()
    max: Resources = Resources()


@dataclass(frozen=True)
class UserQuota:
    """A named user's quota inside a project."""

    name: str
    quota: QuotaPair
    index: int
    """Position in `spec.users.members`, for diagnostics."""


@dataclass(frozen=True)
class AlertRuleSpec:
    """One rule of `spec.alertActions.rules`: what an alert makes gangops do."""

    index: int
    """Its position in the list (for diagnostics)."""
    alert: str
    action: str
    mode: str
    cooldown_seconds: int
    restart_job: bool
    grace_period_seconds: int
    grace_given: bool
    """`gracePeriodSeconds` was written (not defaulted)."""


@dataclass(frozen=True)
class ClusterPolicy:
    """Cluster-wide rules (one per policy set)."""

    name: str
    capacity: Resources
    """With `gpu` always set once the policy set is valid (from `capacityFrom` if needed)."""
    capacity_from: str | None
    reserve_gpu: int
    reserve_tiers: tuple[str, ...]
    gang_timeout_seconds: int
    gang_backoff_limit: int
    preemption_enabled: bool
    preemption_min_runtime_seconds: int
    preemption_max_per_hour: int
    fair_share_enabled: bool
    borrowing: bool
    topology_levels: tuple[str, ...]
    """Node label keys of topology domains, tightest first."""
    doc: Document = field(compare=False, repr=False)
    alert_rules: tuple[AlertRuleSpec, ...] = ()
    breaker_max_percent: int = 10
    breaker_max_nodes: int = 5
    breaker_window_seconds: int = 600
    resolve_timeout_seconds: int = 0
    """0: alerts never lapse (`alertActions.resolveTimeoutSeconds` unset)."""


@dataclass(frozen=True)
class PriorityTier:
    """A priority tier, compiled into a PriorityClass of the same name."""

    name: str
    value: int
    preemptible: bool
    preemption_policy: Literal["PreemptLowerPriority", "Never"]
    global_default: bool
    description: str
    doc: Document = field(compare=False, repr=False)


@dataclass(frozen=True)
class Project:
    """A tenant with its namespaces and three quota levels."""

    name: str
    namespaces: tuple[str, ...]
    quota: QuotaPair
    user_default: QuotaPair
    members: tuple[UserQuota, ...]
    job_max_gpu: int | None
    """`None` means "up to the project's GPU max"."""
    job_max_count: int | None
    """The most TrainingJobs the project's namespaces hold at once, whatever their
    phase (`jobs.maxCount`); `None` means no limit."""
    tiers: tuple[str, ...] | None
    """`None` means "every tier"."""
    default_tier: str | None
    pod_security: str
    """The Pod Security Standard enforced in the project's namespaces (default baseline)."""
    doc: Document = field(compare=False, repr=False)


@dataclass(frozen=True)
class PolicySet:
    """A whole, valid policy set at one revision."""

    cluster: ClusterPolicy
    tiers: tuple[PriorityTier, ...]
    """Sorted by name."""
    projects: tuple[Project, ...]
    """Sorted by name."""

    def tier(self, name: str) -> PriorityTier | None:
        """The tier called `name`, if any."""
        return next((t for t in self.tiers if t.name == name), None)


def format_amount(name: ResourceName, amount: Fraction) -> str:
    """An amount for messages: `8 GPUs`, `500m CPU`, `2Ti`."""
    if name == "gpu":
        return f"{amount} GPU" if amount == 1 else f"{amount} GPUs"
    return format_quantity(amount, binary=name == "memory") + (" CPU" if name == "cpu" else "")


def _resources(raw: Any) -> Resources:
    if not isinstance(raw, dict):
        return Resources()
    cpu, mem = raw.get("cpu"), raw.get("memory")
    return Resources(
        gpu=raw.get("gpu"),
        cpu=None if cpu is None else parse_quantity(cpu),
        memory=None if mem is None else parse_quantity(mem),
    )


def _pair(raw: Any) -> QuotaPair:
    if not isinstance(raw, dict):
        return QuotaPair()
    return QuotaPair(guaranteed=_resources(raw.get("guaranteed")), max=_resources(raw.get("max")))


def _get(d: dict[str, Any], *path: str) -> Any:
    cur: Any = d
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def build_cluster_policy(doc: Document, *, capacity_gpu: int | None) -> ClusterPolicy:
    """The model of a schema-valid ClusterPolicy document.

    `capacity_gpu` is the GPU count read from `capacityFrom`, used when the
    document does not set `capacity.gpu`.
    """
    spec = doc.data["spec"]
    capacity = _resources(spec.get("capacity"))
    if capacity.gpu is None and capacity_gpu is not None:
        capacity = Resources(gpu=capacity_gpu, cpu=capacity.cpu, memory=capacity.memory)
    return ClusterPolicy(
        name=doc.name,
        capacity=capacity,
        capacity_from=spec.get("capacityFrom"),
        reserve_gpu=_get(spec, "reserve", "gpu") or 0,
        reserve_tiers=tuple(_get(spec, "reserve", "tiers") or ()),
        gang_timeout_seconds=_default(_get(spec, "gang", "timeoutSeconds"), 300),
        gang_backoff_limit=_default(_get(spec, "gang", "backoffLimit"), 3),
        preemption_enabled=_default(_get(spec, "preemption", "enabled"), True),
        preemption_min_runtime_seconds=_default(_get(spec, "preemption", "minRuntimeSeconds"), 600),
        preemption_max_per_hour=_default(_get(spec, "preemption", "maxPerHour"), 20),
        fair_share_enabled=_default(_get(spec, "fairShare", "enabled"), True),
        borrowing=_default(_get(spec, "fairShare", "borrowing"), True),
        topology_levels=tuple(_get(spec, "topology", "levels") or DEFAULT_TOPOLOGY_LEVELS),
        doc=doc,
        alert_rules=tuple(
            AlertRuleSpec(
                index=i,
                alert=r["alert"],
                action=r.get("action", "quarantine-gpus"),
                mode=r.get("mode", "shadow"),
                cooldown_seconds=_default(r.get("cooldownSeconds"), 600),
                restart_job=_default(r.get("restartJob"), True),
                grace_period_seconds=_default(r.get("gracePeriodSeconds"), 120),
                grace_given="gracePeriodSeconds" in r,
            )
            for i, r in enumerate(_get(spec, "alertActions", "rules") or ())
        ),
        breaker_max_percent=_default(
            _get(spec, "alertActions", "circuitBreaker", "maxPercent"), 10
        ),
        breaker_max_nodes=_default(_get(spec, "alertActions", "circuitBreaker", "maxNodes"), 5),
        breaker_window_seconds=_default(
            _get(spec, "alertActions", "circuitBreaker", "windowSeconds"), 600
        ),
        resolve_timeout_seconds=_default(_get(spec, "alertActions", "resolveTimeoutSeconds"), 0),
    )


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def build_tier(doc: Document) -> PriorityTier:
    """The model of a schema-valid PriorityTier document."""
    spec = doc.data["spec"]
    return PriorityTier(
        name=doc.name,
        value=spec["value"],
        preemptible=spec.get("preemptible", False),
        preemption_policy=spec.get("preemptionPolicy", "PreemptLowerPriority"),
        global_default=spec.get("globalDefault", False),
        description=spec.get("description", ""),
        doc=doc,
    )


def build_project(doc: Document) -> Project:
    """The model of a schema-valid Project document."""
    spec = doc.data["spec"]
    users = spec.get("users") or {}
    members = tuple(
        UserQuota(name=m["name"], quota=_pair(m), index=i)
        for i, m in enumerate(users.get("members") or ())
    )
    tiers = _get(spec, "jobs", "tiers")
    return Project(
        name=doc.name,
        namespaces=tuple(spec["namespaces"]),
        quota=_pair(spec.get("quota")),
        user_default=_pair(users.get("default")),
        members=members,
        job_max_gpu=_get(spec, "jobs", "maxGPU"),
        job_max_count=_get(spec, "jobs", "maxCount"),
        tiers=None if tiers is None else tuple(tiers),
        default_tier=_get(spec, "jobs", "defaultTier"),
        pod_security=spec.get("podSecurity", "baseline"),
        doc=doc,
    )
