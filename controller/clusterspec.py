"""Cluster descriptions: the GPU nodes of a cluster, as `clusters/<name>/cluster.yaml`.

One file feeds three consumers: the local control plane registers a fake Node
per entry, the validator derives `capacity` from it, and the simulator builds
its node list from it. The file describes pools of identical nodes; this
module expands them into concrete nodes with their topology labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from controller.quantity import QuantityError, parse_quantity
from controller.scheduler.types import Taint

__all__ = [
    "LABEL_CLIQUE",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_PRODUCT",
    "LABEL_POOL",
    "LABEL_RACK",
    "LABEL_ZONE",
    "MAX_GPUS",
    "MAX_GPUS_PER_NODE",
    "MAX_NODES_PER_POOL",
    "ClusterSpec",
    "ClusterSpecError",
    "NodeSpec",
    "PoolSpec",
    "load_cluster",
    "parse_cluster",
]

LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_RACK = "topology.kubernetes.io/rack"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_POOL = "gangops.ai/pool"


class ClusterSpecError(ValueError):
    """A cluster description that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class NodeSpec:
    """One GPU node, fully expanded from its pool."""

    name: str
    """Node name, `<pool>-<index>` with a three-digit index."""
    pool: str
    gpus: int
    """`nvidia.com/gpu` capacity."""
    gpu_model: str
    cpu_milli: int
    memory_bytes: int
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class PoolSpec:
    """A pool of identical nodes."""

    name: str
    count: int
    gpus_per_node: int
    gpu_model: str
    gpu_memory_mib: int
    cpu_milli: int
    memory_bytes: int
    zone: str
    nodes_per_rack: int
    nodes_per_nvlink_domain: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def nodes(self) -> list[NodeSpec]:
        """The pool's nodes, with zone, rack and NVLink-domain labels."""
        out = []
        for i in range(self.count):
            labels = {
                LABEL_POOL: self.name,
                LABEL_ZONE: self.zone,
                LABEL_RACK: f"{self.name}-r{i // self.nodes_per_rack}",
                LABEL_CLIQUE: f"{self.name}-c{i // self.nodes_per_nvlink_domain}",
                LABEL_GPU_PRODUCT: self.gpu_model,
                LABEL_GPU_COUNT: str(self.gpus_per_node),
                LABEL_GPU_MEMORY: str(self.gpu_memory_mib),
                **self.labels,
            }
            out.append(
                NodeSpec(
                    name=f"{self.name}-{i:03d}",
                    pool=self.name,
                    gpus=self.gpus_per_node,
                    gpu_model=self.gpu_model,
                    cpu_milli=self.cpu_milli,
                    memory_bytes=self.memory_bytes,
                    labels=labels,
                    taints=self.taints,
                )
            )
        return out


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster description."""

    name: str
    pools: tuple[PoolSpec, ...]

    def nodes(self) -> list[NodeSpec]:
        """Every node of every pool, in file order."""
        return [n for p in self.pools for n in p.nodes()]

    @property
    def total_gpus(self) -> int:
        """Sum of `nvidia.com/gpu` capacity over all nodes."""
        return sum(p.count * p.gpus_per_node for p in self.pools)


_POOL_KEYS = {
    "name", "count", "gpusPerNode", "gpuModel", "gpuMemoryMiB", "cpu", "memory",
    "zone", "nodesPerRack", "nodesPerNVLinkDomain", "labels", "taints",
}  # fmt: skip


MAX_NODES_PER_POOL = 100_000
MAX_GPUS_PER_NODE = 1024
MAX_GPUS = 1_000_000
"""A cluster description may declare at most this many GPUs: `capacity.gpu`'s own maximum."""


def _int(where: str, value: Any, *, minimum: int, maximum: int = 10**9) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ClusterSpecError(
            f"{where}: expected an integer from {minimum} to {maximum:,}, found {_short(value)}"
        )
    return value


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**15 else f"{value:.3e}"
    return text if len(text) <= 40 else text[:37] + "..."


def _qty(where: str, value: Any) -> Fraction:
    try:
        q = parse_quantity(value)
    except QuantityError as e:
        raise ClusterSpecError(f"{where}: {e}") from None
    if q <= 0:
        raise ClusterSpecError(f"{where}: must be positive, found {value!r}")
    return q


