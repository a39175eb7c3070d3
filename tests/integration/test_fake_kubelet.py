"""The fake GPU nodes and their kubelet behave like real ones, as far as gangops can see.

The scheduler, the simulator and the benchmarks rely on these behaviours: the
nodes of the cluster description with their topology labels, GPU capacity and
taints, Ready and kept so by Lease renewals; pods run and finish on command or
after a duration; a node's GPUs are never handed out twice (the kubelet rejects
an over-committed pod, as a real one does); deletions complete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.clusterspec import LABEL_CLIQUE, LABEL_GPU_PRODUCT, LABEL_RACK, LABEL_ZONE
from controller.devcluster import DevCluster

from .kube import FAKE_DURATION, FAKE_EXIT, FAKE_EXIT_CODE, GPU, pod, wait_for


def _phase(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> Callable[[], Any]:
    def probe() -> Any:
        p = core.read_namespaced_pod(name, namespace)
        return p if p.status.phase == phase else None

    return probe


def test_nodes_match_the_cluster_description(
    api: client.ApiClient, dev_cluster: DevCluster
) -> None:
    core = client.CoreV1Api(api)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for spec in dev_cluster.options.cluster.nodes():
        node = nodes[spec.name]
        labels = node.metadata.labels
        for key in (LABEL_ZONE, LABEL_RACK, LABEL_CLIQUE, LABEL_GPU_PRODUCT):
            assert labels[key] == spec.labels[key], (spec.name, key)
        assert labels["kubernetes.io/hostname"] == spec.name
        assert node.status.capacity[GPU] == str(spec.gpus)
        assert node.status.allocatable[GPU] == str(spec.gpus)
        assert [(t.key, t.value, t.effect) for t in node.spec.taints or []] == [
            (t.key, t.value, t.effect) for t in spec.taints
        ]
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready[0].status == "True", spec.name
    a100 = nodes["a100-002"].metadata.labels
    assert (a100[LABEL_RACK], a100[LABEL_CLIQUE]) == ("a100-r0", "a100-c1")


def test_node_leases_are_renewed(api: client.ApiClient, dev_cluster: DevCluster) -> None:
    leases = client.CoordinationV1Api(api)
    name = dev_cluster.node_names[0]
    first = leases.read_namespaced_lease(name, "kube-node-lease")
    assert first.spec.holder_identity == name
    assert first.metadata.owner_references[0].kind == "Node"
    wait_for(
        "the fake kubelet to renew the lease (every 10 s)",
        lambda: (
            leases.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
            > first.spec.renew_time
        ),
        timeout=15,
    )


def test_pod_finishes_after_its_duration_with_its_exit_code(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    node = claim_node(gpus=2)
    core.create_namespaced_pod(
        namespace, pod("ok", gpus=1, node=node, annotations={FAKE_DURATION: "1"})
    )
    core.create_namespaced_pod(
        namespace,
        pod("crash", gpus=1, node=node, annotations={FAKE_DURATION: "1", FAKE_EXIT_CODE: "3"}),
    )
    ok = wait_for("pod ok to succeed", _phase(core, namespace, "ok", "Succeeded"))
    assert ok.status.container_statuses[0].state.terminated.exit_code == 0
    assert ok.status.container_statuses[0].state.terminated.reason == "Completed"
    crash = wait_for("pod crash to fail", _phase(core, namespace, "crash", "Failed"))
    assert crash.status.container_statuses[0].state.terminated.exit_code == 3
    assert crash.status.container_statuses[0].state.terminated.reason == "Error"


def test_fake_exit_annotation_fails_a_running_pod(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("p", gpus=1, node=claim_node(gpus=1)))
    wait_for("the pod to run", _phase(core, namespace, "p", "Running"))
    core.patch_namespaced_pod("p", namespace, {"metadata": {"annotations": {FAKE_EXIT: "Failed"}}})
    failed = wait_for("the pod to fail", _phase(core, namespace, "p", "Failed"))
    assert failed.status.container_statuses[0].state.terminated.exit_code == 1


def test_kubelet_rejects_a_pod_beyond_the_nodes_gpus_and_frees_them_when_pods_end(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    node = claim_node(gpus=8)
    core.create_namespaced_pod(namespace, pod("first", gpus=8, node=node))
    wait_for("the first pod to run", _phase(core, namespace, "first", "Running"))

    core.create_namespaced_pod(namespace, pod("second", gpus=1, node=node))
    rejected = wait_for(
        "the second pod to be rejected", _phase(core, namespace, "second", "Failed")
    )
    assert rejected.status.reason == "OutOfnvidia.com/gpu"
    assert rejected.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu,"
        " requested: 1, used: 8, capacity: 8"
    )

    core.patch_namespaced_pod(
        "first", namespace, {"metadata": {"annotations": {FAKE_EXIT: "Succeeded"}}}
    )
    wait_for("the first pod to succeed", _phase(core, namespace, "first", "Succeeded"))
    core.create_namespaced_pod(namespace, pod("third", gpus=8, node=node))
    wait_for("the third pod to run on the freed GPUs", _phase(core, namespace, "third", "Running"))


def test_deleting_a_running_pod_completes(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("p", gpus=1, node=claim_node(gpus=1)))
    wait_for("the pod to run", _phase(core, namespace, "p", "Running"))
    core.delete_namespaced_pod("p", namespace)  # graceful: the kubelet must confirm

    def gone() -> bool:
        try:
            core.read_namespaced_pod("p", namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for("the pod to be deleted", gone, timeout=10)


def test_namespace_with_running_pods_is_deleted(
    api: client.ApiClient, new_namespace: Callable[[], str], claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    namespace = new_namespace()
    node = claim_node(gpus=2)
    for i in range(2):
        core.create_namespaced_pod(namespace, pod(f"p{i}", gpus=1, node=node))
    for i in range(2):
        wait_for(f"pod p{i} to run", _phase(core, namespace, f"p{i}", "Running"))
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for("the namespace controller to finish deleting the namespace", gone, timeout=60)


@pytest.mark.parametrize("value", ["succeeded", "later"])
def test_invalid_fake_exit_value_is_ignored(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str], value: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace, pod("p", node=claim_node(gpus=0), annotations={FAKE_EXIT: value})
    )
    running = wait_for("the pod to run", _phase(core, namespace, "p", "Running"))
    assert running.status.phase == "Running"
