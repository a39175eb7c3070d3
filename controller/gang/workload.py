"""The workload placement expects: the request shapes of recent TrainingJobs.

A one-pod gang goes where it fragments the cluster least for the workload's
typical requests (`scheduler.fragmentation`, FGD). The simulator takes those
from the whole trace, as FGD does; a controller has no trace, so it takes
them from the TrainingJobs it holds: the most recent `window` pods' worth by
creation time (a gang of N workers counts N pods), whatever their phase.
That reads the same from the API server after a restart, and `gangops
explain` reads it the same way the controller does.

A workload's mix moves over hours, not between two steps, so it is read again
at most every `REFRESH_S` (a step reads every job anyway, but this would sort
them too), and only when jobs came or went (or changed shape); the model,
with its memo of scored node states, is kept while the typical requests stay
the same to the percent. With no job asking for GPUs in the window there is
no model, and placement is best-fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.gang.view import JobView
from controller.scheduler.fragmentation import FragModel, block_cpu, block_share, typical_pods
from controller.scheduler.types import PodShape

__all__ = ["REFRESH_S", "WINDOW_PODS", "Workload"]

REFRESH_S = 60.0
"""The longest the typical requests go unread while jobs come and go."""
WINDOW_PODS = 2_000
"""Pods of the most recent jobs the typical requests are read from (openb's
default trace, which FGD reads whole, has 8,152)."""

_Job = tuple[str, str, PodShape, int]
"""(creation time, namespace/name, pod shape, workers) of one job."""


class Workload:
    """The fragmentation model of the jobs' most recent `window` pods (0: none).
    Not thread-safe: one scheduling loop owns it."""

    def __init__(self, window: int = WINDOW_PODS) -> None:
        if window < 0:
            raise ValueError(f"window must be 0 or more pods, not {window}")
        self.window = window
        self._jobs: dict[str, _Job] = {}
        self._key: tuple[object, ...] = ()
        self._model: FragModel | None = None
        self._read_at: float | None = None
        self.pods = 0
        """Pods the current model was read from."""

    def model(self, views: Iterable[JobView], now: float) -> FragModel | None:
        """The model for `views` (every job the scheduler sees) at `now` (seconds):
        the last one until `REFRESH_S` after it was read, and kept after that while
        the typical requests are the same to the percent."""
        if not self.window:
            return None
        if self._read_at is not None and 0 <= now - self._read_at < REFRESH_S:
            return self._model
        self._read_at = now
        jobs: dict[str, _Job] = {}
        for v in views:
            if v.gang is None:
                continue
            meta = v.obj.get("metadata") or {}
            created = str(meta.get("creationTimestamp") or "")
            jobs[str(meta.get("uid") or v.id)] = (created, v.id, v.gang.pod, v.gang.workers)
        if jobs == self._jobs:
            return self._model
        self._jobs = jobs
        pods: list[PodShape] = []
        for _, _, pod, workers in sorted(jobs.values(), reverse=True):
            pods.extend([pod] * min(workers, self.window - len(pods)))
            if len(pods) >= self.window:
                break
        self.pods = len(pods)
        typical = typical_pods(pods)
        blocks, heavy = block_share(pods), block_cpu(pods)
        key = (
            tuple((t.gpus, t.gpu_milli, t.cpu_milli, t.gpu_models, t.memory, round(t.weight, 2))
                  for t in typical),
            round(blocks, 2),
            heavy,
        )  # fmt: skip
        if key != self._key:
            self._key = key
            self._model = (
                FragModel(typical, blocks=blocks, heavy_block_cpu=heavy) if typical else None
            )
        return self._model
