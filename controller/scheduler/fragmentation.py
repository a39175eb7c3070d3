"""Fragmentation-aware placement of single pods (FGD, Weng et al., ATC 2023).

A free GPU share is a *fragment* for a request when the node cannot host that
request with it: too little left on the device, too few devices, too little
CPU, or the wrong GPU model. A node's fragmentation is the expected
fragmented amount over the workload's distribution of requests (the
"typical pods"); a pod goes where placing it increases the cluster's
fragmentation least. With no distribution given, the snapshot has no model
and placement stays best-fit.

Pure: the model is built from values and memoises node states, so the same
state is scored once however many nodes are in it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.scheduler.types import MILLI, PodShape

__all__ = ["FragModel", "TypicalPod", "typical_pods"]


@dataclass(frozen=True)
class TypicalPod:
    """One request shape of the target workload and its share of all requests."""

    gpus: int
    gpu_milli: int
    """Per GPU: less than 1000 for a shared GPU."""
    cpu_milli: int
    gpu_models: frozenset[str]
    weight: float


def typical_pods(pods: Iterable[PodShape], *, coverage: float = 0.95) -> list[TypicalPod]:
    """The most frequent request shapes that together make up `coverage` of
    the pods, weights normalised to 1 (FGD's default: 95 %). Pods without GPUs
    count towards the coverage but are left out: they fragment no GPU."""
    counts = Counter((p.gpus, p.gpu_milli, p.cpu_milli, p.gpu_models) for p in pods)
    total = sum(counts.values())
    if not total:
        return []
    kept: list[tuple[tuple[int, int, int, frozenset[str]], int]] = []
    covered = 0
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][:3], sorted(kv[0][3])))
    for shape, n in ranked:
        if covered >= coverage * total:
            break
        kept.append((shape, n))
        covered += n
    gpu = [(s, n) for s, n in kept if s[0] > 0]
    weight = sum(n for _, n in gpu)
    return [TypicalPod(g, m, c, models, n / weight) for (g, m, c, models), n in gpu]


_Key = tuple[str, tuple[int, ...], int]


class FragModel:
    """Scores node states by their expected fragmented milli-GPUs."""

    def __init__(self, typical: Sequence[TypicalPod]) -> None:
        self.typical = tuple(typical)
        self._cpu_levels = sorted({t.cpu_milli for t in self.typical})
        self._shapes = tuple(
            (
                t.gpus,
                t.gpu_milli if t.gpu_milli < MILLI else MILLI,
                bisect_right(self._cpu_levels, t.cpu_milli),
                t.gpu_models,
                t.weight,
            )
            for t in self.typical
        )
        self._memo: dict[_Key, float] = {}

    def cpu_level(self, cpu: int | None) -> int:
        """How many of the typical CPU requests fit in `cpu` (None: untracked, all)."""
        if cpu is None:
            return len(self._cpu_levels)
        return bisect_right(self._cpu_levels, cpu)

    def frag(self, model: str, free: tuple[int, ...], level: int) -> float:
        """Expected fragmented milli-GPUs of a node of GPU `model` whose devices
        have `free` milli-GPUs (sorted) and that fits `level` CPU levels."""
        key = (model, free, level)
        found = self._memo.get(key)
        if found is not None:
            return found
        total = sum(free)
        out = 0.0
        for gpus, milli, needs_level, models, weight in self._shapes:
            if (models and model not in models) or level < needs_level:
                out += weight * total
                continue
            usable = 0
            frag = 0
            for f in free:
                if f >= milli:
                    usable += 1
                else:
                    frag += f
            out += weight * (frag if usable >= gpus else total)
        self._memo[key] = out
        return out
