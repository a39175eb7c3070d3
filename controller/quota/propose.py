"""The scheduler's proposal: a QuotaRequest for a job blocked only by a max.

The gang scheduler says why a job waits in its status (`reason: Quota`, and a
message in the words of `scheduler.cycle.quota`). A job blocked by its
project's max or its user's max, and by nothing else, can be helped by a
pull request; one blocked by the reserve or by a lack of free GPUs cannot.
The namespace's ResourceQuota is the project's max split between its
namespaces (the compiler writes it), and the scheduler checks it first, so a
job at it is read as blocked by the project's max (the quota loop finds the
project by the namespace, and multiplies). `shortfall` reads that message (a
unit test runs the scheduler's own wording through it, so the two cannot
drift apart); `proposal` is the QuotaRequest for the GPUs missing, on the job owner's
behalf, which the quota loop creates for projects that opted in
(`spec.quotaRequests.autoPropose` in the policy repository). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from controller.jobs.spec import LABEL_USER
from controller.quota.request import ANNOTATION_PROPOSED_FOR

__all__ = ["Shortfall", "proposal", "shortfall"]

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_PROJECT = re.compile(
    rf"^project (\S+) at max: {_NUMBER} of {_NUMBER} GPUs in use, this job needs {_NUMBER}$"
)
_NAMESPACE = re.compile(
    rf"^namespace (\S+) at its ResourceQuota: {_NUMBER} of {_NUMBER} GPUs requested, "
    rf"this job needs {_NUMBER}$"
)
_USER = re.compile(
    rf"^user (\S+) at max in project (\S+): {_NUMBER} of {_NUMBER} GPUs in use, "
    rf"this job needs {_NUMBER}$"
)


@dataclass(frozen=True)
class Shortfall:
    project: str
    """Empty when only the namespace is known (its ResourceQuota blocks)."""
    user: str | None
    """Set when the user's max blocks, not the project's."""
    gpus: int
    """How much the max must rise for the job to start now (for a namespace: how much
    its ResourceQuota must; the project's max is split evenly between its namespaces)."""
    namespace: str = ""


def _gpus(used: str, limit: str, need: str) -> int:
    missing = float(used) + float(need) - float(limit)
    return max(1, int(-(-missing // 1)))


def shortfall(status: dict[str, Any]) -> Shortfall | None:
    """What a waiting job's status says it lacks, when only a max blocks it."""
    if status.get("reason") != "Quota" or status.get("phase") in ("Running", "Succeeded", "Failed"):
        return None
    message = str(status.get("message") or "")
    m = _PROJECT.match(message)
    if m:
        return Shortfall(m.group(1), None, _gpus(m.group(2), m.group(3), m.group(4)))
    m = _USER.match(message)
    if m:
        return Shortfall(m.group(2), m.group(1), _gpus(m.group(3), m.group(4), m.group(5)))
    m = _NAMESPACE.match(message)
    if m:  # the ResourceQuota gangops compiles from the project's max
        return Shortfall("", None, _gpus(m.group(2), m.group(3), m.group(4)), m.group(1))
    return None


def proposal(job: dict[str, Any], short: Shortfall) -> dict[str, Any]:
    """The QuotaRequest proposed for `job`: named after it, charged to its owner."""
    meta = job["metadata"]
    owner = str((meta.get("labels") or {}).get(LABEL_USER, ""))
    spec: dict[str, Any] = {
        "project": short.project,
        "resource": "gpu",
        "amount": short.gpus,
        "reason": (
            f"proposed by gangops: TrainingJob {meta['name']} waits ("
            f"{(job.get('status') or {}).get('message', '')})"
        ),
        "trainingJob": meta["name"],
    }
    if short.user:
        spec["user"] = short.user
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "QuotaRequest",
        "metadata": {
            "name": f"{meta['name'][:200]}-quota",
            "namespace": meta["namespace"],
            "labels": {LABEL_USER: owner},
            "annotations": {ANNOTATION_PROPOSED_FOR: meta["name"]},
        },
        "spec": spec,
    }
