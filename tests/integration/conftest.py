"""Integration tests run against a real control plane, started once per session.

Every test under tests/integration is marked `integration` and may use the
session's cluster (`dev_cluster`: etcd, kube-apiserver, kube-controller-manager
and the fake GPU kubelet from clusters/local, nodes from
clusters/local/cluster.yaml), an admin API client (`api`), the ordinary users'
clients (`user_api("alice")`), a namespace of its own (`namespace`, deleted
afterwards; `new_namespace()` for more), and nodes no other test uses
(`claim_node()`).

The binaries are built on first use (cached; the first build takes minutes).
If the control plane cannot be built or started, every integration test ERRORS
with the reason: a run that never reached a real API server must not pass.
Someone without Go may opt out on purpose with GANGOPS_SKIP_INTEGRATION=1; the
tests are then reported as skipped, with that reason.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controller.clusterspec import load_cluster
from controller.devcluster import (
    DEFAULT_CLUSTER_FILE,
    Build,
    DevCluster,
    DevClusterError,
    Options,
    ensure_binaries,
    start,
)

from .kube import wait_for

SKIP_ENV = "GANGOPS_SKIP_INTEGRATION"
_HERE = Path(__file__).parent


def _opted_out() -> bool:
    return os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes")


_SKIP_REASON = (
    f"{SKIP_ENV}=1: integration tests against the local control plane skipped on purpose"
    " (unset it to run them; they need Go the first time, see clusters/local/README.md)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            if _opted_out():
                item.add_marker(pytest.mark.skip(reason=_SKIP_REASON))


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"integration: SKIPPED — {_SKIP_REASON}" if _opted_out() else None


def _show_build_progress(line: str) -> None:
    if "is up to date" not in line:
        print(f"[clusters/local] {line}", file=sys.stderr)


@pytest.fixture(scope="session", autouse=True)
def control_plane(pytestconfig: pytest.Config) -> Build:
    """The control plane's binaries, built (or found in the cache) before the first
    integration test runs, so no test's own timeout ever includes the build, however
    the tests are selected (`make test` builds them even earlier)."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    try:
        # Show the build's progress: the first one takes minutes.
        with capture.global_and_fixture_disabled():
            return ensure_binaries(progress=_show_build_progress)
    except DevClusterError as e:
        pytest.fail(
            f"the local control plane could not be built: {e}\n"
            f"(set {SKIP_ENV}=1 to skip the integration tests on purpose)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def dev_cluster(
    control_plane: Build, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevCluster]:
    """The local control plane, started once for the session and stopped at its end."""
    error = ""
    cluster: DevCluster | None = None
    try:
        cluster = start(
            Options(
                cluster=load_cluster(DEFAULT_CLUSTER_FILE),
                data_dir=tmp_path_factory.mktemp("dev-cluster"),
                bin_dir=control_plane.bin_dir,
            )
        )
    except DevClusterError as e:
        error = f"the local control plane did not start: {e}"
    if cluster is None:
        pytest.fail(error, pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def api(dev_cluster: DevCluster) -> Iterator[client.ApiClient]:
    """An API client with admin rights (group system:masters)."""
    with config.new_client_from_config(config_file=str(dev_cluster.kubeconfig)) as c:
        yield c


@pytest.fixture(scope="session")
def user_api(dev_cluster: DevCluster) -> Iterator[Callable[[str], client.ApiClient]]:
    """`user_api("alice")`: an API client authenticated as an ordinary user."""
    clients: dict[str, client.ApiClient] = {}

    def get(user: str) -> client.ApiClient:
        if user not in clients:
            path = dev_cluster.user_kubeconfigs[user]
            clients[user] = config.new_client_from_config(config_file=str(path))
        return clients[user]

    yield get
    for c in clients.values():
        c.close()


@pytest.fixture
def new_namespace(
    api: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """`new_namespace()`: a fresh namespace, ready for pods, deleted after the test."""
    core = client.CoreV1Api(api)
    created: list[str] = []

    def make() -> str:
        name = f"it-{secrets.token_hex(4)}"
        core.create_namespace(
            {"metadata": {"name": name, "annotations": {"gangops.ai/test": request.node.nodeid}}}
        )
        created.append(name)

        # The ServiceAccount admission plugin rejects pods until the serviceaccount
        # controller has created the namespace's "default" ServiceAccount.
        def has_default_sa() -> bool:
            try:
                core.read_namespaced_service_account("default", name)
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            return True

        wait_for(f"ServiceAccount {name}/default", has_default_sa)
        return name

    yield make
    for name in created:
        try:
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def namespace(new_namespace: Callable[[], str]) -> str:
    """A namespace of the test's own."""
    return new_namespace()


@pytest.fixture(scope="session")
def claim_node(dev_cluster: DevCluster) -> Callable[..., str]:
    """`claim_node(gpus=8)`: an untainted fake node with at least `gpus` GPUs that no other
    test of the session has claimed, so tests never compete for a node's GPUs.
    `claim_node(gpus=0)` (a pod that takes no GPU) shares the last node instead of
    taking one: the cluster has only 12 untainted nodes for the whole session."""
    free = [n for n in dev_cluster.options.cluster.nodes() if not n.taints]
    shared = free[-1].name

    def claim(gpus: int = 8) -> str:
        if gpus == 0:
            return shared
        for i, n in enumerate(free):
            if n.gpus >= gpus:
                del free[i]
                return n.name
        raise AssertionError(f"no unclaimed untainted node with {gpus} GPUs is left")

    return claim
