"""The scheduler's telemetry provider (`controller.gang.telemetry.PrometheusTelemetry`)
against a real Prometheus (Debian's `prometheus`) with the chart's recording rules,
scraping a fixed DCGM exposition: the values it reads, and what it does when that
Prometheus answers with NaN, nothing, an error, `warnings` (a failing remote read),
or not at all (stopped with SIGSTOP): never zero load; each signal keeps its last
good value and ages; it recovers on the next good answer. The unit tests
(tests/unit/gang/test_telemetry_provider.py) cover the same at the HTTP seam.

Without the `prometheus` package the tests skip, saying how to install it."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from controller.devcluster.prometheus import (
    INSTALL_HINT,
    Prometheus,
    PrometheusConfig,
    start_prometheus,
)
from controller.gang.telemetry import PrometheusTelemetry
from controller.scheduler.telemetry import Telemetry

from .kube import free_port, wait_for

if shutil.which("prometheus") is None:
    pytest.skip(f"prometheus is not installed: {INSTALL_HINT}", allow_module_level=True)

_GPU = 'gpu="{g}",UUID="GPU-{g}",Hostname="n1",modelName="NVIDIA A100"'
EXPOSITION = "\n".join(
    [
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        f'DCGM_FI_DEV_GPU_UTIL{{{_GPU.format(g=0)},namespace="ns",pod="busy"}} 80',
        f'DCGM_FI_DEV_GPU_UTIL{{{_GPU.format(g=1)},namespace="ns",pod="broken"}} NaN',
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
        f'DCGM_FI_DEV_FB_USED{{{_GPU.format(g=0)},namespace="ns",pod="busy"}} 20480',
        f'DCGM_FI_DEV_FB_USED{{{_GPU.format(g=1)},namespace="ns",pod="broken"}} 100',
        "# TYPE gangops_gpu_healthy gauge",
        f"gangops_gpu_healthy{{{_GPU.format(g=0)}}} 1",
        f"gangops_gpu_healthy{{{_GPU.format(g=1)}}} 0",
        "",
    ]
).encode()
"""One node, two GPUs: GPU 0 held by pod ns/busy at 80 %; GPU 1 held by ns/broken,
whose utilisation reads NaN, and out of service."""


class _Exposition(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _prometheus(work: Path, exporter: str | None, **kw: object) -> Prometheus:
    targets = ({"targets": [exporter]},) if exporter else ()
    return start_prometheus(work, PrometheusConfig(static_targets=targets, **kw))  # type: ignore[arg-type]


def _read(provider: PrometheusTelemetry) -> Telemetry:
    """Refresh until the recording rules have the busy pod and the bad GPU (a few 1 s
    evaluations). Both: a refresh reads health before usage, so the first evaluation
    of the rule group can land between its two queries, with the pod and no health."""
    return wait_for(
        "the busy pod's utilisation and the bad GPU",
        lambda: (t := provider.refresh()).pods.get(("ns", "busy")) and t.unhealthy and t,
        timeout=30,
    )


def _errors(provider: PrometheusTelemetry, signal_: str, reason: str) -> float:
    return provider.metrics.errors.labels(signal_, reason)._value.get()


def test_a_real_prometheus_is_read_and_nan_is_unknown_not_idle(
    exporter: str, tmp_path: Path
) -> None:
    with _prometheus(tmp_path, exporter) as prom:
        provider = PrometheusTelemetry(prom.url, timeout_s=2)
        t = _read(provider)
    busy = t.pods[("ns", "busy")]
    assert (busy.avg_1m, busy.avg_5m, busy.gpus, busy.memory_used_mib) == (80, 80, 1, 20480)
    # NaN is no reading: the pod is unknown (counted busy by the core), never 0 % idle
    assert ("ns", "broken") not in t.pods
    assert t.unhealthy == {"n1": frozenset({1})}
    assert not t.health.error and not t.usage.error


def test_an_empty_prometheus_is_a_health_error_and_knows_no_pod(tmp_path: Path) -> None:
    with _prometheus(tmp_path, None) as prom:
        provider = PrometheusTelemetry(prom.url, timeout_s=2)
        t = provider.refresh()
    assert t.health.at is None and "no health series" in t.health.error
    assert t.usage.at is not None and not t.pods  # no pod known: nobody counts as idle
    assert _errors(provider, "health", "empty") == 1


def test_an_error_answer_keeps_the_last_values_and_the_next_good_one_resumes(
    exporter: str, tmp_path: Path
) -> None:
    with _prometheus(tmp_path / "a", exporter) as good:
        provider = PrometheusTelemetry(good.url, timeout_s=2)
        first = _read(provider)
    # the same URL and data, now a Prometheus that refuses every query (422: too many
    # samples), as an overloaded one does
    refusing = start_prometheus(
        tmp_path / "a",
        PrometheusConfig(
            static_targets=({"targets": [exporter]},), flags=("--query.max-samples=0",)
        ),
        port=int(good.url.rsplit(":", 1)[1]),
    )
    with refusing:
        t = provider.refresh()
    assert "query processing would load too many samples" in t.usage.error, t.usage.error
    assert t.usage.at == first.usage.at and t.pods == first.pods  # kept, and ageing
    assert t.unhealthy == first.unhealthy
    assert _errors(provider, "usage", "error") == 1 and _errors(provider, "health", "error") == 1


def test_warnings_are_not_read_as_values(exporter: str, tmp_path: Path) -> None:
    """A remote read that fails makes Prometheus answer with the local data and
    `warnings`: the answer may be missing series, so it is not used."""
    nowhere = f"http://127.0.0.1:{free_port()}/api/v1/read"
    with _prometheus(tmp_path, exporter, remote_read=(nowhere,)) as prom:
        provider = PrometheusTelemetry(prom.url, timeout_s=2)
        wait_for("a scrape", lambda: prom.query("up"), timeout=20)
        t = provider.refresh()
    assert "Prometheus warned" in t.health.error and "remote_read" in t.health.error, t.health
    assert t.usage.at is None and not t.pods
    assert _errors(provider, "health", "warnings") == 1


def test_a_prometheus_that_does_not_answer_times_out_and_recovers(
    exporter: str, tmp_path: Path
) -> None:
    with _prometheus(tmp_path, exporter) as prom:
        provider = PrometheusTelemetry(prom.url, timeout_s=1)
        first = _read(provider)
        os.kill(prom.component.pid, signal.SIGSTOP)  # accepts connections, answers nothing
        try:
            t = provider.refresh()
        finally:
            os.kill(prom.component.pid, signal.SIGCONT)
        assert "no answer in 1s" in t.health.error and "no answer in 1s" in t.usage.error
        assert t.pods == first.pods and t.usage.at == first.usage.at
        assert _errors(provider, "usage", "timeout") == 1
        again = provider.refresh()
    assert not again.health.error and not again.usage.error
    assert again.usage.at is not None and first.usage.at is not None
    assert again.usage.at > first.usage.at
