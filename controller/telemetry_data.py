"""Recorded GPU telemetry, per container: the format of `../shared/telemetry/genai2026/`
(`pod_gpu_duty_cycle.csv`, utilisation in percent, and `pod_gpu_memory_used_bytes.csv`,
both `container,timestamp,value`). Read by the node agent's replayed GPUs
(`agent.replay`) and the simulator's replayed jobs (`sim.telemetry`), so it lives
below both wings. I/O only: a directory in, arrays of samples out.
"""

from __future__ import annotations

import bisect
import csv
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DUTY_FILE", "MEMORY_FILE", "Recording", "Series", "load_recording"]

DUTY_FILE = "pod_gpu_duty_cycle.csv"
MEMORY_FILE = "pod_gpu_memory_used_bytes.csv"


@dataclass(frozen=True)
class Series:
    """One container's samples: offsets from its first timestamp (s), and values
    (arrays of doubles: a day of 60 containers is 1.4 MB, not 10 as float objects)."""

    offsets: array[float]
    values: array[float]

    @property
    def duration(self) -> float:
        if len(self.offsets) < 2:
            return 60.0
        # one more step after the last sample, so a loop does not repeat it twice
        return self.offsets[-1] + (self.offsets[-1] - self.offsets[-2])

    def at(self, t: float) -> float:
        """The value recorded at `t` seconds into the series (looped), held until the
        next sample."""
        t %= self.duration
        i = bisect.bisect_right(self.offsets, t) - 1
        return self.values[max(i, 0)]


@dataclass(frozen=True)
class Recording:
    """Per container: utilisation (%) and memory used (bytes)."""

    containers: tuple[str, ...]
    duty: dict[str, Series]
    memory: dict[str, Series]


def _read_series(path: Path) -> dict[str, Series]:
    rows: dict[str, list[tuple[float, float]]] = {}
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["container", "timestamp", "value"]:
            raise ValueError(f"{path}: expected the header container,timestamp,value")
        for line, row in enumerate(reader, start=2):
            try:
                rows.setdefault(row[0], []).append((float(row[1]), float(row[2])))
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{line}: expected container,timestamp,value") from None
    out: dict[str, Series] = {}
    for container, samples in rows.items():
        samples.sort()
        t0 = samples[0][0]
        out[container] = Series(
            array("d", (t - t0 for t, _ in samples)), array("d", (v for _, v in samples))
        )
    return out


def load_recording(directory: str | Path) -> Recording:
    """Read a telemetry directory; ValueError naming the file and line if malformed."""
    d = Path(directory)
    for name in (DUTY_FILE, MEMORY_FILE):
        if not (d / name).is_file():
            raise ValueError(
                f"{d}: no {name} (a replay directory holds {DUTY_FILE} and {MEMORY_FILE})"
            )
    duty = _read_series(d / DUTY_FILE)
    memory = _read_series(d / MEMORY_FILE)
    containers = tuple(sorted(set(duty) | set(memory)))
    if not containers:
        raise ValueError(f"{d}: the replay files hold no samples")
    return Recording(containers, duty, memory)


def load_events(path: Path, error: type[ValueError], *, hint: str = "") -> list[tuple[int, Any]]:
    """The `events:` list of a scripted-faults file (the agent's `--scenario`, the
    simulator's `--faults`), each entry with its line; `error` with file:line when the
    file cannot be read, is not YAML, or holds no such list (`hint` says where the format
    is documented)."""
    from ruamel.yaml import YAML  # only for these files: the node agent stays small without

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from None
    try:
        doc = YAML(typ="rt").load(text)
    except Exception as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise error(f"{where}: not YAML: {getattr(e, 'problem', e)}") from None
    items = doc.get("events") if isinstance(doc, Mapping) else None
    if not isinstance(items, list):
        raise error(f"{path}:1: expected a mapping with a list `events`{hint}")
    lines = getattr(items, "lc", None)
    return [(lines.item(i)[0] + 1 if lines else 1, raw) for i, raw in enumerate(items)]
