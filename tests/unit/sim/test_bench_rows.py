"""The simulator's speed rows in `make bench` (tests/perf/sim.py) time a run that
scheduled its jobs: a gangops that turns every job away, or starts none, is fast and
must fail the row, not pass it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from controller.scheduler.types import Gang
from controller.sim import schedulers
from controller.sim.schedulers import GangopsScheduler, Outcome
from controller.sim.traces import TRACES_ENV, trace_path, traces_dir
from tests.perf import sim as bench

OPENB_NODES = trace_path("openb/openb_node_list_gpu_node.csv")
OPENB_PODS = trace_path("openb/openb_pod_list_default.csv")


@pytest.mark.parametrize(
    ("never_started", "rejected", "ok"),
    [(0, 0, True), (3, 0, False), (0, 8152, False), (1, 1, False)],
)
def test_timed_row_fails_when_the_run_did_not_schedule(
    capsys: pytest.CaptureFixture[str], never_started: int, rejected: int, ok: bool
) -> None:
    f = {"never_started": never_started, "rejected": rejected, "utilization": 0.0}
    row = bench.timed_row("sim: row (CPU s)", 1.5, 10.0, f)
    assert row.ok is ok and row.name == "sim: row (CPU s)"
    assert row.value == (1.5 if ok else math.inf)
    if not ok:
        assert "did not schedule its jobs" in capsys.readouterr().out


def _slice(tmp_path: Path, source: Path, name: str, rows: int) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines()
    out = tmp_path / name
    out.write_text("\n".join(lines[: rows + 1]) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize("broken", [False, True], ids=["gangops", "gangops-rejects-all"])
def test_speed_rows_on_an_openb_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    if OPENB_NODES is None or OPENB_PODS is None:
        pytest.skip(f"openb trace not found under {traces_dir()} (docs/simulator.md, {TRACES_ENV})")
    nodes = _slice(tmp_path, OPENB_NODES, "nodes.csv", 40)
    pods = _slice(tmp_path, OPENB_PODS, "pods.csv", 300)
    if broken:

        def rejects_all(
            self: GangopsScheduler, now: float, pending: Sequence[Gang], recent: int
        ) -> Outcome:
            return Outcome(rejected=[g.id for g in pending])

        monkeypatch.setattr(schedulers.GangopsScheduler, "cycle", rejects_all)
    full = bench._full_trace(nodes, pods)
    overloaded = bench._overloaded(nodes, pods)
    assert (full.ok, overloaded.ok) == (not broken, not broken), (full, overloaded)
