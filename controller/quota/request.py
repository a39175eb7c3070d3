"""A QuotaRequest, read: its spec as a typed value, its branch, and its status.

Requests for the same project, user and resource share one branch and so one
pull request (`branch_name`): a repeated or second request updates it
instead of opening another. The states mirror Kueue's AdmissionCheck:
Pending (a pull request is open; its URL is in the status), Ready (merged
and applied by the reconciler), Retry (the forge or Git failed: tried again
with a backoff that doubles), Rejected (closed unmerged, or the edit cannot
be made); a temporary grant whose revert is merged and applied ends Expired.
A temporary grant carries `FINALIZER` until nothing can be owed back (its revert
applied or closed by a reviewer, its pull request closed or never opened), so
deleting the request cannot keep the grant. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from controller.backoff import doubled
from controller.jobs.admission import GRANT_FINALIZER
from controller.jobs.spec import LABEL_USER
from controller.quantity import QuantityError, parse_quantity

__all__ = [
    "ANNOTATION_PROPOSED_FOR",
    "BACKOFF_MAX_S",
    "BACKOFF_START_S",
    "FINALIZER",
    "QuotaRequestSpec",
    "State",
    "backoff_s",
    "branch_name",
    "revert_branch",
    "status_body",
]

State = Literal["Pending", "Ready", "Retry", "Rejected", "Expired"]

ANNOTATION_PROPOSED_FOR = "gangops.ai/proposed-for"
"""On a QuotaRequest the scheduler proposed: the TrainingJob that was blocked."""

FINALIZER = GRANT_FINALIZER
"""On a QuotaRequest with spec.expiresAt while its grant may still have to be taken
back: deleted, the request stays until its revert is applied (the quota loop); the
admission policy keeps its requester from removing it."""

BACKOFF_START_S = 2.0
BACKOFF_MAX_S = 300.0


@dataclass(frozen=True)
class QuotaRequestSpec:
    """`spec` of a QuotaRequest, with its namespace, name and requester."""

    namespace: str
    name: str
    requester: str
    project: str
    user: str | None
    resource: str
    amount: Fraction
    amount_text: str
    reason: str
    expires_at: dt.datetime | None
    training_job: str | None

    @property
    def key(self) -> tuple[str, str, str]:
        """What one pull request collects: project, user ('' for the project's max), resource."""
        return (self.project, self.user or "", self.resource)

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> QuotaRequestSpec:
        """From the object; raises ValueError on what the schema would have refused."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        try:
            amount = parse_quantity(spec["amount"])
        except (KeyError, QuantityError) as e:
            raise ValueError(f"spec.amount: {e}") from None
        if amount <= 0:
            raise ValueError(f"spec.amount must be positive (found {spec['amount']!r})")
        if spec.get("resource") == "gpu" and amount.denominator != 1:
            raise ValueError(f"spec.amount: whole GPUs only (found {spec['amount']!r})")
        if spec.get("resource") == "gpu" and amount > MAX_GPUS:
            # the schema's maximum holds for a number only: "1e12" passed as a string
            raise ValueError(f"spec.amount: at most {MAX_GPUS} GPUs (found {spec['amount']!r})")
        expires = spec.get("expiresAt")
        return cls(
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            requester=str((meta.get("labels") or {}).get(LABEL_USER, "")),
            project=str(spec["project"]),
            user=spec.get("user"),
            resource=str(spec["resource"]),
            amount=amount,
            amount_text=str(spec["amount"]),
            reason=str(spec.get("reason", "")),
            expires_at=parse_time(expires) if expires else None,
            training_job=spec.get("trainingJob"),
        )


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 timestamp (`2026-12-03T10:00:00Z`) as an aware datetime."""
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


MAX_GPUS = 1_000_000
"""The most GPUs a request may ask for (the schema's maximum; a compiled policy holds
at most this many in all)."""

_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def _segment(text: str) -> str:
    """A ref-safe path segment; a name that had to change gets a short hash, so two
    names never meet on one branch."""
    safe = _UNSAFE.sub("-", text.lower()).strip(".-") or "x"
    if safe == text and not safe.endswith(".lock"):
        return safe
    return f"{safe[:40]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def branch_name(project: str, user: str | None, resource: str) -> str:
    """The one branch (and pull request) of a project's, or a user's, max of a resource."""
    who = _segment(project) if not user else f"{_segment(project)}/user-{_segment(user)}"
    return f"gangops/quota/{who}/{resource}"


def revert_branch(namespace: str, name: str) -> str:
    """The branch of the pull request that ends a temporary grant."""
    return f"gangops/quota-revert/{_segment(namespace)}/{_segment(name)}"


def backoff_s(attempts: int) -> float:
    """The wait before retry number `attempts` (1-based): 2 s doubling, at most 5 min."""
    return doubled(BACKOFF_START_S, attempts, BACKOFF_MAX_S)


_CONDITION: dict[State, tuple[str, str]] = {
    "Pending": ("False", "PullRequestOpen"),
    "Ready": ("True", "Applied"),
    "Retry": ("False", "Retrying"),
    "Rejected": ("False", "Rejected"),
    "Expired": ("False", "Expired"),
}


def status_body(
    *,
    state: State,
    message: str,
    now: str,
    generation: int,
    previous: dict[str, Any],
    **fields: Any,
) -> dict[str, Any]:
    """The status to merge-patch: state, message, kstatus conditions (Ready;
    Stalled for Rejected; Reconciling for Pending and Retry) and `fields`."""
    status, reason = _CONDITION[state]
    old = {c.get("type"): c for c in previous.get("conditions") or []}

    def cond(kind: str, value: str, why: str) -> dict[str, Any]:
        was = old.get(kind) or {}
        since = was.get("lastTransitionTime") if was.get("status") == value else now
        return {
            "type": kind,
            "status": value,
            "reason": why,
            "message": message,
            "lastTransitionTime": since or now,
        }

    conditions = [
        cond("Ready", status, reason),
        cond("Reconciling", "True" if state in ("Pending", "Retry") else "False", reason),
        cond("Stalled", "True" if state == "Rejected" else "False", reason),
    ]
    return {
        "observedGeneration": generation,
        "state": state,
        "message": message,
        "conditions": conditions,
        **fields,
    }
