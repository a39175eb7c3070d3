"""The compiler: a valid policy set in, the desired Kubernetes objects out.

Pure and deterministic: the same `PolicySet` and revision always give the
same objects in the same order, so plans are stable and a reconcile with
nothing to change writes nothing. What it produces, per the README:

- a PriorityClass per tier;
- per project namespace, a Namespace (labelled with its project and with the
  project's Pod Security level, `podSecurity`, default baseline, so pods the
  controller creates for a tenant are held to it like the tenant's own) and a
  ResourceQuota whose `hard` is the project's `max`, split evenly across the
  project's namespaces (remainders go to the namespaces listed first), so
  the API server enforces the ceiling even when the scheduler is down; with
  `jobs.maxCount`, the quota also holds the namespace's share of it as an
  object count (`JOB_COUNT_KEY`), split the same way, so a tenant cannot fill
  etcd (and slow every tenant's admissions) with TrainingJobs;
- beside each ResourceQuota that tracks `requests.cpu` or `requests.memory`,
  a LimitRange `gangops-defaults` giving every container that sets neither a
  request nor a limit for them a default request (`DEFAULT_REQUESTS`, or the
  namespace's whole share when that is smaller), so a pod that asks only for
  GPUs is admitted instead of refused by quota admission (`must specify
  requests.cpu`); the quota tracks no limits, so no default limit is set;
- the compiled scheduling policy, a ConfigMap in the controller's namespace
  holding `policy.json`: the quota tree and tier rules with every default
  resolved, which is what the scheduler reads; canonical where order has no
  meaning (tiers by value, projects and users by name), so a reorder in the
  files rewrites nothing.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from controller.policy.model import RESOURCE_NAMES, PolicySet, PriorityTier, Project, QuotaPair
from controller.quantity import format_quantity, parse_quantity
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE, POLICY_CONFIGMAP, POLICY_KEY

__all__ = [
    "ANNOTATION_REVISION",
    "ANNOTATION_SOURCE",
    "APPLY_ORDER",
    "DEFAULT_REQUESTS",
    "JOB_COUNT_KEY",
    "LABEL_MANAGED_BY",
    "LABEL_POD_SECURITY",
    "LABEL_PROJECT",
    "LIMIT_RANGE_NAME",
    "MAX_CONFIGMAP_BYTES",
    "QUOTA_NAME",
    "compile_policy_set",
    "object_key",
    "policy_json",
    "scheduling_policy",
    "split_evenly",
]

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PROJECT = "gangops.ai/project"
LABEL_POD_SECURITY = "pod-security.kubernetes.io/enforce"
"""Pod Security Admission's enforce label (its `-version` label is set beside it)."""
LABEL_TIER_PREEMPTIBLE = "gangops.ai/preemptible"
ANNOTATION_SOURCE = "gangops.ai/source-file"
ANNOTATION_REVISION = "gangops.ai/revision"
QUOTA_NAME = "gangops-quota"
LIMIT_RANGE_NAME = "gangops-defaults"
DEFAULT_REQUESTS = {"cpu": "1", "memory": "1Gi"}
"""The default container request for each resource a namespace's ResourceQuota
tracks besides GPUs (capped at the namespace's share), as the README documents."""
MAX_CONFIGMAP_BYTES = 1 << 20
"""What the API server allows in a ConfigMap's data, all keys together."""
APPLY_ORDER = ("PriorityClass", "Namespace", "ResourceQuota", "LimitRange", "ConfigMap")
"""Kinds in the order they are applied; prune runs in reverse."""

_QUOTA_KEYS = {"gpu": "requests.nvidia.com/gpu", "cpu": "requests.cpu", "memory": "requests.memory"}
JOB_COUNT_KEY = "count/trainingjobs.ai.operator"
"""The ResourceQuota key that counts a namespace's TrainingJobs (object count quota:
`count/<plural>.<group>`), whatever their phase, until they are deleted."""


def object_key(obj: dict[str, Any]) -> tuple[int, str, str, str]:
    """Sort key: apply order of the kind, then namespace and name."""
    kind = obj["kind"]
    rank = APPLY_ORDER.index(kind) if kind in APPLY_ORDER else len(APPLY_ORDER)
    meta = obj["metadata"]
    return (rank, kind, meta.get("namespace", ""), meta["name"])


