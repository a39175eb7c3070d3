"""Fragmentation-aware placement of single pods (FGD, Weng et al., ATC 2023).

A free GPU share is a *fragment* for a request when the node cannot host that
request with it: too little left on the device, too few devices, too little
CPU, or the wrong GPU model. A node's fragmentation is the expected
fragmented amount over the workload's distribution of requests (the
"typical pods"); a pod goes where placing it increases the cluster's
fragmentation least. With no distribution given, the snapshot has no model
and placement stays best-fit.

One step beyond FGD's measure: FGD asks whether the node's CPU fits *one*
more pod of a request, so a node whose CPU runs out before its GPUs looks
unfragmented until the last pod's worth of CPU is gone. Here, when the CPU
fits some of the request's pods but not enough to use all the GPUs it could,
the GPUs beyond what the CPU feeds count as half a fragment for that request
(`CPU_SHORT_WEIGHT`). FGD's reading counts none of them, and allocates
about 1.3 points less of openb's default trace; counting all of them (this
measure until 2026-12-05) allocates 0.17-0.35 point less on the default
trace and the `gpuspec33` and `multigpu50` variants (docs/simulator.md).
With CPU for no pod at all every free GPU is a fragment, as in FGD; where
CPU is not the limit the measures agree.

Memory, which FGD's measure leaves out: a node whose memory cannot hold one
more pod of a request has all its free GPU fragmented for that request, as
when its CPU cannot (each typical request carries its pods' median memory).
On the `multigpu50` variant, where memory turns away most of the pods that are
turned away, that allocates about 0.1 point more; counting the GPUs memory
cannot feed as half a fragment, as CPU does, gained less there and lost on
`gpushare100` (docs/simulator.md).

Whole nodes: the requests for a whole 8-GPU node are too rare to be typical
(under 1 % of openb's pods) yet ask for about 6 % of its GPUs, and no
fragment measure over typical requests keeps an empty node for them. The
model carries their share of the GPU demand (`block_share`, `FragModel.blocks`);
placement keeps
that share of the free GPUs in empty nodes of 8 or more GPUs, and every
empty one with CPU enough for the CPU-heaviest of those requests
(`block_cpu`; on openb the G3 nodes, the only ones a 120-core 8-GPU pod
fits) while such nodes hold no more than that share of the cluster's GPUs
(`placement`).

Pure: the model is built from values and memoises node states, so the same
state is scored once however many nodes are in it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median_high

from controller.scheduler.types import MILLI, PodShape

__all__ = ["BLOCK_GPUS", "FragModel", "TypicalPod", "block_cpu", "block_share", "typical_pods"]


@dataclass(frozen=True)
class TypicalPod:
    """One request shape of the target workload and its share of all requests."""

    gpus: int
    gpu_milli: int
    """Per GPU: less than 1000 for a shared GPU."""
    cpu_milli: int
    gpu_models: frozenset[str]
    weight: float
    memory: int = 0
    """Bytes one pod of the shape asks for: the median of the workload's pods of
    that shape (0: memory not counted)."""


def typical_pods(pods: Iterable[PodShape], *, coverage: float = 0.95) -> list[TypicalPod]:
    """The most frequent request shapes that together make up `coverage` of
    the pods, weights normalised to 1 (FGD's default: 95 %). Pods without GPUs
    count towards the coverage but are left out: they fragment no GPU. A shape's
    pods may ask for different memory: it carries their median."""
    memory: dict[tuple[int, int, int, frozenset[str]], list[int]] = defaultdict(list)
    for p in pods:
        memory[(p.gpus, p.gpu_milli, p.cpu_milli, p.gpu_models)].append(p.memory)
    counts = {shape: len(values) for shape, values in memory.items()}
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
    return [
        TypicalPod(g, m, c, models, n / weight, median_high(memory[(g, m, c, models)]))
        for (g, m, c, models), n in gpu
    ]


BLOCK_GPUS = 8
"""A request for this many GPUs or more needs a node of at least as many with
every GPU free: a whole block."""


def block_share(pods: Iterable[PodShape]) -> float:
    """The share of the pods' GPU demand (milli) in requests for a whole block
    (`BLOCK_GPUS` or more GPUs in one pod); 0 when they ask for no GPU."""
    total = blocks = 0
    for p in pods:
        total += p.gpu_total
        if p.gpus >= BLOCK_GPUS:
            blocks += p.gpu_total
    return blocks / total if total else 0.0


def block_cpu(pods: Iterable[PodShape]) -> int:
    """The most milli-CPU a request for a whole block asks for (0: none)."""
    return max((p.cpu_milli for p in pods if p.gpus >= BLOCK_GPUS), default=0)


_Key = tuple[str, tuple[int, ...], int | None, int]

MEMO_STATES = 1 << 18
"""Node states remembered before the memo starts over (bounds a long-running
controller's memory; a full openb arrivals replay sees about 90,000)."""


class FragModel:
    """Scores node states by their expected fragmented milli-GPUs."""

    def __init__(
        self,
        typical: Sequence[TypicalPod],
        *,
        cpu_feeds: bool = True,
        blocks: float = 0.0,
        heavy_block_cpu: int = 0,
    ) -> None:
        """`cpu_feeds=False`: FGD's own measure, where a node's CPU only has to fit
        one more pod of a request (the simulator's `fgd` baseline). `blocks` and
        `heavy_block_cpu`: the workload's `block_share` and `block_cpu`."""
        self.typical = tuple(typical)
        self.cpu_feeds = cpu_feeds
        self.blocks = blocks
        """Share of the free GPUs placement keeps in empty nodes of `BLOCK_GPUS`
        or more (the whole-block requests' share of the GPU demand)."""
        self.heavy_block_cpu = heavy_block_cpu
        """Milli-CPU of the CPU-heaviest whole-block request: an empty block with
        that much CPU free is kept for it whatever the share (0: none)."""
        self._shapes = tuple(
            (t.gpus, min(t.gpu_milli, MILLI), t.cpu_milli, t.memory, t.gpu_models, t.weight)
            for t in self.typical
            if t.gpus > 0
        )
        self._memory_steps = tuple(sorted({t.memory for t in self.typical}))
        """The typical requests' memory, ascending, 0 among them where one asks for
        none: a node's free memory matters to the measure only by how many of these
        it reaches (a node short of memory, below 0, reaches not even 0)."""
        self._memo: dict[_Key, float] = {}
        self.scores: dict[tuple[object, ...], tuple[float, int, int, tuple[int, ...]]] = {}
        """`placement`'s scores by pod shape and node state, the node's name left
        out: kept with the model, so across snapshots."""
        self.restricted: dict[str, float] = {}
        """GPU model -> weight of the typical requests that accept only some
        models, shared out among the models each accepts."""
        for t in self.typical:
            for m in t.gpu_models:
                self.restricted[m] = self.restricted.get(m, 0.0) + t.weight / len(t.gpu_models)

    @classmethod
    def of(cls, pods: Sequence[PodShape]) -> FragModel:
        """The model of a workload of `pods`: its typical requests, the share of its
        GPU demand in whole blocks and the CPU of the heaviest whole-block request."""
        return cls(typical_pods(pods), blocks=block_share(pods), heavy_block_cpu=block_cpu(pods))

    def pressure(self, free: Mapping[str, int]) -> dict[str, float]:
        """Per GPU model, what a milli-GPU of it taken costs, in expected
        fragmented milli-GPUs: the model's share of the restricted requests
        over its share of the free GPUs (`free`: model -> free milli-GPUs).
        Equal for every model while the free GPUs follow the restricted
        demand; a model that runs short of what its restricted requests need
        costs more, so requests that accept any model go elsewhere."""
        total = sum(free.values())
        return {m: w * total / free[m] for m, w in self.restricted.items() if free.get(m, 0) > 0}

    def frag(
        self, model: str, free: tuple[int, ...], cpu: int | None, mem: int | None = None
    ) -> float:
        """Expected fragmented milli-GPUs of a node of GPU `model` whose devices
        have `free` milli-GPUs (sorted ascending), `cpu` milli-CPUs and `mem`
        bytes of memory left (None: not tracked; FGD's measure, `cpu_feeds=False`,
        does not look at memory)."""
        if not self.cpu_feeds:
            mem = None
        # Memory only decides which requests' pods fit at all: the state is the
        # same for every amount between two typical requests' needs.
        reach = -1 if mem is None else bisect.bisect_right(self._memory_steps, mem)
        key = (model, free, cpu, reach)
        found = self._memo.get(key)
        if found is not None:
            return found
        total = sum(free)
        out = 0.0
        for gpus, milli, cpu_need, mem_need, models, weight in self._shapes:
            if models and model not in models:
                if not self.cpu_feeds:
                    out += weight * total
                continue
            if not self.cpu_feeds and cpu is not None and cpu < cpu_need:
                out += weight * total
                continue
            if mem is not None and mem < mem_need:
                out += weight * total
                continue
            feed = cpu if self.cpu_feeds else None
            out += weight * (total - _usable(free, gpus, milli, cpu_need, feed))
        if len(self._memo) >= MEMO_STATES:
            self._memo.clear()
        self._memo[key] = out
        return out


CPU_SHORT_WEIGHT = 0.5
"""How much of a fragment a free GPU is, for one request, when the node's CPU
fits some of that request's pods but cannot feed this GPU (0: not at all, as
FGD reads it; 1: wholly, this measure until 2026-12-05). Replayed on openb,
arrivals only, seeds 42-46: 0.5 allocated as much or more than 1 on the default
trace and the three variants, 0 lost 1.3 points on the default trace
(docs/simulator.md, "Fragmentation-aware placement in the core")."""


def _usable(free: tuple[int, ...], gpus: int, milli: int, cpu_need: int, cpu: int | None) -> float:
    """Free milli-GPUs that pods of one request shape (`gpus` devices with
    `milli` each, `cpu_need` milli-CPUs) could use on a node: FGD's devices
    with at least `milli` left; where the node's CPU fits some of those pods
    but not all, the ones it feeds and `CPU_SHORT_WEIGHT` of the rest."""
    devices = 0
    slots = 0
    for f in free:
        if f >= milli:
            devices += f
            slots += f // milli
    slots //= gpus
    fit = slots if cpu is None or not cpu_need else min(slots, cpu // cpu_need)
    if fit == slots:
        return devices if slots else 0
    if not fit:
        return 0
    need = fit * gpus
    usable = 0
    for f in reversed(free):
        if need <= 0:
            break
        usable += f
        need -= f // milli
    return usable + (1 - CPU_SHORT_WEIGHT) * (devices - usable)
