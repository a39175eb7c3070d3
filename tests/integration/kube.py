"""Small helpers the integration tests share: polling, API error bodies, pod manifests.

The API server is eventually consistent from a client's point of view
(controllers write status after the fact), so tests poll with a deadline and
say what they were waiting for when it expires, instead of sleeping.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

GPU = "nvidia.com/gpu"
FAKE_EXIT = "gangops.ai/fake-exit"
FAKE_DURATION = "gangops.ai/fake-duration-seconds"
FAKE_EXIT_CODE = "gangops.ai/fake-exit-code"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 30.0) -> T:
    """Call `probe` until it returns something truthy, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"
            )
        time.sleep(0.1)


def status_of(error: ApiException) -> dict[str, Any]:
    """The `Status` object the API server sent with an error response."""
    body: dict[str, Any] = json.loads(error.body)
    assert body.get("kind") == "Status", body
    return body


def pod(
    name: str,
    *,
    gpus: int = 0,
    node: str | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "gangops",
) -> dict[str, Any]:
    """A one-container pod asking for `gpus` GPUs (limits; the API server copies them to
    requests), optionally bound to `node` at creation."""
    container: dict[str, Any] = {"name": "main", "image": "pause:3.10"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [container],
        "tolerations": [{"key": GPU, "operator": "Exists"}],
        "terminationGracePeriodSeconds": 5,
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": spec,
    }
