"""Alertmanager's webhook payload (version 4), read into `Alert` values.

Alertmanager posts a group of alerts: `{"version": "4", "status", "alerts": [...],
"groupKey", ...}`, each alert with `status` (`firing` or `resolved`), `labels`,
`annotations`, `startsAt`, `endsAt` and `fingerprint`. One alert instance is its
fingerprint (a hash of its labels) with its `startsAt`: an alert that resolves and
fires again later is a new instance, and every redelivery of one instance (a retry,
a repeat, an Alertmanager restart, a replay) carries the same pair. Pure.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "GPU_LABELS",
    "NODE_LABELS",
    "Alert",
    "PayloadError",
    "parse",
    "parse_time",
]

MAX_GPU_DIGITS = 4
"""A GPU label longer than this (or not ASCII digits, such as '²') names no GPU."""
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "exported_node")
"""Labels that may name the node, tried in order (dcgm-exporter's `Hostname` first)."""
GPU_LABELS = ("gpu", "exported_gpu")
"""Labels that may name a GPU's index on its node."""


class PayloadError(ValueError):
    """The body is not an Alertmanager webhook payload of version 4."""


def parse_time(value: str) -> float:
    """Epoch seconds of an RFC 3339 time as Alertmanager writes it (nanoseconds and
    offsets included); raises ValueError."""
    s = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    if "." in s:
        head, _, tail = s.partition(".")
        digits = tail[: len(tail) - len(tail.lstrip("0123456789"))]  # not the offset's
        rest = tail[len(digits) :]
        s = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    t = dt.datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(value: str) -> bool:
    """Whether `value` is a DNS-1123 subdomain, as Node and Pod names are."""
    return len(value) <= 253 and _SUBDOMAIN.fullmatch(value) is not None


@dataclass(frozen=True)
class Alert:
    """One alert of a delivery."""

    name: str
    """The `alertname` label."""
    status: Literal["firing", "resolved"]
    fingerprint: str
    starts_at: str
    """As Alertmanager wrote it: part of the instance's identity, never reformatted."""
    ends_at: float | None
    """Epoch seconds; None when Alertmanager sent its zero time (still firing)."""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The instance: `fingerprint@startsAt`."""
        return f"{self.fingerprint}@{self.starts_at}"

    @property
    def node(self) -> str | None:
        """The node the alert names; a value that is not a Node name names none (it
        goes into the API's URL paths)."""
        for name in NODE_LABELS:
            value = self.labels.get(name)
            if value:
                return value if _object_name(value) else None
        return None

    @property
    def gpu(self) -> int | None:
        for name in GPU_LABELS:
            value = self.labels.get(name, "")
            if value.isascii() and value.isdigit() and len(value) <= MAX_GPU_DIGITS:
                return int(value)
        return None

    @property
    def pod(self) -> tuple[str, str] | None:
        """(namespace, pod) holding the GPU, when the alert names one."""
        ns, pod = self.labels.get("namespace"), self.labels.get("pod")
        if not ns or not pod or not _object_name(pod) or len(ns) > 63 or "." in ns:
            return None
        return (ns, pod) if _object_name(ns) else None

    def resolved(self, now: float) -> bool:
        """Resolved, or firing with an `endsAt` already past (Alertmanager sends a
        firing alert its expected end; a replay of an old delivery is over)."""
        return self.status == "resolved" or (self.ends_at is not None and self.ends_at <= now)


def _alert(raw: Any, i: int) -> Alert:
    if not isinstance(raw, dict):
        raise PayloadError(f"alerts[{i}] is not an object")
    labels = raw.get("labels")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PayloadError(f"alerts[{i}].labels is not an object of strings")
    status = raw.get("status")
    if status not in ("firing", "resolved"):
        raise PayloadError(f"alerts[{i}].status is {status!r}, not firing or resolved")
    fingerprint, starts = raw.get("fingerprint"), raw.get("startsAt")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise PayloadError(f"alerts[{i}].fingerprint is missing")
    if not isinstance(starts, str):
        raise PayloadError(f"alerts[{i}].startsAt is missing")
    try:
        parse_time(starts)
        ends_raw = raw.get("endsAt")
        ends = parse_time(ends_raw) if isinstance(ends_raw, str) and ends_raw else None
    except ValueError as e:
        raise PayloadError(f"alerts[{i}]: a time is not RFC 3339: {e}") from e
    if ends is not None and ends <= 0:
        ends = None  # Go's zero time, 0001-01-01T00:00:00Z
    name = labels.get("alertname", "")
    if not name:
        raise PayloadError(f"alerts[{i}] has no alertname label")
    return Alert(name, status, fingerprint, starts, ends, dict(labels))


def parse(body: bytes) -> list[Alert]:
    """The alerts of one delivery; raises `PayloadError` saying what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise PayloadError(f"the body is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise PayloadError("the body is not a JSON object")
    if doc.get("version") != "4":
        raise PayloadError(f"payload version {doc.get('version')!r}; this receiver reads 4")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("the payload has no alerts list")
    return [_alert(a, i) for i, a in enumerate(alerts)]
