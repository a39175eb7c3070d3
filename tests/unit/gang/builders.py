"""Raw API objects for the gang package's unit tests, built small: a TrainingJob
with or without a recorded decision, its worker pods, GPU nodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.gang.record import Admission
from controller.scheduler.types import JobId, Placement, PodPlacement
from tests.unit.scheduler.builders import policy

Obj = dict[str, Any]
NS = "p"
POLICY = replace(policy(projects={"p": {"guaranteed": 16, "max": 16}}), gang_timeout_seconds=60.0)
"""One project `p` (namespace `p`), tiers high/normal/batch, gang timeout 60 s."""


def node(name: str, gpus: int = 8, *, ready: bool = True, **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}],
        },
    }


def admission(
    *nodes: str, attempt: int = 1, at: float = 1000.0, state: str = "Admitted", **kw: Any
) -> Admission:
    pods = tuple(PodPlacement(n, (i,)) for i, n in enumerate(nodes))
    return Admission(state, attempt, Placement(pods), at, **kw)  # type: ignore[arg-type]


def job(
    name: str,
    gang: int = 2,
    *,
    tier: str = "normal",
    adm: Admission | None = None,
    **status: Any,
) -> Obj:
    st = dict(status)
    if adm is not None:
        st["admission"] = adm.to_dict()
        st.setdefault("attempts", adm.attempt)
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": "1970-01-01T00:10:00Z",
            "labels": {"ai.operator/user": "alice"},
        },
        "spec": {
            "gangSize": gang,
            "priority": tier,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ]
                }
            },
        },
        "status": st,
    }


def pod(
    job_name: str,
    rank: int,
    *,
    attempt: int = 1,
    node: str | None = None,
    phase: str = "Running",
    gpus: int = 1,
    owner: bool = True,
    deleting: bool = False,
) -> Obj:
    meta: Obj = {
        "name": f"{job_name}-{attempt}-{rank}",
        "namespace": NS,
        "uid": f"pod-{job_name}-{attempt}-{rank}",
        "labels": {
            "ai.operator/job-name": job_name,
            "ai.operator/attempt": str(attempt),
            "ai.operator/rank": str(rank),
        },
        "ownerReferences": [{"uid": f"uid-{job_name}"}] if owner else [],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: Obj = {
        "containers": [{"name": "t", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase}}  # fmt: skip


def foreign(name: str, node: str, gpus: int, *, phase: str = "Running") -> Obj:
    """A pod of another scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other", "uid": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def job_id(name: str) -> JobId:
    return JobId(f"{NS}/{name}")
