"""The real Prometheus (Debian's `prometheus`) that runs beside the dev cluster.

It scrapes exporters listed in a file_sd file: here `prometheus_client` HTTP
endpoints in this test process exposing a dcgm-exporter gauge, as the node
agents will. PromQL must return the exported value with its labels and the
target's, the chart's recording rules must run over it, and targets added to or
removed from the file must come and go while Prometheus runs. Starting fails
clearly (a rejected configuration in Prometheus' words, a taken port), stopping
is bounded, and Prometheus dies with the process that started it.

Without the `prometheus` package the tests skip, saying how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from controller.devcluster.prometheus import (
    AGENT_JOB,
    INSTALL_HINT,
    Prometheus,
    PrometheusConfig,
    PrometheusError,
    TargetGroup,
    scrape_health,
    start_prometheus,
    write_targets,
)

from .kube import wait_for

GPU_LABELS = ("gpu", "UUID", "Hostname", "modelName", "pod", "namespace", "container")

if shutil.which("prometheus") is None:
    pytest.skip(f"prometheus is not installed: {INSTALL_HINT}", allow_module_level=True)


class Exporter:
    """A /metrics endpoint in this process with dcgm-exporter's utilisation gauge."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.util = Gauge(
            "DCGM_FI_DEV_GPU_UTIL",
            "GPU utilization (in %).",
            GPU_LABELS,
            registry=self.registry,
        )
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def exporter() -> Iterator[Callable[[], Exporter]]:
    """`exporter()`: a new endpoint, closed after the test."""
    made: list[Exporter] = []

    def make() -> Exporter:
        made.append(Exporter())
        return made[-1]

    yield make
    for e in made:
        e.close()


@pytest.fixture
def targets_file(tmp_path: Path) -> Path:
    return tmp_path / "sd" / "targets.json"


@pytest.fixture
def prometheus(tmp_path: Path, targets_file: Path) -> Iterator[Prometheus]:
    with start_prometheus(
        tmp_path / "prometheus", PrometheusConfig(file_sd_files=(targets_file,))
    ) as prom:
        yield prom


def group(exporter: Exporter, node: str, *, path: str | None = None) -> TargetGroup:
    labels = {"node": node, **({"__metrics_path__": path} if path else {})}
    return {"targets": [exporter.target], "labels": labels}


def agent_targets(prom: Prometheus) -> dict[str, str]:
    """The agents' targets Prometheus scrapes now, by node label: their health."""
    return {t.labels["node"]: t.health for t in prom.targets() if t.job == AGENT_JOB}


# Discovery hands changes to the scrape manager at most every 5 s, then the first
# scrape comes within an interval: 20 s leaves room on a busy machine.
SD_TIMEOUT = 20.0


def test_promql_returns_the_scraped_gauge_and_the_recording_rule(
    prometheus: Prometheus, targets_file: Path, exporter: Callable[[], Exporter]
) -> None:
    e = exporter()
    e.util.labels("0", "GPU-0a", "node-1", "NVIDIA H100", "train-0", "team-a", "main").set(73)
    e.util.labels("1", "GPU-1a", "node-1", "NVIDIA H100", "", "", "").set(0)
    write_targets(targets_file, [group(e, "node-1")])

    samples = wait_for(
        "the gauge scraped",
        lambda: prometheus.query('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-0a"}'),
        timeout=SD_TIMEOUT,
    )
    [s] = samples
    assert s.value == 73
    assert s.labels == {
        "__name__": "DCGM_FI_DEV_GPU_UTIL",
        "gpu": "0",
        "UUID": "GPU-0a",
        "Hostname": "node-1",
        "modelName": "NVIDIA H100",
        "pod": "train-0",
        "namespace": "team-a",
        "container": "main",
        "job": AGENT_JOB,
        "instance": e.target,
        "node": "node-1",  # the file_sd label
    }
    # An empty label is no label: the GPU no pod holds has no pod labels.
    [idle] = prometheus.query('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1a"}')
    assert "pod" not in idle.labels and "namespace" not in idle.labels

    avg = wait_for(
        "the 1m recording rule",
        lambda: prometheus.query('gpu:DCGM_FI_DEV_GPU_UTIL:avg1m{UUID="GPU-0a"}'),
        timeout=10,
    )
    assert avg[0].value == 73
    assert {**avg[0].labels, "__name__": s.labels["__name__"]} == s.labels
    [ns] = wait_for(
        "the per-namespace rule",
        lambda: prometheus.query("namespace:DCGM_FI_DEV_GPU_UTIL:avg_avg5m"),
        timeout=10,
    )
    assert (ns.labels, ns.value) == (
        {"__name__": "namespace:DCGM_FI_DEV_GPU_UTIL:avg_avg5m", "namespace": "team-a"},
        73,
    )

    e.util.labels("0", "GPU-0a", "node-1", "NVIDIA H100", "train-0", "team-a", "main").set(20)
    wait_for(
        "the new value scraped",
        lambda: prometheus.query('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-0a"} == 20'),
        timeout=10,
    )
    now = time.time()
    [series] = prometheus.query_range(
        'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-0a"}', start=now - 30, end=now, step_s=1
    )
    values = [v for _, v in series.points]
    assert values[-1] == 20 and 73 in values


