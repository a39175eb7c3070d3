"""Placement quality on FGD's workload variants (issue 17).

FGD's paper reports the openb trace in more shapes than the default one:
multi-GPU pods raised to 50 % of the GPU demand, every GPU pod a share, a third
of the pods restricted to one GPU model. `sim.variants` builds them from the
default trace with a seed (docs/simulator.md, "Variants"); each is run
arrivals-only as FGD measures (inflated to 1.3 x capacity by resampling,
shuffled per seed, allocation when arrived demand reaches 100 %) through
gangops, the `fgd` baseline (FGD's measure and ties), bestfit and random,
`GANGOPS_BENCH_SEEDS` arrival seeds (default 3: 42, 43, 44), variant seed 42.

Published figures (`PUBLISHED`): FGD's artifact ships the allocation curves its
paper plots (hkust-adsl/kubernetes-scheduler-simulator,
experiments/analysis/expected_results/analysis_allo_discrete.csv, commit
1853fc0: ten seeds 42-51 per workload and policy, the paper's bar charts read
its column 100, allocation at 100 % arrived). The means of that column for
the default trace are the paper's 95.23/92.86/86.30 %. Each row prints the
published FGD, BestFit and Random figures beside the runs here; the
published FGD + 1 is a threshold of its own. The variants are built as the
published files are (docs/simulator.md, "Variants"), and `fgd`, `bestfit`
and `random` land within 0.65 point of the published figures on each.

Threshold per workload (the default trace and each variant): gangops at
least FGD + 1 point (the issue's goal), against FGD as measured on the same
workload, and against the published FGD figure. Measured 2026-12-05 on the
2-core development machine: see docs/simulator.md, "Variants", for the
figures and the command; the rows are the issue's targets, not fitted.
Why the default trace and `gpushare100` fall short (GPU left beside the
810-milli shares; offline packings of the same pods) and what was tried:
docs/simulator.md, "Where the default and gpushare100 traces stall".

Run: `.venv/bin/python -m tests.perf variants`.
"""

from __future__ import annotations

import os

from controller.sim.report import figures
from controller.sim.run import Experiment
from controller.sim.run import run as simulate
from controller.sim.variants import VARIANTS
from tests.perf.harness import Result
from tests.perf.sim import inputs

__all__ = ["PUBLISHED", "run"]

BASELINES = ("fgd", "bestfit", "random")
GOAL_POINTS = 1.0
"""The issue's goal: gangops at least FGD + 1 point on every variant."""
PUBLISHED: dict[str, dict[str, float]] = {
    "default": {"fgd": 95.23, "bestfit": 92.86, "random": 86.30},
    "multigpu50": {"fgd": 97.09, "bestfit": 95.62, "random": 81.28},
    "gpushare100": {"fgd": 86.64, "bestfit": 84.62, "random": 78.90},
    "gpuspec33": {"fgd": 87.84, "bestfit": 80.40, "random": 83.87},
}
"""FGD's artifact, allocation at 100 % arrived, mean of seeds 42-51 per workload
(`analysis_allo_discrete.csv`, column 100; policies 06-FGD, 05-BestFit, 01-Random)."""
VARIANT_SEED = 42


def run() -> list[Result]:
    """One row per variant and scheduler; an empty list without the traces."""
    found = inputs()
    if found is None:
        return []
    nodes, pods = found
    seeds = int(os.environ.get("GANGOPS_BENCH_SEEDS", "3"))
    results = []
    for variant in ("default", *VARIANTS):
        runs, _ = simulate(
            Experiment(
                nodes,
                pods,
                schedulers=("gangops", *BASELINES),
                arrivals_only=True,
                seed=VARIANT_SEED,
                seeds=seeds,
                variant=None if variant == "default" else variant,
            )
        )
        alloc = {r.name: float(figures(r)["gpu_allocation_at_full_arrival"]) for r in runs}
        per_seed = {r.name: figures(r)["gpu_allocation_at_full_arrival_per_seed"] for r in runs}
        published = PUBLISHED.get(variant, {})
        g = alloc["gangops"]
        for name in BASELINES:
            pub = published.get(name)
            print(
                f"variants: {variant} (variant seed {VARIANT_SEED}, arrival seeds "
                f"{VARIANT_SEED}-{VARIANT_SEED + seeds - 1}): gangops {g:.2f} % "
                f"{per_seed['gangops']} vs {name} {alloc[name]:.2f} % {per_seed[name]}: "
                f"x{g / max(alloc[name], 1e-9):.4f}, {g - alloc[name]:+.2f} pt; published "
                + (f"{pub:.2f} % ({g - pub:+.2f} pt)" if pub is not None else "not available")
            )
        if "fgd" in published:
            results.append(
                Result(
                    f"variants: {variant} gangops - published fgd",
                    g - published["fgd"],
                    "pt",
                    GOAL_POINTS,
                    higher_is_better=True,
                )
            )
        results.append(
            Result(
                f"variants: {variant} gangops - fgd",
                g - alloc["fgd"],
                "pt",
                GOAL_POINTS,
                higher_is_better=True,
            )
        )
    return results
