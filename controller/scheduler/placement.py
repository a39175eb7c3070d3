"""Placing a gang: all-or-nothing, fewest nodes, tightest topology domain.

The order of preference, for `workers` identical pods:

1. one node that holds the whole gang (the fullest such node, so large free
   nodes stay free for large gangs);
2. else, level by level from the tightest (NVLink domain, rack, zone), the
   domain that can hold the gang with the least room to spare, filled with
   as few nodes as possible (largest free nodes first, the last workers on
   the node that fits them most tightly);
3. else the same across the whole cluster.

A gang of one pod, when the snapshot carries a fragmentation model
(`fragmentation.FragModel`, built from the workload's typical requests),
goes instead on the node and device where it raises the expected
fragmentation least (FGD), ties to the tightest fit (least GPU, then least
CPU left), then node name; without a model it is placed best-fit as above.
The ties matter as much as the measure: many nodes often tie (a CPU-only
pod changes no node's fragmentation), and breaking them the same way every
time packs pods onto nodes already in use, where breaking them at random
spreads pods and strands GPUs (about four points of allocation on the openb
trace). FGD's own simulator packs too: its scheduler takes the first of the
tied nodes in a fixed per-run order.

While the free GPUs of empty nodes of 8 or more GPUs (whole blocks) are no
more than the model's `blocks` share of all free GPUs, and always for an
empty block with CPU enough for the CPU-heaviest whole-node request
(`heavy_block_cpu`) while such blocks are scarce (`_heavy_cpu`), a smaller
pod opens such a node only when no other node fits it: the whole-node
requests, too rare to be typical, still find one. Without this every 8-GPU
node of the openb cluster was in use by 30 % of the arrivals and a quarter
of the 8-GPU pods were turned away, and with departures the 120-core 8-GPU
pods waited up to 20 minutes for a G3 node (docs/simulator.md).

A gang that does not fit gets `None` and `shortfall` explains why with the
figures a user can act on. Nothing here changes the snapshot.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from fractions import Fraction

from controller.quantity import format_quantity
from controller.scheduler.fragmentation import BLOCK_GPUS, MEMO_STATES, FragModel
from controller.scheduler.snapshot import NodeState, Snapshot
from controller.scheduler.types import MILLI, Gang, Placement, PodPlacement, PodShape, format_gpus

__all__ = ["LEVEL_NAMES", "fits", "frag_score", "place", "shortfall"]

LEVEL_NAMES = {
    "nvidia.com/gpu.clique": "NVLink domain",
    "topology.kubernetes.io/rack": "rack",
    "topology.kubernetes.io/zone": "zone",
}

_NONE: frozenset[str] = frozenset()


def _fill(nodes: Sequence[tuple[NodeState, int]], workers: int) -> list[tuple[NodeState, int]]:
    """Fewest nodes: largest first, the remainder on the tightest fit."""
    ordered = sorted(nodes, key=lambda nk: (-nk[1], nk[0].name))
    chosen: list[tuple[NodeState, int]] = []
    need = workers
    i = 0
    while need > 0:
        if ordered[i][1] >= need:
            rest = ordered[i:]
            ns, k = min((nk for nk in rest if nk[1] >= need), key=lambda nk: (nk[1], nk[0].name))
            chosen.append((ns, need))
            return chosen
        ns, k = ordered[i]
        chosen.append((ns, k))
        need -= k
        i += 1
    return chosen


def _single(open_nodes: Sequence[tuple[NodeState, int]], gang: Gang) -> NodeState | None:
    fits = [nk for nk in open_nodes if nk[1] >= gang.workers]
    if not fits:
        return None
    if gang.pod.shared:
        return min(fits, key=lambda nk: (_shared_waste(nk[0], gang.pod.gpu_milli), nk[0].name))[0]
    return min(fits, key=lambda nk: (nk[1], nk[0].whole, nk[0].name))[0]


def _shared_waste(ns: NodeState, milli: int) -> tuple[int, int]:
    """Prefer the device left fullest (smallest remainder), then nodes with
    fewer whole GPUs, so shared pods pack and whole GPUs stay whole."""
    leftovers = [f - milli for f in ns.free if f >= milli and f < MILLI]
    if leftovers:
        return (0, min(leftovers))
    return (1, ns.whole)


def _choose(snap: Snapshot, gang: Gang, exclude: AbstractSet[str]) -> list[tuple[NodeState, int]]:
    if gang.gpu_total > snap.free_milli:
        return []
    open_nodes = snap.open_slots(gang.pod, exclude)
    if sum(k for _, k in open_nodes) < gang.workers:
        return []
    one = _single(open_nodes, gang)
    if one is not None:
        return [(one, gang.workers)]
    slots = {ns.name: k for ns, k in open_nodes}
    for level in range(len(snap.levels)):
        best: tuple[int, str, list[tuple[NodeState, int]]] | None = None
        for domain, members in snap.domain_members(level).items():
            nodes = [(ns, slots[ns.name]) for ns in members if ns.name in slots]
            total = sum(k for _, k in nodes)
            if total >= gang.workers and (best is None or (total, domain) < best[:2]):
                best = (total, domain, nodes)
        if best is not None:
            return _fill(best[2], gang.workers)
    return _fill(open_nodes, gang.workers)


_Score = tuple[float, int, int, str, tuple[int, ...]]


def frag_score(model: FragModel, ns: NodeState, pod: PodShape) -> _Score:
    """(fragmentation increase, GPU and CPU left after, name, devices) for one
    more `pod` on `ns`; the caller has checked that it fits. Only the pod's GPUs,
    CPU and memory count (not which nodes it may use), so shapes that differ only
    in which nodes they may use share scores (`Snapshot.frag_scores`)."""
    free = ns.free
    before_free = tuple(sorted(free))
    gpu_model = ns.node.gpu_model
    before = model.frag(gpu_model, before_free, ns.cpu, ns.mem)
    cpu_after = None if ns.cpu is None else ns.cpu - pod.cpu_milli
    mem_after = None if ns.mem is None else ns.mem - pod.memory
    cpu_left = 0 if cpu_after is None else cpu_after
    total = sum(free)
    if pod.shared:
        best: _Score | None = None
        whole_ok = ns.usable_whole > 0
        for value in set(free):
            if value < pod.gpu_milli or (value == MILLI and not whole_ok):
                continue
            after = list(before_free)
            after[after.index(value)] = value - pod.gpu_milli
            delta = model.frag(gpu_model, tuple(sorted(after)), cpu_after, mem_after) - before
            score = (delta, total - pod.gpu_milli, cpu_left, ns.name, (free.index(value),))
            if best is None or score < best:
                best = score
        assert best is not None
        return best
    devices = tuple([i for i, f in enumerate(free) if f == MILLI][: pod.gpus])
    after_free = tuple(sorted(before_free[: len(before_free) - pod.gpus] + (0,) * pod.gpus))
    delta = model.frag(gpu_model, after_free, cpu_after, mem_after) - before
    return (delta, total - pod.gpus * MILLI, cpu_left, ns.name, devices)


def _score(
    cache: dict[str, tuple[int, object]], model: FragModel, ns: NodeState, pod: PodShape
) -> _Score:
    """`frag_score`, cached per node until the node changes (its stamp), and by node
    state in the model (`FragModel.scores`): nodes alike share a score, and a
    controller, whose snapshot is new each step, does not score its nodes again."""
    hit = cache.get(ns.name)
    if hit is not None and hit[0] == ns.stamp:
        return hit[1]  # type: ignore[return-value]
    key = (pod.gpus, pod.gpu_milli, pod.cpu_milli, pod.memory, ns.node.gpu_model,
           tuple(ns.free), ns.whole, ns.bad, ns.cpu, ns.mem)  # fmt: skip
    known = model.scores.get(key)
    if known is None:
        score = frag_score(model, ns, pod)
        if len(model.scores) >= MEMO_STATES:
            model.scores.clear()
        model.scores[key] = (score[0], score[1], score[2], score[4])
    else:
        score = (known[0], known[1], known[2], ns.name, known[3])
    cache[ns.name] = (ns.stamp, score)
    return score


_Entry = tuple[_Score, int, NodeState]


class _Ranking:
    """The open nodes for one single-pod shape by placement score,
    kept across placements on one snapshot: three heaps of (score, node stamp, node)
    for the nodes that are not whole blocks, the whole blocks held while blocks are
    short, and the whole blocks always held (CPU enough for the heaviest whole-node
    request). Each placement first pushes the nodes changed since the last one (with
    their new scores) and drops the entries whose node has changed since it was
    pushed, so it costs what changed, not a pass over every open node: the same
    choice as `_place_one`'s pass (the least (held, score), and a score ends with
    the node's name, so there are no ties). Excluded nodes (held for another gang)
    are set aside while the tops are read and pushed back after."""

    __slots__ = ("entries", "heaps", "seen")

    def __init__(self) -> None:
        self.heaps: tuple[list[_Entry], list[_Entry], list[_Entry]] | None = None
        self.seen = 0
        self.entries = 0

    def best(
        self,
        snap: Snapshot,
        model: FragModel,
        pod: PodShape,
        slots: Mapping[str, tuple[NodeState, int]],
        cache: dict[str, tuple[int, object]],
        *,
        hold: bool,
        heavy: int,
        exclude: AbstractSet[str],
    ) -> _Score | None:
        """The score of the node (and devices) `pod` goes on, or None when every open
        node (`slots`) is in `exclude`. `heavy`: `_heavy_cpu`, the same for the
        snapshot's life."""
        small = pod.gpus < BLOCK_GPUS
        if self.heaps is None or self.entries > 3 * len(slots) + 64:
            self.heaps = ([], [], [])
            for ns, _ in slots.values():
                self.heaps[_category(ns, small, heavy)].append(
                    (_score(cache, model, ns, pod), ns.stamp, ns)
                )
            for h in self.heaps:
                heapq.heapify(h)
            self.entries = len(slots)
        else:
            for ns in snap.changes(self.seen):
                if ns.name in slots:
                    entry = (_score(cache, model, ns, pod), ns.stamp, ns)
                    heapq.heappush(self.heaps[_category(ns, small, heavy)], entry)
                    self.entries += 1
        self.seen = snap.changed
        aside: list[tuple[list[_Entry], _Entry]] = []
        free, blocks, heavy_blocks = (self._top(h, exclude, aside) for h in self.heaps)
        for heap, entry in aside:
            heapq.heappush(heap, entry)
        if hold:  # every whole block is held
            picks = [free] if free is not None else [blocks, heavy_blocks]
        else:  # only the CPU-heavy ones
            picks = [free, blocks] if free is not None or blocks is not None else [heavy_blocks]
        best = min((p for p in picks if p is not None), default=None)
        return None if best is None else best[0]

    def _top(
        self,
        heap: list[_Entry],
        exclude: AbstractSet[str],
        aside: list[tuple[list[_Entry], _Entry]],
    ) -> _Entry | None:
        """The heap's least entry that is current and not excluded; stale entries are
        dropped, excluded ones added to `aside`."""
        while heap:
            _, stamp, ns = heap[0]
            if ns.stamp != stamp:
                heapq.heappop(heap)
                self.entries -= 1
            elif ns.name in exclude:
                aside.append((heap, heapq.heappop(heap)))
            else:
                return heap[0]
        return None


