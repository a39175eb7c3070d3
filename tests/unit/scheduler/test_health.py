"""GPUs out of service (the node agent's annotation, or telemetry) are never offered:
a node with one bad GPU of eight offers seven, to placement, packing and preemption's
what-ifs alike."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduler.cycle import schedule
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.placement import place
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import (
    MILLI,
    Admit,
    Node,
    Pending,
    Placement,
    PodPlacement,
    Preempt,
    Running,
)
from tests.unit.scheduler.builders import job, node, policy, running

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")


def _bad(n: Node, *gpus: int) -> Node:
    return replace(n, unhealthy=frozenset(gpus))


def test_a_node_with_one_bad_gpu_of_eight_offers_seven() -> None:
    snap = Snapshot([_bad(node("a"), 3)], levels=LEVELS)
    assert place(snap, job("eight").gang(8, per_worker=8).build()) is None
    assert place(snap, job("seven").gang(7).build()) is not None
    assert snap.capacity == 7 * MILLI


def test_the_gang_goes_to_the_healthy_node() -> None:
    snap = Snapshot([_bad(node("a"), 0), node("b")], levels=LEVELS)
    p = place(snap, job("g").gang(8).build())
    assert p is not None and set(p.nodes()) == {"b"}


def test_a_whole_node_gang_waits_when_a_node_has_a_bad_gpu() -> None:
    snap = Snapshot([_bad(node("a"), 5), node("b")], levels=LEVELS)
    result = schedule(snap, [job("big").gang(16, per_worker=8).build()], policy(), now=0.0)
    (d,) = result.decisions
    assert isinstance(d, Pending) and d.code == "Capacity"


def test_shared_pods_do_not_open_the_last_whole_device_that_is_bad() -> None:
    # 2 GPUs, 1 bad, 1 used whole: nothing left for a half GPU
    n = _bad(node("a", 2), 1)
    whole = job("w").gang(1).build()
    snap = Snapshot([n], levels=LEVELS, running=[running(whole, {"a": 1})])
    half = job("h").share(500).build()
    assert place(snap, half) is None


def test_shared_pods_never_use_room_on_bad_devices_beyond_the_whole_ones() -> None:
    """More bad GPUs than whole devices: the rest are among the used ones, and the
    room of the used devices with the most is held back (found by a review: a node
    whose two GPUs were both bad took a second half-GPU pod)."""
    half = job("h").share(500).build()
    both_bad = _bad(node("a", 2), 0, 1)
    for model in (None, FragModel.of([half.pod])):
        snap = Snapshot(
            [both_bad], levels=LEVELS, running=[running(half, {"a": 1})], fragmentation=model
        )
        assert snap.capacity == 0
        assert place(snap, job("h2").share(500).build()) is None, model
    # 4 GPUs, 3 bad; three quarter-GPU pods on device 0 and one on device 1: one of
    # the used devices is bad, the one with room for three is held back
    quarter = job("q").share(250).build()
    pods = [
        Running(replace(quarter, id=f"p/q{i}"), Placement((PodPlacement("a", (d,)),)), 0.0)
        for i, d in enumerate((0, 0, 0, 1))
    ]
    snap = Snapshot([_bad(node("a", 4), 1, 2, 3)], levels=LEVELS, running=pods)
    assert snap.nodes[0].slots(quarter.pod) == 1


def test_preemption_never_frees_room_that_is_only_a_bad_gpu() -> None:
    low = job("low").tier("batch").gang(8).build()
    snap = Snapshot([_bad(node("a"), 7)], levels=LEVELS, running=[running(low, {"a": 8})])
    high8 = job("high8").tier("high").gang(8).build()
    result = schedule(snap, [high8], policy(), now=0.0)
    assert isinstance(result.decisions[0], Pending)
    high7 = job("high7").tier("high").gang(7).build()
    result = schedule(snap, [high7], policy(), now=0.0)
    assert isinstance(result.decisions[0], Preempt)


def test_a_node_offers_at_most_its_allocatable_and_its_capacity_less_its_bad_gpus() -> None:
    """Found by a review: the device plugin leaves a GPU it finds unhealthy out of
    allocatable (not out of capacity), and the agent reports the same GPU by index;
    it was taken out a second time, or not, depending on the index."""
    cases = [
        # allocatable, capacity, bad indices, GPUs offered
        (7, 8, {3}, 7),  # the plugin and the agent both found GPU 3
        (7, 8, {7}, 7),  # ... whatever its index
        (8, 8, {3}, 7),  # only the agent found it (or an alert action quarantined it)
        (7, 8, {2, 3}, 6),  # the plugin found one of the agent's two
        (8, 8, {9}, 8),  # an index past the capacity names no GPU of the node
        (8, 0, {3}, 7),  # a Node that does not say its capacity: counted against allocatable
        (7, 0, {7}, 7),
    ]
    for allocatable, capacity, bad, offered in cases:
        n = replace(node("a", allocatable), gpu_capacity=capacity, unhealthy=frozenset(bad))
        snap = Snapshot([n], levels=LEVELS)
        case = (allocatable, capacity, bad)
        assert snap.capacity == offered * MILLI, case
        assert place(snap, job("fits").gang(offered).build()) is not None, case
        assert place(snap, job("one-more").gang(offered + 1).build()) is None, case


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[object]]:
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([4, 8]))
        bad = draw(st.sets(st.integers(0, gpus - 1), max_size=gpus))
        nodes.append(_bad(node(f"n{i}", gpus, clique=f"c{i // 2}"), *bad))
    queue = [
        job(f"q{i}").gang(per * draw(st.integers(1, 4)), per_worker=per).at(float(i)).build()
        for i, per in enumerate(
            draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=10))
        )
    ]
    return nodes, queue


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_never_more_gpus_placed_on_a_node_than_it_has_in_service(
    scenario: tuple[list[Node], list[object]],
) -> None:
    nodes, queue = scenario
    snap = Snapshot(nodes, levels=LEVELS)
    result = schedule(snap, queue, policy(), now=0.0)  # type: ignore[arg-type]
    placed: dict[str, int] = {}
    for d in result.decisions:
        if isinstance(d, Admit):
            for p in d.placement.pods:
                placed[p.node] = placed.get(p.node, 0) + len(p.devices)
    for n in nodes:
        assert placed.get(n.name, 0) <= n.gpus - n.bad_gpus


def test_set_unhealthy_in_place_is_a_snapshot_built_with_it() -> None:
    # the simulator keeps one snapshot for a run and tells it when health changes
    snap = Snapshot([node("a"), node("b")], levels=LEVELS)
    seven = job("seven").gang(7).build()
    assert place(snap, job("eight").gang(8, per_worker=8).build()) is not None
    snap.set_unhealthy("a", frozenset({3}))
    snap.set_unhealthy("b", frozenset({0, 1}))
    fresh = Snapshot([_bad(node("a"), 3), _bad(node("b"), 0, 1)], levels=LEVELS)
    assert snap.capacity == fresh.capacity == 13 * MILLI
    assert place(snap, job("eight").gang(8, per_worker=8).build()) is None
    assert place(snap, seven) == place(fresh, seven)
    snap.set_unhealthy("a", frozenset())
    assert snap.capacity == 14 * MILLI
    assert place(snap, job("eight").gang(8, per_worker=8).build()) is not None
