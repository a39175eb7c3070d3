"""The Prometheus telemetry provider at its one seam (the HTTP fetch): answers parsed
into the core's Telemetry; errors, timeouts, warnings, NaN and empty answers never read
as zero load; each signal keeps its last good value and ages."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import urllib.error
import urllib.parse
from typing import Any

import pytest

from controller.gang.telemetry import QUERIES, PrometheusTelemetry
from controller.httpread import BodyTooLarge


class Prom:
    """Answers by query name; an exception instance is raised instead."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.asked: list[str] = []

    def __call__(self, url: str, timeout: float) -> tuple[int, bytes]:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
        name = next(n for n, q in QUERIES.items() if q == query)
        self.asked.append(name)
        a = self.answers[name]
        if isinstance(a, BaseException):
            raise a
        if isinstance(a, tuple):
            return a
        return 200, a if isinstance(a, bytes) else json.dumps(a).encode()


def vector(*rows: tuple[dict[str, str], str], warnings: list[str] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1.0, v]} for m, v in rows],
        },
    }
    if warnings:
        doc["warnings"] = warnings
    return doc


def reporting(node: str, gpus: int = 8) -> tuple[dict[str, str], str]:
    return {"Hostname": node, "stat": "reporting"}, str(gpus)


def bad(node: str, gpu: int) -> tuple[dict[str, str], str]:
    return {"Hostname": node, "gpu": str(gpu), "stat": "bad"}, "0"


_NAMES = {
    "avg1m": "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg1m",
    "avg5m": "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg5m",
    "avg15m": "pod:DCGM_FI_DEV_GPU_UTIL:avg_avg15m",
    "p95_5m": "pod:DCGM_FI_DEV_GPU_UTIL:avg_p95_5m",
    "trend": "pod:DCGM_FI_DEV_GPU_UTIL:avg_deriv15m",
    "used": "pod:DCGM_FI_DEV_FB_USED:sum",
    "gpus": "pod:DCGM_FI_DEV_FB_USED:count",
}


def stat(pod: str, name: str, value: str) -> tuple[dict[str, str], str]:
    return {"__name__": _NAMES[name], "namespace": "ns", "pod": pod}, value


def good(prom: Prom) -> None:
    prom.answers = {
        "health": vector(reporting("a"), bad("a", 3), reporting("b")),
        "usage": vector(
            stat("p", "avg1m", "3"),
            stat("p", "avg5m", "2.5"),
            stat("p", "avg15m", "2"),
            stat("p", "p95_5m", "9"),
            stat("p", "trend", "-0.5"),
            stat("q", "avg5m", "NaN"),
        ),
        "memory": vector(stat("p", "used", "20480"), stat("p", "gpus", "2")),
    }


def _http_error(code: int, body: bytes) -> tuple[int, bytes]:
    return code, body


class Clock:
    """The provider's clock: `t` seconds on the monotonic clock, and `t` plus `stepped`
    on the wall clock (what NTP or a resumed VM moved it by)."""

    t = 1000.0
    stepped = 0.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.t + self.stepped, dt.UTC)


def test_three_queries_make_the_snapshot() -> None:
    prom, clock = Prom(), Clock()
    good(prom)
    t = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock).refresh()
    assert sorted(prom.asked) == ["health", "memory", "usage"]
    assert t.unhealthy == {"a": frozenset({3})}
    p = t.pods[("ns", "p")]
    assert (p.avg_1m, p.avg_5m, p.avg_15m, p.p95_5m, p.trend_per_min) == (3, 2.5, 2, 9, -0.5)
    assert (p.memory_used_mib, p.gpus) == (20480, 2)
    assert ("ns", "q") not in t.pods, "NaN is unknown, not idle"
    assert t.health.at == t.usage.at == 1000.0 and not t.health.error


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (urllib.error.URLError("connection refused"), "unreachable"),
        (TimeoutError(), "timeout"),
        (b"<html>", "malformed"),
        # found by a review: these escaped as exceptions and lost the whole round
        (http.client.IncompleteRead(b'{"status":', 1000), "unreachable"),
        (http.client.BadStatusLine("SSH-2.0-OpenSSH_9.6"), "unreachable"),
        ({"status": "success", "data": {"resultType": "vector", "result": [None]}}, "malformed"),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": []}]}},
            "malformed",
        ),
        ({"status": "success", "data": ["vector"]}, "malformed"),
        ({"status": "error", "error": "bad query"}, "error"),
        # how Prometheus answers a failed query: 4xx/5xx with its error as JSON
        (_http_error(422, b'{"status":"error","error":"too many samples"}'), "error"),
        (_http_error(502, b"<html>bad gateway</html>"), "error"),
        (vector(stat("p", "avg5m", "0"), warnings=["partial response"]), "warnings"),
        (BodyTooLarge("answer longer than 67108864 bytes"), "malformed"),
    ],
)
def test_a_failed_usage_query_keeps_the_last_values_and_says_why(answer: Any, reason: str) -> None:
    prom, clock = Prom(), Clock()
    good(prom)
    provider = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock)
    provider.refresh()
    clock.t += 30
    prom.answers["usage"] = answer
    t = provider.refresh()
    assert t.usage.at == 1000.0 and t.usage.error, "the signal ages; never reset to zero load"
    assert t.usage.reason == reason, "the kind in a word, for a waiting job's status"
    assert t.pods[("ns", "p")].avg_5m == 2.5
    assert t.health.at == 1030.0
    assert provider.metrics.errors.labels("usage", reason)._value.get() == 1
    clock.t += 200  # past max_age: the core treats utilisation as unknown (busy)
    assert not t.fresh(t.usage, clock.t)
    assert "scheduling by requests alone" in t.describe(clock.t)


