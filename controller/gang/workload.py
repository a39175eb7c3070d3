"""The workload placement expects: the request shapes of recent TrainingJobs.

A one-pod gang goes where it fragments the cluster least for the workload's
typical requests (`scheduler.fragmentation`, FGD). The simulator takes those
from the whole trace, as FGD does; a controller has no trace, so it takes
them from the TrainingJobs it holds: the most recent `window` pods' worth by
creation time (a gang of N workers counts N pods), whatever their phase.
That reads the same from the API server after a restart, and `gangops
explain` reads it the same way the controller does.

It is read again once the jobs that arrived since it was last read ask for a
tenth as many pods as it was read from (`REFRESH_SHARE`, at least one pod):
often while few jobs have arrived, when each one moves the mix, and rarely
after (every 200 pods with a full window of 2,000). Replayed on openb,
reading it every 200 arrivals instead lost 0.1-0.8 point, all of it early
(docs/scheduler.md). A job whose shape changes, or that goes, counts at the
next read. The model, with its memo of scored node states, is kept while the
typical requests stay the same to the percent. With no job asking for GPUs
there is no model, and placement is best-fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.gang.view import JobView
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.types import PodShape

__all__ = ["REFRESH_SHARE", "WINDOW_PODS", "Workload", "model_of"]

REFRESH_SHARE = 0.1
"""New pods, as a share of those the model was read from, that read it again."""
WINDOW_PODS = 2_000
"""Pods of the most recent jobs the typical requests are read from (openb's
default trace, which FGD reads whole, has 8,152)."""

_Job = tuple[str, str, PodShape, int]
"""(creation time, namespace/name, pod shape, workers) of one job."""


def model_of(pods: Sequence[PodShape]) -> tuple[tuple[object, ...], FragModel | None]:
    """The fragmentation model of `pods` (None when none asks for GPUs), and a key
    of what it is made of, its weights to the percent: a model read later with the
    same key differs from this one by under a percent in any weight."""
    model = FragModel.of(pods)
    key = (
        tuple((t.gpus, t.gpu_milli, t.cpu_milli, t.gpu_models, t.memory, round(t.weight, 2))
              for t in model.typical),
        round(model.blocks, 2),
        model.heavy_block_cpu,
    )  # fmt: skip
    return key, model if model.typical else None


def _uid(v: JobView) -> str:
    return str((v.obj.get("metadata") or {}).get("uid") or v.id)


class Workload:
    """The fragmentation model of the jobs' most recent `window` pods (0: none).
    Not thread-safe: one scheduling loop owns it."""

    def __init__(self, window: int = WINDOW_PODS) -> None:
        if window < 0:
            raise ValueError(f"window must be 0 or more pods, not {window}")
        self.window = window
        self._read: set[str] = set()
        """The uids of the jobs the model was read from (and their elders)."""
        self._key: tuple[object, ...] = ()
        self._model: FragModel | None = None
        self.pods = 0
        """Pods the current model was read from."""

    def shares(self) -> list[tuple[tuple[str, str], float]]:
        """The current model's typical requests by (GPUs per pod, milli-GPUs of each),
        each with its share of them (the metric `gangops_placement_typical_requests`)."""
        out: dict[tuple[str, str], float] = {}
        for t in self._model.typical if self._model is not None else ():
            key = (str(t.gpus), str(t.gpu_milli))
            out[key] = out.get(key, 0.0) + t.weight
        return sorted(out.items())

    def model(self, views: Sequence[JobView]) -> FragModel | None:
        """The model for `views` (every job the scheduler sees): the last one until
        the jobs new since it was read ask for `REFRESH_SHARE` of its pods, and
        kept after that while the typical requests are the same to the percent."""
        if not self.window:
            return None
        read = self._read
        new = sum(v.gang.workers for v in views if v.gang is not None and _uid(v) not in read)
        if new < max(1, REFRESH_SHARE * self.pods):
            return self._model
        jobs: list[_Job] = []
        for v in views:
            if v.gang is not None:
                created = str((v.obj.get("metadata") or {}).get("creationTimestamp") or "")
                jobs.append((created, v.id, v.gang.pod, v.gang.workers))
        self._read = {_uid(v) for v in views if v.gang is not None}
        pods: list[PodShape] = []
        for _, _, pod, workers in sorted(jobs, key=lambda j: j[:2], reverse=True):
            pods.extend([pod] * min(workers, self.window - len(pods)))
            if len(pods) >= self.window:
                break
        self.pods = len(pods)
        key, model = model_of(pods)
        if key != self._key:
            self._key, self._model = key, model
        return self._model
