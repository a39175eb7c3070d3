"""`gangops simulate` on input it must refuse: a flag value out of range is a usage
error (exit 2, argparse's one line), a bad trace or cluster is one line naming the
file (exit 1); never a traceback, never a run on nonsense."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.cli import main
from controller.sim.run import Experiment, policy_doc
from controller.sim.tenants import PolicyError

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,V100\n"
TRACE = "job_id,submit_time,duration,gang_size\na,0,100,1\nb,50,100,1\n"


def _simulate(tmp_path: Path, *flags: str, cluster: str = NODES, trace: str = TRACE) -> int:
    c = tmp_path / "cluster.csv"
    c.write_text(cluster, encoding="utf-8")
    t = tmp_path / "trace.csv"
    t.write_text(trace, encoding="utf-8")
    args = ["simulate", "--no-progress", "--cluster", str(c), "--trace", str(t)]
    return main([*args, "--scheduler", "gangops", *flags])


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--load", "0"], "--load: must be > 0"),  # ZeroDivisionError
        (["--load", "-1"], "--load: must be > 0"),  # arrivals re-timed backwards, exit 0
        (["--load", "nan"], "--load: expected a number"),
        (["--load", "inf"], "--load: expected a number"),
        (["--seeds", "0", "--arrivals-only"], "--seeds: must be 1 or more"),  # IndexError
        (["--session-mean", "0"], "--session-mean: must be > 0"),  # ZeroDivisionError
        (["--session-mean", "-3"], "--session-mean: must be > 0"),
        (["--tune", "-1", "--arrivals-only"], "--tune: must be 0 or more"),
        (["--repeat", "0", "--load", "1"], "--repeat: must be 1 or more"),
        (["--max-duration", "-5"], "--max-duration: must be 0 or more"),  # negative JCT
        (["--limit", "-1"], "--limit: must be 0 or more"),  # all but the last job
        (["--tick", "-10"], "--tick: must be 0 or more"),
        (["--generate", "0"], "--generate: must be 1 or more"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_flag_values_out_of_range_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _simulate(tmp_path, *flags)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {says}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "flags",
    [
        ["--limit", "0"],
        ["--max-duration", "0"],
        ["--tick", "0"],
        ["--tune", "0", "--arrivals-only"],
        ["--load", "0.5", "--repeat", "1"],
        ["--session-mean", "0.5"],
    ],
    ids=lambda v: " ".join(v),
)
def test_flag_values_at_the_bounds_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    assert _simulate(tmp_path, *flags) == 0
    assert "gangops" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("cluster", "trace", "says"),
    [
        (NODES, TRACE.replace("b,50", "a,50"), r"trace.csv:3: job_id 'a' repeats line 2"),
        (NODES + "n1,64000,262144,8,V100\n", TRACE, r"cluster.csv:3: sn 'n1' repeats line 2"),
        (
            "gpu,cpu_milli,memory_mib,model,sn\n2,1000,1000,P100\n",
            TRACE,
            r"cluster.csv:2: column 'sn'",
        ),
        (
            NODES,
            "submit_time,duration,gang_size,job_id\n0,100,1\n",
            r"trace.csv:2: column 'job_id'",
        ),
        (
            NODES,
            "job_id,submit_time,duration,gang_size,gpu_milli\na,0,100,1,0\n",
            r"trace.csv:2: column 'gpu_milli'",
        ),
        ("sn,cpu_milli,memory_mib,gpu,model\n", TRACE, r"cluster.csv: no GPU in the cluster"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,0,\n", TRACE, r"cluster.csv: no GPU"),
        (
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1000,1024,64,512\n",
            TRACE,
            r"cluster.csv:2: 1000 nodes of 1024 GPUs: more than 1000000 GPUs in all",
        ),
    ],
    ids=[
        "dup-job_id",
        "dup-sn",
        "short-row-sn",
        "short-row-job_id",
        "gpu_milli-0",
        "no-nodes",
        "zero-gpus",
        "over-1M-gpus",
    ],
)
def test_bad_inputs_are_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: str, trace: str, says: str
) -> None:
    assert _simulate(tmp_path, cluster=cluster, trace=trace) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gangops simulate: "), err
    assert re.search(says, err), err


def test_generate_on_a_cluster_without_gpus_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = tmp_path / "cluster.csv"
    c.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,0,\n", encoding="utf-8")
    code = main(["simulate", "--no-progress", "--cluster", str(c), "--generate", "5"])
    assert code == 1
    assert "no GPU in the cluster" in capsys.readouterr().err


def test_a_policy_that_cannot_be_built_is_a_policy_error(tmp_path: Path) -> None:
    """The compiled policy holds at most 1,000,000 GPUs; its ValueError was a traceback."""
    exp = Experiment(tmp_path / "c.csv", tmp_path / "t.csv")
    with pytest.raises(PolicyError, match="no policy for a cluster of 1024000 GPUs"):
        policy_doc(exp, 1_024_000)
    assert policy_doc(exp, 8)["cluster"]["capacity"]["gpu"] == 8


def _ctrl_c_in(monkeypatch: pytest.MonkeyPatch, scheduler: str) -> None:
    """A Ctrl-C as `scheduler` is simulated."""
    import controller.sim.run as sim_run

    real = sim_run.simulate

    def simulate(jobs, sched, *a, **kw):  # type: ignore[no-untyped-def]
        if sched.name == scheduler:
            raise KeyboardInterrupt
        return real(jobs, sched, *a, **kw)

    monkeypatch.setattr(sim_run, "simulate", simulate)


def test_ctrl_c_shows_the_schedulers_that_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Noticed and left last stop: a Ctrl-C in the third of three schedulers lost the
    two that had finished. They are printed, the rest named, exit 130."""
    _ctrl_c_in(monkeypatch, "random")
    report = tmp_path / "report"
    code = _simulate(tmp_path, "--scheduler", "gangops", "bestfit", "random", "fifo-greedy",
                     "--report", str(report))  # fmt: skip
    assert code == 130
    out, err = capsys.readouterr()
    rows = [line.split()[0] for line in out.splitlines()[2:]]
    assert out.startswith("departures: ") and rows == ["gangops", "bestfit"]
    assert "interrupted; not finished: random, fifo-greedy (nothing written)" in err
    assert not (report / "report.json").exists()


def test_ctrl_c_in_a_generated_run_is_headed_and_names_the_trace_it_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: with --generate the trace is written before the run, and
    the Ctrl-C said "nothing written" beside it; the table came without its heading."""
    _ctrl_c_in(monkeypatch, "random")
    c, saved = tmp_path / "cluster.csv", tmp_path / "generated.csv"
    c.write_text(NODES, encoding="utf-8")
    code = main(["simulate", "--no-progress", "--cluster", str(c), "--generate", "20",
                 "--scheduler", "gangops", "random", "--save-trace", str(saved)])  # fmt: skip
    assert code == 130
    out, err = capsys.readouterr()
    assert out.startswith("departures: ") and "generated (20 jobs" in out
    assert f"(the generated trace is in {saved}, nothing else written)" in err
    assert saved.exists()