def compile_policy_set(
    policy_set: PolicySet,
    *,
    revision: str,
    source_root: str,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
) -> list[dict[str, Any]]:
    """The desired objects for `policy_set`, in apply order.

    `revision` (a Git commit, or a label for an uncommitted tree) and the
    source file of each object go into annotations; `source_root` names the
    policy root for the objects compiled from the whole set.
    """
    objects: list[dict[str, Any]] = []
    for tier in policy_set.tiers:
        objects.append(_priority_class(tier, revision))
    for project in policy_set.projects:
        shares = _quota_shares(project)
        for ns, hard in zip(project.namespaces, shares, strict=True):
            objects.append(_namespace(project, ns, revision))
            if hard:
                objects.append(_resource_quota(project, ns, hard, revision))
            defaults = _default_requests(hard)
            if defaults:
                objects.append(_limit_range(project, ns, defaults, revision))
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": POLICY_CONFIGMAP,
                "namespace": system_namespace,
                "labels": {LABEL_MANAGED_BY: "gangops"},
                "annotations": _annotations(source_root, revision),
            },
            "data": {POLICY_KEY: policy_json(policy_set)},
        }
    )
    return sorted(objects, key=object_key)


def _annotations(source: str, revision: str) -> dict[str, str]:
    return {ANNOTATION_SOURCE: source, ANNOTATION_REVISION: revision}


def _metadata(name: str, source: str, revision: str, **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {LABEL_MANAGED_BY: "gangops", **labels},
        "annotations": _annotations(source, revision),
    }


def _priority_class(tier: PriorityTier, revision: str) -> dict[str, Any]:
    meta = _metadata(tier.name, tier.doc.file, revision)
    meta["labels"][LABEL_TIER_PREEMPTIBLE] = "true" if tier.preemptible else "false"
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": meta,
        "value": tier.value,
        "preemptionPolicy": tier.preemption_policy,
        "globalDefault": tier.global_default,
    }
    if tier.description:
        obj["description"] = tier.description
    return obj


def _namespace(project: Project, ns: str, revision: str) -> dict[str, Any]:
    labels = {
        LABEL_PROJECT: project.name,
        LABEL_POD_SECURITY: project.pod_security,
        f"{LABEL_POD_SECURITY}-version": "latest",
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _metadata(ns, project.doc.file, revision, **labels),
    }


def _resource_quota(
    project: Project, ns: str, hard: dict[str, str], revision: str
) -> dict[str, Any]:
    meta = _metadata(QUOTA_NAME, project.doc.file, revision, **{LABEL_PROJECT: project.name})
    meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": {"hard": hard}}


def _default_requests(hard: dict[str, str]) -> dict[str, str]:
    """The LimitRange's default requests for a namespace whose quota is `hard`:
    each resource the quota tracks besides GPUs, at `DEFAULT_REQUESTS` or the
    whole share, whichever is smaller."""
    out = {}
    for r, default in DEFAULT_REQUESTS.items():
        share = hard.get(_QUOTA_KEYS[r])
        if share is not None:
            out[r] = min(default, share, key=parse_quantity)
    return out


