"""The schedulers a simulation compares, behind one small interface.

- `gangops`: the real scheduling core (`controller.scheduler.cycle.schedule`)
  with the given policies, on one snapshot kept for the whole run (assume on
  admission, forget on completion; the same state the controller rebuilds
  each cycle, since assume and forget are exact inverses);
- `static`: the same core, but each project confined to its own island of
  nodes sized by its guarantee, with no borrowing ("resource islands");
- `fifo-greedy`: pods placed one at a time, first fit, in submission order,
  with no gang awareness: a gang's pods hold their GPUs while its other pods
  wait, which is how half-placed gangs deadlock a cluster;
- `bestfit`, `random`, `fgd`: per-pod placement (see `baselines`), gang
  all-or-nothing, no quotas.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.scheduler.cycle import schedule
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.placement import place
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import NodeState, Snapshot
from controller.scheduler.types import (
    Admit,
    Gang,
    JobId,
    Node,
    Pending,
    Placement,
    PodPlacement,
    PodShape,
    Preempt,
    Running,
)
from controller.sim.baselines import PLACERS, FgdPlacer, Placer
from controller.sim.telemetry import Feed

__all__ = ["SCHEDULERS", "Outcome", "Scheduler", "make_scheduler"]

SCHEDULERS = ("gangops", "static", "fifo-greedy", "bestfit", "random", "fgd")


@dataclass
class Outcome:
    """What one cycle changed."""

    started: list[JobId] = field(default_factory=list)
    preempted: list[JobId] = field(default_factory=list)
    rejected: list[JobId] = field(default_factory=list)
    """Gangs that can never run here: refused by the policy, above their
    user's max, or not placeable even on the empty cluster (or island); the
    engine drops and counts them."""
    resized: list[tuple[JobId, int]] = field(default_factory=list)
    """Running elastic gangs grown or shrunk: (job, workers it now has)."""


class Scheduler(Protocol):
    """One scheduler under simulation."""

    name: str

    def cycle(self, now: float, pending: Sequence[Gang], recent_preemptions: int) -> Outcome:
        """Decide for the pending gangs (in submission order); start or preempt."""
        ...

    def release(self, job: JobId) -> None:
        """A running job ended: free what it holds."""
        ...

    def node_states(self) -> Iterable[NodeState]:
        """Every node's current free capacity."""
        ...

    def partial(self) -> Mapping[JobId, int]:
        """Gangs holding some but not all of their pods' GPUs: milli-GPUs held."""
        ...

    def placement(self, job: JobId) -> Placement | None:
        """Where a running job's pods are (None: not running)."""
        ...


