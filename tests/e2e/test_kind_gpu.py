"""GPU quota and scheduling with a real kubelet and the real kube-scheduler.

The integration tests cover the API server; here the rest of a real node is
involved: a node advertising `nvidia.com/gpu` (as the NVIDIA device plugin
does, through the node status API), the default scheduler placing a GPU pod
on it, the kubelet admitting and running the pod, and ResourceQuota rejecting
the pod that asks for more than the namespace may use.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

GPU = "nvidia.com/gpu"
_GPU_PATH = "nvidia.com~1gpu"  # "/" is "~1" in a JSON pointer


def _wait(what: str, probe: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture
def gpu_node(api: client.ApiClient) -> Iterator[str]:
    """A schedulable worker advertising 4 GPUs for the test's duration."""
    core = client.CoreV1Api(api)
    workers = [
        n
        for n in core.list_node().items
        if "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {})
        and not n.spec.taints
        and not n.spec.unschedulable
    ]
    assert workers, "the cluster has no schedulable worker node"
    node = workers[0]
    name = node.metadata.name
    before = {
        "capacity": (node.status.capacity or {}).get(GPU),
        "allocatable": (node.status.allocatable or {}).get(GPU),
    }
    advertise = [
        {"op": "add", "path": f"/status/{field}/{_GPU_PATH}", "value": "4"} for field in before
    ]
    core.patch_node_status(name, advertise)
    _wait(
        "the GPUs to be allocatable",
        lambda: core.read_node(name).status.allocatable.get(GPU) == "4",
    )
    yield name
    restore = [
        {"op": "remove", "path": f"/status/{field}/{_GPU_PATH}"}
        if value is None
        else {"op": "add", "path": f"/status/{field}/{_GPU_PATH}", "value": value}
        for field, value in before.items()
    ]
    core.patch_node_status(name, restore)


def test_gpu_pod_is_scheduled_and_run_within_quota(
    api: client.ApiClient, namespace: str, gpu_node: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "gpu"}, "spec": {"hard": {f"requests.{GPU}": "2"}}}
    )
    _wait(
        "status.hard from the resourcequota controller",
        lambda: core.read_namespaced_resource_quota("gpu", namespace).status.hard,
    )

    def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": gpu_node},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {GPU: str(gpus)}},
                    }
                ],
            },
        }

    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(namespace, gpu_pod("three", 3))
    assert rejected.value.status == 403
    assert "exceeded quota: gpu" in json.loads(rejected.value.body)["message"]

    core.create_namespaced_pod(namespace, gpu_pod("two", 2))
    running = _wait(
        "the scheduler and the kubelet to run the pod",
        lambda: (p := core.read_namespaced_pod("two", namespace)).status.phase == "Running" and p,
        timeout=180,
    )
    assert running.spec.node_name == gpu_node
    assert core.read_namespaced_resource_quota("gpu", namespace).status.used == {
        f"requests.{GPU}": "2"
    }
