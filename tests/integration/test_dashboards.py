"""Every query of the chart's Grafana dashboards returns data from a real Prometheus
(Debian's `prometheus`, the dev cluster's): the GPU dashboards' scraping a real
`gangops agent` on fake GPUs that meet an XID, with the chart's recording rules
loaded; the scheduler's scraping a real gang scheduler on the local control plane
while a batch gang runs, a high-tier gang preempts it and a third waits.

Without the `prometheus` package the tests skip, saying how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import start_http_server

from controller.devcluster.prometheus import (
    INSTALL_HINT,
    Prometheus,
    PrometheusConfig,
    start_prometheus,
)
from controller.kube.client import RESOURCES
from tests.unit.chart.dashboards import DASHBOARDS, fed_by, load, queries

from .gang_helpers import BATCH, HIGH, GangEnv, policy_doc
from .kube import free_port, wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

if shutil.which("prometheus") is None:
    pytest.skip(f"prometheus is not installed: {INSTALL_HINT}", allow_module_level=True)

ALL = [
    (p.stem, title, expr)
    for p in DASHBOARDS
    if fed_by(p) == "gpu"
    for title, expr in queries(load(p))
]
SCHEDULER = [
    (p.stem, title, expr)
    for p in DASHBOARDS
    if fed_by(p) == "scheduler"
    for title, expr in queries(load(p))
]
NEEDS_TELEMETRY = {"Idle-but-held GPUs by project and user"}
WHY_NOT_HERE = (
    "it has data only once a job has run for 5 minutes under live GPU telemetry "
    "(gangops_idle_gpus); its samples are tested in tests/unit/gang/test_metrics.py, "
    "its query's syntax by promtool in tests/unit/chart/test_dashboards.py"
)


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


def test_every_scheduler_dashboard_query_returns_data(gang_env: GangEnv, tmp_path: Path) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    controller = env.start()
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=controller.metrics.registry)
    prom = start_prometheus(
        tmp_path, PrometheusConfig(static_targets=({"targets": [f"127.0.0.1:{port}"]},))
    )
    try:
        env.create(env.job("batch", gang=8, tier=BATCH))
        env.wait_phase("batch", "Running")
        env.create(env.job("urgent", gang=8, tier=HIGH))
        env.wait_phase("urgent", "Running")
        env.create(env.job("later", gang=8, tier=BATCH))
        wait_for(
            "a job waiting", lambda: env.status("later").get("reason") in ("Quota", "Capacity")
        )
        missing = []
        for dashboard, title, expr in SCHEDULER:
            if title in NEEDS_TELEMETRY:
                print(f"{dashboard} / {title}: not checked here: {WHY_NOT_HERE}")
                continue
            try:
                wait_for(f"{dashboard} / {title}", lambda e=expr: prom.query(e), timeout=45)
            except AssertionError:
                missing.append(f"{dashboard} / {title}: {expr}")
        assert not missing, "queries without data:\n" + "\n".join(missing)
        events, _ = env.kube.list(RESOURCES["Event"], namespace=env.namespace)
        assert any(e["reason"] == "Preempted" for e in events), "the scenario preempted nothing"
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)
