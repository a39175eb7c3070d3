"""Fixtures for the agent's unit tests: a settable clock and a tiny recording."""

from __future__ import annotations

from pathlib import Path

import pytest


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


GIB = 1024**3


def write_recording(d: Path, rows: dict[str, tuple[float, float]]) -> Path:
    """Constant series per container: (utilisation %, memory bytes), 3 samples a minute apart."""
    duty = ["container,timestamp,value"]
    mem = ["container,timestamp,value"]
    for c, (util, used) in rows.items():
        for i in range(3):
            duty.append(f"{c},{1000 + 60 * i}.0,{util}")
            mem.append(f"{c},{1000 + 60 * i}.0,{used}")
    d.mkdir(parents=True, exist_ok=True)
    (d / "pod_gpu_duty_cycle.csv").write_text("\n".join(duty) + "\n")
    (d / "pod_gpu_memory_used_bytes.csv").write_text("\n".join(mem) + "\n")
    return d


@pytest.fixture
def recording_dir(tmp_path: Path) -> Path:
    # sorted container ids: GPU 0 plays "aaa", GPU 1 "bbb", GPU 2 "ccc"
    return write_recording(
        tmp_path / "rec",
        {"bbb": (70.0, 20 * GIB), "aaa": (40.0, 10 * GIB), "ccc": (5.0, 1 * GIB)},
    )
