"""`gangops agent` as a process: serves, answers health, stops on SIGTERM; bad input
gets exit 2 and a message that says where."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from controller.agent.deadline import Lanes
from controller.agent.replay import ScenarioError, load_recording, load_scenario


def _gangops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "agent", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status, r.read().decode()


def test_help_explains_every_flag() -> None:
    r = _gangops("--help")
    assert r.returncode == 0
    for flag in (
        "--listen",
        "--node",
        "--interval",
        "--replay",
        "--gpus",
        "--gpu-memory-mib",
        "--speed",
        "--scenario",
        "--scenario-start-file",
        "--deadline",
        "--xid-class",
        "--hostname-label",
    ):
        assert flag in r.stdout


def test_a_missing_replay_directory_is_a_usage_error(tmp_path: Path) -> None:
    r = _gangops("--replay", str(tmp_path / "nope"), "--pod-resources-socket", "")
    assert r.returncode == 2
    assert "pod_gpu_duty_cycle.csv" in r.stderr


def test_a_bad_scenario_names_its_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "events:\n  - {at: 1, kind: xid, gpu: 0, xid: 48}\n  - {at: 2, kind: explode, gpu: 1}\n"
    )
    r = _gangops("--scenario", str(f), "--pod-resources-socket", "")
    assert r.returncode == 2
    assert f"{f}:3: kind must be one of" in r.stderr


def test_a_start_file_without_a_scenario_is_a_usage_error(tmp_path: Path) -> None:
    r = _gangops("--scenario-start-file", str(tmp_path / "go"), "--pod-resources-socket", "")
    assert r.returncode == 2
    assert "--scenario-start-file needs --scenario" in r.stderr


def test_the_agent_serves_replayed_gpus_and_stops_on_sigterm(recording_dir: Path) -> None:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "agent",
            "--listen",
            "127.0.0.1:0",
            "--node",
            "n1",
            "--replay",
            str(recording_dir),
            "--gpus",
            "2",
            "--pod-resources-socket",
            "",
            "--publish-node",
            "off",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stderr is not None
        port = None
        deadline = time.monotonic() + 20
        while port is None and time.monotonic() < deadline:
            m = re.search(r"agent started .* listen=127\.0\.0\.1:(\d+)", p.stderr.readline())
            port = int(m.group(1)) if m else None
        assert port, "the agent did not say where it listens"
        base = f"http://127.0.0.1:{port}"
        for _ in range(50):
            try:
                if _get(base + "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        assert _get(base + "/healthz")[0] == 200
        body = _get(base + "/metrics")[1]
        assert re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="0",.*Hostname="n1".*\} 40', body)
        assert re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="1",.*\} 70', body)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    finally:
        p.kill()
        p.wait()
        if p.stderr is not None:
            p.stderr.close()


def test_a_recording_with_a_bad_row_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "pod_gpu_duty_cycle.csv").write_text("container,timestamp,value\na,1,2\na,x,3\n")
    (tmp_path / "pod_gpu_memory_used_bytes.csv").write_text("container,timestamp,value\na,1,2\n")
    with pytest.raises(ValueError, match=r"pod_gpu_duty_cycle.csv:3: "):
        load_recording(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("events: 3\n", ":1: expected a mapping"),
        ("events:\n  - {at: 1, kind: hang}\n", ":2: a hang event needs `gpu: INDEX`"),
        ("events:\n  - {at: 1, kind: xid, gpu: 0}\n", ":2: an xid event needs"),
        (
            "events:\n  - {at: 1, kind: error, gpu: 0, error: nope}\n",
            ":2: unknown NVML error 'nope'",
        ),
    ],
)
def test_scenario_errors(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(message)):
        load_scenario(f)


def test_a_lane_whose_call_hangs_is_parked_not_called_again_and_released_when_it_returns() -> None:
    lanes = Lanes(0.1, workers=2)
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.4)
        return 1

    first = lanes.run("gpu0", slow)
    assert first.hung is not None and first.hung.new
    second = lanes.run("gpu0", slow)
    assert second.hung is not None and not second.hung.new
    assert calls == [1], "a parked lane is not called again"
    assert lanes.run("gpu1", lambda: 7).value == 7, "other lanes go on"
    time.sleep(0.5)
    assert lanes.stuck() == {}
    assert lanes.run("gpu0", lambda: 3).value == 3


@pytest.mark.parametrize("fleet", [False, True])
def test_credentials_that_cannot_be_read_are_a_usage_error(tmp_path: Path, fleet: bool) -> None:
    """Found by a review: a kubeconfig that is missing or unreadable raised out of the
    agent, a traceback in a crash-looping DaemonSet's log."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("events: []\n")
    nodes = tmp_path / "nodes.json"
    nodes.write_text(
        '[{"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "1"}}}]'
    )
    where = ["--fake-nodes", str(nodes)] if fleet else ["--scenario", str(scenario)]
    r = _gangops(
        "--listen", "127.0.0.1:0", "--pod-resources-socket", "", *where,
        "--kubeconfig", str(tmp_path / "nope"),
    )  # fmt: skip
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-600:]
    assert "cannot publish GPU health on the Node: no usable credentials in" in r.stderr