def test_reads_failing_after_the_wall_clock_stepped_back_go_stale_as_time_passes() -> None:
    """Found by a review: with ages on the wall clock, clamped at 0, a step back of an
    hour kept a signal whose reads kept failing fresh for that hour, its last
    utilisation used as current. Ages are read on the monotonic clock."""
    prom, clock = Prom(), Clock()
    good(prom)
    provider = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock)
    provider.refresh()
    answered = prom.answers["usage"]
    clock.stepped -= 3600
    prom.answers["usage"] = urllib.error.URLError("connection refused")
    for _ in range(40):  # 10 minutes of failing reads, 15 s apart
        clock.t += 15
        provider.refresh()
    t = provider.current()
    now = clock.now().timestamp()
    assert not t.fresh(t.usage, now)
    assert "utilisation: stale, 600s old" in t.describe(now)
    assert provider.metrics.age.labels("usage")._value.get() == 600
    # and a step forward does not age a signal read a moment ago
    prom.answers["usage"] = answered
    clock.t += 15
    provider.refresh()
    clock.stepped += 3600
    clock.t += 15
    t = provider.current()
    now = clock.now().timestamp()
    assert t.fresh(t.usage, now) and "utilisation: 15s old" in t.describe(now)


def test_a_bad_gpu_stays_out_while_health_cannot_be_read_and_comes_back_on_a_healthy_reading() -> (
    None
):
    prom, clock = Prom(), Clock()
    good(prom)
    provider = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock)
    provider.refresh()
    prom.answers["health"] = urllib.error.URLError("down")
    assert provider.refresh().unhealthy == {"a": frozenset({3})}
    prom.answers["health"] = vector(reporting("b"))  # node a's agent silent: still out
    assert provider.refresh().unhealthy == {"a": frozenset({3})}
    prom.answers["health"] = vector(reporting("a"), reporting("b"))
    assert provider.refresh().unhealthy == {}


def test_a_gpu_label_that_is_not_an_index_names_no_gpu() -> None:
    prom, clock = Prom(), Clock()
    good(prom)
    prom.answers["health"] = vector(
        reporting("a"), ({"Hostname": "a", "gpu": "\u00b2", "stat": "bad"}, "0"), bad("a", 5)
    )
    t = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock).refresh()
    assert t.unhealthy == {"a": frozenset({5})} and not t.health.error


def test_age_metric_follows_the_signals() -> None:
    prom, clock = Prom(), Clock()
    good(prom)
    provider = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock)
    provider.current()
    assert provider.metrics.age.labels("usage")._value.get() == float("inf")
    provider.refresh()
    clock.t += 42
    provider.current()
    assert provider.metrics.age.labels("usage")._value.get() == 42


def test_an_empty_health_answer_is_an_error_an_empty_usage_answer_knows_no_pod() -> None:
    prom, clock = Prom(), Clock()
    good(prom)
    provider = PrometheusTelemetry("http://prom:9090", fetch=prom, clock=clock)
    provider.refresh()
    clock.t += 30
    prom.answers["health"] = vector()
    prom.answers["usage"] = vector()
    prom.answers["memory"] = vector()
    t = provider.refresh()
    assert t.health.at == 1000.0 and "no health series" in t.health.error
    assert t.unhealthy == {"a": frozenset({3})}
    assert t.usage.at == 1030.0 and t.pods == {}
    assert provider.metrics.errors.labels("health", "empty")._value.get() == 1
