"""Telemetry and faults in the simulator: recorded series attached to trace jobs, the
faults file (errors at file:line), the simulated device plugin, the report's fields,
and `gangops simulate --telemetry --faults` end to end: with telemetry no job lands
on a GPU out of service, without it some do."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from controller.cli import main
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import Hints
from controller.scheduler.types import Gang, JobId, Node, Placement, PodPlacement, PodShape, Running
from controller.sim.engine import RunResult
from controller.sim.faults import CLEAN_PERIOD_S, Devices, FaultError, load_faults
from controller.sim.report import figures
from controller.sim.run import SchedulerRun
from controller.sim.telemetry import Feed, Replayed
from controller.sim.tenants import open_policy_doc
from controller.telemetry_data import DUTY_FILE, MEMORY_FILE, load_recording


def _recording(d: Path) -> Path:
    """Container `busy` at 100 % for a minute then 0 for a minute, looped; `idle` at 0."""
    duty = ["container,timestamp,value"]
    mem = ["container,timestamp,value"]
    for k in range(10):
        duty.append(f"busy,{1000 + 60 * k},{100.0 if k % 2 == 0 else 0.0}")
        duty.append(f"idle,{1000 + 60 * k},0.0")
        mem.append(f"busy,{1000 + 60 * k},1048576")
    d.mkdir(parents=True, exist_ok=True)
    (d / DUTY_FILE).write_text("\n".join(duty) + "\n")
    (d / MEMORY_FILE).write_text("\n".join(mem) + "\n")
    return d


# -- attachment


def test_each_job_gets_the_same_series_every_time(tmp_path: Path) -> None:
    rec = load_recording(_recording(tmp_path / "t"))
    a, b = Replayed(rec), Replayed(rec)
    for job in ("j-1", "j-2", "ns/job-3"):
        assert a.attach(job, 0) == b.attach(job, 0)
        assert a.usage(job, 0, 300.0) == b.usage(job, 0, 300.0)
    # a gang's pods play consecutive containers
    c0, _ = a.attach("j-1", 0)
    c1, _ = a.attach("j-1", 1)
    assert c1 == (c0 + 1) % len(a.containers)


def test_utilisation_windows_follow_the_recorded_series_at_recorded_speed(
    tmp_path: Path,
) -> None:
    rep = Replayed(load_recording(_recording(tmp_path / "t")))
    job = next(j for j in (f"j-{i}" for i in range(100)) if rep.attach(j, 0)[0] == 0)
    assert rep.containers[0] == "busy"
    _, offset = rep.attach(job, 0)
    # 100 % half of the time: a window of whole periods averages 50 %
    elapsed = 1200.0 - offset % 120.0
    u = rep.usage(job, 0, elapsed)
    assert u.avg_5m == pytest.approx(100.0 * 2 / 5) or u.avg_5m == pytest.approx(100.0 * 3 / 5)
    assert u.avg_15m == pytest.approx(50.0, abs=100.0 / 15)
    # idle half of the time (under 5 %), over ten whole periods
    assert rep.idle_seconds(job, 0, 0.0, 1200.0) == pytest.approx(600.0)
    idle = next(j for j in (f"j-{i}" for i in range(100)) if rep.attach(j, 0)[0] == 1)
    assert rep.idle_seconds(idle, 0, 0.0, 1000.0) == pytest.approx(1000.0)
    assert rep.usage(idle, 0, 600.0).avg_5m == 0.0


def test_the_feed_gives_utilisation_only_for_jobs_the_telemetry_has_seen(
    tmp_path: Path,
) -> None:
    rep = Replayed(load_recording(_recording(tmp_path / "t")))
    policy = SchedulingPolicy.from_dict(open_policy_doc(16))
    feed = Feed(policy, replay=rep)
    snap = Snapshot([Node("n", 8)], levels=())
    old = Gang(JobId("old"), "default", "u", "", 0, 0.0, 1)
    new = Gang(JobId("new"), "default", "u", "", 0, 0.0, 1)
    snap.assume(Running(old, Placement((PodPlacement("n", (0,)),)), 0.0))
    snap.assume(Running(new, Placement((PodPlacement("n", (1,)),)), 3500.0))
    hints = feed.hints(3600.0, snap, [])
    assert isinstance(hints, Hints)
    # herd protection: `new` started within the window before the reading
    assert set(hints.utilisation) == {JobId("old")}


# -- faults


def _faults(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "faults.yaml"
    p.write_text(text)
    return p


def test_faults_file_schedule(tmp_path: Path) -> None:
    f = load_faults(
        _faults(
            tmp_path,
            "events:\n"
            "  - {at: 10, node: a, gpu: 3, kind: xid, xid: 79}\n"
            "  - {at: 20, node: a, gpu: 1, kind: xid, xid: 13}\n"
            "  - {at: 30, node: b, gpu: 0, kind: xid, xid: 48}\n"
            "  - {at: 40, node: b, gpu: 5, kind: lost}\n"
            "  - {at: 100, node: b, gpu: 5, kind: reset, seconds: 5}\n"
            "  - {at: 50, node: c, gpu: 2, kind: hang, seconds: 10}\n",
        )
    )
    assert f.at(5) == {}
    assert f.at(10) == {"a": {3}}
    assert f.at(25) == {"a": {3}}  # an application XID leaves the GPU in service
    assert f.at(55) == {"a": {3}, "b": {0, 5}, "c": {2}}
    assert f.at(61) == {"a": {3}, "b": {0, 5}}
    assert f.at(103) == {"a": {3}, "b": {0, 5}}  # resetting
    assert f.at(106) == {"a": {3}, "b": {0}}
    assert f.at(30 + CLEAN_PERIOD_S) == {"a": {3}}  # a reset-class XID clears
    assert f.at(1e9) == {"a": {3}}  # off the bus: out for good
    assert 10.0 in f.changes and 105.0 in f.changes


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("events:\n  - {at: 1, node: a, gpu: 0, kind: melt}\n", 2, "kind must be one of"),
        ("events:\n  - {at: 1, node: a, gpu: 0, kind: lost}\n  - {at: 1, gpu: 0, kind: lost}\n",
         3, "needs `node: NAME`"),
        ("events:\n\n  - {at: 1, node: a, gpu: -1, kind: lost}\n", 3, "gpu: INDEX"),
        ("events:\n  - {at: 1, node: a, gpu: 0, kind: xid}\n", 2, "needs `xid: NUMBER`"),
        ("events:\n  - {at: -5, node: a, gpu: 0, kind: lost}\n", 2, "`at` must be"),
        ("events:\n  - {at: 1, node: a, gpu: 0, kind: hang, seconds: 0}\n", 2, "`seconds`"),
        ("events:\n  - {at: 1, node: a, gpu: 0, kind: lost, colour: red}\n", 2, "unknown key"),
        ("events: 3\n", 1, "a list `events`"),
        ("events:\n  - {at: 1, node: a\n", 3, "not YAML"),
    ],
)  # fmt: skip
def test_faults_file_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    p = _faults(tmp_path, text)
    with pytest.raises(FaultError) as e:
        load_faults(p)
    assert str(e.value).startswith(f"{p}:{line}: "), str(e.value)
    assert says in str(e.value)


def test_faults_on_nodes_or_gpus_the_cluster_lacks_name_the_line(tmp_path: Path) -> None:
    p = _faults(tmp_path, "events:\n  - {at: 1, node: a, gpu: 0, kind: lost}\n"
                          "  - {at: 1, node: a, gpu: 8, kind: lost}\n")  # fmt: skip
    f = load_faults(p)
    with pytest.raises(FaultError, match=rf"^{p}:3: node a has 8 GPUs \(0..7\)"):
        f.check([Node("a", 8)])
    with pytest.raises(FaultError, match=rf"^{p}:2: no node 'a' in the cluster"):
        f.check([Node("b", 8)])


def test_the_device_plugin_gives_healthy_gpus_first() -> None:
    d = Devices([Node("a", 4)])
    whole = PodShape(gpus=3)
    bad = {"a": frozenset({0})}
    assert not d.bind("x", whole, [PodPlacement("a", (0, 1, 2))], bad)
    # one GPU left and it is the bad one
    assert d.bind("y", PodShape(gpus=1), [PodPlacement("a", (3,))], bad)
    d.release("x")
    assert not d.bind("z", whole, [PodPlacement("a", (0, 1, 2))], bad)


# -- report


def test_report_carries_the_telemetry_figures() -> None:
    r = RunResult("gangops", 8000, 3)
    r.on_unhealthy = {"a", "b"}
    r.idle_gpu_seconds = 120.0
    r.lost_gpu_seconds = 60.0
    r.lost_busy_gpu_seconds = 25.0
    r.forecast = {"forecast_p90_coverage": 0.9}
    f = figures(SchedulerRun("gangops", [r]))
    assert f["jobs_on_unhealthy_gpus"] == 2
    assert f["idle_gpu_seconds"] == 120.0
    assert f["lost_gpu_seconds"] == 60.0
    assert f["lost_busy_gpu_seconds"] == 25.0
    assert f["forecast_p90_coverage"] == 0.9
    plain = figures(SchedulerRun("bestfit", [RunResult("bestfit", 8000, 3)]))
    assert plain["jobs_on_unhealthy_gpus"] == 0
    assert plain["idle_gpu_seconds"] is None and plain["forecast_p90_coverage"] is None
    assert plain["lost_busy_gpu_seconds"] is None


# -- end to end


def _trace(tmp_path: Path) -> Path:
    rows = ["job_id,submit_time,duration,gang_size,gpus_per_worker"]
    rows += [f"j{i:03d},{10 * i},900,8,8" for i in range(40)]
    p = tmp_path / "trace.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def _simulate(tmp_path: Path, *extra: str) -> dict[str, dict[str, object]]:
    out = tmp_path / f"report{len(extra)}"
    faults = _faults(tmp_path, "events:\n  - {at: 0, node: a100-000, gpu: 3, kind: xid, xid: 79}\n"
                               "  - {at: 0, node: h100-002, gpu: 6, kind: lost}\n")  # fmt: skip
    code = main(
        [
            "simulate", "--cluster", "clusters/local/cluster.yaml", "--trace",
            str(_trace(tmp_path)), "--scheduler", "gangops", "bestfit", "--telemetry",
            str(_recording(tmp_path / "rec")), "--faults", str(faults), "--report", str(out),
            "--no-progress", *extra,
        ]
    )  # fmt: skip
    assert code == 0
    report: dict[str, dict[str, object]] = json.loads((out / "report.json").read_text())
    return report


def test_with_telemetry_no_job_lands_on_a_bad_gpu_and_without_some_do(tmp_path: Path) -> None:
    on = _simulate(tmp_path)
    off = _simulate(tmp_path, "--no-telemetry")
    assert on["gangops"]["jobs_on_unhealthy_gpus"] == 0
    assert isinstance(off["gangops"]["jobs_on_unhealthy_gpus"], int)
    assert off["gangops"]["jobs_on_unhealthy_gpus"] > 0
    assert isinstance(on["bestfit"]["jobs_on_unhealthy_gpus"], int)
    assert on["bestfit"]["jobs_on_unhealthy_gpus"] > 0  # the baselines never see telemetry
    for key in ("idle_gpu_seconds", "lost_gpu_seconds"):
        assert isinstance(on["gangops"][key], float)
    cov = on["gangops"]["forecast_p90_coverage"]
    assert isinstance(cov, float) and 0.0 <= cov <= 1.0
    assert off["gangops"]["forecast_p90_coverage"] is None
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "report0" / "telemetry.png").stat().st_size > 10_000
    assert on["_inputs"]["telemetry"] == {
        "recording": str(tmp_path / "rec"),
        "faults": str(tmp_path / "faults.yaml"),
        "used_by_gangops": True,
    }


def test_friendly_reclamation_loses_less_busy_work(tmp_path: Path) -> None:
    """docs/sim-workloads/reclaim.csv: research borrows the cluster with 1-GPU batch
    jobs; every 3 hours vision, speech and nlp come back for their guarantees and
    borrowed jobs are preempted. Replayed on half busy, half idle containers, the
    same victims' count with telemetry on and off, but with it the victims are the
    idle ones: busy work lost goes down."""
    rec = str(_recording(tmp_path / "rec"))

    def run(*extra: str) -> dict[str, object]:
        out = tmp_path / f"r{len(extra)}"
        code = main(
            ["simulate", "--cluster", "clusters/local/cluster.yaml", "--policies", "policies",
             "--trace", "docs/sim-workloads/reclaim.csv", "--scheduler", "gangops",
             "--telemetry", rec, "--report", str(out), "--no-progress", *extra]
        )  # fmt: skip
        assert code == 0
        figures: dict[str, object] = json.loads((out / "report.json").read_text())["gangops"]
        return figures

    on, off = run(), run("--no-telemetry")
    assert on["preemptions"] == off["preemptions"] and isinstance(on["preemptions"], int)
    assert on["preemptions"] >= 40
    busy_on, busy_off = on["lost_busy_gpu_seconds"], off["lost_busy_gpu_seconds"]
    assert isinstance(busy_on, float) and isinstance(busy_off, float)
    assert busy_on < 0.2 * busy_off


def test_a_bad_faults_file_is_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = _faults(tmp_path, "events:\n  - {at: 0, node: nowhere, gpu: 0, kind: lost}\n")
    code = main(
        ["simulate", "--cluster", "clusters/local/cluster.yaml", "--trace", str(_trace(tmp_path)),
         "--scheduler", "gangops", "--faults", str(faults), "--no-progress"]
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert err.strip() == f"gangops simulate: {faults}:2: no node 'nowhere' in the cluster"
