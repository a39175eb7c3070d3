"""The benchmarks' CPU meter reads the right fields of /proc (a wrong index would
print plausible nonsense beside every figure of the gang benchmark)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.perf.cpu import CpuMeter, machine_busy, process_cpu

_SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"


def test_process_cpu_matches_the_process_own_clock() -> None:
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    mine, clock = process_cpu(os.getpid()), time.process_time()
    assert mine is not None
    assert abs(mine - clock) < 0.05  # /proc counts in clock ticks (10 ms)


def test_a_phase_counts_a_child_that_spins_and_the_machine_with_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", _SPIN + "time.sleep(60)\n"])
    try:
        meter = CpuMeter({"child": child.pid})
        with meter.phase("spin"):
            deadline = time.monotonic() + 30
            while (process_cpu(child.pid) or 0.0) < 0.9 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        child.kill()
        child.wait(30)
    (phase,) = meter.phases
    assert phase.name == "spin"
    assert phase.cpu_s["child"] >= 0.5  # its start-up (well under 0.4 s) may fall before
    assert phase.machine_s >= phase.cpu_s["child"] - 0.05  # the machine saw it too
    assert phase.wall_s >= phase.cpu_s["child"] / (os.cpu_count() or 1)
    assert "child" in phase.line() and "bench" in phase.cpu_s


def test_a_process_that_has_exited_reads_as_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert process_cpu(child.pid) is None
    assert machine_busy() > 0
