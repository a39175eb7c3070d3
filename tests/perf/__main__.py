"""`make bench`: run every benchmark, print the figures, fail on a missed threshold
or a benchmark that crashed (reported, and the others still run).

Usage: python -m tests.perf [NAME ...]
(names: policy, scheduler, devcluster, reconciler, gang, sim, variants, agent,
prometheus, telemetry, quota, alerts, scale, step, messages; default: all)
"""

from __future__ import annotations

import sys
import traceback

from tests.perf import (
    agent,
    alerts,
    devcluster,
    gang,
    messages,
    policy,
    prometheus,
    quota,
    reconciler,
    scale,
    scheduler,
    sim,
    step,
    variants,
)
from tests.perf import telemetry as telemetry_bench
from tests.perf.harness import Result, print_table

BENCHMARKS = {
    "policy": policy.run,
    "scheduler": scheduler.run,
    "devcluster": devcluster.run,
    "reconciler": reconciler.run,
    "gang": gang.run,
    "sim": sim.run,
    "variants": variants.run,
    "agent": agent.run,
    "prometheus": prometheus.run,
    "telemetry": telemetry_bench.run,
    "quota": quota.run,
    "alerts": alerts.run,
    "scale": scale.run,
    "step": step.run,
    "messages": messages.run,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    results: list[Result] = []
    crashed: list[str] = []
    for name in names:
        print(f"== {name}", flush=True)
        try:
            results += BENCHMARKS[name]()
        except Exception:  # one broken benchmark must not lose the others' figures
            traceback.print_exc()
            print(f"{name}: crashed (above); the other benchmarks go on", flush=True)
            crashed.append(name)
    print_table(results)
    failed = [r for r in results if not r.ok]
    if failed:
        print(f"{len(failed)} benchmark(s) missed their threshold")
    if crashed:
        print(f"{len(crashed)} benchmark(s) crashed: {', '.join(crashed)}")
    return 1 if failed or crashed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