def _limit_range(
    project: Project, ns: str, defaults: dict[str, str], revision: str
) -> dict[str, Any]:
    meta = _metadata(LIMIT_RANGE_NAME, project.doc.file, revision, **{LABEL_PROJECT: project.name})
    meta["namespace"] = ns
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": meta,
        "spec": {"limits": [{"type": "Container", "defaultRequest": defaults}]},
    }


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` split into `parts` integers differing by at most one, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _quota_shares(project: Project) -> list[dict[str, str]]:
    """Each namespace's ResourceQuota `hard`: the project's max split evenly.

    GPUs split in whole GPUs, CPU in millicores, memory in bytes; the
    namespaces listed first take the remainders, so the shares add up to the
    project's max exactly. A max finer than that unit (`1500u` CPU) is first
    rounded up to it, as Kubernetes rounds quantities: never under-promise.
    `jobs.maxCount` splits like GPUs, in whole TrainingJobs; without it the
    quota has no count key at all.
    """
    n = len(project.namespaces)
    shares: list[dict[str, str]] = [{} for _ in range(n)]
    for r in RESOURCE_NAMES:
        amount = project.quota.max.get(r)
        if amount is None:
            continue
        unit = Fraction(1, 1000) if r == "cpu" else Fraction(1)
        units = -(-amount // unit)
        for share, part in zip(shares, split_evenly(units, n), strict=True):
            value = Fraction(part) * unit
            share[_QUOTA_KEYS[r]] = (
                str(part) if r == "gpu" else format_quantity(value, binary=r == "memory")
            )
    if project.job_max_count is not None:
        for share, part in zip(shares, split_evenly(project.job_max_count, n), strict=True):
            share[JOB_COUNT_KEY] = str(part)
    return shares


def _pair(pair: QuotaPair) -> dict[str, Any]:
    return {"guaranteed": pair.guaranteed.to_dict(), "max": pair.max.to_dict()}


def _allowed_tiers(policy_set: PolicySet, project: Project) -> list[str]:
    by_value = sorted(policy_set.tiers, key=lambda t: (-t.value, t.name))
    allowed = set(project.tiers) if project.tiers is not None else None
    return [t.name for t in by_value if allowed is None or t.name in allowed]


def _default_tier(policy_set: PolicySet, project: Project, allowed: list[str]) -> str | None:
    if project.default_tier is not None:
        return project.default_tier
    global_default = next((t.name for t in policy_set.tiers if t.global_default), None)
    if global_default in allowed:
        return global_default
    return allowed[-1] if allowed else None


def policy_json(policy_set: PolicySet) -> str:
    """The scheduling-policy ConfigMap's `policy.json`: `scheduling_policy` as
    compact JSON, ASCII only (its length is its size in bytes)."""
    return json.dumps(scheduling_policy(policy_set), sort_keys=True, separators=(",", ":"))


def scheduling_policy(policy_set: PolicySet) -> dict[str, Any]:
    """The scheduler's view of the policy set, every default resolved."""
    c = policy_set.cluster
    projects = []
    for p in policy_set.projects:
        allowed = _allowed_tiers(policy_set, p)
        projects.append(
            {
                "name": p.name,
                "namespaces": list(p.namespaces),
                "quota": _pair(p.quota),
                "users": {
                    "default": _pair(p.user_default),
                    # by name: their order means nothing (the scheduler looks users up
                    # by name), so reordering them in a file changes no byte of policy.json
                    "members": [
                        {"name": u.name, **_pair(u.quota)}
                        for u in sorted(p.members, key=lambda u: u.name)
                    ],
                },
                "jobs": {
                    "maxGPU": p.job_max_gpu if p.job_max_gpu is not None else p.quota.max.gpu,
                    "tiers": allowed,
                    "defaultTier": _default_tier(policy_set, p, allowed),
                },
            }
        )
    return {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": c.capacity.to_dict(),
            "reserve": {"gpu": c.reserve_gpu, "tiers": sorted(c.reserve_tiers)},
            "gang": {
                "timeoutSeconds": c.gang_timeout_seconds,
                "backoffLimit": c.gang_backoff_limit,
            },
            "preemption": {
                "enabled": c.preemption_enabled,
                "minRuntimeSeconds": c.preemption_min_runtime_seconds,
                "maxPerHour": c.preemption_max_per_hour,
            },
            "fairShare": {"enabled": c.fair_share_enabled, "borrowing": c.borrowing},
            "topology": {"levels": list(c.topology_levels)},
        },
        "alertActions": {
            "rules": [
                {
                    "alert": r.alert,
                    "action": r.action,
                    "mode": r.mode,
                    "cooldownSeconds": r.cooldown_seconds,
                    "restartJob": r.restart_job,
                    "gracePeriodSeconds": r.grace_period_seconds,
                }
                for r in c.alert_rules
            ],
            "circuitBreaker": {
                "maxPercent": c.breaker_max_percent,
                "maxNodes": c.breaker_max_nodes,
                "windowSeconds": c.breaker_window_seconds,
            },
            "resolveTimeoutSeconds": c.resolve_timeout_seconds,
        },
        "tiers": [
            {
                "name": t.name,
                "value": t.value,
                "preemptible": t.preemptible,
                "preemptionPolicy": t.preemption_policy,
                "globalDefault": t.global_default,
            }
            for t in sorted(policy_set.tiers, key=lambda t: (-t.value, t.name))
        ],
        "projects": projects,
    }
