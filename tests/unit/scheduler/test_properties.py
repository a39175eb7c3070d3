"""Hypothesis properties of the scheduling cycle on random clusters and queues:
no device over-allocated, no quota exceeded, gangs all-or-nothing, and a
higher tier never left waiting where preemption would have let it in; elastic
gangs grow and shrink within minGPU..maxGPU and the quota."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduler.cycle import schedule
from controller.scheduler.placement import place
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import MILLI, Admit, Gang, Pending, Preempt
from tests.unit.scheduler.builders import TIERS, JobBuilder, job, node, policy, running

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")
PROJECTS = ("a", "b", "c")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, list[Gang], object]:
    n_nodes = draw(st.integers(1, 6))
    nodes = [
        node(
            f"n{i}",
            draw(st.sampled_from([4, 8])),
            clique=f"c{i // 2}",
            rack=f"r{i // 4}",
        )
        for i in range(n_nodes)
    ]
    quotas = {
        p: {"guaranteed": draw(st.integers(0, 8)), "max": draw(st.sampled_from([None, 8, 16]))}
        for p in PROJECTS
    }
    pol = policy(quotas)
    # Fill the cluster through the scheduler itself, so the starting state is one
    # the scheduler could have produced (quota respected).
    snap = Snapshot(nodes, levels=LEVELS)
    warm = []
    for i in range(draw(st.integers(0, 8))):
        size = draw(st.sampled_from([1, 2, 4, 8]))
        b = (
            job(f"r{i}")
            .project(draw(st.sampled_from(PROJECTS)))
            .tier(draw(st.sampled_from(["normal", "batch"])))
            .gang(size)
        )
        if draw(st.booleans()):  # elastic
            b = b.elastic(draw(st.integers(1, size)), size * draw(st.integers(1, 3)))
        warm.append(b.build())
    schedule(snap, warm, pol, now=-10_000)
    # Grow the elastic ones onto what is left, as a later cycle would.
    schedule(snap, [], pol, now=-5_000)
    queue = [queued(draw, f"q{i}").at(float(i)).build() for i in range(draw(st.integers(1, 8)))]
    return snap, queue, pol


def queued(draw: st.DrawFn, name: str, *, most: int = 4) -> JobBuilder:
    """A waiting gang: a drawn project, user and tier, workers of 1, 2 or 4 GPUs,
    up to `most` of them."""
    per = draw(st.sampled_from([1, 2, 4]))
    return (
        job(name)
        .project(draw(st.sampled_from(PROJECTS)))
        .user(draw(st.sampled_from(["u1", "u2"])))
        .tier(draw(st.sampled_from(list(TIERS))))
        .gang(per * draw(st.integers(1, most)), per_worker=per)
    )


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_cycle_invariants(scenario: tuple[Snapshot, list[Gang], object]) -> None:
    snap, queue, pol = scenario
    assert not isinstance(pol, Snapshot)
    before = dict(snap.running)
    result = schedule(snap, queue, pol, now=0.0)  # type: ignore[arg-type]

    # The pods of a gang evicted or shrunk this cycle hold their GPUs until they
    # terminate: no gang is admitted onto them in the same cycle (found by a review:
    # a gang decided after the preemptor was, and the kubelet refused its pod).
    gone = [
        before[victim]
        for d in result.decisions
        if isinstance(d, Preempt)
        for victim in (*d.victims, *(j for j, _ in d.shrinks))
    ]
    releasing = {n for r in gone for n in r.placement.nodes()}
    still_held = {  # whole devices (a shared one may have had room beside the victim)
        (p.node, dev)
        for r in gone
        if not r.gang.pod.shared
        for p in r.placement.pods
        for dev in p.devices
    }
    for d in result.decisions:
        if isinstance(d, Admit):
            taken = {(p.node, dev) for p in d.placement.pods for dev in p.devices}
            assert not taken & still_held, d

    # No device over-allocated, none negative.
    for ns in snap.nodes:
        assert all(0 <= f <= MILLI for f in ns.free)
        assert ns.whole == sum(f == MILLI for f in ns.free)
    used: Counter[tuple[str, int]] = Counter()
    for r in snap.running.values():
        for p in r.placement.pods:
            for d in p.devices:
                used[(p.node, d)] += r.gang.pod.gpu_milli if r.gang.pod.shared else MILLI
    assert all(v <= MILLI for v in used.values())

    # All or nothing: an admitted gang has every worker placed with its GPUs.
    for d in result.decisions:
        if isinstance(d, Admit | Preempt):
            assert len(d.placement.pods) == d.gang.workers
            assert all(len(p.devices) == d.gang.pod.gpus for p in d.placement.pods)

    # Elastic: every running gang within its range, placed whole at its size.
    for r in snap.running.values():
        g = r.gang
        assert len(r.placement.pods) == g.workers
        assert g.min_workers is None or g.workers >= g.min_workers
        assert g.workers <= max(g.max_workers or 0, g.submitted_workers)
    for d in result.decisions:
        if isinstance(d, Preempt):
            for victim, kept in d.shrinks:
                assert snap.running[victim].gang.workers == kept
    for rz in result.resizes:
        assert snap.running[rz.gang.id].placement == rz.placement
    # Usage is exactly what the running gangs hold.
    usage: Counter[str] = Counter()
    for r in snap.running.values():
        usage[r.gang.project] += r.gang.gpu_total
    assert {k: v for k, v in snap.project_usage.items() if v} == +usage
    shrinkable: Counter[str] = Counter(
        r.gang.project
        for r in snap.running.values()
        if min(r.gang.min_workers or r.gang.workers, r.gang.submitted_workers) < r.gang.workers
    )
    assert {k: v for k, v in snap.shrinkable.items() if v} == +shrinkable

    # Quota: no project over its max.
    for name, project in pol.projects.items():  # type: ignore[attr-defined]
        if project.max is not None:
            assert snap.project_usage.get(name, 0) <= project.max

    # A capacity-blocked gang could not have fitted by evicting every lower-tier
    # preemptible gang that ran before the cycle (preemption is on, no minimum
    # runtime, ample budget); gangs admitted this cycle behind it are backfill.
    for d in result.decisions:
        if not (isinstance(d, Pending) and d.code == "Capacity") or not d.gang.may_preempt:
            continue
        exclude = frozenset() if result.reserved_for == d.gang.id else result.reserved_nodes
        exclude |= releasing
        victims = [
            r
            for r in snap.running.values()
            if r.gang.preemptible and r.gang.priority < d.gang.priority and r.started < 0
        ]
        for r in victims:
            snap.forget(r.gang.id)
        assert place(snap, d.gang, exclude=exclude) is None, d
        for r in victims:
            snap.assume(r)


def test_running_builder_matches_scheduler_accounting() -> None:
    g = job("x").gang(4).build()
    snap = Snapshot([node("n1")], levels=LEVELS, running=[running(g, {"n1": 4})])
    assert snap.free_milli == 4 * MILLI
    assert snap.project_usage["p"] == 4 * MILLI
