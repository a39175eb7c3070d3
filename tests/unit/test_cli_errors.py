"""What a user sees when `gangops` meets bad input or an unkind environment: one line
and an exit code, never a traceback, and nothing lost (each case found by a review of
the command line)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller import cli
from controller.kube.client import ApiError, connect
from tests.interrupt import ctrl_c_as_a_terminal

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "clusters/local/cluster.yaml")


def _exit(argv: list[str]) -> int:
    """`gangops ARGV` in this process: its exit status (argparse's usage errors too)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (b"apiVersion: v1\nkind: Config\nclusters: [\n", "no usable credentials in"),
        (b"apiVersion: v1\nclusters: \xff\n", "no usable credentials in"),
        (b"- a\n- b\n", "is not a kubeconfig"),
    ],
    ids=["not-yaml", "not-utf8", "a-list"],
)
def test_a_kubeconfig_that_cannot_be_read_is_an_api_error(
    tmp_path: Path, text: bytes, said: str
) -> None:
    """Not YAML, not UTF-8, YAML of another shape: the loader's own errors escaped
    every command that connects, as tracebacks."""
    path = tmp_path / "kubeconfig"
    path.write_bytes(text)
    with pytest.raises(ApiError, match=said) as e:
        connect(str(path))
    assert e.value.reason == "BadConfig"


def test_a_command_given_such_a_kubeconfig_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(b"- a\n")
    assert _exit(["explain", "ns/job", "--kubeconfig", str(path)]) == 1
    assert f"{path} is not a kubeconfig" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--retry-period", "0"], "--retry-period: must be > 0"),
        (["--telemetry-interval", "-1"], "--telemetry-interval: must be > 0"),
        (["--alert-tick", "inf"], "--alert-tick: expected a number of seconds"),
        (["--forecast-horizon", "nan"], "--forecast-horizon: expected a number of seconds"),
        (["--prometheus-url", "localhost:9090"], "expected http://HOST[:PORT][/PATH]"),
        (["--alertmanager-url", "http://am:9093/?tenant=a"], "without ?query or #fragment"),
        (["--alertmanager-url", "alertmanager:9093"], "--alertmanager-url: expected http://"),
        (["--metrics-addr", "localhost:70000"], "a port from 0 to 65535"),
        (["--renew-deadline", "20"], "--renew-deadline at least 1 s under --lease-duration"),
        (["--renew-deadline", "14.5"], "--renew-deadline at least 1 s under --lease-duration"),
        (["--retry-period", "12"], "need --retry-period < --renew-deadline"),
    ],
)
def test_run_refuses_timings_and_addresses_it_cannot_use_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    """0 or negative timings ran as request storms (450 Lease requests in 8 s); a renew
    deadline past the lease raised after the metrics server had started."""
    assert _exit(["run", *flags, "--kubeconfig", str(tmp_path / "none")]) == 2
    assert said in capsys.readouterr().err


def test_simulate_refuses_a_report_it_could_not_write_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run took its time, printed its table, then lost report.json to a
    FileExistsError traceback."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    base = ["simulate", "--cluster", CLUSTER, "--generate", "5", "--no-progress"]
    assert _exit([*base, "--report", str(a_file)]) == 2
    assert _exit([*base, "--save-trace", str(tmp_path / "no" / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert "--report" in err and "not a directory" in err and "--save-trace" in err
    assert "scheduler" not in capsys.readouterr().out, "refused before the run"


def test_install_crds_into_a_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert _exit(["install-crds", "--output-dir", str(a_file)]) == 2
    assert "gangops install-crds: --output-dir:" in capsys.readouterr().err


def test_a_step_summary_that_cannot_be_written_leaves_the_verdict_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Valid policies turned into exit 1 and a traceback."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    assert _exit(["validate", str(REPO / "policies"), "--format", "github"]) == 0
    assert "no step summary" in capsys.readouterr().err


def _gangops(*args: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli", *args],
        cwd=REPO,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_a_terminal,
    )


def test_ctrl_c_is_one_line_and_exit_130() -> None:
    p = _gangops("simulate", "--cluster", CLUSTER, "--generate", "200000", "--no-progress")
    time.sleep(4)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    # while the jobs are generated, or (on a quiet machine, past 4 s) while they run,
    # when the line names the schedulers not finished (7038cd8): one line either way
    assert p.returncode == 130 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("gangops simulate: interrupted"), err


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`gangops render policies | head -1`: BrokenPipeError and a traceback, exit 1
    (to CI, 'policies invalid')."""
    read, write = os.pipe()
    os.close(read)
    p = _gangops("render", str(REPO / "policies"), stdout=write)
    os.close(write)
    _, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert p.returncode == 128 + signal.SIGPIPE