def test_file_sd_targets_come_and_go_while_prometheus_runs(
    prometheus: Prometheus, targets_file: Path, exporter: Callable[[], Exporter]
) -> None:
    a, b = exporter(), exporter()
    a.util.labels("0", "GPU-a", "node-a", "T4", "", "", "").set(1)
    b.util.labels("0", "GPU-b", "node-b", "T4", "", "", "").set(2)
    write_targets(targets_file, [group(a, "node-a")])
    wait_for(
        "node-a up",
        lambda: agent_targets(prometheus) == {"node-a": "up"},
        timeout=SD_TIMEOUT,
    )

    # node-b as `gangops agent --fake-nodes` lists its nodes: one server, a path each.
    b_path = "/nodes/node-b/metrics"
    write_targets(targets_file, [group(a, "node-a"), group(b, "node-b", path=b_path)])
    wait_for(
        "node-b added",
        lambda: agent_targets(prometheus) == {"node-a": "up", "node-b": "up"},
        timeout=SD_TIMEOUT,
    )
    [b_target] = [t for t in prometheus.targets() if t.labels.get("node") == "node-b"]
    assert b_target.scrape_url == f"http://{b.target}{b_path}"
    [s] = wait_for(
        "node-b's gauge",
        lambda: prometheus.query('DCGM_FI_DEV_GPU_UTIL{node="node-b"}'),
        timeout=10,
    )
    assert s.value == 2

    write_targets(targets_file, [group(b, "node-b", path=b_path)])
    wait_for(
        "node-a removed",
        lambda: agent_targets(prometheus) == {"node-b": "up"},
        timeout=SD_TIMEOUT,
    )
    # Its series end at once (a staleness marker), not after the 5-minute lookback.
    wait_for(
        "node-a's series gone",
        lambda: not prometheus.query('DCGM_FI_DEV_GPU_UTIL{node="node-a"}'),
        timeout=5,
    )
    assert prometheus.query('DCGM_FI_DEV_GPU_UTIL{node="node-b"}')

    # Once node-a's last scrape has left the window, one target, up, scraped on time.
    health = wait_for(
        "node-a out of the window",
        lambda: (h := scrape_health(prometheus, window_s=3)).targets == 1 and h,
        timeout=10,
    )
    assert (health.up, health.missed_scrapes, health.failed_scrapes) == (1, 0, 0)
    assert 2 <= health.scrapes <= 4
    assert 0 < health.scrape_duration_p50_s <= health.scrape_duration_max_s < 1


def test_static_targets_are_scraped(tmp_path: Path, exporter: Callable[[], Exporter]) -> None:
    e = exporter()
    e.util.labels("0", "GPU-s", "node-s", "T4", "", "", "").set(5)
    config = PrometheusConfig(static_targets=(group(e, "node-s"),))
    with start_prometheus(tmp_path, config) as prom:
        [s] = wait_for(
            "the static target's gauge",
            lambda: prom.query("DCGM_FI_DEV_GPU_UTIL"),
            timeout=10,
        )
        assert (s.labels["job"], s.labels["node"], s.value) == ("static", "node-s", 5)


