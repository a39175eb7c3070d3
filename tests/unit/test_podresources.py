"""controller.agent.podresources against an in-process pod-resources server on a unix
socket: GPU device ids map to their containers, other resources and GPU-less
containers are left out, and every failure is one PodResourcesError naming the socket."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from controller.agent.podresources import (
    DeviceOwner,
    PodResourcesClient,
    PodResourcesError,
    fake_gpu_uuid,
)
from controller.agent.proto.podresources.v1 import api_pb2 as pb
from controller.agent.proto.podresources.v1 import api_pb2_grpc

# The same vectors are checked against the Go fakeGPUUUID in
# clusters/local/cmd/fake-kubelet/devices_test.go; they were computed with sha1sum.
UUID_VECTORS = [
    ("a100-000", 0, "GPU-67567bec-be9f-6d30-e8e7-99ef9cfc9f36"),
    ("a100-000", 1, "GPU-6a2442b4-d6e1-4d15-dfe2-2f5832b7b458"),
    ("h100-003", 7, "GPU-20845cf0-5c48-e48f-959e-11875752351b"),
]


@pytest.mark.parametrize(("node", "index", "uuid"), UUID_VECTORS)
def test_fake_gpu_uuid_matches_the_fake_kubelet(node: str, index: int, uuid: str) -> None:
    assert fake_gpu_uuid(node, index) == uuid


def gpus(*ids: str) -> list[pb.ContainerDevices]:
    """One entry per device, as the kubelet's device manager reports them."""
    return [pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[i]) for i in ids]


def container(name: str, devices: list[pb.ContainerDevices] | None = None) -> pb.ContainerResources:
    return pb.ContainerResources(name=name, devices=devices or [])


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """The one fake at the seam: answers with what a test puts in it, or as told to fail."""

    pods: list[pb.PodResources] = field(default_factory=list)
    allocatable: list[pb.ContainerDevices] = field(default_factory=list)
    abort: grpc.StatusCode | None = None
    hang: threading.Event | None = None
    """Set: each call blocks until it is set (the test's cleanup sets it)."""

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> object:
        self._misbehave(context)
        return pb.ListPodResourcesResponse(pod_resources=self.pods)

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> object:
        self._misbehave(context)
        return pb.AllocatableResourcesResponse(devices=self.allocatable)

    def _misbehave(self, context: grpc.ServicerContext) -> None:
        if self.hang is not None:
            self.hang.wait(10)
        if self.abort is not None:
            context.abort(self.abort, "kubelet is restarting")


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    yield fake
    if fake.hang is not None:
        fake.hang.set()
    server.stop(grace=None).wait()


@pytest.fixture
def client(socket_path: Path) -> Iterator[PodResourcesClient]:
    with PodResourcesClient(socket_path, timeout_s=1.0) as c:
        yield c


def test_list_devices_maps_each_gpu_to_its_container(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.pods = [
        pb.PodResources(
            namespace="team-a",
            name="train-0",
            containers=[
                container("trainer", gpus("GPU-1", "GPU-2")),
                container("sidecar"),
            ],
        ),
        pb.PodResources(
            namespace="team-b",
            name="infer",
            containers=[
                container(
                    "server",
                    [
                        # Both device ids in one entry: also valid, from older kubelets.
                        pb.ContainerDevices(
                            resource_name="nvidia.com/gpu", device_ids=["GPU-3", "GPU-4"]
                        ),
                        pb.ContainerDevices(resource_name="example.com/nic", device_ids=["nic-0"]),
                    ],
                )
            ],
        ),
        pb.PodResources(namespace="team-b", name="cpu-only", containers=[container("main")]),
    ]
    assert client.list_devices() == {
        "GPU-1": DeviceOwner(namespace="team-a", pod="train-0", container="trainer"),
        "GPU-2": DeviceOwner(namespace="team-a", pod="train-0", container="trainer"),
        "GPU-3": DeviceOwner(namespace="team-b", pod="infer", container="server"),
        "GPU-4": DeviceOwner(namespace="team-b", pod="infer", container="server"),
    }


def test_a_node_without_pods_holds_no_devices(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    assert client.list_devices() == {}


def test_allocatable_lists_the_gpus_only(kubelet: FakeKubelet, client: PodResourcesClient) -> None:
    kubelet.allocatable = [
        *gpus("GPU-1", "GPU-2"),
        pb.ContainerDevices(resource_name="example.com/nic", device_ids=["nic-0"]),
    ]
    assert client.allocatable() == ["GPU-1", "GPU-2"]


def test_a_missing_socket_is_a_pod_resources_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.sock"
    with (
        PodResourcesClient(path, timeout_s=1.0) as client,
        pytest.raises(PodResourcesError) as err,
    ):
        client.list_devices()
    assert str(path) in str(err.value)
    assert "no socket there" in str(err.value)
    assert "UNAVAILABLE" in str(err.value)


def test_an_unavailable_kubelet_is_a_pod_resources_error(
    kubelet: FakeKubelet, client: PodResourcesClient, socket_path: Path
) -> None:
    kubelet.abort = grpc.StatusCode.UNAVAILABLE
    with pytest.raises(PodResourcesError) as err:
        client.allocatable()
    message = str(err.value)
    assert str(socket_path) in message
    assert "GetAllocatableResources failed: UNAVAILABLE: kubelet is restarting" in message


def test_a_kubelet_that_does_not_answer_times_out(
    kubelet: FakeKubelet, client: PodResourcesClient, socket_path: Path
) -> None:
    kubelet.hang = threading.Event()
    with pytest.raises(PodResourcesError) as err:
        client.list_devices()
    assert f"{socket_path}: List failed: DEADLINE_EXCEEDED: no answer within 1s" in str(err.value)


def test_timeout_must_be_positive(socket_path: Path) -> None:
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        PodResourcesClient(socket_path, timeout_s=0)


def test_a_socket_that_speaks_something_else_is_a_pod_resources_error(tmp_path: Path) -> None:
    import socket as sk

    path = tmp_path / "junk.sock"
    server = sk.socket(sk.AF_UNIX, sk.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer_junk() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    t = threading.Thread(target=answer_junk, daemon=True)
    t.start()
    try:
        with pytest.raises(PodResourcesError, match="List failed: UNAVAILABLE"):
            PodResourcesClient(path, timeout_s=2).list_devices()
    finally:
        t.join(timeout=5)
        server.close()


def test_time_sliced_replicas_are_their_gpu(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    """Found by a review: with the device plugin's time-slicing the kubelet lists
    `GPU-...::1`, which matched no GPU UUID, so those pods' GPUs had no pod labels
    (dcgm-exporter splits at `::`)."""
    kubelet.pods = [
        pb.PodResources(
            namespace="nlp", name="bert-0", containers=[container("t", gpus("GPU-1::1"))]
        ),
        pb.PodResources(
            namespace="nlp", name="bert-1", containers=[container("t", gpus("GPU-1::0"))]
        ),
    ]
    assert client.list_devices() == {"GPU-1": DeviceOwner("nlp", "bert-0", "t")}
    kubelet.pods.reverse()  # the kubelet's order is not its own: the same pod is named
    assert client.list_devices() == {"GPU-1": DeviceOwner("nlp", "bert-0", "t")}
    kubelet.allocatable = [*gpus("GPU-1::0", "GPU-1::1", "GPU-2::0", "GPU-2::1")]
    assert client.allocatable() == ["GPU-1", "GPU-2"]