def _category(ns: NodeState, small: bool, heavy: int) -> int:
    """0: not a whole block (for this pod); 1: a whole block; 2: a whole block with CPU
    for the heaviest whole-node request (`_heavy_cpu`)."""
    if not small or ns.empty_block <= 0:
        return 0
    return 2 if heavy > 0 and (ns.cpu or 0) >= heavy else 1


def _heavy_cpu(snap: Snapshot, model: FragModel) -> int:
    """The milli-CPU an empty block needs free to be kept whatever the share
    (`FragModel.heavy_block_cpu`), or 0 (none kept so) when the blocks with that
    much CPU hold more GPUs than the whole-node requests' share of the cluster's
    (in service or not, so that it stays the same for the snapshot's life):
    those requests are then not short of nodes, and keeping every such node
    would keep most of the cluster's blocks (a heaviest request of 88 cores
    where the 96-core G2 nodes hold it: openb's `gpuspec33` lost 11.6 points)."""
    heavy = model.heavy_block_cpu
    if heavy > 0 and snap.block_gpus(heavy) > model.blocks * snap.devices:
        return 0
    return heavy


def _place_one(
    snap: Snapshot, model: FragModel, gang: Gang, exclude: AbstractSet[str]
) -> Placement | None:
    """A one-pod gang on the node and device that fragment the cluster least."""
    pod = gang.pod
    if gang.gpu_total > snap.free_milli:
        return None
    slots = snap.open_map(pod)
    if not slots:
        return None
    key = (pod.gpus, pod.gpu_milli, pod.cpu_milli, pod.memory, pod.constraint_key())
    cache = snap.frag_scores.setdefault((pod.gpus, pod.gpu_milli, pod.cpu_milli, pod.memory), {})
    pressure = model.pressure(snap.free_by_model) if model.restricted else None
    small = pod.gpus < BLOCK_GPUS
    hold = small and model.blocks > 0 and snap.empty_blocks <= model.blocks * snap.free_milli
    heavy = _heavy_cpu(snap, model)
    best: _Score | None
    if pressure:  # a per-model cost on top of the score: every node is looked at
        best = _scan(
            model, pod, slots, cache, exclude=exclude, hold=hold, heavy=heavy, pressure=pressure
        )
    else:
        # The first placement of a shape on this snapshot passes over the open
        # nodes; the next ones keep a ranking (a snapshot that lives for one
        # step and places one pod of a shape would pay for heaps it never uses).
        ranking = snap.rankings.get(key)
        if ranking is None:
            snap.rankings[key] = _Ranking()
            best = _scan(model, pod, slots, cache, exclude=exclude, hold=hold, heavy=heavy)
        else:
            assert isinstance(ranking, _Ranking)
            best = ranking.best(
                snap, model, pod, slots, cache, hold=hold, heavy=heavy, exclude=exclude
            )
    return None if best is None else Placement((PodPlacement(best[3], best[4]),))


