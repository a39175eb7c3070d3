"""kstatus for PolicySources: Ready, Reconciling and Stalled, done exactly.

`kubectl wait --for=condition=Ready`, Flux's health checks, Argo CD's health
script and kstatus itself read these, so the rules are kstatus's: Ready is
always present (True or False); Reconciling and Stalled are present only
while True ("abnormal-true" conditions); a condition's lastTransitionTime
changes only when its status does; `observedGeneration` says which spec the
status describes. Building the same status twice gives equal dicts, which is
what lets a reconcile with nothing new write nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["Condition", "conditions", "stamp"]

Condition = dict[str, Any]


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
