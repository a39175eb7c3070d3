"""The core's fragmentation-aware placement of single pods (FGD)."""

from __future__ import annotations

from controller.scheduler.fragmentation import FragModel, TypicalPod, typical_pods
from controller.scheduler.placement import place
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang, JobId, Node, Placement, PodPlacement, PodShape, Running


def _gang(name: str, pod: PodShape) -> Gang:
    return Gang(JobId(name), "p", "u", "normal", 1, 0.0, 1, pod)


def _snap(model: FragModel | None) -> Snapshot:
    """Node a: device 0 has 900 milli free, device 1 is taken; node b: one whole GPU."""
    nodes = [Node("a", 2, cpu_milli=64000), Node("b", 1, cpu_milli=64000)]
    snap = Snapshot(nodes, levels=(), fragmentation=model)
    used = [("x", PodShape(gpu_milli=100), 0), ("y", PodShape(gpus=1), 1)]
    for name, pod, device in used:
        snap.assume(Running(_gang(name, pod), Placement((PodPlacement("a", (device,)),)), 0))
    return snap


def test_typical_pods_cover_the_workload_and_drop_cpu_only() -> None:
    pods = [PodShape(gpu_milli=500)] * 6 + [PodShape(gpus=1)] * 3 + [PodShape(gpus=0)] * 1
    typical = typical_pods(pods, coverage=0.9)
    assert [(t.gpus, t.gpu_milli) for t in typical] == [(1, 500), (1, 1000)]
    assert abs(sum(t.weight for t in typical) - 1) < 1e-9


def test_fgd_leaves_a_share_the_workload_can_use() -> None:
    """The workload asks for 700-milli shares. Best-fit puts a 300-milli pod on
    a's 900 free (leaving 600 nobody can use); FGD puts it on b's whole GPU,
    leaving 700 that fits the next typical request."""
    model = FragModel([TypicalPod(1, 700, 0, frozenset(), 1.0)])
    gang = _gang("q", PodShape(gpu_milli=300))
    assert place(_snap(model), gang) == Placement((PodPlacement("b", (0,)),))
    assert place(_snap(None), gang) == Placement((PodPlacement("a", (0,)),))


def test_frag_counts_what_no_typical_request_can_use() -> None:
    model = FragModel([TypicalPod(1, 1000, 0, frozenset(), 1.0)])
    assert model.frag("", (300, 1000), None) == 300
    picky = FragModel([TypicalPod(1, 500, 0, frozenset({"A100"}), 1.0)])
    assert picky.frag("T4", (1000,), None) == 0  # not its model: no fragment
    assert picky.frag("A100", (300,), None) == 300
    cpu = FragModel([TypicalPod(1, 500, 8000, frozenset(), 1.0)])
    assert cpu.frag("", (1000,), 4000) == 1000
    assert cpu.frag("", (1000,), 8000) == 0
