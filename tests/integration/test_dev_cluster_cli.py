"""`dev-cluster up | env | down` from the shell, and no orphans whichever way it ends.

A developer starts the cluster in one shell and uses or stops it from another;
a test run may be interrupted or killed. In every case the processes must end
and the temporary directory go away, or the machine fills with stray API
servers. These tests run the real command (`python -m controller.devcluster`)
on a one-node cluster.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.interrupt import ctrl_c_as_a_terminal

from .kube import wait_for

ONE_NODE = """\
apiVersion: gangops.ai/v1
kind: Cluster
metadata: {name: tiny}
spec:
  pools:
    - {name: g, count: 1, gpusPerNode: 2, gpuModel: Tesla-T4, gpuMemoryMiB: 15360}
"""


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(ONE_NODE, encoding="utf-8")
    return path


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state" / "dev-cluster.json"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "controller.devcluster", *args]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=180, check=False)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _pids(state: Path) -> list[int]:
    return [c["pid"] for c in json.loads(state.read_text(encoding="utf-8"))["components"]]


def _start_foreground(
    cluster_file: Path, state: Path, log: Path
) -> tuple[subprocess.Popen[str], str]:
    """Start `up` in the foreground; return the process and its `export KUBECONFIG=` line."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            _command("up", "--cluster", str(cluster_file), "--state", str(state)),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=ctrl_c_as_a_terminal,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the cluster is ready
    if not line.startswith("export KUBECONFIG="):
        proc.kill()
        proc.wait()
        proc.stdout.close()
        pytest.fail(f"`up` did not become ready:\n{log.read_text()}")
    return proc, line


def test_detached_up_env_and_down(cluster_file: Path, state: Path) -> None:
    up = _run("up", "--detach", "--cluster", str(cluster_file), "--state", str(state))
    assert up.returncode == 0, up.stderr
    assert "ready in" in up.stderr
    assert "fake nodes Ready: 100% (1/1 nodes)" in up.stderr  # progress, as plain lines
    kubectl = up.stderr.split("  kubectl     ", 1)[1].split(" ", 1)[0]
    version = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True)
    assert json.loads(version.stdout)["clientVersion"]["gitVersion"] == "v1.35.4"
    assert up.stdout.startswith("export KUBECONFIG=")
    kubeconfig = Path(up.stdout.strip().split("=", 1)[1])
    pids = _pids(state)
    assert len(pids) == 4 and not any(_gone(p) for p in pids)

    env = _run("env", "--state", str(state))
    assert (env.returncode, env.stdout) == (0, up.stdout)
    alice = _run("env", "--user", "alice", "--state", str(state))
    assert alice.stdout == f"export KUBECONFIG={kubeconfig.parent / 'alice.kubeconfig'}\n"

    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["g-000"]

    again = _run("up", "--detach", "--cluster", str(cluster_file), "--state", str(state))
    assert again.returncode == 1
    assert "a cluster is already running" in again.stderr

    down = _run("down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    assert all(_gone(p) for p in pids)
    assert not state.exists()
    assert not kubeconfig.parent.exists()

    assert _run("down", "--state", str(state)).returncode == 0
    missing = _run("env", "--state", str(state))
    assert missing.returncode == 1
    assert "no cluster is running" in missing.stderr


def test_ctrl_c_stops_a_foreground_up(cluster_file: Path, state: Path, tmp_path: Path) -> None:
    proc, line = _start_foreground(cluster_file, state, tmp_path / "up.log")
    assert proc.stdout is not None
    with proc.stdout:
        pids = _pids(state)
        data_dir = Path(line.strip().split("=", 1)[1]).parent
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()
    assert all(_gone(p) for p in pids)
    assert not state.exists()
    assert not data_dir.exists()


def test_down_from_another_shell_stops_a_foreground_up(
    cluster_file: Path, state: Path, tmp_path: Path
) -> None:
    proc, _ = _start_foreground(cluster_file, state, tmp_path / "up.log")
    assert proc.stdout is not None
    with proc.stdout:
        pids = _pids(state)
        down = _run("down", "--state", str(state))
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=60) == 0
    assert all(_gone(p) for p in pids)
    assert "stopping" in (tmp_path / "up.log").read_text()


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only"
)
def test_killed_up_takes_its_cluster_with_it(
    cluster_file: Path, state: Path, tmp_path: Path
) -> None:
    proc, line = _start_foreground(cluster_file, state, tmp_path / "up.log")
    pids = _pids(state)
    proc.kill()  # SIGKILL: no handler, no atexit; only the parent-death signal is left
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    wait_for(
        "every component to die with its parent", lambda: all(_gone(p) for p in pids), timeout=10
    )
    # The state it left behind is stale; `down` cleans it up.
    assert _run("down", "--state", str(state)).returncode == 0
    assert not state.exists()
    assert not Path(line.strip().split("=", 1)[1]).parent.exists()
