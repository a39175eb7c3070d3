"""The objects that run a TrainingJob: its worker pods and a headless Service.

Workers get the rendezvous environment torchrun-style launchers read
(`WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT`), stable DNS names through
the headless Service (`<job>-<rank>.<job>.<namespace>.svc`), the tier's
PriorityClass, and an owner reference so deleting the job deletes them.

A worker is created already bound: `spec.nodeName` is the node the recorded
decision placed it on, which is what the Kubernetes docs reserve `nodeName`
for (custom schedulers). Creating and binding in one request halves the API
writes of a gang launch; the kubelet's admission still refuses a pod its node
cannot run, exactly as after a binding. `schedulerName: gangops` stays, so no
other scheduler would take a worker that somehow lost its node. Each gang attempt has its
own pod names, so a restart never waits for the old pods' names to free up.
Of the template's metadata only labels and annotations are copied: a finalizer
there would keep every worker Terminating forever once its job is deleted.
The job's `spec.tolerations` (the short form `- <taint key>` expanded) are added
to the template's: the scheduler placed the workers by both, and a worker bound
to a node with a NoExecute taint it does not carry would be refused by the kubelet
or evicted by the taint manager.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from controller.jobs.spec import LABEL_USER, JobSpec
from controller.scheduler.types import Placement

__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_JOB",
    "LABEL_RANK",
    "MASTER_PORT",
    "SCHEDULER_NAME",
    "headless_service",
    "worker_pods",
]

SCHEDULER_NAME = "gangops"
LABEL_JOB = "ai.operator/job-name"
LABEL_ATTEMPT = "ai.operator/attempt"
LABEL_RANK = "ai.operator/rank"
ANNOTATION_NODE = "gangops.ai/assigned-node"
MASTER_PORT = 29500


def _owner(job: JobSpec) -> dict[str, Any]:
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def headless_service(job: JobSpec) -> dict[str, Any]:
    """The Service that gives every worker a stable DNS name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {LABEL_JOB: job.name},
            "ownerReferences": [_owner(job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: job.name},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }


def _same(t: Mapping[str, Any]) -> str:
    """A toleration as the API server reads it (empty fields unset, operator Equal
    by default), to tell duplicates: as canonical JSON, since a template's own may
    carry fields of any kind (the CRD keeps `template.spec` as written), which a
    tuple of them could not hash."""
    t = {"operator": "Equal", **{k: v for k, v in t.items() if v not in (None, "")}}
    return json.dumps(t, sort_keys=True, default=str)


def _tolerations(template: list[Any] | None, job: JobSpec) -> list[Any]:
    """The template's tolerations, then the job's `spec.tolerations` not among them."""
    out = list(template or ())
    seen = {_same(t) for t in out if isinstance(t, Mapping)}
    for pairs in job.tolerations:
        t = dict(pairs)
        if _same(t) not in seen:
            seen.add(_same(t))
            out.append(t)
    return out


RESERVED_PREFIX = "ai.operator/"
"""Label keys only gangops sets on the workers (the job, its attempt and rank, and
the user it is charged to)."""


def _not_reserved(keys: object) -> dict[str, Any]:
    """A template's labels without gangops' own keys."""
    if not isinstance(keys, Mapping):
        return {}
    return {k: v for k, v in keys.items() if not str(k).startswith(RESERVED_PREFIX)}


def worker_pods(
    job: JobSpec,
    template: Mapping[str, Any],
    placement: Placement,
    *,
    tier: str,
    attempt: int,
) -> list[dict[str, Any]]:
    """One pod per worker of `placement`, rank by rank, each bound to its node
    (`spec.nodeName`, also recorded in an annotation). `template` is the job's
    `spec.template`; the job's own `spec.tolerations` are added to its tolerations
    (the scheduler placed the workers by both, and the kubelet's admission and the
    taint manager check the pod's)."""
    world = len(placement.pods)
    master = f"{job.name}-{attempt}-0.{job.name}.{job.namespace}.svc"
    pods = []
    for rank, where in enumerate(placement.pods):
        # Only labels and annotations come from the template: finalizers (a pod
        # nothing would ever release), owner references, names and namespaces are
        # gangops' to set.
        # Labels under gangops' own prefix are gangops': a template could label alice's
        # workers `ai.operator/user: bob`, and whatever bills by pod labels would bill
        # bob. Annotations are the workload's (its tools read them), but for ours.
        meta = template.get("metadata") or {}
        labels = _not_reserved(meta.get("labels"))
        labels.update(
            {
                LABEL_USER: job.user,
                LABEL_JOB: job.name,
                LABEL_ATTEMPT: str(attempt),
                LABEL_RANK: str(rank),
            }
        )
        annotations = dict(meta.get("annotations") or {})
        annotations[ANNOTATION_NODE] = where.node
        spec = copy.deepcopy(dict(template.get("spec") or {}))
        env = [
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "MASTER_ADDR", "value": master},
            {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        ]
        containers = []
        for c in spec.get("containers") or ():
            c = dict(c)
            names = {e["name"] for e in env}
            c["env"] = [e for e in c.get("env") or () if e.get("name") not in names] + env
            containers.append(c)
        if job.tolerations:
            spec["tolerations"] = _tolerations(spec.get("tolerations"), job)
        spec.update(
            {
                "containers": containers,
                "schedulerName": SCHEDULER_NAME,
                "priorityClassName": tier,
                "hostname": f"{job.name}-{attempt}-{rank}",
                "subdomain": job.name,
                "restartPolicy": "Never",
                "nodeName": where.node,
            }
        )
        spec.pop("priority", None)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{attempt}-{rank}",
                    "namespace": job.namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [_owner(job)],
                },
                "spec": spec,
            }
        )
    return pods
