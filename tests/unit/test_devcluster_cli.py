"""`gangops dev-cluster` without a cluster: what `up` refuses before it starts
anything, and what `env` prints for `eval` (each found by a review)."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from controller import cli
from controller.devcluster import launcher


@pytest.fixture(autouse=True)
def no_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should `up` get past its checks, it fails at once for want of binaries rather
    than start a cluster."""
    monkeypatch.setenv("GANGOPS_K8S_BIN_DIR", str(tmp_path / "no-binaries"))


def _exit(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_a_second_up_on_a_state_file_being_started_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two `up --detach` at once on one state file both started; the state file
    recorded the second, and `down` left the first running for good. The first holds
    a lock beside the state file until its cluster is recorded."""
    state = tmp_path / "dev-cluster.json"
    with open(state.with_name(state.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert _exit(["dev-cluster", "up", "--detach", "--state", str(state)]) == 1
    assert "another `dev-cluster up` is starting a cluster on" in capsys.readouterr().err
    assert not state.exists()


def test_a_state_file_that_cannot_be_written_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It raised a traceback once etcd had started, and left the cluster's directory."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("gangops-dev-cluster-*"))
    assert _exit(["dev-cluster", "up", "--state", str(a_file / "state.json")]) == 2
    assert "cannot write there" in capsys.readouterr().err
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("gangops-dev-cluster-*")) == before


def test_env_prints_lines_a_shell_can_eval_whatever_the_paths(tmp_path: Path) -> None:
    """A temporary directory with a space broke `eval "$(gangops dev-cluster env)"`."""
    where = tmp_path / "tmp dir"
    where.mkdir()
    me = {
        "name": "owner",
        "pid": os.getpid(),
        "start_time": launcher._proc_start_time(os.getpid()),
        "log": "",
    }
    state = {
        "version": launcher._STATE_VERSION,
        "owner": None,
        "data_dir": str(where),
        "remove_data_dir": False,
        "server": "https://127.0.0.1:1",
        "etcd": "http://127.0.0.1:2",
        "kubeconfig": str(where / "admin.kubeconfig"),
        "users": {},
        "components": [me],
        "ready": True,
        "prometheus_url": "http://127.0.0.1:9090",
    }
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    gangops = [sys.executable, "-m", "controller.cli"]
    script = f'eval "$({shlex.join([*gangops, "dev-cluster", "env", "--state", str(path)])})"'
    out = subprocess.run(
        ["bash", "-c", script + ' && printf "%s" "$KUBECONFIG"'],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout == str(where / "admin.kubeconfig")
