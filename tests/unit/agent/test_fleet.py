"""Many fake nodes in one process: each node its own agent, GPUs and path."""

from __future__ import annotations

import json
from pathlib import Path

from controller.agent.agent import AgentConfig
from controller.agent.fleet import Fleet, fleet_nodes
from controller.agent.health import State
from controller.agent.replay import Event, Scenario, load_recording
from controller.httpserver import Request


def _manifest(name: str, gpus: int, product: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": "81920"},
        },
        "status": {"capacity": {"nvidia.com/gpu": str(gpus), "cpu": "8"}},
    }


def test_each_node_has_its_own_gpus_series_and_faults(recording_dir: Path, tmp_path: Path) -> None:
    nodes = fleet_nodes(
        [
            _manifest("n1", 2),
            _manifest("n2", 1),
            {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "4"}}},
        ],
        default_memory_mib=49152,
    )
    assert [(n.name, n.gpus, n.model, n.memory_mib) for n in nodes] == [
        ("n1", 2, "NVIDIA H100 80GB HBM3", 81920.0),
        ("n2", 1, "NVIDIA H100 80GB HBM3", 81920.0),
    ]
    fleet = Fleet(
        nodes,
        config=AgentConfig(node=""),
        recording=load_recording(recording_dir),
        scenario=Scenario((Event(at=0, kind="xid", gpu=0, xid=79, node="n2"),)),
    )
    fleet.round()
    assert fleet.ready()
    # GPUs continue the container order across nodes: n1 plays aaa, bbb; n2 plays ccc
    utils = {
        name: [g.sample["DCGM_FI_DEV_GPU_UTIL"] for g in a.snapshot().gpus]  # type: ignore[index]
        for name, a in fleet.agents.items()
    }
    assert utils == {"n1": [40.0, 70.0], "n2": [5.0]}
    assert fleet.agents["n2"].snapshot().gpus[0].health.state is State.REBOOT_REQUIRED
    assert fleet.agents["n1"].snapshot().gpus[0].health.state is State.HEALTHY

    code, _, body = fleet.route(Request("GET", "/nodes/n2/metrics", {}, b""))
    assert code == 200 and b'Hostname="n2"' in body and b'Hostname="n1"' not in body
    assert fleet.route(Request("GET", "/nodes/zz/metrics", {}, b""))[0] == 404

    out = tmp_path / "targets.json"
    fleet.write_targets(out, "127.0.0.1", 9400)
    assert json.loads(out.read_text()) == [
        {
            "targets": ["127.0.0.1:9400"],
            "labels": {"__metrics_path__": "/nodes/n1/metrics", "node": "n1"},
        },
        {
            "targets": ["127.0.0.1:9400"],
            "labels": {"__metrics_path__": "/nodes/n2/metrics", "node": "n2"},
        },
    ]


def test_a_hung_gpu_on_one_node_does_not_stall_the_same_gpu_of_another() -> None:
    import time

    nodes = fleet_nodes([_manifest("n1", 2), _manifest("n2", 2)], default_memory_mib=49152)
    fleet = Fleet(
        nodes,
        config=AgentConfig(node="", deadline_s=0.2),
        recording=None,
        scenario=Scenario((Event(at=0.1, kind="hang", gpu=0, node="n1", seconds=5),)),
    )
    fleet.round()
    time.sleep(0.15)
    fleet.round()  # n1's GPU 0 hangs: parked
    fleet.round()  # n1's GPU 0 is parked; n2's GPU 0 is another lane
    assert fleet.agents["n1"].snapshot().gpus[0].health.state is State.UNRESPONSIVE
    n2 = fleet.agents["n2"].snapshot().gpus[0]
    assert n2.health.state is State.HEALTHY and n2.sample is not None
