"""A TrainingJob's status: phase, kstatus conditions and the reason it waits.

kstatus (what `kubectl wait`, Flux and Argo CD read): `Ready` is True only
while the whole gang runs (or after it succeeded); `Reconciling` is True
while the job is queued, admitted or starting; `Stalled` is True when it
cannot progress without a change from the user (failed, refused by the
policies, malformed). `observedGeneration` says which spec this describes.
Conditions keep their `lastTransitionTime` while their status is unchanged,
so a status written twice is written identically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["PHASES", "Phase", "job_status"]

Phase = Literal["Queued", "Admitted", "Running", "Succeeded", "Failed", "Preempted"]
PHASES: tuple[Phase, ...] = ("Queued", "Admitted", "Running", "Succeeded", "Failed", "Preempted")


def _condition(
    kind: str, status: bool, reason: str, message: str, now: str, old: Mapping[str, Any] | None
) -> dict[str, Any]:
    value = "True" if status else "False"
    since = old.get("lastTransitionTime") if old and old.get("status") == value else None
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
    }


def job_status(
    *,
    generation: int,
    phase: Phase,
    reason: str,
    message: str,
    now: str,
    previous: Sequence[Mapping[str, Any]] = (),
    stalled: bool = False,
    allocation: Mapping[str, int] | None = None,
    restarts: int = 0,
    tier: str | None = None,
    gpus: int | None = None,
) -> dict[str, Any]:
    """The `status` of a TrainingJob. `reason` is CamelCase; `message` is
    the sentence a user reads (for a queued job: why it waits)."""
    old = {c.get("type"): c for c in previous}
    running = phase == "Running"
    ready = running or phase == "Succeeded"
    done = phase in ("Succeeded", "Failed")
    stalled = stalled or phase == "Failed"
    wanted = {
        "Ready": ready,
        "Reconciling": not (ready or done or stalled),
        "Stalled": stalled,
        "Admitted": phase in ("Admitted", "Running"),
        "Running": running,
        "Preempted": phase == "Preempted",
    }
    conditions = [
        _condition(kind, value, reason, message, now, old.get(kind))
        for kind, value in wanted.items()
    ]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase,
        "reason": reason,
        "message": message,
        "restarts": restarts,
        "conditions": conditions,
    }
    if allocation:
        status["allocation"] = dict(sorted(allocation.items()))
    if tier is not None:
        status["tier"] = tier
    if gpus is not None:
        status["gpus"] = gpus
    return status
