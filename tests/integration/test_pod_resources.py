"""The fake kubelet's pod-resources API, read by the agent's client: the path
dcgm-exporter takes to label a GPU with the pod that holds it.

A pod bound to a fake node is given GPUs when the fake kubelet admits it (lowest
free indices, as a device plugin would); `List` on the node's socket reports them
by the UUIDs `fake_gpu_uuid` computes, and they are free again once the pod
finishes or is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from kubernetes import client

from controller.agent.podresources import DeviceOwner, PodResourcesClient, fake_gpu_uuid
from controller.agent.proto.podresources.v1 import api_pb2, api_pb2_grpc
from controller.devcluster import DevCluster

from .kube import FAKE_EXIT, pod, wait_for

GPU_INDICES = "gangops.ai/fake-gpu-indices"


def _running(core: client.CoreV1Api, namespace: str, name: str) -> Callable[[], Any]:
    def probe() -> Any:
        p = core.read_namespaced_pod(name, namespace)
        return p if p.status.phase == "Running" else None

    return probe


def _listed(socket: str) -> dict[str, list[tuple[str, list[str]]]]:
    """`List` straight from the generated stub: each pod with its containers' devices."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        resp = api_pb2_grpc.PodResourcesListerStub(channel).List(
            api_pb2.ListPodResourcesRequest(), timeout=5
        )
    return {
        f"{p.namespace}/{p.name}": [
            (c.name, [i for d in c.devices for i in d.device_ids]) for c in p.containers
        ]
        for p in resp.pod_resources
    }


def test_every_node_has_its_socket(dev_cluster: DevCluster) -> None:
    for name in dev_cluster.node_names:
        assert dev_cluster.pod_resources_socket(name).is_socket(), name
    with pytest.raises(ValueError, match="no node 'gpu-9999'"):
        dev_cluster.pod_resources_socket("gpu-9999")


def test_a_pods_gpus_are_listed_by_uuid_and_freed_when_it_finishes(
    api: client.ApiClient,
    dev_cluster: DevCluster,
    namespace: str,
    claim_node: Callable[..., str],
) -> None:
    core = client.CoreV1Api(api)
    node = claim_node(gpus=2)
    gpus = next(n.gpus for n in dev_cluster.options.cluster.nodes() if n.name == node)
    socket = dev_cluster.pod_resources_socket(node)
    core.create_namespaced_pod(namespace, pod("train", gpus=2, node=node))
    core.create_namespaced_pod(namespace, pod("cpu-only", node=node))
    train = wait_for("pod train Running", _running(core, namespace, "train"))
    wait_for("pod cpu-only Running", _running(core, namespace, "cpu-only"))

    owner = DeviceOwner(namespace=namespace, pod="train", container="main")
    uuids = [fake_gpu_uuid(node, 0), fake_gpu_uuid(node, 1)]
    with PodResourcesClient(socket, timeout_s=5) as kubelet:
        assert kubelet.list_devices() == dict.fromkeys(uuids, owner)
        assert kubelet.allocatable() == [fake_gpu_uuid(node, i) for i in range(gpus)]
        assert train.metadata.annotations[GPU_INDICES] == "0,1"
        # The GPU-less pod is listed, as by the kubelet, with no devices.
        listed = _listed(str(socket))
        assert listed[f"{namespace}/cpu-only"] == [("main", [])]
        assert sorted(listed[f"{namespace}/train"][0][1]) == sorted(uuids)

        core.patch_namespaced_pod(
            "train", namespace, {"metadata": {"annotations": {FAKE_EXIT: "Succeeded"}}}
        )
        wait_for(
            "pod train Succeeded",
            lambda: core.read_namespaced_pod("train", namespace).status.phase == "Succeeded",
        )
        wait_for("train's GPUs to be free", lambda: kubelet.list_devices() == {})
        assert f"{namespace}/train" not in _listed(str(socket))

        # Freed for real: the next pod gets the same GPUs, and loses them when deleted.
        core.create_namespaced_pod(namespace, pod("next", gpus=1, node=node))
        wait_for("pod next Running", _running(core, namespace, "next"))
        assert kubelet.list_devices() == {
            uuids[0]: DeviceOwner(namespace=namespace, pod="next", container="main")
        }
        core.delete_namespaced_pod("next", namespace)
        wait_for("next's GPU to be free", lambda: kubelet.list_devices() == {})
