"""Checks on the public traces (../shared/traces, or $GANGOPS_TRACES), on
slices made at run time so they stay fast; skipped, saying why, when absent.
The full-size anchors (FGD's figures) are in `make bench` (tests/perf/sim.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.sim.run import Experiment, run
from controller.sim.traces import TRACES_ENV, trace_path, traces_dir

OPENB_NODES = trace_path("openb/openb_node_list_gpu_node.csv")
OPENB_PODS = trace_path("openb/openb_pod_list_default.csv")
TIRESIAS = trace_path("tiresias/60_job.csv")
TIRESIAS_CLUSTER = trace_path("tiresias/n32g4.csv")


def _need(*paths: Path | None) -> None:
    if not all(paths):
        reason = (
            f"public traces not found under {traces_dir()}: see docs/simulator.md for the "
            f"sources, or set {TRACES_ENV}"
        )
        print(reason)
        pytest.skip(reason)


def _slice(tmp_path: Path, source: Path, name: str, rows: int) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines()
    out = tmp_path / name
    out.write_text("\n".join(lines[: rows + 1]) + "\n", encoding="utf-8")
    return out


def test_openb_slice_arrivals_only_gangops_beats_random(tmp_path: Path) -> None:
    _need(OPENB_NODES, OPENB_PODS)
    assert OPENB_NODES is not None and OPENB_PODS is not None
    nodes = _slice(tmp_path, OPENB_NODES, "nodes.csv", 150)
    pods = _slice(tmp_path, OPENB_PODS, "pods.csv", 1000)
    runs, _ = run(
        Experiment(nodes, pods, schedulers=("gangops", "random"), arrivals_only=True, seeds=1)
    )
    alloc = {r.name: r.runs[0].allocation_at_full for r in runs}
    assert alloc["gangops"] is not None and alloc["random"] is not None
    assert alloc["gangops"] > alloc["random"]


def test_tiresias_gangops_never_holds_partial_gangs() -> None:
    _need(TIRESIAS, TIRESIAS_CLUSTER)
    assert TIRESIAS is not None and TIRESIAS_CLUSTER is not None
    runs, _ = run(
        Experiment(TIRESIAS_CLUSTER, TIRESIAS, schedulers=("gangops", "fifo-greedy"), load=4.0)
    )
    by = {r.name: r.runs[0] for r in runs}
    assert by["gangops"].partial_gpu_seconds == 0 and not by["gangops"].deadlocked
    assert by["gangops"].never_started == 0
    assert by["fifo-greedy"].partial_gpu_seconds > 0
