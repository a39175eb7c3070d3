"""Per-pod placement of the baseline schedulers, on the core's snapshot.

The baselines are other schedulers, so they have their own placement: one
pod at a time, no gang awareness, no topology. They keep their state in the
same `Snapshot` as gangops (assume and forget), so every scheduler is
measured by the same accounting.

- `bestfit`: the FGD simulator's BestFit score, the node left with the least
  normalised CPU and GPU after the pod (0.5 * CPU/128 cores + 0.5 * GPU/8
  GPUs), scored 0..100 in whole points like a kube-scheduler plugin, ties
  broken at random; a shared pod takes the fullest device it fits on;
- `random`: a random node that fits, a random device that fits;
- `fgd` (`FgdPlacer`): FGD as its simulator runs it, on the core's
  fragmentation measure in FGD's own form (`FragModel(cpu_feeds=False)`:
  the node's CPU need only fit one more pod of a request) and the core's
  device choice (`placement.frag_score`); the fragmentation increase is
  scored 0..100 in whole points through a sigmoid like a kube-scheduler
  plugin, ties go to the first node in a fixed order drawn per run (FGD's
  simulator prefixes node names with a random permutation and its scheduler
  takes the smallest tied name);
- `first-fit` (fifo-greedy's): the first node in name order that fits.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from controller.scheduler.fragmentation import FragModel, TypicalPod
from controller.scheduler.placement import frag_score
from controller.scheduler.snapshot import NodeState, Snapshot
from controller.scheduler.types import MILLI, PodPlacement, PodShape

__all__ = ["PLACERS", "FgdPlacer", "Placer", "bestfit", "first_fit", "random_fit"]

MAX_SPEC_CPU = 128_000
"""FGD's normalisation constants: milli-CPU and milli-GPU of the largest node."""
MAX_SPEC_GPU = 8 * MILLI

Placer = Callable[[Snapshot, PodShape, random.Random], PodPlacement | None]
"""One pod onto the snapshot's current free capacity (not assumed), or None."""


def _open(snap: Snapshot, pod: PodShape) -> list[NodeState]:
    if pod.gpus * (pod.gpu_milli if pod.shared else MILLI) > snap.free_milli:
        return []
    return [ns for ns, _ in snap.open_slots(pod, frozenset())]


def _devices(ns: NodeState, pod: PodShape, rng: random.Random | None) -> tuple[int, ...]:
    if pod.shared:
        fits = [i for i, f in enumerate(ns.free) if f >= pod.gpu_milli]
        if rng is not None:
            return (rng.choice(fits),)
        return (min(fits, key=lambda i: (ns.free[i], i)),)
    return ns.pick_devices(pod)


def _bestfit_score(ns: NodeState, pod: PodShape) -> int:
    cpu_left = (ns.cpu or 0) - pod.cpu_milli if ns.cpu is not None else 0
    gpu_left = sum(ns.free) - (pod.gpu_milli if pod.shared else pod.gpus * MILLI)
    waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
    return int((1.0 - waste) * 100)


def bestfit(snap: Snapshot, pod: PodShape, rng: random.Random) -> PodPlacement | None:
    """The node left fullest (whole-point scores, random among the best)."""
    nodes = _open(snap, pod)
    if not nodes:
        return None
    scored = [(_bestfit_score(ns, pod), ns) for ns in nodes]
    top = max(s for s, _ in scored)
    ns = rng.choice([n for s, n in scored if s == top])
    return PodPlacement(ns.name, _devices(ns, pod, None))


def random_fit(snap: Snapshot, pod: PodShape, rng: random.Random) -> PodPlacement | None:
    """Any node that fits, any device that fits."""
    nodes = _open(snap, pod)
    if not nodes:
        return None
    ns = rng.choice(nodes)
    return PodPlacement(ns.name, _devices(ns, pod, rng))


def first_fit(snap: Snapshot, pod: PodShape, rng: random.Random) -> PodPlacement | None:
    """The first node, in name order, that fits."""
    nodes = _open(snap, pod)
    if not nodes:
        return None
    ns = min(nodes, key=lambda n: n.name)
    return PodPlacement(ns.name, _devices(ns, pod, None))


def _sigmoid_points(delta: float) -> int:
    """A fragmentation increase (milli-GPUs) as FGD's 0..100 score (less is better)."""
    x = max(-50.0, min(50.0, delta / MILLI))
    return int(100.0 / (1.0 + math.exp(x)))


class FgdPlacer:
    """FGD's placement: least fragmentation increase, whole-point scores, ties
    to a fixed order of the nodes drawn once per run from `seed`."""

    def __init__(self, typical: Sequence[TypicalPod], names: Sequence[str], *, seed: int) -> None:
        self.model = FragModel(typical, cpu_feeds=False)
        order = sorted(names)
        random.Random(seed).shuffle(order)
        self.rank = {n: i for i, n in enumerate(order)}

    def __call__(self, snap: Snapshot, pod: PodShape, rng: random.Random) -> PodPlacement | None:
        best: tuple[int, int] | None = None
        where: PodPlacement | None = None
        for ns in _open(snap, pod):
            score = frag_score(self.model, ns, pod)
            key = (-_sigmoid_points(score[0]), self.rank[ns.name])
            if best is None or key < best:
                best, where = key, PodPlacement(ns.name, score[4])
        return where


PLACERS: dict[str, Placer] = {"bestfit": bestfit, "random": random_fit, "first-fit": first_fit}
