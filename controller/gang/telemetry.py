"""The scheduler's telemetry provider: a background reader of Prometheus that keeps one
frozen `Telemetry` ready for each scheduling step (never queried inside the step).

Every `interval_s` (15 s by default) it sends at most three batched queries for the
whole cluster, grouped by node and GPU or by pod, never one per node:

1. health: from `gangops_gpu_healthy` (the node agents' series), the nodes that
   report and their GPUs reading 0;
2. utilisation: per pod, the mean over its GPUs of the 1, 5 and 15-minute averages,
   the 5-minute p95 and the 15-minute slope (`pod:DCGM_FI_DEV_GPU_UTIL:*`);
3. memory: per pod, `DCGM_FI_DEV_FB_USED` summed and its GPUs counted
   (`pod:DCGM_FI_DEV_FB_USED:*`).

What is never done: read an error, a timeout, a `warnings` answer's gaps or an empty
result as zero load (the bug Volcano users hit). An empty health answer (no agent
scraped) is an error; an empty utilisation answer means no pod is known, and a pod
the telemetry does not know counts as busy. A failed query keeps the signal's
last good value and its age; the core treats a stale signal as unknown (utilisation:
busy; health: the GPUs known bad stay out, until a reading says they are healthy).
The age of each signal and the query errors are metrics
(`gangops_telemetry_age_seconds`, `gangops_telemetry_query_errors_total`).
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from controller import httpread
from controller.httpread import BodyTooLarge
from controller.kube.clock import Clock, SystemClock
from controller.scheduler.telemetry import PodUsage, Signal, Telemetry

__all__ = ["QUERIES", "PrometheusTelemetry", "TelemetryMetrics"]

log = logging.getLogger(__name__)

QUERIES = {
    # the nodes whose agents report, and their GPUs out of service
    "health": (
        'label_replace(Hostname:gangops_gpu_healthy:count, "stat", "reporting", "", "")'
        ' or label_replace(gpu:gangops_gpu_healthy:unhealthy, "stat", "bad", "", "")'
    ),
    # per pod: the mean over its GPUs of each utilisation statistic
    "usage": '{__name__=~"pod:DCGM_FI_DEV_GPU_UTIL:.+"}',
    # per pod: memory used (MiB) and GPUs
    "memory": '{__name__=~"pod:DCGM_FI_DEV_FB_USED:(sum|count)"}',
}
"""The three queries, whole-cluster, batched: they read the chart's recording rules
(charts/gangops/files/prometheus/recording-rules.yaml), already aggregated per pod and
node, so each is an instant selection of a few thousand series even at 40,000 GPUs.
Without those rules loaded, utilisation reads as unknown (busy) and bad GPUs are not
cleared by Prometheus (the agents' Node annotations still are)."""

ANSWER_LIMIT = 64 * 1024 * 1024
"""The longest answer read (a few thousand series are well under a MiB): a longer
one, or one not read whole within the query timeout, fails the query."""

_STAT = {
    "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg1m": "avg1m",
    "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg5m": "avg5m",
    "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg15m": "avg15m",
    "pod:DCGM_FI_DEV_GPU_UTIL:avg_p95_5m": "p95_5m",
    "pod:DCGM_FI_DEV_GPU_UTIL:avg_deriv15m": "trend",
    "pod:DCGM_FI_DEV_FB_USED:sum": "used",
    "pod:DCGM_FI_DEV_FB_USED:count": "gpus",
}


class TelemetryMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.age = Gauge(
            "gangops_telemetry_age_seconds",
            "Age of each telemetry signal the scheduler uses (health, usage); grows while"
            " Prometheus cannot be read, and past the limit the scheduler falls back to"
            " requests alone (usage) or keeps known-bad GPUs out (health).",
            ["signal"],
            registry=registry,
        )
        self.errors = Counter(
            "gangops_telemetry_query_errors_total",
            "Telemetry queries that failed (error, timeout, empty or unusable answer).",
            ["signal", "reason"],
            registry=registry,
        )


class QueryError(Exception):
    """A failed query: `reason` is its kind in a word (the error metric's label and
    what a waiting job's status says), the message the details, address included."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PrometheusTelemetry:
    """`current()` is the latest `Telemetry`; `start()` refreshes it in the background."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 15.0,
        timeout_s: float = 5.0,
        max_age_s: float = 120.0,
        clock: Clock | None = None,
        metrics: TelemetryMetrics | None = None,
        fetch: Callable[[str, float], tuple[int, bytes]] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock = clock or SystemClock()
        """Reads are dated on both of its clocks: the wall clock to compare with when
        jobs started and to show, the monotonic one to judge how old they are."""
        self.metrics = metrics or TelemetryMetrics(CollectorRegistry())
        self._fetch = fetch or _http_get
        self._current = Telemetry(max_age_s=max_age_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> Telemetry:
        t, now = self._taken(self._current)
        for name, sig in (("health", t.health), ("usage", t.usage)):
            age = t.age(sig, now)
            self.metrics.age.labels(name).set(age if age is not None else math.inf)
        return t

    def _taken(self, t: Telemetry) -> tuple[Telemetry, float]:
        """`t` as handed out now (its signals' ages read on the monotonic clock up to
        here: `Telemetry.age`), and now on the wall clock."""
        now = self._clock.now().timestamp()
        return replace(t, taken=self._clock.monotonic(), taken_at=now), now

    def start(self) -> PrometheusTelemetry:
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:
                log.exception("telemetry refresh failed; keeping the last values")
            self._stop.wait(self.interval_s)

    # -- one refresh

    def refresh(self) -> Telemetry:
        """Run the (at most three) queries and publish the new `Telemetry`."""
        t = self._current
        now, read = self._clock.now().timestamp(), self._clock.monotonic()
        try:
            rows = self._query("health")
            unhealthy = _health(rows, t.unhealthy)
            t = replace(t, unhealthy=unhealthy, health=Signal(at=now, read=read))
        except QueryError as e:
            t = replace(t, health=replace(t.health, error=str(e), reason=e.reason))
            self.metrics.errors.labels("health", e.reason).inc()
        try:
            # No pod holding a GPU is an empty answer, and says nothing is idle: a
            # pod the telemetry does not list counts as busy (unlike health, below).
            usage = self._query("usage", allow_empty=True)
            memory = self._query("memory", allow_empty=True)
            t = replace(t, pods=_pods(usage, memory), usage=Signal(at=now, read=read))
        except QueryError as e:
            t = replace(t, usage=replace(t.usage, error=str(e), reason=e.reason))
            self.metrics.errors.labels("usage", e.reason).inc()
        self._current = t
        t, now = self._taken(t)
        if t.health.error or t.usage.error:
            log.warning("telemetry: %s", t.describe(now))
        return t

    def _query(self, name: str, *, allow_empty: bool = False) -> list[dict[str, Any]]:
        query = QUERIES[name]
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            status, raw = self._fetch(url, self.timeout_s)
        except BodyTooLarge as e:
            raise QueryError("malformed", f"Prometheus at {self.url}: {e}") from None
        except TimeoutError:
            raise QueryError(
                "timeout", f"Prometheus at {self.url}: no answer in {self.timeout_s:g}s"
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            # HTTPException: not an HTTP answer, or one cut short (IncompleteRead)
            raise QueryError("unreachable", f"Prometheus at {self.url}: {e!r}") from None
        if status >= 400 and not raw.lstrip().startswith(b"{"):
            # Prometheus answers a failed query with 4xx/5xx and its error as JSON
            raise QueryError("error", f"Prometheus at {self.url}: HTTP {status}")
        try:
            doc = json.loads(raw)
        except ValueError:
            raise QueryError("malformed", f"Prometheus at {self.url}: not JSON") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else None
            raise QueryError("error", f"Prometheus at {self.url}: {err or 'query failed'}")
        if doc.get("warnings"):
            log.warning("Prometheus warnings for %s: %s", name, doc["warnings"])
            raise QueryError(
                "warnings", f"Prometheus warned: {'; '.join(map(str, doc['warnings']))}"
            )
        data = doc.get("data") or {}
        result = data.get("result") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or data.get("resultType") != "vector"
            or not isinstance(result, list)
            or not all(
                isinstance(r, dict) and isinstance(r.get("metric", {}), dict) for r in result
            )
        ):
            raise QueryError("malformed", f"Prometheus at {self.url}: not an instant vector")
        if not result and not allow_empty:
            raise QueryError(
                "empty", f"no {name} series in Prometheus (are the node agents scraped?)"
            )
        return result


def _http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    return httpread.get(url, timeout_s=timeout_s, limit_bytes=ANSWER_LIMIT)


def _index(label: object) -> bool:
    """Whether a `gpu` label is a GPU index (ASCII digits: '²' is a digit to
    str.isdigit, not to int)."""
    text = str(label or "")
    return text.isascii() and text.isdigit() and len(text) <= 4


def _value(row: dict[str, Any]) -> float | None:
    try:
        v = float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def _health(
    rows: list[dict[str, Any]], before: dict[str, frozenset[int]] | Any
) -> dict[str, frozenset[int]]:
    """A reporting node's bad GPUs are those reading 0 (the others are back); a node
    whose agent does not report keeps what was known (a bad GPU whose agent went
    silent stays out)."""
    reporting: set[str] = set()
    found: dict[str, set[int]] = {}
    for row in rows:
        m = row.get("metric") or {}
        node = m.get("Hostname") or m.get("hostname") or m.get("node")
        if not node or _value(row) is None:
            continue
        if m.get("stat") == "reporting":
            reporting.add(str(node))
        elif m.get("stat") == "bad" and _index(m.get("gpu")):
            found.setdefault(str(node), set()).add(int(m["gpu"]))
    out = {n: s for n, s in dict(before).items() if n not in reporting}
    for node in reporting:
        if found.get(node):
            out[node] = frozenset(found[node])
    for node, gpus in found.items():  # bad GPUs of a node not counted as reporting
        if node not in reporting:
            out[node] = frozenset(gpus) | out.get(node, frozenset())
    return out


def _pods(
    usage: list[dict[str, Any]], memory: list[dict[str, Any]]
) -> dict[tuple[str, str], PodUsage]:
    stats: dict[tuple[str, str], dict[str, float]] = {}
    for row in [*usage, *memory]:
        m = row.get("metric") or {}
        key = (m.get("namespace"), m.get("pod"))
        v = _value(row)
        stat = _STAT.get(str(m.get("__name__", "")))
        if not key[0] or not key[1] or v is None or stat is None:
            continue
        stats.setdefault((str(key[0]), str(key[1])), {})[stat] = v
    out = {}
    for key, s in stats.items():
        if "avg5m" not in s:
            continue  # no utilisation for it: unknown, not idle
        out[key] = PodUsage(
            avg_1m=s.get("avg1m", s["avg5m"]),
            avg_5m=s["avg5m"],
            avg_15m=s.get("avg15m", s["avg5m"]),
            p95_5m=s.get("p95_5m", s["avg5m"]),
            trend_per_min=s.get("trend", 0.0),
            memory_used_mib=s.get("used", 0.0),
            gpus=int(s.get("gpus", 0)),
        )
    return out
