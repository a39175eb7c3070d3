"""Many fake nodes' agents in one process: the dev cluster's telemetry at 1,000 nodes.

Each node runs the per-node agent code (`Agent` over its own replayed GPUs, its own
pod-resources socket, its own health); what is shared is the process, one sampling
loop, one pool of deadline workers and one HTTP server, where node N's metrics are
at `/nodes/N/metrics`. `targets()` writes the Prometheus `file_sd_configs` entries
that point a scrape job at each node's path, with the node's name as a label.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.agent.agent import Agent, AgentConfig, OwnersReader, Snapshot
from controller.agent.deadline import Lanes
from controller.agent.exposition import CONTENT_TYPE, render
from controller.agent.replay import Recording, Replay, Scenario
from controller.httpserver import Request, Response, text

__all__ = ["Fleet", "FleetNode", "fleet_nodes", "metrics_path"]

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"


@dataclass(frozen=True)
class FleetNode:
    name: str
    gpus: int
    model: str
    memory_mib: float


def fleet_nodes(
    manifests: Sequence[Mapping[str, Any]], *, default_memory_mib: float
) -> list[FleetNode]:
    """The GPU nodes among v1 Node manifests (the file the fake kubelet registers):
    GPUs from `capacity`, model and memory from the GPU feature labels."""
    out = []
    for m in manifests:
        gpus = int(str(m.get("status", {}).get("capacity", {}).get(GPU_RESOURCE, "0")))
        if gpus <= 0:
            continue
        labels = m.get("metadata", {}).get("labels", {})
        out.append(
            FleetNode(
                name=str(m["metadata"]["name"]),
                gpus=gpus,
                model=str(labels.get(PRODUCT_LABEL, "NVIDIA GPU")).replace("-", " "),
                memory_mib=float(labels.get(MEMORY_LABEL, default_memory_mib)),
            )
        )
    return out


def metrics_path(node: str) -> str:
    return f"/nodes/{node}/metrics"


class Fleet:
    """One `Agent` per fake node, driven from one loop."""

    def __init__(
        self,
        nodes: Sequence[FleetNode],
        *,
        config: AgentConfig,
        recording: Recording | None,
        scenario: Scenario | None = None,
        speed: float = 1.0,
        owners_for: Callable[[str], OwnersReader | None] = lambda _: None,
        hostname_label: str = "Hostname",
        workers: int = 16,
        publish: Callable[[str], Callable[[Snapshot], None] | None] = lambda _: None,
    ) -> None:
        self._interval = config.interval_s
        self._hostname_label = hostname_label
        self._lanes = Lanes(config.deadline_s, workers=workers, name="fleet-nvml")
        self.agents: dict[str, Agent] = {}
        self._offers: dict[str, Callable[[Snapshot], None]] = {}
        offset = 0
        for n in nodes:
            replay = Replay(
                node=n.name,
                gpus=n.gpus,
                memory_mib=n.memory_mib,
                model=n.model,
                recording=recording,
                scenario=(scenario or Scenario()).for_node(n.name),
                speed=speed,
                offset=offset,
            )
            offset += n.gpus
            owners = owners_for(n.name)
            offer = publish(n.name)
            if offer is not None:
                self._offers[n.name] = offer
            self.agents[n.name] = Agent(
                replay,
                AgentConfig(
                    node=n.name,
                    interval_s=config.interval_s,
                    deadline_s=config.deadline_s,
                    clean_period_s=config.clean_period_s,
                    xid_overrides=config.xid_overrides,
                ),
                owners=owners,
                on_held=replay.set_held if owners is not None else None,
                lanes=self._lanes,
                on_change=offer,
            )
        self.last_round_s = 0.0
        self.last_tick = time.monotonic()

    def round(self) -> None:
        """One sampling round of every node, and their queued XIDs."""
        t0 = time.monotonic()
        for agent in self.agents.values():
            try:
                snap = agent.tick()
                agent.poll_xids(0)
                offer = self._offers.get(agent.config.node)
                if offer is not None:
                    offer(snap)
            except Exception:
                log.exception("fleet round failed node=%s; continuing", agent.config.node)
        self.last_tick = time.monotonic()
        self.last_round_s = self.last_tick - t0

    def run(self, stop: threading.Event) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            self.round()
            next_at += self._interval
            if next_at < time.monotonic():
                log.warning(
                    "fleet round took %.2fs, longer than the %gs interval (%d nodes)",
                    self.last_round_s,
                    self._interval,
                    len(self.agents),
                )
                next_at = time.monotonic()
            stop.wait(max(0.0, next_at - time.monotonic()))

    def route(self, request: Request) -> Response:
        """`/nodes/<name>/metrics`."""
        parts = request.path.strip("/").split("/")
        if len(parts) != 3 or parts[2] != "metrics" or parts[1] not in self.agents:
            return text(404, "no such node; try /nodes/<name>/metrics")
        snap = self.agents[parts[1]].snapshot().fresh(time.monotonic())
        return 200, CONTENT_TYPE, render(snap, hostname_label=self._hostname_label)

    def ready(self) -> bool:
        return all(a.ready() for a in self.agents.values())

    def targets(self, host: str, port: int) -> list[dict[str, Any]]:
        """Prometheus `file_sd_configs` entries: one per node, at its path."""
        return [
            {
                "targets": [f"{host}:{port}"],
                "labels": {"__metrics_path__": metrics_path(name), "node": name},
            }
            for name in self.agents
        ]

    def write_targets(self, path: Path, host: str, port: int) -> None:
        """Write `targets()` atomically (Prometheus re-reads the file when it changes)."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.targets(host, port), indent=1) + "\n")
        tmp.replace(path)
