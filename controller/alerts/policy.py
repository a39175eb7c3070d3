"""What to do about which alert: the ClusterPolicy's `alertActions`, as compiled.

The compiler writes them under `alertActions` of the compiled policy JSON (the
ConfigMap `gangops-scheduling-policy`, key `policy.json`; shape in
schemas/schedulingpolicy.schema.json); `AlertPolicy.from_dict` reads them. An
alert no rule names is recorded and not acted on. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ActionKind",
    "AlertPolicy",
    "AlertRule",
    "Breaker",
    "Mode",
]

ActionKind = Literal["quarantine-gpus", "cordon-node", "none"]
Mode = Literal["enforce", "shadow"]


@dataclass(frozen=True)
class AlertRule:
    """What one alert name makes gangops do."""

    alert: str
    action: ActionKind = "quarantine-gpus"
    """`quarantine-gpus`: the GPUs the alert names are taken out of the scheduler's
    hands (the whole node is tainted and cordoned when it names none);
    `cordon-node`: the node is tainted and cordoned; `none`: Events only."""
    mode: Mode = "shadow"
    """`enforce` acts; `shadow` only records what it would have done (Event, metric)."""
    cooldown_s: float = 600.0
    """After the last alert behind an action resolves, wait this long, then undo it."""
    restart_job: bool = True
    """Ask the TrainingJob holding an affected GPU to checkpoint, then restart its gang
    elsewhere after `grace_s` (not counted against its backoffLimit)."""
    grace_s: float = 120.0
    """Seconds between the checkpoint request and the restart."""


@dataclass(frozen=True)
class Breaker:
    """The blast radius: how many nodes gangops may act on in any window."""

    max_percent: float = 10.0
    """Of the cluster's nodes (at least one node)."""
    max_nodes: int = 5
    window_s: float = 600.0

    def limit(self, nodes: int) -> int:
        """Nodes that may be acted on in one window in a cluster of `nodes`:
        `min(max_percent %, max_nodes)`, and at least one."""
        return max(1, min(math.floor(nodes * self.max_percent / 100), self.max_nodes))


@dataclass(frozen=True)
class AlertPolicy:
    """Every alert rule, and the breaker."""

    rules: Mapping[str, AlertRule] = field(default_factory=dict)
    breaker: Breaker = field(default_factory=Breaker)
    resolve_timeout_s: float = 0.0
    """An alert acted on and not sent again, still firing, for this long is taken as
    resolved: its resolve was lost (Alertmanager sends one once). Above twice the
    route's repeat_interval, which is how often a firing alert is sent again; 0 (the
    default): never, as a silenced or inhibited alert is not sent either (unless the
    actor can ask Alertmanager, `gangops run --alertmanager-url`)."""

    def rule(self, alert: str) -> AlertRule:
        """The rule for `alert`; an alert no rule names does nothing (mode shadow,
        action none), and the node's state does not record it."""
        return self.rules.get(alert) or AlertRule(alert=alert, action="none", mode="shadow")

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> AlertPolicy:
        """Read the compiled `alertActions` (absent: no rules, default breaker)."""
        if not doc:
            return cls()
        rules = {}
        for r in doc.get("rules") or ():
            rules[r["alert"]] = AlertRule(
                alert=r["alert"],
                action=r.get("action", "quarantine-gpus"),
                mode=r.get("mode", "shadow"),
                cooldown_s=float(r.get("cooldownSeconds", 600)),
                restart_job=bool(r.get("restartJob", True)),
                grace_s=float(r.get("gracePeriodSeconds", 120)),
            )
        b = doc.get("circuitBreaker") or {}
        breaker = Breaker(
            max_percent=float(b.get("maxPercent", 10)),
            max_nodes=int(b.get("maxNodes", 5)),
            window_s=float(b.get("windowSeconds", 600)),
        )
        timeout = float(doc.get("resolveTimeoutSeconds", 0))
        return cls(rules=rules, breaker=breaker, resolve_timeout_s=timeout)

    @classmethod
    def from_configmap(cls, cm: Mapping[str, Any], key: str) -> AlertPolicy:
        """Read them from the compiled policy's ConfigMap (raises ValueError)."""
        try:
            return cls.from_dict(json.loads(cm["data"][key]).get("alertActions"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"unreadable alertActions: {e}") from e
