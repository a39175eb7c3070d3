"""Benchmarks of the local control plane (issue 3): build, warm start, 1,000 fake GPU nodes.

Every integration test, the demo and the scheduler benchmarks pay for starting
the local control plane, and the scheduler benchmarks need clusters of 1,000
GPU nodes, so these figures are watched like any other performance figure.

Run: `.venv/bin/python -m tests.perf.devcluster [--nodes N]` (exit status 1
if a threshold is missed); `make bench` can call `run()`, which returns the
harness's `Result`s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from controller.clusterspec import ClusterSpec, load_cluster, parse_cluster
from controller.devcluster import DEFAULT_CLUSTER_FILE, Options, ensure_binaries, start
from tests.perf.harness import Result, print_table

# Thresholds, set from measurements on the reference machine (2 vCPUs shared with other
# work, 23 GiB, Go 1.26). The start-up limits are the targets of issue 3; measured: warm
# start of the 16-node default cluster 4.1-5.1 s to ready, 1,000 nodes Ready 7.7-10.5 s
# after the API server (23 s before the TaintNodesByCondition plugin was turned off, see
# controller/devcluster/launcher.py). The build limit is a guard, not a target: the cold
# build measured 308 s (module downloads included); a build that takes six times that
# means something is wrong with the toolchain or the cache.
WARM_START_MAX_S = 15.0
"""`up` to ready, binaries cached, default cluster (clusters/local/cluster.yaml)."""
THOUSAND_NODES_MAX_S = 30.0
"""API server ready to 1,000 fake GPU nodes Ready and schedulable."""
COLD_BUILD_MAX_S = 1800.0
"""Building every binary from an empty cache (reported only when a build happened)."""


def thousand_node_cluster(nodes: int = 1000) -> ClusterSpec:
    """A cluster of `nodes` 8-GPU nodes in two zones (racks of 8, NVLink domains of 2)."""
    half = nodes // 2
    pool = {"gpusPerNode": 8, "cpu": "96", "memory": "1Ti", "nodesPerRack": 8}
    return parse_cluster(
        {
            "kind": "Cluster",
            "metadata": {"name": f"bench-{nodes}"},
            "spec": {
                "pools": [
                    {"name": "h100", "count": half, "gpuModel": "NVIDIA-H100-80GB-HBM3",
                     "gpuMemoryMiB": 81920, "zone": "zone-a", "nodesPerNVLinkDomain": 2, **pool},
                    {"name": "a100", "count": nodes - half, "gpuModel": "NVIDIA-A100-SXM4-80GB",
                     "gpuMemoryMiB": 81920, "zone": "zone-b", "nodesPerNVLinkDomain": 2, **pool},
                ]
            },
        },
        source="<bench>",
    )  # fmt: skip


def _measure(cluster: ClusterSpec, bin_dir: Path, work: Path) -> tuple[float, float]:
    """Start and stop one cluster; its (ready_s, nodes_s)."""
    c = start(Options(cluster=cluster, data_dir=work, bin_dir=bin_dir, remove_data_dir=True))
    try:
        assert c.timings is not None
        return c.timings.ready_s, c.timings.nodes_s
    finally:
        c.stop()


def run(nodes: int = 1000) -> list[Result]:
    """Measure the build (when one is needed), a warm start, and `nodes` fake nodes."""
    build = ensure_binaries(progress=lambda line: print(line, file=sys.stderr))
    results = []
    if build.built:
        results.append(Result("devcluster build (cold)", build.seconds, "s", COLD_BUILD_MAX_S))
    with tempfile.TemporaryDirectory(prefix="gangops-bench-") as tmp:
        ready_s, _ = _measure(load_cluster(DEFAULT_CLUSTER_FILE), build.bin_dir, Path(tmp, "warm"))
        results.append(Result("devcluster warm start to ready", ready_s, "s", WARM_START_MAX_S))
        _, nodes_s = _measure(thousand_node_cluster(nodes), build.bin_dir, Path(tmp, "nodes"))
        results.append(
            Result(f"devcluster {nodes} nodes Ready", nodes_s, "s", THOUSAND_NODES_MAX_S)
        )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks, print the table, and return 1 if a threshold is missed."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.devcluster")
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes (default: 1000)")
    args = parser.parse_args(argv)
    results = run(args.nodes)
    print_table(results)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