def _scalar(where: str, value: Any) -> str:
    """A label or taint value as text; a list or mapping (perhaps an alias that
    expands to millions of items) is refused, never turned into a string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and abs(value) < 10**63:  # a label value's length
        return repr(value)
    raise ClusterSpecError(f"{where}: expected a string, found {type(value).__name__}")


def _labels(where: str, raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise ClusterSpecError(f"{where}: expected a mapping of label names to values")
    return {_scalar(f"{where} key", k): _scalar(f"{where}.{k}", v) for k, v in raw.items()}


def _taints(where: str, raw: Any) -> tuple[Taint, ...]:
    if not isinstance(raw, list):
        raise ClusterSpecError(f"{where}: expected a list of taints")
    out = []
    for i, t in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(t, Mapping) or "key" not in t or "effect" not in t:
            raise ClusterSpecError(f"{at}: expected a mapping with key and effect")
        value = _scalar(f"{at}.value", t.get("value", ""))
        out.append(
            Taint(
                key=_scalar(f"{at}.key", t["key"]),
                effect=_scalar(f"{at}.effect", t["effect"]),
                value=value,
            )
        )
    return tuple(out)


def parse_cluster(doc: Any, *, source: str = "<cluster>") -> ClusterSpec:
    """Build a `ClusterSpec` from a parsed YAML document, or raise `ClusterSpecError`."""
    if not isinstance(doc, Mapping) or doc.get("kind") != "Cluster":
        raise ClusterSpecError(f"{source}: expected a document of kind Cluster")
    spec = doc.get("spec")
    pools_raw = spec.get("pools") if isinstance(spec, Mapping) else None
    if not isinstance(pools_raw, list) or not pools_raw:
        raise ClusterSpecError(f"{source}: spec.pools must be a non-empty list")
    pools = []
    seen: set[str] = set()
    for i, p in enumerate(pools_raw):
        where = f"{source}: spec.pools[{i}]"
        if not isinstance(p, Mapping):
            raise ClusterSpecError(f"{where}: expected a mapping")
        unknown = sorted(set(p) - _POOL_KEYS)
        if unknown:
            raise ClusterSpecError(f"{where}: unknown field(s) {', '.join(unknown)}")
        name = p.get("name")
        if not isinstance(name, str) or not name or name in seen:
            raise ClusterSpecError(f"{where}.name: a unique non-empty name is required")
        seen.add(name)
        taints = _taints(f"{where}.taints", p.get("taints") or [])
        pools.append(
            PoolSpec(
                name=name,
                count=_int(f"{where}.count", p.get("count"), minimum=0, maximum=MAX_NODES_PER_POOL),
                gpus_per_node=_int(
                    f"{where}.gpusPerNode",
                    p.get("gpusPerNode"),
                    minimum=0,
                    maximum=MAX_GPUS_PER_NODE,
                ),
                gpu_model=str(p.get("gpuModel", "unknown")),
                gpu_memory_mib=_int(f"{where}.gpuMemoryMiB", p.get("gpuMemoryMiB", 0), minimum=0),
                cpu_milli=int(_qty(f"{where}.cpu", p.get("cpu", "64")) * 1000),
                memory_bytes=int(_qty(f"{where}.memory", p.get("memory", "512Gi"))),
                zone=str(p.get("zone", "zone-a")),
                nodes_per_rack=_int(f"{where}.nodesPerRack", p.get("nodesPerRack", 8), minimum=1),
                nodes_per_nvlink_domain=_int(
                    f"{where}.nodesPerNVLinkDomain", p.get("nodesPerNVLinkDomain", 1), minimum=1
                ),
                labels=_labels(f"{where}.labels", p.get("labels") or {}),
                taints=taints,
            )
        )
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    cluster = ClusterSpec(name=str(name or "cluster"), pools=tuple(pools))
    if cluster.total_gpus > MAX_GPUS:
        raise ClusterSpecError(
            f"{source}: the pools declare {cluster.total_gpus:,} GPUs, more than {MAX_GPUS:,}"
        )
    return cluster


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read and parse a cluster description file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterSpecError(f"{p}: cannot read: {e}") from None
    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as e:
        raise ClusterSpecError(f"{p}: invalid YAML: {e}") from None
    return parse_cluster(doc, source=str(p))
