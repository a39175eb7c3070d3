"""`--repeat`: shuffled passes of a trace as one stationary Poisson stream at a given load."""

from __future__ import annotations

from controller.scheduler.types import PodShape
from controller.sim.run import stationary
from controller.sim.traces import TraceJob


def _job(name: str, gpus: int, duration: float) -> TraceJob:
    return TraceJob(name, 0.0, duration, gpus, PodShape(gpus=1), project="p", tier="normal")


def test_passes_are_shuffled_copies_with_unique_ids_at_the_offered_load() -> None:
    jobs = [_job(f"j{i}", 1 + i % 4, 100.0 + 10 * i) for i in range(200)]
    out = stationary(jobs, 16_000, 0.8, repeat=5, seed=7)
    assert len(out) == 1000 and len({j.id for j in out}) == 1000
    assert sorted(j.id for j in out[:200]) == sorted(f"{j.id}-pass0" for j in jobs)
    assert [j.id for j in out[:200]] != [f"{j.id}-pass0" for j in jobs]  # shuffled
    submits = [j.submit for j in out]
    assert submits == sorted(submits) and submits[0] == 0.0
    work = sum(j.gpu_milli * (j.duration or 0.0) for j in out)
    offered = work / (16_000 * submits[-1])
    assert 0.7 < offered < 0.9  # Poisson: within noise of the asked-for 0.8
    assert stationary(jobs, 16_000, 0.8, repeat=5, seed=7) == out  # seeded