def test_a_rejected_configuration_is_reported_in_prometheus_words(tmp_path: Path) -> None:
    rules = tmp_path / "bad-rules.yaml"
    rules.write_text(
        "groups:\n- name: x\n  rules:\n  - record: a:b:c\n    expr: rate(\n", encoding="utf-8"
    )
    with pytest.raises(PrometheusError) as raised:
        start_prometheus(tmp_path / "p", PrometheusConfig(rule_files=(rules,)))
    message = str(raised.value)
    assert "rejected its configuration" in message
    assert "unclosed left parenthesis" in message  # Prometheus' own line


def test_a_taken_port_is_reported(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PrometheusError, match=r"(?s)could not bind .*address already in use"):
            start_prometheus(tmp_path, PrometheusConfig(), port=port)


def test_stop_is_bounded_and_the_process_gone(tmp_path: Path) -> None:
    prom = start_prometheus(tmp_path, PrometheusConfig())
    t0 = time.monotonic()
    prom.stop()
    assert time.monotonic() - t0 < 10
    assert not prom.alive()
    prom.stop()  # twice is fine


_STARTER = """
import sys, time
from pathlib import Path
from controller.devcluster.prometheus import start_prometheus
prom = start_prometheus(Path(sys.argv[1]))
print(prom.component.pid, flush=True)
time.sleep(120)
"""


def test_prometheus_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        os.kill(starter.pid, signal.SIGKILL)  # no atexit, no finally: only the kernel acts
        starter.wait(10)
        wait_for("Prometheus to die with its parent", lambda: _gone(pid), timeout=10)
    finally:
        starter.kill()
        starter.wait(10)
        if starter.stdout is not None:
            starter.stdout.close()


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_dev_cluster_up_with_prometheus(tmp_path: Path) -> None:
    """`up --detach --prometheus` prints the URL, Prometheus scrapes the cluster's
    file_sd file, and `down` stops it with the cluster."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "apiVersion: gangops.ai/v1\nkind: Cluster\nmetadata: {name: tiny}\nspec:\n  pools:\n"
        "    - {name: g, count: 1, gpusPerNode: 2, gpuModel: Tesla-T4, gpuMemoryMiB: 15360}\n",
        encoding="utf-8",
    )
    state = tmp_path / "state.json"
    command = [sys.executable, "-m", "controller.devcluster"]
    common = ["--state", str(state)]
    flags = ["--detach", "--prometheus", "--no-progress", "--cluster", str(cluster)]
    up = subprocess.run(
        [*command, "up", *flags, *common],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stderr
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines()
        )
        url = exports["GANGOPS_PROMETHEUS_URL"]
        assert f"prometheus  {url}" in up.stderr
        recorded = json.loads(state.read_text())
        [prom_state] = [c for c in recorded["components"] if c["name"] == "prometheus"]
        targets = Path(recorded["data_dir"]) / "prometheus" / "targets.json"
        assert json.loads(targets.read_text()) == []
        assert str(targets) in up.stderr

        def pools() -> list[str]:
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=10) as resp:
                return [t["scrapePool"] for t in json.load(resp)["data"]["activeTargets"]]

        assert wait_for("Prometheus scraping itself", pools) == ["prometheus"]  # no agents yet
        env = subprocess.run(
            [*command, "env", *common], capture_output=True, text=True, timeout=60, check=True
        )
        assert f"export GANGOPS_PROMETHEUS_URL={url}\n" in env.stdout
    finally:
        down = subprocess.run(
            [*command, "down", *common], capture_output=True, text=True, timeout=60, check=False
        )
    assert down.returncode == 0, down.stderr
    assert _gone(prom_state["pid"])


def test_reload_rereads_the_configuration_and_reports_a_refusal(tmp_path: Path) -> None:
    with start_prometheus(tmp_path, PrometheusConfig()) as prom:
        prom.reload()
        prom.config_file.write_text("scrape_configs: [{job_name: 1, nope: 2}]\n")
        with pytest.raises(PrometheusError, match=r"(?s)refused to reload .*field nope not found"):
            prom.reload()
        assert prom.alive()  # the running configuration stays
        assert [s.value for s in prom.query("1 + 1")] == [2.0]
