"""Benchmarks of the alert actions (issue 18): webhook to action, and metric change to
action through the whole real chain.

A dev cluster of 50 fake 8-GPU nodes is started, and `gangops run --no-scheduler` (a
subprocess, as in production) serves `POST /alertmanager`; a Node watch in this
process notes when each GPU's quarantine lands on its Node.

1. webhook to action: 200 deliveries, one alert each (4 GPUs on each of the 50
   nodes), posted one by one every 50 ms as Alertmanager would (bearer token, its
   payload version 4); each one's time from the POST to the Node event that shows
   its GPU in `gangops.ai/quarantined-gpus`, p99; and from the POST to its answer,
   p99 (under 200 ms). The breaker is opened wide for
   this phase (100 %, 100 nodes): it measures the path, not the policy.
2. metric change to action: the node agents replay GPUs for every node, a real
   Prometheus scrapes them and evaluates the chart's rules, a real Alertmanager
   posts to gangops. Three GPUs on three nodes jump to 100 % memory at once (a
   scripted memory-ramp) at a known second of the agents' clock; each one's time
   from that second (taken from just before the agents were launched, so it errs
   long) to its quarantine on the Node; the largest of the three. Timings used:
   scrape and rule evaluation every 5 s, the shipped rule's `for: 30s`, Alertmanager
   `group_wait` 5 s (and `group_interval` 5 s), the actor's tick 1 s. Worst case by
   construction: 5 (scrape) + 5 (evaluation) + 30 (for) + 5 (group_wait) + < 1 (the
   actor) = 46 s; production's 15 s scrape and evaluation with a 10 s group_wait
   would add up to 71 s, so keep them at 5 s where the 60 s budget matters.

Run: `.venv/bin/python -m tests.perf alerts` (part of `make bench`).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from controller.devcluster import DevCluster, Options, ensure_binaries, start
from controller.devcluster.alertmanager import AlertmanagerConfig, start_alertmanager
from controller.devcluster.launcher import _free_ports
from controller.devcluster.prometheus import PrometheusConfig, start_prometheus
from controller.devcluster.telemetry import TelemetryOptions, start_agents, steady_recording
from controller.kube.client import RESOURCES, ApiError, Kube, connect
from controller.kube.crds import generate_crds, install
from controller.nodehealth import QUARANTINE_ANNOTATION, parse_indices
from controller.policy.validate import schema_dir
from controller.scheduler.policy import policy_configmap
from tests.perf.devcluster import thousand_node_cluster
from tests.perf.harness import Result, print_table

# Thresholds: the targets of issue 18. Measured on the reference machine (2 vCPUs
# shared with three other sessions' work), 2026-12-03, two runs: webhook answered p99
# 19 ms; webhook to action p50 21-22 ms, p99 178-291 ms; metric change to action
# 39.8 s (all three GPUs) and 39.5 / 45.0 / 44.9 s. The metric figure errs long by the
# agents' start-up (its origin is taken before they are launched).
WEBHOOK_P99_MAX_S = 1.0
ANSWER_P99_MAX_S = 0.2
"""Alertmanager's delivery is answered within 200 ms (the issue's figure): the
receiver only checks, parses and queues."""
METRIC_TO_ACTION_MAX_S = 60.0

NODES = 50
SYSTEM_NS = "gangops-system"
TOKEN = "bench-token"
LEAK = "GangopsGPUMemoryLeak"
SCRAPE_S = 5.0
GROUP_WAIT_S = 5.0


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


def _setup(kube: Kube) -> None:
    install(kube, generate_crds(schema_dir()))
    kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}},
        field_manager="bench",
    )
    policy = {
        "alertActions": {
            "rules": [
                {"alert": LEAK, "action": "quarantine-gpus", "mode": "enforce",
                 "cooldownSeconds": 600, "restartJob": False, "gracePeriodSeconds": 0}
            ],
            "circuitBreaker": {"maxPercent": 100, "maxNodes": 100, "windowSeconds": 600},
        }
    }  # fmt: skip
    kube.apply(
        policy_configmap(policy, SYSTEM_NS),
        field_manager="bench",
    )


class _Landed:
    """A Node watch noting when each (node, GPU) first shows as quarantined."""

    def __init__(self, kube: Kube) -> None:
        self.at: dict[tuple[str, int], float] = {}
        self._kube = kube
        self._stop = threading.Event()
        _, rv = kube.list(RESOURCES["Node"])
        self._thread = threading.Thread(target=self._watch, args=(rv,), daemon=True)
        self._thread.start()

    def _watch(self, rv: str) -> None:
        while not self._stop.is_set():
            try:
                for ev in self._kube.watch(RESOURCES["Node"], resource_version=rv, timeout_s=30):
                    now = time.monotonic()
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    ann = obj["metadata"].get("annotations") or {}
                    for gpu in parse_indices(ann.get(QUARANTINE_ANNOTATION)):
                        self.at.setdefault((obj["metadata"]["name"], gpu), now)
                    if self._stop.is_set():
                        return
            except ApiError:
                if self._stop.is_set():
                    return  # the cluster is going away
                _, rv = self._kube.list(RESOURCES["Node"])

    def wait(self, keys: list[tuple[str, int]], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(k in self.at for k in keys):
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


def _delivery(node: str, gpu: int) -> bytes:
    return json.dumps(
        {
            "version": "4",
            "status": "firing",
            "receiver": "gangops",
            "groupKey": f'{{}}:{{Hostname="{node}",gpu="{gpu}"}}',
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": LEAK, "Hostname": node, "gpu": str(gpu)},
                    "annotations": {},
                    "startsAt": "2027-01-15T08:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z",
                    "fingerprint": f"bench-{node}-{gpu}",
                }
            ],
        }
    ).encode()


def _webhook_phase(
    kube: Kube, port: int, nodes: list[str], landed: _Landed
) -> tuple[list[float], list[float]]:
    """(POST to action, POST to answer) of each delivery, seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent: dict[tuple[str, int], float] = {}
    answers: list[float] = []
    try:
        for gpu in range(4):
            for node in nodes:
                sent[(node, gpu)] = time.monotonic()
                conn.request(
                    "POST", "/alertmanager", body=_delivery(node, gpu),
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )  # fmt: skip
                with conn.getresponse() as resp:
                    resp.read()
                    assert resp.status == 200, resp.status
                answers.append(time.monotonic() - sent[(node, gpu)])
                time.sleep(0.05)
    finally:
        conn.close()
    landed.wait(list(sent), timeout_s=30)
    missing = [k for k in sent if k not in landed.at]
    assert not missing, f"{len(missing)} quarantines never landed, e.g. {missing[:3]}"
    return [landed.at[k] - t for k, t in sent.items()], answers


