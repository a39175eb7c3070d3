"""The status a reconcile writes, assembled from its outcome. Pure.

kstatus for PolicySources (and the policy custom resources): Ready,
Reconciling and Stalled, done exactly.

`kubectl wait --for=condition=Ready`, Flux's health checks, Argo CD's health
script and kstatus itself read these, so the rules are kstatus's: Ready is
always present (True or False); Reconciling and Stalled are present only
while True ("abnormal-true" conditions); a condition's lastTransitionTime
changes only when its status does; `observedGeneration` says which spec the
status describes. Building the same status twice gives equal dicts, which is
what lets a reconcile with nothing new write nothing.

Around the conditions: which reasons stall (`STALLING`), a PolicySource's
whole status after a reconcile (`source_status`: revisions, the handled
request, the inventory), the outcome a reconcile is counted under, and
diagnostics quoted in a condition message.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from controller.policy.diagnostics import Diagnostic
from controller.reconciler.spec import ANNOTATION_REQUESTED

__all__ = [
    "STALLING",
    "Condition",
    "Outcome",
    "conditions",
    "diagnostics_text",
    "kstatus",
    "outcome",
    "progressing",
    "source_status",
    "stamp",
]

Condition = dict[str, Any]
Obj = dict[str, Any]
Outcome = Literal["applied", "unchanged", "stalled", "failed"]

STALLING = frozenset(
    {
        "ValidationFailed",
        "DryRunFailed",
        "ImmutableFieldChange",
        "RecreateRefused",
        "OwnershipConflict",
        "MixedSources",
        "InvalidSpec",
    }
)
"""Reasons that need a change by a person (a new commit, a spec edit): Stalled."""


def stamp(t: dt.datetime) -> str:
    """RFC 3339 in UTC, to the second, as Kubernetes writes times."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    old: list[Condition], type_: str, status: str, reason: str, message: str, gen: int, now: str
) -> Condition:
    prev = next((c for c in old if c.get("type") == type_), None)
    moved = prev is None or prev.get("status") != status
    return {
        "type": type_,
        "status": status,
        "observedGeneration": gen,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if moved else prev.get("lastTransitionTime", now),  # type: ignore[union-attr]
    }


def conditions(
    old: list[Condition],
    *,
    ready: bool,
    reason: str,
    message: str,
    generation: int,
    now: dt.datetime,
    reconciling: bool = False,
    stalled: bool = False,
) -> list[Condition]:
    """The conditions for a result: Ready always; Reconciling or Stalled when True."""
    at = stamp(now)
    out = [_condition(old, "Ready", "True" if ready else "False", reason, message, generation, at)]
    if reconciling:
        out.append(_condition(old, "Reconciling", "True", reason, message, generation, at))
    if stalled:
        out.append(_condition(old, "Stalled", "True", reason, message, generation, at))
    return out


def kstatus(
    obj: Mapping[str, Any], *, ok: bool, reason: str, message: str, now: dt.datetime
) -> Obj:
    """`observedGeneration` and the kstatus conditions for the outcome of a
    reconcile: Ready when it applied, Stalled when the reason needs a change
    from the user, Reconciling otherwise."""
    generation = int(obj["metadata"].get("generation", 0))
    stalled = not ok and reason in STALLING
    return {
        "observedGeneration": generation,
        "conditions": conditions(
            (obj.get("status") or {}).get("conditions") or [],
            ready=ok,
            reason=reason,
            message=message,
            generation=generation,
            now=now,
            reconciling=not ok and not stalled,
            stalled=stalled,
        ),
    }


def progressing(obj: Mapping[str, Any], revision: str, *, now: dt.datetime) -> Obj:
    """A PolicySource's status while `revision` is being applied."""
    status = dict(obj.get("status") or {})
    status["conditions"] = conditions(
        status.get("conditions") or [],
        ready=False,
        reason="Progressing",
        message=f"applying revision {revision}",
        generation=int(obj["metadata"].get("generation", 0)),
        now=now,
        reconciling=True,
    )
    status["lastAttemptedRevision"] = revision
    return status


def source_status(
    obj: Mapping[str, Any],
    *,
    ok: bool,
    reason: str,
    message: str,
    revision: str | None,
    inventory: Iterable[Mapping[str, str]],
    now: dt.datetime,
) -> Obj:
    """A PolicySource's status after a reconcile: the conditions (an applied
    revision says so), the revisions applied and attempted, the reconcile
    request handled, and the inventory entries."""
    old = obj.get("status") or {}
    if ok:
        message = f"Applied revision: {revision}"
    status = kstatus(obj, ok=ok, reason=reason, message=message, now=now)
    for key in ("lastAppliedRevision", "lastAttemptedRevision", "lastHandledReconcileAt"):
        if key in old:
            status[key] = old[key]
    if revision is not None:
        status["lastAttemptedRevision"] = revision
    if ok:
        status["lastAppliedRevision"] = revision
    requested = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUESTED)
    if requested:
        status["lastHandledReconcileAt"] = requested
    status["inventory"] = {"entries": [dict(e) for e in inventory]}
    return status


def outcome(*, ok: bool, writes: int, reason: str) -> Outcome:
    """What a reconcile is counted as: it wrote, it found nothing to write, it
    needs a person (stalled), or it will be retried (failed)."""
    if ok:
        return "applied" if writes else "unchanged"
    return "stalled" if reason in STALLING else "failed"


def diagnostics_text(errors: list[Diagnostic], limit: int) -> str:
    """`N error(s): file:line:col: CODE: message; ...` for a condition message."""
    lines = [
        f"{d.file}:{d.line}:{d.column}: {d.code}: {d.message}"
        if d.line
        else f"{d.file}: {d.code}: {d.message}"
        for d in errors[:limit]
    ]
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return f"{len(errors)} error(s): " + "; ".join(lines) + more
