"""Fixtures for the gang scheduler's integration tests, on the session's control plane.

Registered by the TrainingJob test modules with `pytest_plugins`. Each test
gets a `GangEnv`: namespaces of its own (a project namespace and a system
namespace holding the compiled policy) and a label its scheduler selects
TrainingJobs by, so tests share one control plane without seeing each
other's jobs. The nodes are three 8-GPU nodes claimed once for the session
(`claim_node`; the scheduler's node selector names them, so it never places
on anyone else's); the tests take turns on them, each deleting its pods and
waiting until they are gone before the next one starts. The scheduler runs
in the test's process (`env.start()`), or as a `gangops run` subprocess for
the crash trials.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import pytest

from controller.devcluster import DevCluster
from controller.jobs.admission import admission_objects, mutating_objects
from controller.kube.client import RESOURCES, Kube, connect
from controller.kube.crds import generate_crds, install
from controller.policy.validate import schema_dir

from .gang_helpers import BATCH, HIGH, GangEnv
from .kube import wait_for


@pytest.fixture(scope="session")
def admin(dev_cluster: DevCluster) -> Kube:
    """Admin access through gangops' own client."""
    return connect(str(dev_cluster.kubeconfig))


@pytest.fixture(scope="session")
def trainingjob_api(admin: Kube) -> Kube:
    """The CRDs (TrainingJob among them), the admission policies and the test tiers'
    PriorityClasses, installed once per session."""
    install(admin, generate_crds(schema_dir()))
    for obj in admission_objects() + mutating_objects():
        admin.apply(obj, field_manager="gangops")
    for name, value in ((HIGH, 100_000), (BATCH, 1_000)):
        pc = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        admin.apply(pc, field_manager="gangops-tests")
    return admin


@pytest.fixture(scope="session")
def gang_nodes(claim_node: Callable[..., str]) -> list[str]:
    """Three 8-GPU nodes the TrainingJob tests take turns on."""
    return [claim_node(8) for _ in range(3)]


def _empty(kube: Kube, namespaces: list[str]) -> None:
    """Delete every TrainingJob and pod in `namespaces` and wait until the pods are gone."""
    for ns in namespaces:
        jobs, _ = kube.list(RESOURCES["TrainingJob"], namespace=ns)
        for j in jobs:
            kube.delete(RESOURCES["TrainingJob"], j["metadata"]["name"], namespace=ns)
        pods, _ = kube.list(RESOURCES["Pod"], namespace=ns)
        for p in pods:
            kube.delete(RESOURCES["Pod"], p["metadata"]["name"], namespace=ns)

    def gone() -> bool:
        return all(not kube.list(RESOURCES["Pod"], namespace=ns)[0] for ns in namespaces)

    wait_for("the test's pods to be gone", gone)


@pytest.fixture
def gang_env(
    trainingjob_api: Kube,
    new_namespace: Callable[[], str],
    gang_nodes: list[str],
) -> Iterator[GangEnv]:
    env = GangEnv(
        kube=trainingjob_api,
        namespace=new_namespace(),
        system_namespace=new_namespace(),
        selector_value=secrets.token_hex(4),
        new_namespace=new_namespace,
        pool=gang_nodes,
    )
    made: list[str] = [env.namespace]
    original = env.new_namespace

    def tracked() -> str:
        made.append(original())
        return made[-1]

    env.new_namespace = tracked
    yield env
    for c in env.controllers:
        c.stop()
    _empty(env.kube, made)


@pytest.fixture
def alice(dev_cluster: DevCluster, gang_env: GangEnv, api: object) -> Kube:
    """Alice's client, allowed to manage TrainingJobs in the test's namespace."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    # The documented tenant role's (docs/security.md): never "*", which would include
    # the verb restart (requesting another user's job to restart, as the controller does).
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [{"apiGroups": ["ai.operator"], "resources": ["trainingjobs"], "verbs": verbs}]
    rbac.create_namespaced_role(gang_env.namespace, {"metadata": {"name": "tj"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        gang_env.namespace,
        {
            "metadata": {"name": "tj"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tj"},
            "subjects": [
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    return connect(str(dev_cluster.user_kubeconfigs["alice"]))