class GangopsScheduler:
    """The real core: `cycle.schedule` on a snapshot that lives for the run. With a
    telemetry `feed`, each cycle the snapshot's nodes carry the GPUs out of service
    (`Snapshot.set_unhealthy` when they change: what `telemetry.with_health` gives
    the controller's per-step snapshot) and the cycle gets the feed's `Hints`."""

    def __init__(
        self,
        nodes: Sequence[Node],
        policy: SchedulingPolicy,
        fragmentation: FragModel | None,
        name: str = "gangops",
        feed: Feed | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.nodes = tuple(nodes)
        self.feed = feed
        self.snap = Snapshot(
            nodes,
            levels=policy.topology_levels,
            reserve_tiers=policy.reserve_tiers,
            fragmentation=fragmentation,
        )
        self._health: Mapping[str, frozenset[int]] = {}
        self._empty: Snapshot | None = None
        self._ever_fits: dict[tuple[PodShape, int, bool], bool] = {}
        self._ever_fits_gang: dict[JobId, tuple[Gang, bool]] = {}

    def ever_fits(self, g: Gang) -> bool:
        """Whether the gang fits these nodes when they are all free (and
        outside the reserve unless its tier may use it), and its user's max."""
        seen = self._ever_fits_gang.get(g.id)
        if seen is not None and seen[0] is g:  # asked again each cycle it waits
            return seen[1]
        fits = self._ever_fits_shape(g)
        self._ever_fits_gang[g.id] = (g, fits)
        return fits

    def _ever_fits_shape(self, g: Gang) -> bool:
        project = self.policy.projects.get(g.project)
        user_max = project.user(g.user).max if project is not None else None
        if user_max is not None and g.gpu_total > user_max:
            return False
        reserved = g.tier not in self.policy.reserve_tiers and self.policy.reserve > 0
        key = (g.pod, g.workers, reserved)
        if key not in self._ever_fits:
            if self._empty is None:
                self._empty = Snapshot(
                    self.nodes,
                    levels=self.policy.topology_levels,
                    reserve_tiers=self.policy.reserve_tiers,
                )
            usable = self._empty.capacity - (self.policy.reserve if reserved else 0)
            self._ever_fits[key] = g.gpu_total <= usable and place(self._empty, g) is not None
        return self._ever_fits[key]

    def cycle(self, now: float, pending: Sequence[Gang], recent_preemptions: int) -> Outcome:
        out = Outcome()
        queue = []
        for g in pending:
            if self.ever_fits(g):
                queue.append(g)
            else:
                out.rejected.append(g.id)
        hints = None
        if self.feed is not None:
            health = self.feed.unhealthy(now)
            if health != self._health:
                for name in health.keys() | self._health.keys():
                    self.snap.set_unhealthy(name, health.get(name, frozenset()))
                self._health = health
            hints = self.feed.hints(now, self.snap, queue)
        # Even with nothing queued: a cycle may grow elastic gangs onto idle GPUs.
        result = schedule(
            self.snap,
            queue,
            self.policy,
            now=now,
            preemptions_last_hour=recent_preemptions,
            hints=hints,
        )
        for d in result.decisions:
            if isinstance(d, Admit):
                out.started.append(d.gang.id)
                self._ever_fits_gang.pop(d.gang.id, None)
            elif isinstance(d, Preempt):
                out.preempted.extend(d.victims)
                out.resized.extend(d.shrinks)
                out.started.append(d.gang.id)
                self._ever_fits_gang.pop(d.gang.id, None)
            elif isinstance(d, Pending) and d.code == "Refused":
                out.rejected.append(d.gang.id)
        out.resized.extend((rz.gang.id, rz.gang.workers) for rz in result.resizes)
        return out

    def release(self, job: JobId) -> None:
        self.snap.forget(job)

    def node_states(self) -> Iterable[NodeState]:
        return self.snap.nodes

    def partial(self) -> Mapping[JobId, int]:
        return {}

    def placement(self, job: JobId) -> Placement | None:
        r = self.snap.running.get(job)
        return r.placement if r is not None else None


def _island_policy(doc: Mapping[str, Any], project: str, gpus: int) -> SchedulingPolicy:
    island = copy.deepcopy(dict(doc))
    island["projects"] = [p for p in island["projects"] if p["name"] == project]
    for p in island["projects"]:
        p["quota"] = {"guaranteed": {"gpu": gpus}, "max": {"gpu": gpus}}
    island["cluster"]["reserve"] = {"gpu": 0, "tiers": []}
    island["cluster"]["fairShare"] = {**island["cluster"]["fairShare"], "borrowing": False}
    return SchedulingPolicy.from_dict(island)


def islands(nodes: Sequence[Node], guarantees: Mapping[str, int]) -> dict[str, list[Node]]:
    """Every node given to a project, in proportion to the guarantees.

    The guarantees usually add up to less than the cluster (the reserve and
    any unpromised GPUs); a static-island cluster still gives every node to
    some team, so each island is (its guarantee / all guarantees) of the
    whole cluster. The split is stratified: each class of identical nodes
    (GPUs, model, CPU, memory) is shared out in those proportions, largest
    nodes first, so every island gets the same mix of hardware as the
    cluster (a team with a small share must not end up with only the small
    nodes, or none of the nodes its largest pods need). What a class cannot
    split evenly is carried over to the next, so the islands' sizes stay
    within about one node of their targets.
    """
    total = sum(guarantees.values()) or 1
    share = {p: g / total for p, g in guarantees.items()}
    out: dict[str, list[Node]] = {p: [] for p in guarantees}
    classes: dict[tuple[int, str, int, int], list[Node]] = {}
    for n in nodes:
        classes.setdefault((n.gpus, n.gpu_model, n.cpu_milli, n.memory), []).append(n)
    debt = {p: 0.0 for p in guarantees}
    """GPUs a project is owed from the classes already split."""
    for key in sorted(classes, key=lambda k: (-k[0], -len(classes[k]), k)):
        members = sorted(classes[key], key=lambda n: n.name)
        owed = {p: debt[p] + share[p] * sum(n.gpus for n in members) for p in guarantees}
        for n in members:
            p = max(sorted(owed), key=lambda p: owed[p])
            out[p].append(n)
            owed[p] -= n.gpus
        debt = owed
    return out


class StaticScheduler:
    """Each project on its own island, sized by its guarantee; no borrowing."""

    def __init__(
        self, nodes: Sequence[Node], doc: Mapping[str, Any], fragmentation: FragModel | None
    ) -> None:
        self.name = "static"
        policy = SchedulingPolicy.from_dict(doc)
        split = islands(nodes, {p.name: p.guaranteed for p in policy.projects.values()})
        self.parts = {
            project: GangopsScheduler(
                members,
                _island_policy(doc, project, sum(n.gpus for n in members)),
                fragmentation,
                name=f"static:{project}",
            )
            for project, members in split.items()
        }
        self.owner: dict[JobId, str] = {}

    def cycle(self, now: float, pending: Sequence[Gang], recent_preemptions: int) -> Outcome:
        out = Outcome()
        by_project: dict[str, list[Gang]] = {}
        for g in pending:
            by_project.setdefault(g.project, []).append(g)
        for project in sorted(by_project.keys() - self.parts.keys()):
            out.rejected += [g.id for g in by_project[project]]
        for project, part in sorted(self.parts.items()):
            o = part.cycle(now, by_project.get(project, []), recent_preemptions)
            out.started += o.started
            out.preempted += o.preempted
            out.rejected += o.rejected
            out.resized += o.resized
            for j in o.started:
                self.owner[j] = project
        return out

    def release(self, job: JobId) -> None:
        self.parts[self.owner.pop(job)].release(job)

    def node_states(self) -> Iterable[NodeState]:
        for part in self.parts.values():
            yield from part.snap.nodes

    def partial(self) -> Mapping[JobId, int]:
        return {}

    def placement(self, job: JobId) -> Placement | None:
        owner = self.owner.get(job)
        return self.parts[owner].placement(job) if owner is not None else None


class PerPodScheduler:
    """Pods placed one at a time by a baseline placer.

    With `gang_aware`, a gang whose pods do not all fit places none; without
    it (fifo-greedy) every pod that fits is bound at once and holds its GPUs
    until the rest of its gang is placed.
    """

    def __init__(self, name: str, nodes: Sequence[Node], placer: Placer, *, seed: int) -> None:
        self.name = name
        self.gang_aware = name != "fifo-greedy"
        self.placer = placer
        self.rng = random.Random(seed)
        self.snap = Snapshot(nodes, levels=())
        self.bound: dict[JobId, list[JobId]] = {}
        """Job -> the snapshot entries of its bound pods."""
        self.gangs: dict[JobId, Gang] = {}
        self.pod_ids = 0

    def _bind(self, g: Gang, pod: PodPlacement) -> None:
        self.pod_ids += 1
        one = Gang(JobId(f"{g.id}#{self.pod_ids}"), g.project, g.user, g.tier, g.priority,
                   g.created, 1, g.pod)  # fmt: skip
        self.snap.assume(Running(one, Placement((pod,)), 0.0))
        self.bound.setdefault(g.id, []).append(one.id)
        self.gangs[g.id] = g

    def _unbind_all(self, job: JobId) -> None:
        for rid in self.bound.pop(job, []):
            self.snap.forget(rid)
        self.gangs.pop(job, None)

    def cycle(self, now: float, pending: Sequence[Gang], recent_preemptions: int) -> Outcome:
        if not self.gang_aware:
            return self._interleaved(pending)
        out = Outcome()
        for g in pending:
            placed = 0
            for _ in range(g.workers):
                pod = self.placer(self.snap, g.pod, self.rng)
                if pod is None:
                    break
                self._bind(g, pod)
                placed += 1
            if placed == g.workers:
                out.started.append(g.id)
            elif placed:
                self._unbind_all(g.id)
        return out

    def _interleaved(self, pending: Sequence[Gang]) -> Outcome:
        """Pods of the pending gangs one at a time, round-robin in submission
        order (the order a pod queue sees pods that job controllers create
        concurrently); each pod that fits is bound and keeps its GPUs."""
        out = Outcome()
        left = {g.id: g.workers - len(self.bound.get(g.id, ())) for g in pending}
        active = [g for g in pending if left[g.id] > 0]
        while active:
            still = []
            for g in active:
                pod = self.placer(self.snap, g.pod, self.rng)
                if pod is None:
                    continue
                self._bind(g, pod)
                left[g.id] -= 1
                if left[g.id] == 0:
                    out.started.append(g.id)
                else:
                    still.append(g)
            active = still
        for g in pending:
            if left[g.id] == 0 and g.id not in out.started:
                out.started.append(g.id)
        return out

    def release(self, job: JobId) -> None:
        self._unbind_all(job)

    def node_states(self) -> Iterable[NodeState]:
        return self.snap.nodes

    def partial(self) -> Mapping[JobId, int]:
        return {
            j: len(pods) * self.gangs[j].pod.gpu_total
            for j, pods in self.bound.items()
            if len(pods) < self.gangs[j].workers
        }

    def placement(self, job: JobId) -> Placement | None:
        pods = self.bound.get(job)
        if not pods:
            return None
        return Placement(tuple(p for rid in pods for p in self.snap.running[rid].placement.pods))


def make_scheduler(
    name: str,
    nodes: Sequence[Node],
    doc: Mapping[str, Any],
    *,
    fragmentation: FragModel | None,
    seed: int,
    feed: Feed | None = None,
) -> Scheduler:
    """A fresh scheduler called `name` (one of `SCHEDULERS`); `feed`: telemetry for
    gangops (the baselines schedule by requests alone)."""
    if name == "gangops":
        return GangopsScheduler(nodes, SchedulingPolicy.from_dict(doc), fragmentation, feed=feed)
    if name == "static":
        return StaticScheduler(nodes, doc, fragmentation)
    if name == "fifo-greedy":
        return PerPodScheduler(name, nodes, PLACERS["first-fit"], seed=seed)
    if name in PLACERS:
        return PerPodScheduler(name, nodes, PLACERS[name], seed=seed)
    if name == "fgd":
        typical = fragmentation.typical if fragmentation is not None else ()
        placer = FgdPlacer(typical, [n.name for n in nodes], seed=seed)
        return PerPodScheduler(name, nodes, placer, seed=seed)
    raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}")
