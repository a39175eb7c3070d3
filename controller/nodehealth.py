"""The contract between the node agent and the scheduler about GPUs out of service:
the agent writes it on the Node, the scheduler reads it (with or without Prometheus).

- annotation `gangops.ai/unhealthy-gpus`: the GPU indices out of service, `"1,3"`
  (empty when none);
- condition `GPUProblem` on the Node's status: True while any GPU is out of service;
- which XIDs take a GPU out (`XID_CLASSES`, NVIDIA's XID catalogue): the agent and
  the simulator's scripted faults read the same table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

__all__ = [
    "CONDITION",
    "UNHEALTHY_ANNOTATION",
    "XID_CLASSES",
    "XidClass",
    "classify_xid",
    "format_indices",
    "unhealthy_gpus",
]

UNHEALTHY_ANNOTATION = "gangops.ai/unhealthy-gpus"
CONDITION = "GPUProblem"


def format_indices(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(set(indices)))


def unhealthy_gpus(node: Mapping[str, Any]) -> frozenset[int]:
    """The GPU indices a Node's annotation puts out of service (malformed entries are
    ignored: a typo must not take a node's GPUs out)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(UNHEALTHY_ANNOTATION, "")
    out = set()
    for part in str(raw).split(","):
        part = part.strip()
        if part.isdigit():
            out.add(int(part))
    return frozenset(out)


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


def classify_xid(xid: int, overrides: dict[int, XidClass] | None = None) -> XidClass:
    """The class of an XID: `overrides` first, then the catalogue, else RESTART_APP."""
    if overrides and xid in overrides:
        return overrides[xid]
    return XID_CLASSES.get(xid, UNKNOWN_XID_CLASS)