def _scan(
    model: FragModel,
    pod: PodShape,
    slots: Mapping[str, tuple[NodeState, int]],
    cache: dict[str, tuple[int, object]],
    *,
    exclude: AbstractSet[str],
    hold: bool,
    heavy: int,
    pressure: Mapping[str, float] | None = None,
) -> _Score | None:
    """The least (held, fragmentation increase plus the GPU model's `pressure`,
    score) over the open nodes (`slots`) not in `exclude`, by a pass over them all;
    None when there is none."""
    taken = pod.gpu_total
    small = pod.gpus < BLOCK_GPUS
    best: _Score | None = None
    best_cost = (False, 0.0)
    for ns, _ in slots.values():
        if ns.name in exclude:
            continue
        score = _score(cache, model, ns, pod)
        frag = score[0]
        if pressure:
            frag += pressure.get(ns.node.gpu_model, 0.0) * taken
        held = small and ns.empty_block > 0 and (hold or (heavy > 0 and (ns.cpu or 0) >= heavy))
        cost = (held, frag)
        if best is None or cost < best_cost or (cost == best_cost and score[1:] < best[1:]):
            best, best_cost = score, cost
    return best


def place(snap: Snapshot, gang: Gang, *, exclude: AbstractSet[str] = _NONE) -> Placement | None:
    """Where the whole gang would go now, or None if it does not fit.

    `exclude` names nodes the gang may not use (GPUs reserved for another gang).
    """
    if gang.workers == 1 and snap.fragmentation is not None:
        return _place_one(snap, snap.fragmentation, gang, exclude)
    chosen = _choose(snap, gang, exclude)
    if not chosen:
        return None
    pods: list[PodPlacement] = []
    for ns, count in chosen:
        # Pick each worker's devices as if the earlier ones were there, then give
        # them all back: the node is as it was, stamp included, so nothing cached
        # against the stamp (scores, `_Ranking`'s entries) goes stale.
        stamp = ns.stamp
        taken: list[tuple[int, ...]] = []
        for _ in range(count):
            devices = ns.pick_devices(gang.pod)
            ns.take(gang.pod, devices)
            taken.append(devices)
        for devices in taken:
            ns.give(gang.pod, devices)
            pods.append(PodPlacement(ns.name, devices))
        ns.stamp = stamp
    return Placement(tuple(pods))


