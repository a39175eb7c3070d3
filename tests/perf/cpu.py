"""Where a benchmark phase's CPU went: per process, and the whole machine's.

A phase on the local control plane is only as fast as the two cores allow, so
its rate alone does not say who held it back. `CpuMeter` reads each named
process's user+system CPU time (`/proc/PID/stat`) and the machine's busy time
(`/proc/stat`) before and after a phase and keeps the differences: core-seconds
per process, what the rest of the machine used (other sessions' work), and the
wall time. Linux only, as the local control plane is.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CpuMeter", "Phase", "machine_busy", "process_cpu", "running_cpu"]

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float | None:
    """User+system CPU seconds of `pid` (its threads included), or None once it has
    exited."""
    try:
        return running_cpu(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None


def running_cpu(pid: int) -> float:
    """User+system CPU seconds of `pid`, a process that must still be running (the
    benchmarks' controller, agent): OSError if it has exited."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    # The command name (field 2) may hold spaces: the fields after it start past ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def machine_busy() -> float:
    """Core-seconds the whole machine has spent busy since boot (all but idle and
    iowait, summed over cores)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user time
    return (sum(ticks[:8]) - idle) / _TICK


@dataclass
class Phase:
    """One measured phase: wall seconds, core-seconds per process, and the machine's."""

    name: str
    wall_s: float
    cpu_s: dict[str, float]
    machine_s: float

    @property
    def ours_s(self) -> float:
        return sum(self.cpu_s.values())

    @property
    def others_s(self) -> float:
        """What processes not named used meanwhile (other work on the machine)."""
        return max(0.0, self.machine_s - self.ours_s)

    def line(self) -> str:
        parts = ", ".join(
            f"{n} {s:.2f}" for n, s in sorted(self.cpu_s.items(), key=lambda i: -i[1])
        )
        return (
            f"{self.name}: {self.wall_s:.2f} s wall, {self.ours_s:.2f} core-s in the named "
            f"processes ({parts}), {self.others_s:.2f} core-s elsewhere on the machine, "
            f"{self.machine_s / self.wall_s if self.wall_s else 0:.2f} of {os.cpu_count()} "
            "cores busy"
        )


@dataclass
class CpuMeter:
    """Measures phases over the processes in `pids` (name -> pid; this process is
    always included, as "bench")."""

    pids: dict[str, int] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)

    def _read(self, pids: Mapping[str, int]) -> dict[str, float]:
        out = {n: c for n, p in pids.items() if (c := process_cpu(p)) is not None}
        out["bench"] = time.process_time()
        return out

    @contextlib.contextmanager
    def phase(self, name: str, extra: Mapping[str, int] | None = None) -> Iterator[None]:
        """Measure the block as phase `name`, over `pids` and `extra` (processes that
        live only for this phase)."""
        pids = {**self.pids, **(extra or {})}
        before, busy, t0 = self._read(pids), machine_busy(), time.monotonic()
        yield
        after, busy2, t1 = self._read(pids), machine_busy(), time.monotonic()
        cpu = {n: after[n] - before[n] for n in after if n in before}
        self.phases.append(Phase(name, t1 - t0, cpu, busy2 - busy))
