"""Auto-approval: the rules in the policy repository under which gangops merges.

The ClusterPolicy's `spec.quotaRequests.autoApprove` (validated with the rest
of the policy set by its schema) lists rules; the first that matches a change
approves it: `decreases: true` (any cut, such as a temporary grant's revert),
or `maxIncrease: {gpu: N}` (an increase of at most N GPUs), optionally with
`minUsage` (the project used at least that fraction of its max over the last
14 days: a team that uses what it has may have a little more without a
meeting). The merge still waits for the repository's checks. Pure.
"""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Any

from ruamel.yaml import YAML

__all__ = ["approval", "rules_of"]


def rules_of(texts: list[str]) -> list[dict[str, Any]]:
    """The autoApprove rules of the ClusterPolicy among the policy files `texts`."""
    yaml = YAML(typ="safe", pure=True)
    for text in texts:
        if "ClusterPolicy" not in text:
            continue
        try:
            docs = list(yaml.load_all(io.StringIO(text)))
        except Exception:  # an invalid file is the validator's to report
            continue
        for d in docs:
            if isinstance(d, dict) and d.get("kind") == "ClusterPolicy":
                spec = d.get("spec") or {}
                rules = (spec.get("quotaRequests") or {}).get("autoApprove") or []
                return [r for r in rules if isinstance(r, dict)]
    return []


def approval(
    rules: list[dict[str, Any]], *, resource: str, delta: Fraction, usage: float | None
) -> str | None:
    """Why the change may be merged without a reviewer (the matching rule), or None."""
    for i, rule in enumerate(rules):
        if rule.get("decreases") and delta < 0:
            return f"autoApprove[{i}]: decreases"
        limit = (rule.get("maxIncrease") or {}).get(resource)
        if limit is None or not 0 < delta <= limit:
            continue
        floor = rule.get("minUsage")
        if floor is None:
            return f"autoApprove[{i}]: an increase of at most {limit} {resource}"
        if usage is not None and usage >= float(floor):
            return (
                f"autoApprove[{i}]: at most {limit} {resource}, and the project used "
                f"{usage:.0%} of its max over 14 days (at least {float(floor):.0%})"
            )
    return None
