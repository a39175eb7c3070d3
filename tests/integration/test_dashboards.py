"""Every query of the chart's Grafana dashboards returns data from a real Prometheus
(Debian's `prometheus`, the dev cluster's) scraping a real `gangops agent` on fake GPUs
that meet an XID, with the chart's recording rules loaded.

Without the `prometheus` package the tests skip, saying how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from controller.devcluster.prometheus import (
    INSTALL_HINT,
    Prometheus,
    PrometheusConfig,
    start_prometheus,
)
from tests.unit.chart.dashboards import DASHBOARDS, load, queries

from .kube import free_port, wait_for

if shutil.which("prometheus") is None:
    pytest.skip(f"prometheus is not installed: {INSTALL_HINT}", allow_module_level=True)

ALL = [(p.stem, title, expr) for p in DASHBOARDS for title, expr in queries(load(p))]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("dashboards")
    scenario = work / "scenario.yaml"
    scenario.write_text("events:\n  - {at: 2, gpu: 3, kind: xid, xid: 79}\n")
    port = free_port()
    log = (work / "agent.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "agent", "--node", "gpu-node-1",
         "--listen", f"127.0.0.1:{port}", "--scenario", str(scenario), "--gpus", "8",
         "--pod-resources-socket", "", "--publish-node", "off"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    config = PrometheusConfig(static_targets=({"targets": [f"127.0.0.1:{port}"]},))
    prom = start_prometheus(work, config)
    yield prom
    prom.stop()
    agent.terminate()
    agent.wait(20)


@pytest.mark.parametrize(("dashboard", "title", "expr"), ALL, ids=[f"{d}:{t}" for d, t, _ in ALL])
def test_the_query_returns_data(
    prometheus: Prometheus, dashboard: str, title: str, expr: str
) -> None:
    samples = wait_for(f"{dashboard} / {title}: {expr}", lambda: prometheus.query(expr), timeout=45)
    assert samples
