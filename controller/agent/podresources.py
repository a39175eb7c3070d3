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
import socket
import time
import urllib.parse
from dataclasses import astuple, dataclass
from pathlib import Path
from types import TracebackType

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.message import DecodeError, Message

from controller.agent.proto.podresources.v1 import api_pb2

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


def _gpu(device_id: str) -> str:
    """The GPU a device id names: a time-sliced replica `GPU-...::N` is its GPU."""
    return device_id.partition("::")[0]


class PodResourcesClient:
    """A client of one kubelet's pod-resources API (v1) on its unix socket.

    Each call opens the socket, makes one unary gRPC call and closes it (the agent
    calls once a second; a kubelet restart needs nothing special), under a deadline
    of `timeout_s`. Any failure (no socket, deadline, a gRPC status other than OK,
    a malformed answer) raises `PodResourcesError`. Safe to share between threads.

    Why not grpcio: its C core costs about 26 MiB of resident memory, half the node
    agent's 50 MiB budget, for one unary call a second. The call is HTTP/2 (h2, the
    maintained protocol implementation, does the framing, HPACK and flow control)
    with gRPC's 5-byte message prefix and status trailers on top; the messages are
    protobuf's, generated from the upstream api.proto. The unit tests run this
    client against a grpcio server.
    """

    def __init__(self, socket_path: str | os.PathLike[str], *, timeout_s: float = 2.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s

    def list_devices(self) -> dict[str, DeviceOwner]:
        """Each `nvidia.com/gpu` device id (a GPU UUID) that a container holds, and that
        container, from `List`. A GPU no pod holds is absent. A device listed for two
        containers (a shared GPU) keeps the first by namespace, pod and container,
        whatever order the kubelet lists them in (so its series keep their labels
        from one scrape to the next). A time-sliced GPU's replicas
        (`GPU-...::1`, NVIDIA's device plugin with sharing) count as the GPU itself,
        as dcgm-exporter reads them."""
        resp = api_pb2.ListPodResourcesResponse()
        self._call("List", api_pb2.ListPodResourcesRequest(), resp)
        owners: dict[str, DeviceOwner] = {}
        for pod in resp.pod_resources:
            for container in pod.containers:
                owner = DeviceOwner(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    if devices.resource_name == GPU_RESOURCE:
                        for device_id in devices.device_ids:
                            gpu = _gpu(device_id)
                            if gpu not in owners or astuple(owner) < astuple(owners[gpu]):
                                owners[gpu] = owner
        return owners

    def allocatable(self) -> list[str]:
        """Every `nvidia.com/gpu` device id of the node, in the kubelet's order, from
        `GetAllocatableResources` (a time-sliced GPU once, not once per replica)."""
        resp = api_pb2.AllocatableResourcesResponse()
        self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest(), resp)
        ids = (
            _gpu(device_id)
            for devices in resp.devices
            if devices.resource_name == GPU_RESOURCE
            for device_id in devices.device_ids
        )
        return list(dict.fromkeys(ids))

    def close(self) -> None:
        """Nothing to release (each call has its own connection); kept for `with`."""

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, request: Message, response: Message) -> None:
        """One unary call of `/v1.PodResourcesLister/<method>`, parsed into `response`."""
        try:
            payload = _unary(
                self.socket_path,
                f"/{_SERVICE}/{method}",
                request.SerializeToString(),
                self.timeout_s,
            )
            response.ParseFromString(payload)
        except _GrpcStatus as e:
            if e.code == "DEADLINE_EXCEEDED":  # the server gave up first: same story
                raise self._error(method, e.code, f"no answer within {self.timeout_s:g}s") from None
            raise self._error(method, e.code, e.message) from None
        except TimeoutError:
            raise self._error(
                method, "DEADLINE_EXCEEDED", f"no answer within {self.timeout_s:g}s"
            ) from None
        except (OSError, h2.exceptions.ProtocolError, DecodeError, ValueError) as e:
            raise self._error(method, "UNAVAILABLE", str(e) or type(e).__name__) from None

    def _error(self, method: str, code: str, details: str) -> PodResourcesError:
        hint = "" if self.socket_path.exists() else " (no socket there: is the kubelet running?)"
        return PodResourcesError(
            f"pod-resources API on {self.socket_path}{hint}: {method} failed: {code}: {details}"
        )


_SERVICE = "v1.PodResourcesLister"
_GRPC_CODES = [
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
]  # fmt: skip


class _GrpcStatus(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def _unary(socket_path: Path, path: str, request: bytes, timeout_s: float) -> bytes:
    """A unary gRPC call over HTTP/2 on a unix socket; the response message's bytes.
    Raises TimeoutError past `timeout_s`, `_GrpcStatus` for a status other than OK."""
    deadline = time.monotonic() + timeout_s
    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(socket_path))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 1 << 20})
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "localhost"),
                ("content-type", "application/grpc+proto"),
                ("te", "trailers"),
                ("grpc-timeout", f"{max(1, int(timeout_s * 1000))}m"),
            ],
        )
        conn.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
        body = bytearray()
        headers: dict[str, str] = {}
        while True:
            sock.sendall(conn.data_to_send())
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                raise ValueError("the server closed the connection before the answer ended")
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    headers.update((str(k), str(v)) for k, v in event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    if len(body) > _MAX_MESSAGE_BYTES + 5:
                        raise ValueError(f"answer larger than {_MAX_MESSAGE_BYTES} bytes")
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    raise ValueError(f"stream reset by the server (error {event.error_code})")
                elif isinstance(event, h2.events.StreamEnded):
                    return _message(headers, bytes(body))


def _message(headers: dict[str, str], body: bytes) -> bytes:
    if headers.get(":status", "200") != "200":
        raise ValueError(f"HTTP status {headers.get(':status')}")
    status = int(headers.get("grpc-status", "2"))
    if status != 0:
        code = _GRPC_CODES[status] if status < len(_GRPC_CODES) else str(status)
        raise _GrpcStatus(code, urllib.parse.unquote(headers.get("grpc-message", "")))
    if len(body) < 5 or body[0] != 0:
        raise ValueError("not a gRPC message (missing prefix, or compressed)")
    length = int.from_bytes(body[1:5], "big")
    if len(body) != 5 + length:
        raise ValueError(f"gRPC message of {len(body) - 5} bytes, prefix says {length}")
    return body[5:]