def _metric_phase(
    cluster: DevCluster, work: Path, am_address: str, nodes: list[str], landed: _Landed
) -> list[float]:
    at_s = 20.0
    picks = [(nodes[i], 7) for i in (0, len(nodes) // 2, len(nodes) - 1)]
    scenario = work / "scenario.yaml"
    scenario.write_text(
        "events:\n"
        + "".join(
            f"  - {{at: {at_s}, node: {n}, gpu: {g}, kind: memory-ramp, mib-per-second: 1000000}}\n"
            for n, g in picks
        )
    )
    t_launch = time.monotonic()
    start_agents(
        cluster,
        TelemetryOptions(
            replay_dir=steady_recording(work / "rec"), scenario=scenario, speed=1, interval_s=1.0
        ),
    )
    prom = start_prometheus(
        work / "prometheus",
        PrometheusConfig(
            scrape_interval_s=SCRAPE_S,
            file_sd_files=(cluster.prometheus_targets_file,),
            alertmanagers=(am_address,),
        ),
        tie_to_process=True,
    )
    cluster.add_component(prom.component)  # stopped with the cluster
    landed.wait(picks, timeout_s=at_s + 120)
    change = t_launch + at_s
    return [landed.at[k] - change if k in landed.at else float("inf") for k in picks]


def _controller(kubeconfig: Path, port: int, token: Path, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "controller.cli", "run", "--kubeconfig", str(kubeconfig),
        "--no-leader-elect", "--no-scheduler", "--webhook-addr", f"127.0.0.1:{port}",
        "--alertmanager-token-file", str(token), "--alert-tick", "1",
        "--metrics-addr", "127.0.0.1:0", "--system-namespace", SYSTEM_NS,
        "--source-selector", "gangops.ai/none=bench", "--cache-dir", str(log.parent / "cache"),
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def run(nodes: int = NODES) -> list[Result]:
    build = ensure_binaries()
    with tempfile.TemporaryDirectory(prefix="gangops-bench-alerts-") as tmp:
        work = Path(tmp)
        cluster = start(
            Options(
                cluster=thousand_node_cluster(nodes),
                data_dir=work / "cluster",
                bin_dir=build.bin_dir,
                timeout_s=300,
            )
        )
        proc: subprocess.Popen[bytes] | None = None
        am = None
        landed = None
        try:
            kube = connect(str(cluster.kubeconfig))
            _setup(kube)
            token = work / "token"
            token.write_text(TOKEN + "\n")
            port = _free_ports(1)[0]
            log = work / "gangops-run.log"
            proc = _controller(cluster.kubeconfig, port, token, log)
            deadline = time.monotonic() + 60
            while "leading" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # the actor's first list
            names = sorted(o["metadata"]["name"] for o in kube.list(RESOURCES["Node"])[0])
            landed = _Landed(kube)
            webhook, answers = _webhook_phase(kube, port, names, landed)
            am = start_alertmanager(
                work / "alertmanager",
                AlertmanagerConfig(
                    f"http://127.0.0.1:{port}/alertmanager",
                    token,
                    group_wait_s=GROUP_WAIT_S,
                    group_interval_s=GROUP_WAIT_S,
                ),
            )
            metric = _metric_phase(cluster, work, am.address, names, landed)
        finally:
            if landed is not None:
                landed.stop()
            if am is not None:
                am.stop()
            if proc is not None:
                proc.terminate()
                proc.wait(30)
            cluster.stop()
    print(
        f"webhook to action: {len(webhook)} deliveries, p50"
        f" {sorted(webhook)[len(webhook) // 2] * 1000:.0f} ms, max {max(webhook) * 1000:.0f} ms"
    )
    print(
        "metric change to action (scrape and evaluation 5 s, for 30 s, group_wait 5 s):"
        f" {', '.join(f'{m:.1f}' for m in metric)} s"
    )
    return [
        Result("alerts: webhook answered p99", _p99(answers), "s", ANSWER_P99_MAX_S),
        Result("alerts: webhook to action p99", _p99(webhook), "s", WEBHOOK_P99_MAX_S),
        Result("alerts: metric change to action (max of 3)", max(metric), "s",
               METRIC_TO_ACTION_MAX_S),
    ]  # fmt: skip


def main() -> int:
    results = run()
    print_table(results)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