def fits(snap: Snapshot, gang: Gang, *, exclude: AbstractSet[str] = _NONE) -> bool:
    """Whether `place` would find a placement, without choosing one (no scoring):
    `place` finds one exactly when the free GPUs are enough and the nodes the gang
    may use have room for all its workers (for a one-pod gang with a fragmentation
    model: room for it on some node)."""
    if gang.gpu_total > snap.free_milli:
        return False
    room = snap.open_total(gang.pod, exclude)
    if gang.workers <= 0:  # an empty placement, if any node has room for one pod
        return room > 0
    return room >= gang.workers


def _gpus(milli: int) -> str:
    """`1 GPU`, `1.5 GPUs`, `8 GPUs`."""
    text = format_gpus(milli)
    return f"{text} GPU" if text == "1" else f"{text} GPUs"


def _needs_gpus(gang: Gang) -> str:
    """What a gang asks for, as its waiting reason opens: `needs 16 GPUs (2 workers x
    8 GPUs)`."""
    if gang.workers == 1:
        return f"needs {_gpus(gang.gpu_total)}"
    return f"needs {_gpus(gang.gpu_total)} ({gang.workers} workers x {_gpus(gang.pod.gpu_total)})"


def _needs_no_gpus(gang: Gang) -> str:
    """What a gang of no GPUs asks for instead, as its waiting reason opens: `needs no
    GPUs (2 workers x 4 CPU, 8Gi of memory)`."""
    pod = gang.pod
    asked = [f"{format_quantity(Fraction(pod.cpu_milli, 1000))} CPU"] if pod.cpu_milli else []
    if pod.memory:
        asked.append(f"{format_quantity(Fraction(pod.memory), binary=True)} of memory")
    each = ", ".join(asked) or "nothing else"
    if gang.workers == 1:
        return f"needs no GPUs ({each})"
    return f"needs no GPUs ({gang.workers} workers x {each})"


