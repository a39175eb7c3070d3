"""The node agent publishes GPU health on the Node of a real API server: a scripted
XID shows as the condition and the annotation within seconds, without touching the
kubelet's conditions, and a Node that does not exist is never created."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.devcluster import DevCluster

from .kube import free_port, wait_for


@pytest.fixture
def run_agent(
    dev_cluster: DevCluster, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(node: str, scenario: str) -> subprocess.Popen[bytes]:
        f = tmp_path / f"{node}.yaml"
        f.write_text(scenario)
        log = (tmp_path / f"{node}.log").open("wb")
        p = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "agent", "--node", node,
             "--listen", f"127.0.0.1:{free_port()}", "--scenario", str(f), "--gpus", "8",
             "--pod-resources-socket", "", "--publish-node", "on",
             "--kubeconfig", str(dev_cluster.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=20)


def _condition(node: dict, kind: str) -> dict | None:  # type: ignore[type-arg]
    return next((c for c in node["status"].get("conditions") or [] if c["type"] == kind), None)


def test_an_xid_turns_the_node_condition_and_annotation_within_seconds(
    api: client.ApiClient, run_agent: Callable[..., object]
) -> None:
    core = client.CoreV1Api(api)
    # A tainted T4 node no scheduling test uses: the test takes none of its GPUs, and the
    # untainted nodes are all claimed by tests that do.
    node = "t4-003"

    def read() -> dict:  # type: ignore[type-arg]
        return api.sanitize_for_serialization(core.read_node(node))  # type: ignore[no-any-return]

    run_agent(
        node,
        "events:\n"
        "  - {at: 4, gpu: 2, kind: xid, xid: 79}\n"
        "  - {at: 4, gpu: 5, kind: xid, xid: 13}\n",
    )
    healthy = wait_for(
        "the agent's first publication", lambda: _condition(read(), "GPUProblem"), timeout=20
    )
    assert healthy["status"] == "False" and healthy["reason"] == "GPUsHealthy"
    t_healthy = time.monotonic()
    bad = wait_for(
        "GPUProblem True",
        lambda: (c := _condition(read(), "GPUProblem")) and c["status"] == "True" and c,
        timeout=15,
    )
    # the XID is due 4 s after the agent starts; it was healthy after at most that
    assert time.monotonic() - t_healthy < 4 + 3
    assert (
        bad["reason"] == "UnhealthyGPUs"
        and "gpu 2" in bad["message"]
        and "XID 79" in bad["message"]
    )
    assert "gpu 5" not in bad["message"], "an application XID does not take a GPU out"
    obj = read()
    assert obj["metadata"]["annotations"]["gangops.ai/unhealthy-gpus"] == "2"
    ready = _condition(obj, "Ready")
    assert ready is not None and ready["status"] == "True", "the kubelet's condition is untouched"


def test_a_node_that_does_not_exist_is_never_created(
    api: client.ApiClient, run_agent: Callable[..., subprocess.Popen[bytes]]
) -> None:
    core = client.CoreV1Api(api)
    p = run_agent("ghost-node-x", "events:\n  - {at: 1, gpu: 0, kind: xid, xid: 48}\n")
    time.sleep(5)
    assert p.poll() is None, "the agent keeps running"
    with pytest.raises(ApiException) as e:
        core.read_node("ghost-node-x")
    assert e.value.status == 404
