"""Small builders for alert tests: Alertmanager alerts, their payloads and policies."""

from __future__ import annotations

import json
import re
from typing import Any

from controller.alerts.payload import Alert
from controller.alerts.policy import ActionKind, AlertPolicy, AlertRule, Breaker, Mode

LEAK = "GangopsGPUMemoryLeak"
XID = "GangopsGPUFatalXID"
STALE = "GangopsGPUTelemetryStale"
T0 = 1_800_000_000.0
"""2027-01-15T08:00:00Z, the tests' epoch."""
STARTS = "2027-01-15T07:59:30.123456789Z"


def alert(
    name: str = LEAK,
    *,
    node: str = "n1",
    gpu: int | None = 1,
    fp: str = "f1",
    starts: str = STARTS,
    status: str = "firing",
    pod: tuple[str, str] | None = None,
    ends: float | None = None,
) -> Alert:
    labels = {"alertname": name, "Hostname": node}
    if gpu is not None:
        labels["gpu"] = str(gpu)
    if pod is not None:
        labels["namespace"], labels["pod"] = pod
    return Alert(name, status, fp, starts, ends, labels)  # type: ignore[arg-type]


def raw(a: Alert) -> dict[str, Any]:
    """`a` as Alertmanager posts it."""
    return {
        "status": a.status,
        "labels": dict(a.labels),
        "annotations": {"summary": "s"},
        "startsAt": a.starts_at,
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": a.fingerprint,
    }


def payload(*alerts: Alert) -> bytes:
    status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    return json.dumps(
        {
            "version": "4",
            "groupKey": '{}:{alertname="x"}',
            "truncatedAlerts": 0,
            "status": status,
            "receiver": "gangops",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager",
            "alerts": [raw(a) for a in alerts],
        }
    ).encode()


def policy(
    *rules: tuple[str, ActionKind, Mode],
    cooldown_s: float = 600,
    grace_s: float = 120,
    breaker: Breaker | None = None,
) -> AlertPolicy:
    return AlertPolicy(
        rules={
            name: AlertRule(name, action, mode, cooldown_s=cooldown_s, grace_s=grace_s)
            for name, action, mode in rules
        },
        breaker=breaker or Breaker(),
    )


ENFORCE = policy((LEAK, "quarantine-gpus", "enforce"), (XID, "cordon-node", "enforce"))
SHADOW = policy((LEAK, "quarantine-gpus", "shadow"), (XID, "cordon-node", "shadow"))


def held(a: Alert, *, silenced_by: tuple[str, ...] = (), starts: str | None = None) -> Any:
    """`a` as Alertmanager's API v2 lists it (`GET /api/v2/alerts`): its start to the
    millisecond, as the API writes it (the webhook writes nanoseconds)."""
    return {
        "annotations": {},
        "endsAt": "2027-01-15T08:05:00.000Z",
        "fingerprint": a.fingerprint,
        "receivers": [{"name": "gangops"}],
        "startsAt": starts or re.sub(r"(\.\d{3})\d*", r"\1", a.starts_at),
        "status": {
            "inhibitedBy": [],
            "silencedBy": list(silenced_by),
            "state": "suppressed" if silenced_by else "active",
        },
        "updatedAt": "2027-01-15T08:00:00.000Z",
        "labels": dict(a.labels),
    }


class FakeAlertmanager:
    """The HTTP seam of `AlertmanagerApi` (`fetch`): answers with what `holds` lists
    (or `answer`, or raises `error`), and records each URL asked."""

    def __init__(self) -> None:
        self.holds: list[Any] = []
        self.answer: tuple[int, bytes] | None = None
        self.error: Exception | None = None
        self.asked: list[str] = []
        self.uptime = "2027-01-01T00:00:00.000Z"
        """When it started (`/api/v2/status`; asking it is not recorded in `asked`)."""

    def __call__(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        if url.endswith("/api/v2/status"):
            return 200, json.dumps({"uptime": self.uptime, "cluster": {}}).encode()
        self.asked.append(url)
        if self.error is not None:
            raise self.error
        return self.answer or (200, json.dumps(self.holds).encode())
