"""End-to-end tests run against a kind cluster that `make e2e` creates.

`make e2e` (clusters/local/e2e.sh) creates the cluster from
clusters/local/kind.yaml and passes its kubeconfig in GANGOPS_E2E_KUBECONFIG;
without Docker it says the tests are skipped and why. Run directly, without
that variable, every test here is skipped with a message saying how to run
them. `make test` does not collect this directory.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

KUBECONFIG_ENV = "GANGOPS_E2E_KUBECONFIG"
_HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: runs against a kind cluster (make e2e)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def api() -> Iterator[client.ApiClient]:
    """Admin access to the kind cluster."""
    path = os.environ.get(KUBECONFIG_ENV)
    if not path:
        pytest.skip(
            f"{KUBECONFIG_ENV} is not set: the end-to-end tests need a kind cluster;"
            " run them with `make e2e` (it creates one, or says why it cannot)"
        )
    with config.new_client_from_config(config_file=path) as c:
        yield c


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards."""
    core = client.CoreV1Api(api)
    name = f"e2e-{secrets.token_hex(4)}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise
