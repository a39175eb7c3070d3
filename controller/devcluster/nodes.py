"""Node manifests for the fake GPU nodes of the local control plane.

The cluster description (`controller.clusterspec`) says which GPU nodes exist;
this module turns each into the v1 Node object a kubelet on such a machine
would register: its labels (topology, GPU product, the well-known
`kubernetes.io/*` labels), taints, and `capacity`/`allocatable` with
`nvidia.com/gpu` as the NVIDIA device plugin advertises it. The fake kubelet
(clusters/local/cmd/fake-kubelet) registers them as given, so the labels are
defined here and in clusterspec only.
"""

from __future__ import annotations

from typing import TypedDict

from controller.clusterspec import ClusterSpec, NodeSpec

__all__ = ["GPU_RESOURCE", "MAX_PODS", "NodeManifest", "node_manifest", "node_manifests"]

GPU_RESOURCE = "nvidia.com/gpu"
MAX_PODS = 110
"""Pods per node, the kubelet's default `maxPods`."""


class ObjectMeta(TypedDict):
    name: str
    labels: dict[str, str]


class TaintDict(TypedDict):
    key: str
    value: str
    effect: str


class NodeSpecDict(TypedDict):
    taints: list[TaintDict]


class NodeStatusDict(TypedDict):
    capacity: dict[str, str]
    allocatable: dict[str, str]


class NodeManifest(TypedDict):
    """A v1 Node as JSON: what the fake kubelet creates."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeSpecDict
    status: NodeStatusDict


def _cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def node_manifest(node: NodeSpec) -> NodeManifest:
    """The Node object for one node of the cluster description."""
    resources = {
        "cpu": _cpu(node.cpu_milli),
        "memory": str(node.memory_bytes),
        "pods": str(MAX_PODS),
    }
    if node.gpus:
        resources[GPU_RESOURCE] = str(node.gpus)
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **node.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def node_manifests(cluster: ClusterSpec) -> list[NodeManifest]:
    """Every node of the cluster description, in file order."""
    return [node_manifest(n) for n in cluster.nodes()]