def _room(ns: NodeState, pod: PodShape) -> list[tuple[str, int]]:
    """How many more `pod`s (of no GPUs) `ns` holds by each resource the pod asks for,
    each counted alone by `NodeState.slots` (whose figure is the least of them): a
    device in service for a share of no GPU, its CPU, its memory."""
    room = []
    if pod.gpus and pod.shared:
        room.append(("GPUs in service", ns.slots(replace(pod, cpu_milli=0, memory=0))))
    if pod.cpu_milli:
        room.append(("CPU", ns.slots(PodShape(gpus=0, cpu_milli=pod.cpu_milli))))
    if pod.memory:
        room.append(("memory", ns.slots(PodShape(gpus=0, memory=pod.memory))))
    return room


def _short_of(snap: Snapshot, gang: Gang, exclude: AbstractSet[str]) -> str:
    """The resources a gang of no GPUs is short of on the nodes it may use: those too
    few in all for its workers; when each would do in all but not on the same nodes,
    every one it asks for ("room" when it asks for none a node tracks)."""
    rooms: dict[str, int] = {}
    for ns in snap.candidates(gang.pod):
        if ns.name not in exclude:
            for name, k in _room(ns, gang.pod):
                rooms[name] = rooms.get(name, 0) + k
    short = [name for name, k in rooms.items() if k < gang.workers]
    return " and ".join(short or rooms) or "room"


def shortfall(snap: Snapshot, gang: Gang, *, exclude: AbstractSet[str] = _NONE) -> str:
    """Why `gang` does not fit: its need against the largest free blocks. A gang that
    asks for no GPUs is told what it is short of instead (CPU, memory): "needs 0
    GPUs; ... hold 0 of 1" named nothing it could act on."""
    pod = gang.pod
    need = _needs_gpus(gang) if gang.gpu_total else _needs_no_gpus(gang)
    candidates = snap.candidates(pod)
    if not candidates:
        return f"{need}; no node matches its GPU model, node selector and tolerations"
    open_nodes = snap.open_slots(pod, exclude)
    fit = sum(k for _, k in open_nodes)
    if gang.gpu_total:
        held = f"the free GPUs of the nodes it may use hold {fit} of {gang.workers}"
    else:
        what = _short_of(snap, gang, exclude)
        held = f"the nodes it may use have free {what} for {fit} of {gang.workers}"
    parts = [f"{need}; {held}"]
    if open_nodes:
        ns, k = max(open_nodes, key=lambda nk: (nk[1], nk[0].name))
        parts.append(f"at most {k} on one node ({ns.name})")
        slots = {n.name: k for n, k in open_nodes}
        for level, key in enumerate(snap.levels):
            blocks = [
                (sum(slots.get(m.name, 0) for m in members), d)
                for d, members in snap.domain_members(level).items()
            ]
            if blocks:
                total, domain = max(blocks)
                name = LEVEL_NAMES.get(key, key)
                parts.append(f"at most {total} in one {name} ({domain})")
                break
    return "; ".join(parts)
