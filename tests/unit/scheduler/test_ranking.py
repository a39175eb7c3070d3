"""The kept ranking of open nodes (`placement._Ranking`) against a pass over every
open node (`placement._scan`), on random streams of what a snapshot goes through:
pods placed and assumed, gangs forgotten, multi-worker gangs placed (which try their
devices on the nodes and give them back), GPUs going out of service and coming back,
and nodes held for another gang. Every single-pod placement must pick the node and
devices the pass picks; a ranking that missed a change would pick a node that no
longer scores best, or one that is full; a score kept by node state across
snapshots (`FragModel.scores`) that left out something the score depends on
would pick another node or other devices. Along the way the index of running gangs
by node (`Snapshot.running_on`) must agree with a look at every running gang."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduler.fragmentation import FragModel, TypicalPod
from controller.scheduler.placement import _heavy_cpu, _place_one, _scan, place
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang, JobId, Node, PodShape, Running

GIB = 1 << 30
SHAPES = [
    PodShape(gpus=1, cpu_milli=4000),
    PodShape(gpus=1, cpu_milli=4000, memory=96 * GIB),  # shares the one above's scores
    PodShape(gpus=1, cpu_milli=30000),  # does not
    PodShape(gpus=1, gpu_milli=500, cpu_milli=2000),
    PodShape(gpus=1, gpu_milli=250, cpu_milli=1000),
    PodShape(gpus=2, cpu_milli=8000),
    PodShape(gpus=8, cpu_milli=64000),
]
MODEL = FragModel(
    [
        TypicalPod(1, 1000, 4000, frozenset(), 0.5),
        TypicalPod(1, 500, 2000, frozenset(), 0.3),
        TypicalPod(8, 1000, 64000, frozenset(), 0.2),
    ],
    blocks=0.3,
    heavy_block_cpu=96000,
)


def _nodes(rng: random.Random, n: int) -> list[Node]:
    return [
        Node(
            name=f"n{i}",
            gpus=rng.choice([4, 8]),
            cpu_milli=rng.choice([32000, 96000, 128000]),
            memory=rng.choice([128, 384]) * GIB,
            gpu_model="A100",
            labels={"topology.kubernetes.io/rack": f"r{i // 3}"},
        )
        for i in range(n)
    ]


def _gang(i: int, pod: PodShape, workers: int = 1) -> Gang:
    return Gang(JobId(f"g{i}"), "p", "u", "normal", 0, float(i), workers, pod)


def _replay(seed: int, events: int, nodes: int) -> int:
    """Drive a snapshot through `events` random events; at each single-pod placement
    compare the ranking's choice with the pass's. How many placements were compared."""
    rng = random.Random(seed)
    all_nodes = _nodes(rng, nodes)
    snap = Snapshot(all_nodes, levels=("topology.kubernetes.io/rack",), fragmentation=MODEL)
    compared = 0
    for i in range(events):
        roll = rng.random()
        if roll < 0.55:
            pod = rng.choice(SHAPES)
            exclude = frozenset(
                n.name for n in rng.sample(all_nodes, min(nodes, rng.choice([0, 0, 1, 2])))
            )
            g = _gang(i, pod)
            got = _place_one(snap, MODEL, g, exclude)
            hold = (
                pod.gpus < 8
                and MODEL.blocks > 0
                and snap.empty_blocks <= MODEL.blocks * snap.free_milli
            )
            want = None
            if g.gpu_total <= snap.free_milli:
                # scores computed afresh, read neither from the snapshot's cache nor
                # from the model's (by node state, kept across snapshots)
                fresh = FragModel(
                    MODEL.typical, blocks=MODEL.blocks, heavy_block_cpu=MODEL.heavy_block_cpu
                )
                heavy = _heavy_cpu(snap, fresh)
                want = _scan(
                    fresh, pod, snap.open_map(pod), {}, exclude=exclude, hold=hold, heavy=heavy
                )
            expected = None if want is None else (want[3], want[4])
            actual = None if got is None else (got.pods[0].node, got.pods[0].devices)
            assert actual == expected, f"event {i}: {pod} excluding {sorted(exclude)}"
            compared += 1
            if got is not None:
                snap.assume(Running(g, got, 0.0))
        elif roll < 0.8 and snap.running:
            snap.forget(rng.choice(sorted(snap.running)))
        elif roll < 0.9:  # a multi-worker gang: tried on the nodes, not assumed
            place(snap, _gang(i, rng.choice(SHAPES[:6]), workers=rng.choice([2, 3])))
        else:
            n = rng.choice(all_nodes)
            bad = frozenset(rng.sample(range(n.gpus), rng.choice([0, 0, 1, 2])))
            snap.set_unhealthy(n.name, bad)
        # The index of running gangs by node (`Snapshot.running_on`, built on the
        # first call, then kept by assume and forget) against a look at every gang.
        names = {n.name for n in rng.sample(all_nodes, min(nodes, 2))}
        on = {r.gang.id for r in snap.running_on(sorted(names))}
        assert on == {
            j for j, r in snap.running.items() if any(p.node in names for p in r.placement.pods)
        }, f"event {i}: running on {sorted(names)}"
    return compared


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 8))
def test_the_kept_ranking_places_where_a_pass_over_every_node_does(seed: int, nodes: int) -> None:
    assert _replay(seed, 120, nodes) > 0


def test_the_ranking_survives_the_change_log_starting_over() -> None:
    """More changes than the snapshot keeps in its log (4 per node + 1,024): the
    rankings are dropped with it and built again, and still agree."""
    assert _replay(7, 4000, 3) > 1000
