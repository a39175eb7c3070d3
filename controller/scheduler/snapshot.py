"""The cycle's mutable view of the cluster: free GPUs per device, usage per quota.

A snapshot is built once per cycle from the informers' state (or the
simulator's) and then changed only through `assume` and `forget`, which are
exact inverses. That is what makes preemption's what-if cheap: forget the
candidate victims, try the placement, assume them back — no copy of the
world. Derived figures are cached per node (`NodeState.stamp`) and caught
up from the nodes `assume` and `forget` changed.

A caller that keeps the cluster across cycles (the controller) need not build
every node again: `node_base` is one node with its foreign pods and running
gangs' pods taken, kept while none of those change, and `Snapshot.resumed`
starts a cycle from copies of such bases, so the cycle's `assume` and `forget`
never reach them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from controller.scheduler.fragmentation import BLOCK_GPUS, FragModel
from controller.scheduler.types import (
    MILLI,
    Gang,
    JobId,
    NamespaceQuota,
    Node,
    PodShape,
    Running,
    namespace_of,
)

__all__ = ["Foreign", "NodeBase", "NodeState", "Snapshot", "Usage", "gang_usage", "node_base"]

Usage = tuple[int, int, int, int]
"""What pods request of a namespace's quota: GPUs (milli), CPU (milli), memory, pods."""


def gang_usage(g: Gang) -> Usage:
    """What all of `g`'s pods request of its namespace's quota."""
    return (g.gpu_total, g.workers * g.pod.cpu_milli, g.workers * g.pod.memory, g.workers)


@dataclass(frozen=True)
class Foreign:
    """Resources held on a node by pods gangops does not schedule."""

    node: str
    gpus: int
    cpu_milli: int = 0
    memory: int = 0


