"""Which pod holds which GPU, as the kubelet tells it: a client of its pod-resources API.

dcgm-exporter labels each GPU's series with the pod, namespace and container that
hold it by asking the kubelet: the pod-resources gRPC API, v1, `List`, on the
unix socket /var/lib/kubelet/pod-resources/kubelet.sock. The node agent does the
same through this module. On the local control plane the fake kubelet serves
that API for each fake node (`DevCluster.pod_resources_socket(node)`), giving
its GPUs the UUIDs `fake_gpu_uuid` computes, so tests run this very code.

The message and stub modules in `proto/` are generated from the upstream
api.proto (`controller/agent/proto/__init__.py` says how).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import grpc

from controller.agent.proto.podresources.v1 import api_pb2, api_pb2_grpc

__all__ = [
    "DEFAULT_SOCKET",
    "GPU_RESOURCE",
    "DeviceOwner",
    "PodResourcesClient",
    "PodResourcesError",
    "fake_gpu_uuid",
]

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""Where a real kubelet serves the API."""

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource of NVIDIA's device plugin; its device ids are GPU UUIDs."""

_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The kubelet's own limit on a pod-resources response (DefaultPodResourcesMaxSize)."""


class PodResourcesError(Exception):
    """The pod-resources API could not be read; the message names the socket and why."""


@dataclass(frozen=True)
class DeviceOwner:
    """The container a device is assigned to."""

    namespace: str
    pod: str
    container: str


def fake_gpu_uuid(node: str, index: int) -> str:
    """The UUID the local control plane's fake kubelet gives GPU `index` of `node`.

    `GPU-`, then the first 16 bytes of sha1("gangops-fake-gpu/<node>/<index>") as
    lowercase hex in 8-4-4-4-12 groups: deterministic, so a replayed GPU and the
    fake kubelet agree without talking. The Go side is `fakeGPUUUID` in
    clusters/local/cmd/fake-kubelet/devices.go; both tests check the same vector.
    """
    h = hashlib.sha1(f"gangops-fake-gpu/{node}/{index}".encode()).hexdigest()[:32]
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class PodResourcesClient:
    """A client of one kubelet's pod-resources API (v1) on its unix socket.

    The channel connects on first use and reconnects by itself after the kubelet
    restarts; every call has a deadline of `timeout_s`. Any failure (no socket,
    deadline, UNAVAILABLE, ...) raises `PodResourcesError`. Safe to share
    between threads; `close()` it, or use it as a context manager.
    """

    def __init__(self, socket_path: str | os.PathLike[str], *, timeout_s: float = 2.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(
            f"unix://{self.socket_path.absolute()}",
            options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)],
        )
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def list_devices(self) -> dict[str, DeviceOwner]:
        """Each `nvidia.com/gpu` device id (a GPU UUID) that a container holds, and that
        container, from `List`. A GPU no pod holds is absent. A device listed for two
        containers (a shared GPU) keeps the first."""
        try:
            resp = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise self._error("List", e) from None
        owners: dict[str, DeviceOwner] = {}
        for pod in resp.pod_resources:
            for container in pod.containers:
                owner = DeviceOwner(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    if devices.resource_name == GPU_RESOURCE:
                        for device_id in devices.device_ids:
                            owners.setdefault(device_id, owner)
        return owners

    def allocatable(self) -> list[str]:
        """Every `nvidia.com/gpu` device id of the node, in the kubelet's order, from
        `GetAllocatableResources`."""
        try:
            resp = self._stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self.timeout_s
            )
        except grpc.RpcError as e:
            raise self._error("GetAllocatableResources", e) from None
        return [
            device_id
            for devices in resp.devices
            if devices.resource_name == GPU_RESOURCE
            for device_id in devices.device_ids
        ]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _error(self, method: str, e: grpc.RpcError) -> PodResourcesError:
        # A failed unary call is also a grpc.Call: it has the status code and details.
        code = e.code() if isinstance(e, grpc.Call) else None
        details = e.details() if isinstance(e, grpc.Call) else str(e)
        what = code.name if code is not None else "error"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            details = f"no answer within {self.timeout_s:g}s"
        hint = "" if self.socket_path.exists() else " (no socket there: is the kubelet running?)"
        return PodResourcesError(
            f"pod-resources API on {self.socket_path}{hint}: {method} failed: {what}: {details}"
        )
