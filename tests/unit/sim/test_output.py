"""The report's outputs: report.json with the issue's keys, the figures as
readable PNGs (opened, measured, not blank), the report without matplotlib,
and `gangops simulate` end to end on a generated workload."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from controller.cli import main

_SIMULATE = ["simulate", "--cluster", "clusters/local/cluster.yaml", "--policies", "policies"]


def _not_blank(path: Path) -> tuple[int, int]:
    """Open the PNG; check that a real picture is drawn on it; its size in pixels."""
    image = pytest.importorskip("PIL.Image", reason="the figures need matplotlib (pillow)")
    with image.open(path) as img:
        assert img.format == "PNG"
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20)
    assert colours is not None
    pixels = rgb.width * rgb.height
    background = max(colours)[0]
    assert len(colours) >= 50, f"{path.name}: {len(colours)} colours"
    assert pixels - background > pixels // 20, f"{path.name}: almost all background"
    return rgb.width, rgb.height


def test_simulate_generated_workload_writes_report_and_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need matplotlib: gangops[plot]")
    out = tmp_path / "report"
    code = main(
        [
            *_SIMULATE, "--generate", "120", "--scheduler", "gangops", "static", "fifo-greedy",
            "--report", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "gangops" in captured.out and "static" in captured.out
    report = json.loads((out / "report.json").read_text())
    for name in ("gangops", "static", "fifo-greedy"):
        for key in ("utilization", "queueing_delay_p50", "queueing_delay_p95",
                    "queueing_delay_p99", "fragmentation", "preemptions"):  # fmt: skip
            assert key in report[name]
    assert report["gangops"]["gang_timeouts"] == 0
    assert report["gangops"]["partial_gang_gpu_seconds"] == 0
    sizes = {p.name: _not_blank(p) for p in out.glob("*.png")}
    assert sizes == {
        "utilization.png": (900, 500),
        "queueing_delay_cdf.png": (900, 500),
        "project_share.png": (900, 500),
        "comparison.png": (1200, 500),
    }
    for png in sizes:
        assert f"wrote {out / png}" in captured.out


def test_arrivals_only_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the figures need matplotlib: gangops[plot]")
    out = tmp_path / "report"
    code = main(
        [
            *_SIMULATE, "--generate", "150", "--arrivals-only", "--seeds", "2",
            "--scheduler", "gangops", "bestfit", "--report", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out.startswith("arrivals-only: ")
    sizes = {p.name: _not_blank(p) for p in out.glob("*.png")}
    assert sizes == {"allocation.png": (900, 500), "comparison.png": (1200, 500)}


def test_without_matplotlib_the_report_is_written_and_one_line_says_why_no_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    out = tmp_path / "report"
    code = main([*_SIMULATE, "--generate", "40", "--scheduler", "gangops", "--report", str(out),
                 "--no-progress"])  # fmt: skip
    assert code == 0
    assert [p.name for p in out.iterdir()] == ["report.json"]
    assert capsys.readouterr().err == (
        "gangops simulate: no figures: the figures need matplotlib:"
        " pip install 'gangops[plot]' (or make venv)\n"
    )


def test_progress_lines_when_stderr_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*_SIMULATE, "--generate", "40", "--scheduler", "gangops", "static"])
    assert code == 0
    err = capsys.readouterr().err
    assert err == "simulate gangops: 100% (40/40 jobs)\nsimulate static: 100% (40/40 jobs)\n"


def test_missing_trace_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANGOPS_TRACES", str(tmp_path))
    code = main(["simulate", "--cluster", "clusters/local/cluster.yaml", "--trace", "nope.csv"])
    assert code == 1
    err = capsys.readouterr().err
    assert "not found" in err and "GANGOPS_TRACES" in err
