"""Publishes GPU health on the Node, as node-problem-detector publishes node
problems, so the scheduler can leave a bad GPU alone even without Prometheus:

- the annotation `gangops.ai/unhealthy-gpus`: the unhealthy GPUs' indices, comma
  separated (empty when all are healthy);
- the condition `GPUProblem` on the Node's status: `True` while some GPU is
  unhealthy (reason `UnhealthyGPUs`, the message says which and why), `False`
  otherwise (reason `GPUsHealthy`); `NVMLDown` while NVML is unusable.

The condition is written by server-side apply of the status with the agent's own
field manager (conditions are a map keyed by type), so the kubelet's conditions are
never touched; the annotation by a merge patch of that one key (an apply would
create a Node that does not exist). Writes happen on
a change (within about a second) and every `resync_s` (the heartbeat), from a
thread of their own: the API server being slow or away never delays sampling, and
the last state is written again once it is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from controller.agent.agent import Snapshot
from controller.kube.client import RESOURCES, ApiError, KubeApi, retry_wait
from controller.nodehealth import CONDITION, UNHEALTHY_ANNOTATION, format_indices

__all__ = ["CONDITION", "FIELD_MANAGER", "UNHEALTHY_ANNOTATION", "NodePublisher", "node_patch"]

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangops-agent"


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_patch(s: Snapshot) -> tuple[str, str, str, str]:
    """(annotation value, condition status, reason, message) for a snapshot."""
    bad = sorted(s.unhealthy, key=lambda g: g.identity.index)
    indices = format_indices(g.identity.index for g in bad)
    if not s.nvml_up:
        return indices, "Unknown", "NVMLDown", "NVML does not answer on this node"
    if not bad:
        return "", "False", "GPUsHealthy", f"{len(s.gpus)} GPUs healthy"
    detail = "; ".join(
        f"gpu {g.identity.index} ({g.identity.uuid}): {g.health.state.value}: {g.health.reason}"
        for g in bad
    )
    return indices, "True", "UnhealthyGPUs", detail


class NodePublisher:
    """Writes the latest snapshot's health to the Node from a background thread."""

    def __init__(
        self,
        kube: KubeApi,
        node: str,
        *,
        resync_s: float = 60.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._kube = kube
        self._node = node
        self._resync_s = resync_s
        self._wall = wall
        self._latest: Snapshot | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._written: tuple[str, str, str, str] | None = None
        self._transition = wall()
        self._thread = threading.Thread(target=self._run, name=f"node-{node}", daemon=True)
        self.writes = 0
        self.failures = 0

    def start(self) -> NodePublisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def offer(self, s: Snapshot) -> None:
        """The newest snapshot; written soon if its health differs from the last write."""
        self._latest = s
        self._wake.set()

    def _run(self) -> None:
        backoff = 1.0
        last = 0.0
        while not self._stop.is_set():
            self._wake.wait(timeout=self._resync_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            s = self._latest
            if s is None or (
                node_patch(s) == self._written and time.monotonic() - last < self._resync_s
            ):
                continue
            try:
                self._write(s)
                last, backoff = time.monotonic(), 1.0
            except Exception as e:  # ApiError, or a defect: the publisher goes on
                self.failures += 1
                wait = retry_wait(e, backoff)  # longer where the API server asks for it
                log.warning(
                    "cannot publish GPU health node=%s error=%s; retrying in %gs",
                    self._node,
                    e,
                    wait,
                    exc_info=not isinstance(e, ApiError),
                )
                self._stop.wait(wait)
                backoff = min(backoff * 2, 30.0)
                self._wake.set()

    def _write(self, s: Snapshot) -> None:
        patch = node_patch(s)
        annotation, status, reason, message = patch
        now = self._wall()
        if self._written is None or self._written[1] != status:
            self._transition = now
        # a merge patch, not an apply: an apply would create a Node that does not exist
        self._kube.merge_patch(
            RESOURCES["Node"],
            self._node,
            {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: annotation}}},
            field_manager=FIELD_MANAGER,
        )
        self._kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self._node},
                "status": {
                    "conditions": [
                        {
                            "type": CONDITION,
                            "status": status,
                            "reason": reason,
                            "message": message,
                            "lastHeartbeatTime": _rfc3339(now),
                            "lastTransitionTime": _rfc3339(self._transition),
                        }
                    ]
                },
            },
            field_manager=FIELD_MANAGER,
            subresource="status",
        )
        self._written = patch
        self.writes += 1
        log.info(
            "published GPU health node=%s condition=%s reason=%s unhealthy=%r",
            self._node,
            status,
            reason,
            annotation,
        )
