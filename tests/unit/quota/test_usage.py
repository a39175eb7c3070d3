"""Recent usage from Prometheus, at its HTTP seam: the queries sent, the answers read."""

from __future__ import annotations

import json
import urllib.parse

from controller.quota.usage import PrometheusUsage, Usage


def _vector(value: str) -> bytes:
    # The shape of Prometheus' instant-query answer (GET /api/v1/query).
    doc = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1764756000, value]}]},
    }
    return json.dumps(doc).encode()


def test_average_and_peak_over_fourteen_days() -> None:
    asked: list[str] = []

    def fetch(url: str, timeout_s: float) -> bytes:
        asked.append(urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0])
        return _vector("48.5" if url and len(asked) == 1 else "64")

    p = PrometheusUsage("http://prom:9090/", fetch=fetch)
    assert p.usage("nlp") == Usage(48.5, 64.0)
    assert asked == [
        'avg_over_time(sum(gangops_gpus_allocated{project="nlp"})[14d:10m])',
        'max_over_time(sum(gangops_gpus_allocated{project="nlp"})[14d:10m])',
    ]
    asked.clear()
    assert p.fraction("nlp", 64) == 48.5 / 64
    asked.clear()
    text = p.markdown("nlp", 64)
    assert text is not None and "48.5 GPUs on average and 64 at the peak of its max 64" in text


def test_no_answer_is_no_usage() -> None:
    def down(url: str, timeout_s: float) -> bytes:
        raise OSError("connection refused")

    def empty(url: str, timeout_s: float) -> bytes:
        return json.dumps({"status": "success", "data": {"result": []}}).encode()

    assert PrometheusUsage("http://prom", fetch=down).usage("nlp") is None
    assert PrometheusUsage("http://prom", fetch=empty).fraction("nlp", 8) is None
    assert PrometheusUsage("http://prom", fetch=empty).markdown("nlp", 8) is None
