"""FGD's workload variants, built from a trace with a seed (`sim.variants`),
and the `fgd` baseline that the variants are measured against."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from controller.scheduler.fragmentation import FragModel, TypicalPod
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import MILLI, Gang, JobId, Node, Placement, PodShape, Running
from controller.sim.baselines import FgdPlacer
from controller.sim.cli import add_subcommand
from controller.sim.traces import TraceError, TraceJob
from controller.sim.variants import SPEC_MIX, VARIANTS, make_variant

GIB = 1 << 30


def _trace() -> list[TraceJob]:
    """300 pods: 100 whole 1-GPU, 100 shares, 10 multi-GPU (2/4/8), 90 without GPUs."""
    pods = (
        [PodShape(gpus=1, cpu_milli=8000)] * 100
        + [PodShape(gpu_milli=250 + 5 * i, cpu_milli=4000) for i in range(100)]
        + [PodShape(gpus=g, cpu_milli=g * 12000) for g in (2, 4, 8, 8, 8, 2, 4, 8, 8, 8)]
        + [PodShape(gpus=0, cpu_milli=2000)] * 90
    )
    return [TraceJob(f"pod-{i:03d}", float(i), None, 1, p) for i, p in enumerate(pods)]


NODES = (
    [Node(f"g2-{i}", 8, cpu_milli=96000, memory=512 * GIB, gpu_model="G2") for i in range(6)]
    + [Node(f"t4-{i}", 2, cpu_milli=104000, memory=256 * GIB, gpu_model="T4") for i in range(6)]
)  # fmt: skip


def _gpu(jobs: list[TraceJob]) -> list[TraceJob]:
    return [j for j in jobs if j.pod.gpus > 0]


def test_multigpu50_adds_copies_of_the_traces_multi_gpu_pods_until_they_ask_for_half() -> None:
    before = _trace()
    out = make_variant(before, "multigpu50", seed=1, nodes=NODES)
    # The trace's pods stay as they are, first; copies of its multi-GPU jobs follow.
    assert out[: len(before)] == before
    added = out[len(before) :]
    assert added and all(j.pod.gpus > 1 for j in added)
    by_id = {j.id: j for j in before}
    for j in added:
        name, _, n = j.id.rpartition("-multigpu-")
        assert n.isdigit() and replace(by_id[name], id=j.id) == j  # shape, times and all
    assert len({j.id for j in out}) == len(out)

    def share(jobs: list[TraceJob]) -> float:
        gpu = _gpu(jobs)
        return sum(j.gpu_milli for j in gpu if j.pod.gpus > 1) / sum(j.gpu_milli for j in gpu)

    # Half of the GPUs asked for, and the last copy is what crossed the line.
    assert share(out) >= 0.5 > share(out[:-1])
    assert share(before) < 0.5


def test_gpushare100_makes_every_gpu_pod_a_share() -> None:
    before = _trace()
    out = make_variant(before, "gpushare100", seed=1, nodes=NODES)
    assert len(_gpu(out)) == 210
    assert all(j.pod.shared for j in _gpu(out))
    assert {j.pod for j in _gpu(out)} <= {j.pod for j in before if j.pod.shared}


def test_gpuspec33_restricts_a_third_to_the_published_model_lists_that_can_hold_them() -> None:
    out = make_variant(_trace(), "gpuspec33", seed=1, nodes=NODES)
    picky = [j for j in _gpu(out) if j.pod.gpu_models]
    assert len(picky) == 70
    assert {j.pod.gpu_models for j in picky} <= {spec for spec, _ in SPEC_MIX}
    # An 8-GPU or 4-GPU pod only fits a G2 node: its list names G2 (alone or among others).
    assert all("G2" in j.pod.gpu_models for j in picky if j.pod.gpus > 2)
    # 1-GPU pods get lists in the published file's proportions, not the supply's:
    # T4 alone is the commonest list although the G2 nodes have 48 GPUs against 12 T4.
    lists = Counter(j.pod.gpu_models for j in picky if j.pod.gpus == 1)
    assert lists[frozenset({"T4"})] > lists[frozenset({"G2"})] > 0
    assert all(m & {"G2", "T4"} for m in lists)


def test_gpuspec33_leaves_a_pod_free_when_no_listed_model_can_hold_it() -> None:
    other = [Node(f"x-{i}", 8, cpu_milli=96000, memory=512 * GIB, gpu_model="X") for i in range(4)]
    out = make_variant(_trace(), "gpuspec33", seed=1, nodes=other)
    assert not [j for j in out if j.pod.gpu_models]


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_is_the_same_for_a_seed_and_differs_across_seeds(name: str) -> None:
    one = make_variant(_trace(), name, seed=7, nodes=NODES)
    assert one == make_variant(_trace(), name, seed=7, nodes=NODES)
    assert one != make_variant(_trace(), name, seed=8, nodes=NODES)


def test_unknown_variant_or_no_donor_is_reported() -> None:
    with pytest.raises(TraceError, match="unknown variant 'x'; known: multigpu50"):
        make_variant(_trace(), "x", seed=1, nodes=NODES)
    whole = [j for j in _trace() if j.pod.gpus == 1 and not j.pod.shared]
    with pytest.raises(TraceError, match="no multi-GPU pod to copy"):
        make_variant(whole, "multigpu50", seed=1, nodes=NODES)


def test_cli_variant_needs_a_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_subcommand(parser.add_subparsers())
    args = parser.parse_args(
        ["simulate", "--cluster", "x.csv", "--generate", "5", "--variant", "gpushare100"]
    )
    assert args.func(args) == 2
    assert "--variant reshapes a --trace" in capsys.readouterr().err


def test_fgd_measure_asks_one_pod_of_cpu_where_gangops_asks_for_every_gpu() -> None:
    """Two free GPUs, CPU for one 8-core pod: FGD sees no fragment, the core's
    measure counts the GPU the CPU cannot feed as half a fragment."""
    typical = [TypicalPod(1, MILLI, 8000, frozenset(), 1.0)]
    assert FragModel(typical, cpu_feeds=False).frag("", (MILLI, MILLI), 8000) == 0
    assert FragModel(typical).frag("", (MILLI, MILLI), 8000) == MILLI / 2
    assert FragModel(typical, cpu_feeds=False).frag("", (MILLI, MILLI), 4000) == 2 * MILLI


def test_fgd_placer_breaks_ties_by_a_seeded_fixed_order() -> None:
    """Three identical empty nodes tie; the placer takes the first of a
    per-run order, the same node for the same seed whatever the call."""
    nodes = [Node(n, 2, cpu_milli=64000) for n in ("a", "b", "c")]
    typical = [TypicalPod(1, MILLI, 0, frozenset(), 1.0)]
    pod = PodShape(gpus=1)
    picks = set()
    for seed in range(12):
        placer = FgdPlacer(typical, [n.name for n in nodes], seed=seed)
        snap = Snapshot(nodes, levels=())
        first = placer(snap, pod, random.Random(0))
        assert first is not None
        assert placer(snap, pod, random.Random(99)) == first
        picks.add(first.node)
        # One GPU taken: every node still ties for a 1-GPU request (no fragment
        # either way), so the same first node gets the next pod, on its other GPU.
        gang = Gang(JobId("x"), "p", "u", "normal", 1, 0.0, 1, pod)
        snap.assume(Running(gang, Placement((first,)), 0.0))
        again = placer(snap, pod, random.Random(0))
        assert again is not None and again.node == first.node
        assert again.devices != first.devices
    assert picks == {"a", "b", "c"}