class NodeState:
    """One node's free resources during a cycle."""

    __slots__ = ("bad", "cpu", "domains", "free", "mem", "name", "node", "stamp", "whole")

    def __init__(self, node: Node, levels: Sequence[str]) -> None:
        self.node = node
        self.name = node.name
        self.free = [MILLI] * node.gpus
        """Free milli-GPUs of each device."""
        self.whole = node.gpus
        """Devices with nothing allocated (unhealthy ones included: see `usable_whole`)."""
        self.bad = node.bad_gpus
        """Devices held back as out of service (`Node.bad_gpus`: none for a GPU the
        device plugin already left out of allocatable): never offered. Which devices
        they are is the device plugin's business; counting them among the free devices
        whenever possible is the conservative reading (a pod may already sit on one)."""
        self.cpu: int | None = node.cpu_milli or None
        self.mem: int | None = node.memory or None
        self.domains = tuple(node.labels.get(level) for level in levels)
        self.stamp = 0
        """Bumped on every change (keys cached per-node scores)."""

    def copy(self) -> NodeState:
        """An independent copy (its own free list)."""
        out = NodeState.__new__(NodeState)
        out.node, out.name, out.free, out.whole = self.node, self.name, self.free[:], self.whole
        out.bad, out.cpu, out.mem = self.bad, self.cpu, self.mem
        out.domains, out.stamp = self.domains, self.stamp
        return out

    @property
    def empty_block(self) -> int:
        """Milli-GPUs of this node if it is a whole block: `BLOCK_GPUS` or more
        GPUs, none of them allocated; else 0."""
        n = len(self.free)
        return n * MILLI if n >= BLOCK_GPUS and self.whole == n else 0

    @property
    def usable_whole(self) -> int:
        """Whole free devices that may be handed out (the unhealthy ones held back)."""
        return self.whole - self.bad if self.bad < self.whole else 0

    def slots(self, pod: PodShape) -> int:
        """How many more pods of `pod`'s shape fit on this node right now."""
        if pod.shared and pod.gpu_milli <= 0:  # a share of nothing: no device runs out
            n = 1 << 30 if self.usable_whole > 0 or self.whole < len(self.free) else 0
        elif pod.shared:
            n = sum(f // pod.gpu_milli for f in self.free)
            if self.bad:
                n -= min(self.bad, self.whole) * (MILLI // pod.gpu_milli)
                if self.bad > self.whole:  # the rest sit among the used devices:
                    n -= self._held_back(pod)  # the ones that hold the most are held back
        elif pod.gpus:
            n = self.usable_whole // pod.gpus
        else:
            n = 1 << 30
        if self.cpu is not None and pod.cpu_milli:
            n = min(n, self.cpu // pod.cpu_milli)
        if self.mem is not None and pod.memory:
            n = min(n, self.mem // pod.memory)
        return n

    def _held_back(self, pod: PodShape) -> int:
        """Pods of `pod`'s share the out-of-service GPUs beyond the whole devices
        could hold, read conservatively: the used devices with room for the most."""
        room = sorted((f // pod.gpu_milli for f in self.free if f < MILLI), reverse=True)
        return sum(room[: self.bad - self.whole])

    def take(self, pod: PodShape, devices: Sequence[int]) -> None:
        """Allocate one pod on `devices`."""
        self.stamp += 1
        for d in devices:
            if self.free[d] == MILLI:
                self.whole -= 1
            self.free[d] -= pod.gpu_milli if pod.shared else MILLI
        if self.cpu is not None:
            self.cpu -= pod.cpu_milli
        if self.mem is not None:
            self.mem -= pod.memory

    def give(self, pod: PodShape, devices: Sequence[int]) -> None:
        """Release one pod from `devices` (the inverse of `take`)."""
        self.stamp += 1
        for d in devices:
            self.free[d] += pod.gpu_milli if pod.shared else MILLI
            if self.free[d] == MILLI:
                self.whole += 1
        if self.cpu is not None:
            self.cpu += pod.cpu_milli
        if self.mem is not None:
            self.mem += pod.memory

    def pick_devices(self, pod: PodShape) -> tuple[int, ...]:
        """Devices for one more pod: whole GPUs lowest index first; a shared
        pod goes on the fullest device it fits on, so whole GPUs stay whole."""
        if pod.shared:
            whole_ok = self.usable_whole > 0
            best = min(
                (f - pod.gpu_milli, i)
                for i, f in enumerate(self.free)
                if f >= pod.gpu_milli and (f < MILLI or whole_ok)
            )
            return (best[1],)
        out = [i for i, f in enumerate(self.free) if f == MILLI][: pod.gpus]
        return tuple(out)


class _Open:
    """Nodes with room for a pod shape, as of `seen` changes, and the pods of that
    shape they hold in all (`total`)."""

    __slots__ = ("items", "seen", "slots", "total")

    def __init__(self, seen: int, slots: dict[str, tuple[NodeState, int]]) -> None:
        self.seen = seen
        self.slots = slots
        self.total = sum(k for _, k in slots.values())
        self.items: list[tuple[NodeState, int]] | None = None


_EXCLUDED_KEPT = 256
"""Open-node lists kept for exclusion sets (a cycle's held nodes): beyond this many
they are dropped, as a cycle that ends takes its held nodes with it."""


class Snapshot:
    """Free capacity and quota usage, changed only by `assume` and `forget`."""

    def __init__(
        self,
        nodes: Iterable[Node],
        *,
        levels: Sequence[str],
        running: Iterable[Running] = (),
        foreign: Iterable[Foreign] = (),
        reserve_tiers: frozenset[str] = frozenset(),
        fragmentation: FragModel | None = None,
        namespace_quota: Mapping[str, NamespaceQuota] | None = None,
        namespace_other: Mapping[str, Usage] | None = None,
    ) -> None:
        self.levels = tuple(levels)
        self.fragmentation = fragmentation
        """The target workload's fragmentation model; None places single pods best-fit."""
        self.frag_scores: dict[tuple[object, ...], dict[str, tuple[int, object]]] = {}
        """Per (GPUs, milli-GPUs, milli-CPU, memory) of a pod, per node: (node stamp,
        placement score) (`placement.frag_score`; the model keeps them by node state
        too, `FragModel.scores`)."""
        self.rankings: dict[tuple[object, ...], object] = {}
        """Per single-pod shape: the open nodes ordered by placement score, kept up
        to date from `changes` (`placement._Ranking`); dropped with the change log."""
        self.reserve_tiers = reserve_tiers
        self.running: dict[JobId, Running] = {}
        self.project_usage: dict[str, int] = {}
        self.user_usage: dict[tuple[str, str], int] = {}
        self.outside_reserve = 0
        """Milli-GPUs used by tiers that may not use the reserve."""
        self.namespace_quota: Mapping[str, NamespaceQuota] = namespace_quota or {}
        """Each namespace's ResourceQuota ceiling, as the API server enforces it."""
        self.namespace_usage: dict[str, Usage] = dict(namespace_other or {})
        """Per namespace, what its pods request: those gangops does not schedule
        (`namespace_other`, whether on a node or not) and the gangs."""
        self.version = 0
        """Bumped by every `assume`, `forget` and health change: while it stands, every
        figure a decision reads is as it was (`cycle`'s memo of waiting gangs)."""
        self.shrinkable: dict[str, int] = {}
        """Per project, running gangs that could give workers back (elastic with
        room above their floor, or grown): lets the cycle skip looking for
        shrinks where there is nothing to find."""
        self._on_node: dict[str, dict[JobId, None]] | None = None
        """Node -> the running gangs with pods there, once `running_on` was asked
        (then kept by `assume` and `forget`)."""
        self.plans: dict[tuple[object, ...], frozenset[str] | None] = {}
        """Per pod shape, workers and nodes held for others: the nodes a gang would
        take on the empty candidate nodes (`cycle._reserve`), or None; kept while
        the nodes stay as they are (a health change clears it)."""
        self._block_gpus: dict[int, int] = {}
        self._candidates: dict[tuple[object, ...], list[NodeState]] = {}
        self._candidate_names: dict[tuple[object, ...], frozenset[str]] = {}
        self._open: dict[PodShape, _Open] = {}
        self._open_excluding: dict[
            tuple[PodShape, AbstractSet[str]], tuple[int, list[tuple[NodeState, int]]]
        ] = {}
        self._changed: list[NodeState] = []
        """Nodes changed by `assume` and `forget`, in order: open-slot lists
        catch up by re-counting only these."""
        self._index([NodeState(n, self.levels) for n in nodes if n.schedulable])
        for f in foreign:
            self._hold_foreign(f)
        for r in running:
            self.assume(r)

    def _index(self, states: list[NodeState]) -> None:
        """Take `states` as the snapshot's nodes, every GPU of them free."""
        self.nodes = states
        self.by_name = {ns.name: ns for ns in self.nodes}
        self.capacity = sum(ns.node.gpus - ns.bad for ns in self.nodes) * MILLI
        """Milli-GPUs the usage figures (`project_usage`, `outside_reserve`) are measured
        against: those in service on schedulable nodes, plus those gangs outside the
        reserve tiers hold on nodes the snapshot leaves out (cordoned, not Ready,
        gone), since `outside_reserve` counts those gangs too. A reserve tier's gang
        there adds nothing: the reserve stays on the schedulable nodes, where it
        would start again. Never free: see `free_milli`."""
        self.devices = sum(len(ns.free) for ns in self.nodes)
        """GPUs of schedulable nodes, in service or not (fixed for the snapshot's life)."""
        self.free_milli = sum(len(ns.free) for ns in self.nodes) * MILLI
        """Free milli-GPUs on schedulable nodes (a gang's pods on other nodes take
        none of them)."""
        self.free_by_model: dict[str, int] = {}
        """The same per GPU model (fragmentation's `pressure`)."""
        self.empty_blocks = 0
        """Milli-GPUs of the nodes that are whole blocks (`NodeState.empty_block`)."""
        for ns in self.nodes:
            model = ns.node.gpu_model
            self.free_by_model[model] = self.free_by_model.get(model, 0) + len(ns.free) * MILLI
            self.empty_blocks += ns.empty_block
        self._domains: list[dict[str, list[NodeState]]] = [{} for _ in self.levels]
        for ns in self.nodes:
            for i, d in enumerate(ns.domains):
                if d is not None:
                    self._domains[i].setdefault(d, []).append(ns)

    def block_gpus(self, cpu: int) -> int:
        """GPUs of the nodes of `BLOCK_GPUS` or more GPUs whose allocatable CPU is at
        least `cpu` milli-CPU, used or not (kept: the nodes stay for the snapshot's
        life)."""
        found = self._block_gpus.get(cpu)
        if found is None:
            found = self._block_gpus[cpu] = sum(
                len(ns.free)
                for ns in self.nodes
                if len(ns.free) >= BLOCK_GPUS and (ns.node.cpu_milli or 0) >= cpu
            )
        return found

    @classmethod
    def resumed(
        cls,
        bases: Iterable[NodeBase],
        *,
        levels: Sequence[str],
        running: Iterable[Running] = (),
        reserve_tiers: frozenset[str] = frozenset(),
        fragmentation: FragModel | None = None,
        namespace_quota: Mapping[str, NamespaceQuota] | None = None,
        namespace_other: Mapping[str, Usage] | None = None,
    ) -> Snapshot:
        """The snapshot `Snapshot(nodes, foreign=..., running=running, ...)` would
        build, from each schedulable node's `node_base` (built with these `levels`,
        the node's foreign hold and `running`'s pods on it, in `running`'s order):
        the bases are copied, never changed, so a cycle on the result leaves them
        as they were and the next cycle may start from them again."""
        snap = cls((), levels=levels, reserve_tiers=reserve_tiers, fragmentation=fragmentation,
                   namespace_quota=namespace_quota, namespace_other=namespace_other)  # fmt: skip
        bases = list(bases)
        snap._index([b.state.copy() for b in bases])
        on_bases = 0
        for b in bases:
            snap.free_milli -= b.foreign_milli + b.pods_milli
            snap.free_by_model[b.state.node.gpu_model] -= b.foreign_milli + b.pods_milli
            on_bases += b.pods_milli
        held = 0
        for r in running:
            snap.running[r.gang.id] = r
            held += len(r.placement.pods) * r.gang.pod.gpu_total
            snap._count(r.gang, +1)
            if r.gang.tier in reserve_tiers:  # rare: off a base, it is not in capacity
                held -= sum(r.gang.pod.gpu_total for p in r.placement.pods
                            if p.node not in snap.by_name)  # fmt: skip
        snap.capacity += held - on_bases  # what gangs hold on nodes without a base
        return snap

    def _hold_foreign(self, f: Foreign) -> None:
        ns = self.by_name.get(f.node)
        if ns is None:
            return
        self.empty_blocks -= ns.empty_block
        for _ in range(min(f.gpus, ns.whole)):
            i = ns.free.index(MILLI)
            ns.free[i] = 0
            ns.whole -= 1
            ns.stamp += 1
            self.free_milli -= MILLI
            self.free_by_model[ns.node.gpu_model] -= MILLI
        if ns.cpu is not None:
            ns.cpu -= f.cpu_milli
        if ns.mem is not None:
            ns.mem -= f.memory
        ns.stamp += 1
        self.empty_blocks += ns.empty_block

    def domain_members(self, level: int) -> dict[str, list[NodeState]]:
        """Nodes per domain value at topology level `level`."""
        return self._domains[level]

    def candidates(self, pod: PodShape) -> list[NodeState]:
        """Nodes `pod` may use at all: GPU model, labels, taints (cached)."""
        key = pod.constraint_key()
        found = self._candidates.get(key)
        if found is None:
            found = [ns for ns in self.nodes if _statically_fits(ns.node, pod)]
            self._candidates[key] = found
            self._candidate_names[key] = frozenset(ns.name for ns in found)
        return found

    def _opened(self, pod: PodShape) -> _Open:
        """The candidate nodes with room for `pod`, caught up with the change log."""
        entry = self._open.get(pod)
        if entry is None:
            slots: dict[str, tuple[NodeState, int]] = {}
            for ns in self.candidates(pod):
                k = ns.slots(pod)
                if k > 0:
                    slots[ns.name] = (ns, k)
            entry = _Open(len(self._changed), slots)
            self._open[pod] = entry
        elif entry.seen != len(self._changed):
            allowed = self._candidate_names[pod.constraint_key()]
            for ns in self.changes(entry.seen):
                if ns.name not in allowed:
                    continue
                old = entry.slots.get(ns.name)
                if old is not None:
                    entry.total -= old[1]
                k = ns.slots(pod)
                if k > 0:
                    entry.slots[ns.name] = (ns, k)
                    entry.total += k
                elif old is not None:
                    del entry.slots[ns.name]
            entry.seen = len(self._changed)
            entry.items = None
        return entry

    def open_slots(self, pod: PodShape, exclude: AbstractSet[str]) -> list[tuple[NodeState, int]]:
        """Candidate nodes not in `exclude` with room for at least one `pod`,
        and how many fit on each (cached; after a change only the changed
        nodes are counted again, and an exclusion set filters that list)."""
        entry = self._opened(pod)
        if not exclude:
            if entry.items is None:
                entry.items = list(entry.slots.values())
            return entry.items
        key = (pod, exclude)
        hit = self._open_excluding.get(key)
        if hit is not None and hit[0] == entry.seen:
            return hit[1]
        items = [v for name, v in entry.slots.items() if name not in exclude]
        if len(self._open_excluding) >= _EXCLUDED_KEPT:
            self._open_excluding.clear()
        self._open_excluding[key] = (entry.seen, items)
        return items

    def open_map(self, pod: PodShape) -> Mapping[str, tuple[NodeState, int]]:
        """The candidate nodes with room for `pod` (none excluded) by name, and how
        many fit on each."""
        return self._opened(pod).slots

    def open_total(self, pod: PodShape, exclude: AbstractSet[str]) -> int:
        """How many `pod`s the candidate nodes not in `exclude` hold in all."""
        entry = self._opened(pod)
        total = entry.total
        for name in exclude:
            hit = entry.slots.get(name)
            if hit is not None:
                total -= hit[1]
        return total

    def running_on(self, nodes: Iterable[str]) -> list[Running]:
        """The running gangs with a pod on any of `nodes`, each once (an index of
        the running gangs by node is built on the first call and kept after)."""
        if self._on_node is None:
            self._on_node = {}
            for job, r in self.running.items():
                for p in r.placement.pods:
                    self._on_node.setdefault(p.node, {})[job] = None
        jobs: dict[JobId, None] = {}
        for n in nodes:
            jobs.update(self._on_node.get(n, {}))
        return [self.running[j] for j in jobs]

    def changes(self, seen: int) -> list[NodeState]:
        """The nodes changed since the change log held `seen` entries, each once, in
        the order of their first change (the log and everything read from it is
        dropped together when it grows long: see `rankings`)."""
        return list(dict.fromkeys(self._changed[seen:]))

    @property
    def changed(self) -> int:
        """Entries in the change log: `changes` from here on are new."""
        return len(self._changed)

    def set_unhealthy(self, name: str, unhealthy: frozenset[int]) -> None:
        """Node `name`'s GPUs out of service are now `unhealthy`. The controller builds
        a snapshot per step from nodes that carry it (`telemetry.with_health`); the
        simulator keeps one for a run and tells it here, so only that node's cached
        figures are counted again."""
        ns = self.by_name.get(name)
        if ns is None or ns.node.unhealthy == unhealthy:
            return
        ns.node = replace(ns.node, unhealthy=unhealthy)
        self.plans.clear()
        self.version += 1
        self.capacity += (ns.bad - ns.node.bad_gpus) * MILLI
        ns.bad = ns.node.bad_gpus
        ns.stamp += 1
        self._touch(ns)

    def _touch(self, ns: NodeState) -> None:
        self._changed.append(ns)
        if len(self._changed) > 4 * len(self.nodes) + 1024:
            self._changed.clear()
            self._open.clear()
            self._open_excluding.clear()
            self.rankings.clear()

    def assume(self, r: Running) -> None:
        """Put a running (or just admitted) gang into the snapshot. Its pods on nodes
        the snapshot leaves out take no free GPUs; outside the reserve tiers their
        GPUs join `capacity`, as they join `outside_reserve`."""
        g = r.gang
        for p in r.placement.pods:
            ns = self.by_name.get(p.node)
            if ns is not None:
                self.empty_blocks -= ns.empty_block
                ns.take(g.pod, p.devices)
                self.empty_blocks += ns.empty_block
                self._touch(ns)
                self.free_milli -= g.pod.gpu_total
                self.free_by_model[ns.node.gpu_model] -= g.pod.gpu_total
            elif g.tier not in self.reserve_tiers:
                self.capacity += g.pod.gpu_total
        self.running[g.id] = r
        self.version += 1
        if self._on_node is not None:
            for p in r.placement.pods:
                self._on_node.setdefault(p.node, {})[g.id] = None
        self._count(g, +1)

    def forget(self, job: JobId) -> Running:
        """Take a gang out of the snapshot (the inverse of `assume`)."""
        r = self.running.pop(job)
        self.version += 1
        if self._on_node is not None:
            for p in r.placement.pods:
                self._on_node[p.node].pop(job, None)
        for p in r.placement.pods:
            ns = self.by_name.get(p.node)
            if ns is not None:
                self.empty_blocks -= ns.empty_block
                ns.give(r.gang.pod, p.devices)
                self.empty_blocks += ns.empty_block
                self._touch(ns)
                self.free_milli += r.gang.pod.gpu_total
                self.free_by_model[ns.node.gpu_model] += r.gang.pod.gpu_total
            elif r.gang.tier not in self.reserve_tiers:
                self.capacity -= r.gang.pod.gpu_total
        self._count(r.gang, -1)
        return r

    def count(self, g: Gang, sign: int, *, namespace: bool = True) -> None:
        """Add (`sign` 1) or take out (-1) `g`'s GPUs and requests in the quota and
        reserve figures alone, placing nothing: what a nomination has been promised
        while its victims' pods still hold its nodes, or what a victim not yet
        evicted is about to give back (`cycle.schedule`). `namespace=False` leaves
        its namespace's figures alone: a ResourceQuota counts a pod until it is gone."""
        self.version += 1
        self._count(g, sign, elastic=False, namespace=namespace)

    def count_namespace(self, g: Gang, sign: int) -> None:
        """`g`'s requests in its namespace's figures alone (`count`)."""
        self.version += 1
        self._count_namespace(g, sign)

    def _count_namespace(self, g: Gang, sign: int) -> None:
        ns = namespace_of(g.id)
        if ns is not None:
            old = self.namespace_usage.get(ns, (0, 0, 0, 0))
            new = gang_usage(g)
            self.namespace_usage[ns] = (
                old[0] + sign * new[0],
                old[1] + sign * new[1],
                old[2] + sign * new[2],
                old[3] + sign * new[3],
            )

    def _count(self, g: Gang, sign: int, *, elastic: bool = True, namespace: bool = True) -> None:
        if namespace:
            self._count_namespace(g, sign)
        amount = sign * g.gpu_total
        self.project_usage[g.project] = self.project_usage.get(g.project, 0) + amount
        key = (g.project, g.user)
        self.user_usage[key] = self.user_usage.get(key, 0) + amount
        if g.tier not in self.reserve_tiers:
            self.outside_reserve += amount
        floor = min(g.min_workers or g.workers, g.submitted_workers)
        if elastic and floor < g.workers:
            self.shrinkable[g.project] = self.shrinkable.get(g.project, 0) + sign


@dataclass(frozen=True)
class NodeBase:
    """One schedulable node as a cycle starts with it (`node_base`): its state once
    the foreign pods and the running gangs' pods on it are taken. Never changed:
    `Snapshot.resumed` copies the state."""

    state: NodeState
    foreign_milli: int
    """Milli-GPUs the foreign hold took (off `free_milli` and `free_by_model`)."""
    pods_milli: int
    """Milli-GPUs the running gangs' pods took (off `free_by_model`)."""


def node_base(
    node: Node,
    *,
    levels: Sequence[str],
    foreign: Foreign | None,
    pods: Iterable[tuple[PodShape, Sequence[int]]],
) -> NodeBase:
    """A schedulable `node` with `foreign` held and `pods` (each running pod's shape
    and devices, in the order `Snapshot` assumes them) taken, exactly as
    `Snapshot(...)` leaves it."""
    snap = Snapshot((node,), levels=levels, foreign=() if foreign is None else (foreign,))
    (state,) = snap.nodes
    foreign_milli = len(state.free) * MILLI - snap.free_milli
    pods_milli = 0
    for shape, devices in pods:
        state.take(shape, devices)
        pods_milli += shape.gpu_total
    return NodeBase(state, foreign_milli, pods_milli)


def _statically_fits(node: Node, pod: PodShape) -> bool:
    if pod.gpus and node.gpus < pod.gpus:
        return False
    if pod.gpu_models and node.gpu_model not in pod.gpu_models:
        return False
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector):
        return False
    if pod.affinity and not any(all(r.matches(labels) for r in term) for term in pod.affinity):
        return False
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(
            tol.tolerates(t) for tol in pod.tolerations
        ):
            return False
    return True
