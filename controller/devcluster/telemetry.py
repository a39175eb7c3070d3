"""GPU telemetry for a dev cluster's fake nodes: node agents over replayed GPUs, and
the real Prometheus (`prometheus.start_for_cluster`) scraping them.

One `gangops agent --fake-nodes` process runs the per-node agent code for every GPU
node of the cluster (the process is started, not imported: the agent is a layer
above the dev cluster). Each node's GPUs replay the recorded telemetry
(`../shared/telemetry/genai2026` by default), follow the pods the fake kubelet gave
them through that node's pod-resources socket, and publish their health on the
Node. The agent writes the file_sd targets Prometheus reads
(`cluster.prometheus_targets_file`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controller.datasets import telemetry_dir
from controller.devcluster.launcher import Component, DevCluster, DevClusterError, launch
from controller.devcluster.prometheus import Prometheus, start_for_cluster

__all__ = ["Telemetry", "TelemetryOptions", "start_agents", "start_telemetry"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TelemetryOptions:
    replay_dir: Path | None = None
    """Recorded telemetry (`pod_gpu_duty_cycle.csv`, `pod_gpu_memory_used_bytes.csv`);
    None: the agent's default (`../shared/telemetry/genai2026`, $GANGOPS_TELEMETRY)."""
    scenario: Path | None = None
    """Scripted faults (controller/agent/replay.py; `node:` picks a node)."""
    scenario_start_file: Path | None = None
    """The faults' clock starts when this file exists; None: at the agents' start."""
    speed: float = 60.0
    """Replay this many times faster than recorded (a recorded minute a second)."""
    interval_s: float = 1.0
    """The agents' sampling interval."""
    scrape_interval_s: float = 1.0
    publish_nodes: bool = True
    """Publish GPU health on the Nodes (condition GPUProblem, annotation)."""


@dataclass
class Telemetry:
    agents: Component
    prometheus: Prometheus


def steady_recording(d: Path) -> Path:
    """Write, under `d`, a recording of one container at 50 % duty cycle and 1 GiB of
    GPU memory for three minutes: a quiet baseline for a scenario's scripted faults
    (a leak, an XID) to stand out against. Returns `d`, for `replay_dir`."""
    d.mkdir(parents=True)
    duty = ["container,timestamp,value"] + [f"c0,{1000 + 60 * i},50" for i in range(3)]
    mem = ["container,timestamp,value"] + [f"c0,{1000 + 60 * i},{1024**3}" for i in range(3)]
    (d / "pod_gpu_duty_cycle.csv").write_text("\n".join(duty) + "\n")
    (d / "pod_gpu_memory_used_bytes.csv").write_text("\n".join(mem) + "\n")
    return d


def _replay_dir(options: TelemetryOptions) -> Path:
    return options.replay_dir if options.replay_dir is not None else telemetry_dir()


def start_agents(
    cluster: DevCluster, options: TelemetryOptions = TelemetryOptions(), *, timeout_s: float = 60.0
) -> Component:
    """Start the node agents of every GPU node of `cluster`; returns once they serve
    and have written Prometheus' targets file."""
    replay = _replay_dir(options)
    if not replay.is_dir():
        raise DevClusterError(
            f"no recorded telemetry at {replay}: put ../shared beside the checkout or set"
            " GANGOPS_TELEMETRY to a directory of pod_gpu_duty_cycle.csv and"
            " pod_gpu_memory_used_bytes.csv"
        )
    targets = cluster.prometheus_targets_file
    targets.parent.mkdir(parents=True, exist_ok=True)
    targets.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "controller.cli", "agent",
        "--fake-nodes", str(cluster.data_dir / "nodes.json"),
        "--listen", "127.0.0.1:0",
        "--targets-file", str(targets),
        "--pod-resources-dir", str(cluster.pod_resources_dir),
        "--replay", str(replay),
        "--speed", f"{options.speed:g}",
        "--interval", f"{options.interval_s:g}",
        "--publish-node", "on" if options.publish_nodes else "off",
        "--kubeconfig", str(cluster.kubeconfig),
    ]  # fmt: skip
    if options.scenario is not None:
        argv += ["--scenario", str(options.scenario)]
        if options.scenario_start_file is not None:
            argv += ["--scenario-start-file", str(options.scenario_start_file.absolute())]
    agents = launch(
        "gangops-agent",
        argv,
        log_file=cluster.log_dir / "gangops-agent.log",
        cwd=cluster.data_dir,
        tie_to_process=cluster.options.tie_to_process,
    )
    cluster.add_component(agents)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not agents.alive():
            raise DevClusterError(
                f"the node agents exited; the end of {agents.log}:\n{agents.log_tail()}"
            )
        try:
            if json.loads(targets.read_text()):
                log.info("node agents serving targets=%s pid=%d", targets, agents.pid)
                return agents
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    agents.stop(2.0)
    raise DevClusterError(f"the node agents did not start within {timeout_s:g}s; see {agents.log}")


def start_telemetry(
    cluster: DevCluster, options: TelemetryOptions = TelemetryOptions()
) -> Telemetry:
    """Node agents for every GPU node, and a real Prometheus scraping them."""
    prometheus = start_for_cluster(cluster, scrape_interval_s=options.scrape_interval_s)
    return Telemetry(agents=start_agents(cluster, options), prometheus=prometheus)
