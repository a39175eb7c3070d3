"""What the simulator reports, checked against figures worked out by hand: the
percentiles, the per-seed counts, the multi-tenant verdict, the tenants a job is
given, and the inputs `gangops simulate` records and refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import PodShape
from controller.sim import run as sim_run
from controller.sim.engine import RunResult
from controller.sim.report import figures, percentile
from controller.sim.run import Experiment, SchedulerRun
from controller.sim.tenants import assign_tenants
from controller.sim.traces import TraceJob
from tests.perf.sim import verdict

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        (list(range(1, 101)), 99, 99),  # was 100, the largest
        (list(range(1, 101)), 95, 95),  # was 96
        (list(range(1, 11)), 50, 5),  # was 6
        ([0, 100], 50, 0),  # was 100
        (list(range(1, 1001)), 99.9, 999),
        (list(range(1, 101)), 100, 100),
        (list(range(1, 101)), 0, 1),
        ([7], 99, 7),
        ([], 50, 0),
    ],
)
def test_percentiles_are_nearest_rank(values: list[int], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_dropped_is_a_mean_over_the_seeds_as_the_allocation_is() -> None:
    runs = [
        RunResult("x", 8000, 10, dropped=d, allocation_at_full=a) for d, a in ((3, 90.0), (4, 92.0))
    ]
    f = figures(SchedulerRun("x", runs))
    assert (f["dropped"], f["dropped_per_seed"], f["gpu_allocation_at_full_arrival"]) == (
        3.5,
        [3, 4],
        91.0,
    )


def _f(**kw: Any) -> dict[str, Any]:
    base = {"utilization": 0.5, "utilization_arrivals": 0.5, "queueing_delay_p50": 1.0,
            "queueing_delay_p99": 2.0, "rejected": 0, "never_started": 0}  # fmt: skip
    return {**base, **kw}


def test_the_verdict_does_not_hold_while_jobs_never_started() -> None:
    # delays count started jobs only: a starved queue read as shorter delays
    starved = verdict(_f(utilization=0.9, never_started=900), _f())
    assert "NOT MET" in starved and "never started" in starved
    assert "HOLDS" in verdict(_f(utilization=0.9), _f())


def test_a_job_naming_its_project_gets_its_default_tier_and_a_user() -> None:
    exp = Experiment(ROOT / "clusters/local/cluster.yaml", Path("-"), policies=ROOT / "policies")
    policy = SchedulingPolicy.from_dict(sim_run.policy_doc(exp, 112))
    pod = PodShape(gpus=1)
    jobs = [
        TraceJob("x", 0.0, 100.0, 1, pod, project="research"),
        TraceJob("y", 1.0, 100.0, 1, pod, project="research", tier="normal", user="frank"),
        TraceJob("z", 2.0, 100.0, 1, pod, project="nowhere"),
    ]
    x, y, z = assign_tenants(jobs, policy, seed=1)
    research = policy.projects["research"]
    assert x.tier == research.default_tier and x.user
    assert y == jobs[1] and z == jobs[2]  # given tenants kept; an unknown project the core refuses


def test_a_variant_run_with_departures_arrives_in_time_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # multigpu50 appends its copies; --load re-timed to the span first to last job
    seen: list[list[TraceJob]] = []
    monkeypatch.setattr(
        sim_run, "run_jobs", lambda exp, nodes, jobs, *a, **k: seen.append(jobs) or []
    )
    trace = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time"]  # fmt: skip
    rows += [f"p{i},1000,1024,{8 if i % 10 == 0 else 1},1000,,LS,Running,{i * 10},{i * 10 + 500},"
             for i in range(100)]  # fmt: skip
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cluster = ROOT / "clusters/local/cluster.yaml"
    sim_run.run(Experiment(cluster, trace, variant="multigpu50", load=1.0, schedulers=("bestfit",)))
    submits = [j.submit for j in seen[0]]
    assert len(submits) > 100 and submits == sorted(submits)
    sim_run.run(Experiment(cluster, trace, variant="multigpu50", arrivals_only=True, order="trace",
                           schedulers=("bestfit",)))  # fmt: skip
    assert [j.submit for j in seen[1]][:100] == sorted(j.submit for j in seen[1][:100])
    assert [j.submit for j in seen[1]] != sorted(j.submit for j in seen[1])  # as published


NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,V100\n"
TRACE = "job_id,submit_time,duration,gang_size\na,0,100,1\nb,50,100,1\n"


def _simulate(tmp_path: Path, *flags: str) -> int:
    c, t = tmp_path / "cluster.csv", tmp_path / "trace.csv"
    c.write_text(NODES, encoding="utf-8")
    t.write_text(TRACE, encoding="utf-8")
    args = ["simulate", "--no-progress", "--cluster", str(c), "--trace", str(t)]
    return main([*args, "--scheduler", "gangops", *flags])


@pytest.mark.parametrize(
    "flags", [["--repeat", "3"], ["--repeat", "3", "--load", "1", "--arrivals-only"]]
)
def test_repeat_without_a_load_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    # it was ignored: the figures were one pass's
    assert _simulate(tmp_path, *flags) == 2
    assert "--repeat K replays the trace with departures at a --load" in capsys.readouterr().err


def test_the_report_records_the_settings_that_ran(tmp_path: Path) -> None:
    assert (
        _simulate(
            tmp_path,
            "--load",
            "0.5",
            "--repeat",
            "2",
            "--tick",
            "5",
            "--report",
            str(tmp_path / "r"),
        )
        == 0
    )
    inputs = json.loads((tmp_path / "r" / "report.json").read_text())["_inputs"]
    assert {k: inputs["settings"][k] for k in ("load", "repeat", "tick", "seed")} == {
        "load": 0.5, "repeat": 2, "tick": 5.0, "seed": 42,
    }  # fmt: skip
