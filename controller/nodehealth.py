"""The contract between the node agent and the scheduler about GPUs out of service:
the agent writes it on the Node, the scheduler reads it (with or without Prometheus).

- annotation `gangops.ai/unhealthy-gpus`: the GPU indices out of service, `"1,3"`
  (empty when none);
- condition `GPUProblem` on the Node's status: True while any GPU is out of service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CONDITION", "UNHEALTHY_ANNOTATION", "format_indices", "unhealthy_gpus"]

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
