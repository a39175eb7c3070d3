"""Fixtures for the reconciler's integration tests, on top of the session's control plane.

Registered by the reconciler test modules with `pytest_plugins`. Everything a
test creates carries a prefix of its own (tier, namespace and project names,
the system namespace, the `gangops.ai/test` label its reconciler selects), so
tests share one control plane without seeing each other, and everything is
deleted afterwards.

- `kube`: a `controller.kube.Kube` with admin rights; `crds`: the gangops CRDs,
  installed once per session;
- `policy_repo`: a seeded `PolicyRepo`; `reconcile_env`: a `ReconcileEnv`.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.devcluster import DevCluster
from controller.kube.client import Kube, connect
from controller.kube.crds import generate_crds, install
from controller.policy.validate import schema_dir

from .reconciler_helpers import PolicyRepo, ReconcileEnv, git


@pytest.fixture(scope="session")
def kube(dev_cluster: DevCluster) -> Kube:
    """Admin access to the session's control plane, through gangops' own client."""
    return connect(str(dev_cluster.kubeconfig))


@pytest.fixture(scope="session")
def crds(kube: Kube) -> None:
    """The PolicySource and policy-kind CRDs, installed once."""
    install(kube, generate_crds(schema_dir()))


@pytest.fixture
def prefix() -> str:
    return f"t{secrets.token_hex(3)}"


@pytest.fixture
def policy_repo(tmp_path: Path, prefix: str) -> PolicyRepo:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@gangops.invalid")
    git(path, "config", "user.name", "gangops tests")
    repo = PolicyRepo(path, prefix)
    repo.seed()
    return repo


@pytest.fixture
def reconcile_env(kube: Kube, crds: None, prefix: str, tmp_path: Path) -> Iterator[ReconcileEnv]:
    system = f"{prefix}-sys"
    kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}},
        field_manager="test",
    )
    env = ReconcileEnv(kube, prefix, tmp_path / "cache", system)
    yield env
    env.cleanup()
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
