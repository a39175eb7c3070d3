"""Recent usage from Prometheus, at its HTTP seam: the queries sent, the answers read."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from controller.httpread import BodyTooLarge
from controller.quota.usage import PrometheusUsage, QueryFailed, Usage


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


@pytest.mark.parametrize(
    "answer",
    [
        b"[]",
        b'"success"',
        b'{"status": "success", "data": []}',
        b'{"status": "success", "data": {"result": [{}]}}',
        b'{"status": "success", "data": {"result": [{"value": [1, "lots"]}]}}',
        b'{"status": "success", "data": {"result": [{"value": [1, "NaN"]}]}}',
        b'{"status": "succ',
        http.client.IncompleteRead(b'{"status": "succ', 100),
        BodyTooLarge("answer longer than 1048576 bytes"),
        QueryFailed("HTTP 503: <html>"),
    ],
)
def test_an_answer_that_is_not_a_number_is_no_usage(answer: bytes | Exception) -> None:
    """Found by a review: a list, a sample without a value or a cut-short answer
    raised out of the pull request's write, so a misbehaving Prometheus stopped
    every quota request; usage is only an aid to the reviewer."""

    def fetch(url: str, timeout_s: float) -> bytes:
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert PrometheusUsage("http://prom", fetch=fetch).markdown("nlp", 8) is None
