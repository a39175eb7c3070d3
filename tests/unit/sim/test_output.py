"""The report's outputs: valid PNGs, report.json with the issue's keys, and
`gangops simulate` end to end on a generated workload."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from controller.cli import main
from controller.sim.plot import line_chart


def _check_png(data: bytes) -> tuple[int, int]:
    """Walk the chunks, checking every CRC and the image data size."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    kinds = []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        kinds.append(kind)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
            assert body[8:10] == b"\x08\x02"  # 8-bit RGB
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    width, height = size
    assert len(zlib.decompress(idat)) == height * (1 + 3 * width)
    return width, height


def test_line_chart_is_a_valid_png() -> None:
    png = line_chart(
        [("gangops", [(0, 0), (1, 50), (2, 95)]), ("static", [(0, 0), (2, 40)])],
        title="UTILISATION",
        x_label="HOURS",
        y_label="%",
    )
    assert _check_png(png) == (720, 420)


def test_simulate_generated_workload_writes_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    code = main(
        [
            "simulate", "--cluster", "clusters/local/cluster.yaml", "--policies", "policies",
            "--generate", "120", "--scheduler", "gangops", "static", "fifo-greedy",
            "--report", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "gangops" in printed and "static" in printed
    report = json.loads((out / "report.json").read_text())
    for name in ("gangops", "static", "fifo-greedy"):
        for key in ("utilization", "queueing_delay_p50", "queueing_delay_p95",
                    "queueing_delay_p99", "fragmentation", "preemptions"):  # fmt: skip
            assert key in report[name]
    assert report["gangops"]["gang_timeouts"] == 0
    assert report["gangops"]["partial_gang_gpu_seconds"] == 0
    for png in ("utilization.png", "queueing_delay_cdf.png"):
        _check_png((out / png).read_bytes())


def test_progress_lines_when_stderr_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate", "--cluster", "clusters/local/cluster.yaml", "--policies", "policies",
            "--generate", "40", "--scheduler", "gangops", "static",
        ]
    )  # fmt: skip
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
