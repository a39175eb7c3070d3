"""The local Kubernetes control plane for tests, the demo and benchmarks (issue 3).

`start` brings up etcd, kube-apiserver, kube-controller-manager and the fake
GPU kubelet from the binaries that `ensure_binaries` builds from
clusters/local; `DevCluster.stop` tears them down. `cli.add_subcommand` exposes
the same as `gangops dev-cluster up | down | env`. `prometheus` runs a real
Prometheus beside it (`up --prometheus`), scraping the node agents.
"""

from controller.devcluster.launcher import (
    DEFAULT_CLUSTER_FILE,
    USERS,
    Build,
    DevCluster,
    DevClusterError,
    Options,
    Timings,
    ensure_binaries,
    start,
    stop_from_state,
)

__all__ = [
    "DEFAULT_CLUSTER_FILE",
    "USERS",
    "Build",
    "DevCluster",
    "DevClusterError",
    "Options",
    "Timings",
    "ensure_binaries",
    "start",
    "stop_from_state",
]
