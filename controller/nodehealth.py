"""The contract between the node agent, the alert actions and the scheduler about GPUs
out of service: the agent and the alert actions write it on the Node, the scheduler
reads it (with or without Prometheus).

- annotation `gangops.ai/unhealthy-gpus`: the GPU indices the agent found out of
  service, `"1,3"` (empty when none); only the agent writes it;
- annotation `gangops.ai/quarantined-gpus`: the GPU indices an alert action took out
  of service (controller/alerts); only the alert actions write it, and the scheduler
  counts the union of both;
- annotation `gangops.ai/out-of-service`: in words, why an alert action holds the
  node or its GPUs and when they come back (for `kubectl describe node` and
  `gangops explain`);
- TrainingJob annotations `gangops.ai/checkpoint-requested` and
  `gangops.ai/restart-requested`, each `"<RFC 3339 time> <why>"`: an alert action
  asks the job to checkpoint (for its training code or operator to act on), then
  asks the gang controller to restart the gang elsewhere; the restart is the
  cluster's doing, so it is not counted against the job's backoffLimit;
- taint `gangops.ai/gpu-fault` (NoSchedule): an alert action took the whole node out
  of service; the scheduler places nothing there whatever a job tolerates;
- condition `GPUProblem` on the Node's status: True while any GPU is out of service;
- which XIDs take a GPU out (`XID_CLASSES`, NVIDIA's XID catalogue): the agent and
  the simulator's scripted faults read the same table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

__all__ = [
    "CHECKPOINT_ANNOTATION",
    "CONDITION",
    "FATAL_XIDS",
    "FAULT_TAINT",
    "OUT_OF_SERVICE_ANNOTATION",
    "QUARANTINE_ANNOTATION",
    "RESTART_ANNOTATION",
    "UNHEALTHY_ANNOTATION",
    "XID_CLASSES",
    "XidClass",
    "classify_xid",
    "format_indices",
    "parse_indices",
    "parse_request",
    "unhealthy_gpus",
]

UNHEALTHY_ANNOTATION = "gangops.ai/unhealthy-gpus"
QUARANTINE_ANNOTATION = "gangops.ai/quarantined-gpus"
OUT_OF_SERVICE_ANNOTATION = "gangops.ai/out-of-service"
CHECKPOINT_ANNOTATION = "gangops.ai/checkpoint-requested"
RESTART_ANNOTATION = "gangops.ai/restart-requested"
CONDITION = "GPUProblem"
FAULT_TAINT = "gangops.ai/gpu-fault"
"""The taint (effect NoSchedule) an alert action places on a node it cordons."""


def format_indices(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(set(indices)))


def parse_indices(raw: object) -> frozenset[int]:
    """GPU indices from `"1,3"` (malformed entries are ignored: a typo must not take a
    node's GPUs out, nor stop the scheduler reading the node)."""
    out = set()
    for part in str(raw or "").split(","):
        part = part.strip()
        # ASCII digits only: '²' and '①' are digits to str.isdigit but not to int();
        # four at most, as no node has 10,000 GPUs (a long run is a typo).
        if part.isascii() and part.isdigit() and len(part) <= 4:
            out.add(int(part))
    return frozenset(out)


def unhealthy_gpus(node: Mapping[str, Any]) -> frozenset[int]:
    """The GPU indices out of service on a Node: the agent's and the alert actions'."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return parse_indices(annotations.get(UNHEALTHY_ANNOTATION)) | parse_indices(
        annotations.get(QUARANTINE_ANNOTATION)
    )


def parse_request(obj: Mapping[str, Any], annotation: str) -> tuple[float, str] | None:
    """(epoch seconds, why) of a `"<RFC 3339 time> <why>"` request annotation, or None."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if not isinstance(raw, str) or not raw.strip():
        return None
    stamp, _, why = raw.strip().partition(" ")
    try:
        at = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return at.timestamp(), why.strip()


class XidClass(Enum):
    IGNORE = "ignore"
    RESTART_APP = "restart-app"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"


XID_CLASSES: dict[int, XidClass] = {
    # the application's fault: restart it; the GPU is fine
    13: XidClass.RESTART_APP,  # graphics engine exception
    31: XidClass.RESTART_APP,  # GPU memory page fault
    43: XidClass.RESTART_APP,  # GPU stopped processing
    45: XidClass.IGNORE,  # preemptive cleanup after an earlier error
    63: XidClass.IGNORE,  # ECC page retirement / row remapping recorded
    68: XidClass.RESTART_APP,  # video decoder exception
    92: XidClass.IGNORE,  # high single-bit ECC error rate
    94: XidClass.RESTART_APP,  # contained ECC error
    # the GPU's fault: reset the GPU
    48: XidClass.RESET_GPU,  # double-bit ECC error
    61: XidClass.RESET_GPU,  # internal micro-controller breakpoint
    62: XidClass.RESET_GPU,  # internal micro-controller halt
    64: XidClass.RESET_GPU,  # ECC page retirement / row remapping failure
    74: XidClass.RESET_GPU,  # NVLink error
    95: XidClass.RESET_GPU,  # uncontained ECC error
    119: XidClass.RESET_GPU,  # GSP RPC timeout
    120: XidClass.RESET_GPU,  # GSP error
    140: XidClass.RESET_GPU,  # unrecovered ECC error
    # the node's fault: reboot it
    79: XidClass.REBOOT_NODE,  # GPU has fallen off the bus
}
UNKNOWN_XID_CLASS = XidClass.RESTART_APP
FATAL_XIDS = tuple(
    sorted(x for x, c in XID_CLASSES.items() if c in (XidClass.RESET_GPU, XidClass.REBOOT_NODE))
)
"""The XIDs that take a GPU out of service (a reset or a reboot): the chart's
`GangopsGPUFatalXID` alert names them, and the agent exports their counts from 0."""


def classify_xid(xid: int, overrides: dict[int, XidClass] | None = None) -> XidClass:
    """The class of an XID: `overrides` first, then the catalogue, else RESTART_APP."""
    if overrides and xid in overrides:
        return overrides[xid]
    return XID_CLASSES.get(xid, UNKNOWN_XID_CLASS)
