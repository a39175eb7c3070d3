"""The scheduler's policy: the compiled policy JSON, parsed into typed values.

The compiler writes this JSON (`controller.policy.compiler.scheduling_policy`,
its shape is `schemas/schedulingpolicy.schema.json`) under `POLICY_KEY` of
the `POLICY_CONFIGMAP` ConfigMap in the controller's namespace; the ConfigMap
is the contract between the policy wing and the gang wing, so its name, key
and reader (`SchedulingPolicy.from_configmap`, used by the gang controller
and `gangops explain`) live here. The simulator gets the JSON straight from a
`PolicySet`. Every source goes through `SchedulingPolicy.from_dict`, so the
scheduler has one input format whatever the source. Amounts are milli-GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.scheduler.types import MILLI

__all__ = [
    "DEFAULT_SYSTEM_NAMESPACE",
    "POLICY_CONFIGMAP",
    "POLICY_KEY",
    "ProjectQuota",
    "SchedulingPolicy",
    "TierRule",
    "UnreadablePolicy",
    "UserQuota",
]

POLICY_CONFIGMAP = "gangops-scheduling-policy"
"""The ConfigMap the compiled policy is written to."""
POLICY_KEY = "policy.json"
"""The ConfigMap's key that holds the compiled policy JSON."""
DEFAULT_SYSTEM_NAMESPACE = "gangops-system"
"""The controller's namespace, where the ConfigMap lives unless told otherwise."""


def policy_configmap(
    doc: Mapping[str, Any], namespace: str = DEFAULT_SYSTEM_NAMESPACE, **metadata: Any
) -> dict[str, Any]:
    """The ConfigMap that carries compiled policy `doc` (as the compiler writes it),
    in `namespace`, with any further `metadata` (labels, annotations, resourceVersion)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": POLICY_CONFIGMAP, "namespace": namespace, **metadata},
        "data": {POLICY_KEY: json.dumps(doc)},
    }


class UnreadablePolicy(ValueError):
    """The ConfigMap holds no readable compiled policy; the message says what is wrong."""


def _gpu(d: Mapping[str, Any] | None, key: str) -> int | None:
    if not d:
        return None
    part = d.get(key) or {}
    value = part.get("gpu")
    return None if value is None else int(value) * MILLI


@dataclass(frozen=True)
class UserQuota:
    """A user's guarantee and ceiling inside a project (milli-GPUs; None = unset)."""

    guaranteed: int
    max: int | None


@dataclass(frozen=True)
class ProjectQuota:
    """A project's quota tree."""

    name: str
    namespaces: tuple[str, ...]
    guaranteed: int
    """Milli-GPUs always given back to the project (0 when unset)."""
    max: int | None
    """Milli-GPU ceiling; None means no ceiling but the cluster."""
    user_default: UserQuota
    members: Mapping[str, UserQuota]
    job_max: int | None
    tiers: frozenset[str]
    default_tier: str | None

    def user(self, name: str) -> UserQuota:
        """The quota of user `name` (a member's own, else the default)."""
        return self.members.get(name, self.user_default)


@dataclass(frozen=True)
class TierRule:
    """A tier's scheduling behaviour."""

    name: str
    value: int
    preemptible: bool
    may_preempt: bool


@dataclass(frozen=True)
class SchedulingPolicy:
    """Everything the scheduling cycle needs from the policies."""

    projects: Mapping[str, ProjectQuota]
    tiers: Mapping[str, TierRule]
    reserve: int
    """Milli-GPUs only `reserve_tiers` may use."""
    reserve_tiers: frozenset[str]
    preemption_enabled: bool
    min_runtime_seconds: float
    max_preemptions_per_hour: int
    fair_share: bool
    borrowing: bool
    topology_levels: tuple[str, ...]
    gang_timeout_seconds: float
    backoff_limit: int

    def project_of_namespace(self, namespace: str) -> ProjectQuota | None:
        """The project that owns `namespace`, if any."""
        for p in self.projects.values():
            if namespace in p.namespaces:
                return p
        return None

    @classmethod
    def from_configmap(
        cls,
        cm: Mapping[str, Any],
        *,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> SchedulingPolicy:
        """Read the compiled policy from its ConfigMap (raises `UnreadablePolicy`);
        `check` (the schema, `controller.policy.validate.check_scheduling_policy`)
        raises ValueError for a document the scheduler must not use."""
        try:
            doc = json.loads(cm["data"][POLICY_KEY])
            if check is not None:
                check(doc)
            return cls.from_dict(doc)
        except (KeyError, TypeError, ValueError, ArithmeticError) as e:
            raise UnreadablePolicy(str(e)) from e

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SchedulingPolicy:
        """Parse the compiled policy JSON (`kind: SchedulingPolicy`)."""
        cluster = doc["cluster"]
        tiers = {
            t["name"]: TierRule(
                name=t["name"],
                value=int(t["value"]),
                preemptible=bool(t["preemptible"]),
                may_preempt=t["preemptionPolicy"] != "Never",
            )
            for t in doc["tiers"]
        }
        projects = {}
        for p in doc["projects"]:
            users = p["users"]
            default = UserQuota(
                guaranteed=_gpu(users["default"], "guaranteed") or 0,
                max=_gpu(users["default"], "max"),
            )
            members = {
                m["name"]: UserQuota(guaranteed=_gpu(m, "guaranteed") or 0, max=_gpu(m, "max"))
                for m in users["members"]
            }
            job_max = p["jobs"].get("maxGPU")
            projects[p["name"]] = ProjectQuota(
                name=p["name"],
                namespaces=tuple(p["namespaces"]),
                guaranteed=_gpu(p["quota"], "guaranteed") or 0,
                max=_gpu(p["quota"], "max"),
                user_default=default,
                members=members,
                job_max=None if job_max is None else int(job_max) * MILLI,
                tiers=frozenset(p["jobs"]["tiers"]),
                default_tier=p["jobs"].get("defaultTier"),
            )
        return cls(
            projects=projects,
            tiers=tiers,
            reserve=int(cluster["reserve"]["gpu"]) * MILLI,
            reserve_tiers=frozenset(cluster["reserve"]["tiers"]),
            preemption_enabled=bool(cluster["preemption"]["enabled"]),
            min_runtime_seconds=float(cluster["preemption"]["minRuntimeSeconds"]),
            max_preemptions_per_hour=int(cluster["preemption"]["maxPerHour"]),
            fair_share=bool(cluster["fairShare"]["enabled"]),
            borrowing=bool(cluster["fairShare"]["borrowing"]),
            topology_levels=tuple(cluster["topology"]["levels"]),
            gang_timeout_seconds=float(cluster["gang"]["timeoutSeconds"]),
            backoff_limit=int(cluster["gang"]["backoffLimit"]),
        )
