"""Figures per scheduler: a table for people and report.json.

`figures` reduces a scheduler's runs to the numbers the report carries
(utilisation and fragmentation as shares 0..1, delays in seconds,
`gpu_allocation_at_full_arrival` in percent of capacity, the mean over
seeds). `write_report` writes `report.json` (scheduler name -> figures, plus
`_inputs`); the PNG figures are `plot`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from controller.sim.run import SchedulerRun

__all__ = ["figures", "format_table", "percentile", "write_report"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..100) of `values`; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    # the smallest value with at least q % of the values at or below it: rank
    # ceil(q n / 100), in exact arithmetic (round(x + 0.5) rounded halves to even,
    # one rank too high whenever q n / 100 was odd: p99 of 1..100 was 100)
    rank = max(1, min(len(ordered), math.ceil(Fraction(str(q)) * len(ordered) / 100)))
    return float(ordered[rank - 1])


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def figures(run: SchedulerRun) -> dict[str, Any]:
    """The report's figures for one scheduler."""
    runs = run.runs
    first = runs[0]
    delays = [d for r in runs for d in r.delays]
    jcts = [d for r in runs for d in r.jcts]
    out: dict[str, Any] = {
        "utilization": round(_mean([r.utilization for r in runs]), 4),
        "utilization_arrivals": round(_mean([r.utilization_arrivals for r in runs]), 4),
        "queueing_delay_p50": round(percentile(delays, 50), 1),
        "queueing_delay_p95": round(percentile(delays, 95), 1),
        "queueing_delay_p99": round(percentile(delays, 99), 1),
        "queueing_delay_max": round(max(delays, default=0.0), 1),
        "jct_mean": round(_mean(jcts), 1),
        "jct_p50": round(percentile(jcts, 50), 1),
        "fairness": None if first.fairness is None else round(first.fairness, 4),
        "preemptions": sum(r.preemptions for r in runs),
        "preempted_gpu_seconds": round(sum(r.preempted_gpu_seconds for r in runs), 1),
        "gang_timeouts": sum(r.gang_timeouts for r in runs),
        "partial_gang_gpu_seconds": round(sum(r.partial_gpu_seconds for r in runs), 1),
        "deadlocked": any(r.deadlocked for r in runs),
        "fragmentation": round(_mean([r.fragmentation for r in runs]), 4),
        "jobs": first.jobs,
        "never_started": sum(r.never_started for r in runs),
        "rejected": sum(r.rejected for r in runs),
        "makespan": round(first.makespan, 1),
        "jobs_on_unhealthy_gpus": sum(len(r.on_unhealthy) for r in runs),
        "lost_gpu_seconds": round(sum(r.lost_gpu_seconds for r in runs), 1),
        "idle_gpu_seconds": (
            None
            if first.idle_gpu_seconds is None
            else round(sum(r.idle_gpu_seconds or 0.0 for r in runs), 1)
        ),
        "lost_busy_gpu_seconds": (
            None
            if first.lost_busy_gpu_seconds is None
            else round(sum(r.lost_busy_gpu_seconds or 0.0 for r in runs), 1)
        ),
        "forecast_p90_coverage": (first.forecast or {}).get("forecast_p90_coverage"),
        "forecast": first.forecast,
        "wall_seconds": round(run.wall_seconds, 2),
    }
    full = [r.allocation_at_full for r in runs if r.allocation_at_full is not None]
    if full:
        out["gpu_allocation_at_full_arrival"] = round(_mean(full), 2)
        out["gpu_allocation_at_full_arrival_per_seed"] = [round(v, 2) for v in full]
        # a mean, as the figures beside it are (it was the sum over the seeds)
        out["dropped"] = round(_mean([r.dropped for r in runs]), 1)
        out["dropped_per_seed"] = [r.dropped for r in runs]
    return out


def format_table(results: Mapping[str, Mapping[str, Any]], *, arrivals_only: bool) -> str:
    """An aligned text table, one row per scheduler."""
    if arrivals_only:
        cols = [
            ("scheduler", None),
            ("alloc@100%", "gpu_allocation_at_full_arrival"),
            ("frag", "fragmentation"),
            ("dropped", "dropped"),
            ("wall s", "wall_seconds"),
        ]
    else:
        cols = [
            ("scheduler", None), ("util", "utilization"), ("delay p50", "queueing_delay_p50"),
            ("p95", "queueing_delay_p95"), ("p99", "queueing_delay_p99"),
            ("jct mean", "jct_mean"), ("fairness", "fairness"), ("preempt", "preemptions"),
            ("gang t/o", "gang_timeouts"), ("partial GPU-s", "partial_gang_gpu_seconds"),
            ("deadlock", "deadlocked"), ("frag", "fragmentation"),
            ("never started", "never_started"), ("rejected", "rejected"),
            ("on bad GPU", "jobs_on_unhealthy_gpus"), ("lost GPU-s", "lost_gpu_seconds"),
            ("lost busy GPU-s", "lost_busy_gpu_seconds"), ("idle GPU-s", "idle_gpu_seconds"),
            ("fc p90 cov", "forecast_p90_coverage"),
            ("wall s", "wall_seconds"),
        ]  # fmt: skip
    rows = [[h for h, _ in cols]]
    for name, f in results.items():
        row = [name]
        for _, key in cols[1:]:
            v = f.get(key or "")
            if isinstance(v, bool):
                row.append("yes" if v else "no")
            elif isinstance(v, float):
                row.append(f"{v:.3f}" if key in ("utilization", "fragmentation") else f"{v:g}")
            else:
                row.append("-" if v is None else str(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(
    out_dir: Path,
    results: Mapping[str, Mapping[str, Any]],
    inputs: Mapping[str, Any],
) -> Path:
    """Write report.json under `out_dir` and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {**results, "_inputs": dict(inputs)}
    path = out_dir / "report.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
