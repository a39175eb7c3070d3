"""The fragmentation measure and where it puts single pods: node states and
typical requests in, fragmented milli-GPUs (or the chosen node) out."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from controller.scheduler.fragmentation import (
    FragModel,
    TypicalPod,
    block_cpu,
    block_share,
    typical_pods,
)
from controller.scheduler.placement import _score, frag_score, place
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang, JobId, Node, Placement, PodPlacement, PodShape, Running

GIB = 1 << 30


def typical(gpus: int = 1, milli: int = 1000, cpu: int = 0, *models: str) -> TypicalPod:
    return TypicalPod(gpus, milli, cpu, frozenset(models), 1.0)


def _with_memory(request: TypicalPod, memory: int) -> TypicalPod:
    return replace(request, memory=memory)


@dataclass
class FragCase:
    name: str
    request: TypicalPod
    free: tuple[int, ...]
    cpu: int | None
    fragmented: float
    model: str = "T4"
    mem: int | None = None


FRAG_CASES = [
    FragCase("a whole GPU: the partial device", typical(), (300, 1000), None, 300),
    FragCase("a share: devices with less than it", typical(1, 500), (300, 600), None, 300),
    FragCase("wrong GPU model: not its GPU, no fragment", typical(1, 500, 0, "A100"), (1000,),
             None, 0),
    FragCase("too few devices: everything", typical(2), (500, 1000), None, 1500),
    FragCase(
        "two-GPU request, three whole GPUs: all usable (FGD)", typical(2), (0, 1000, 1000, 1000),
        None, 0,
    ),
    FragCase("CPU for none: everything", typical(1, 500, 8000), (1000,), 4000, 1000),
    FragCase("CPU for all: as FGD", typical(1, 1000, 8000), (1000, 1000), 16000, 0),
    FragCase(
        "CPU for two of four GPUs: the other two are half fragments", typical(1, 1000, 8000),
        (1000, 1000, 1000, 1000), 16000, 1000,
    ),
    FragCase(
        "CPU for one share of four: the other device is half a fragment", typical(1, 500, 4000),
        (1000, 1000), 4000, 500,
    ),
    FragCase(
        "CPU for two shares: one device holds both, the other is half a fragment",
        typical(1, 400, 4000), (300, 1000, 1000), 8000, 800,
    ),
    FragCase(
        "CPU for one of two 2-GPU pods: half of the two GPUs it cannot feed",
        typical(2, 1000, 30000), (1000, 1000, 1000, 1000), 40000, 1000,
    ),
    FragCase("memory for no pod: everything", _with_memory(typical(), 48 * GIB), (300, 1000),
             None, 1300, mem=40 * GIB),
    FragCase("memory for one pod of two: no fragment (only whether one fits counts)",
             _with_memory(typical(), 48 * GIB), (1000, 1000), None, 0, mem=60 * GIB),
    FragCase("memory not tracked on the node: as before", _with_memory(typical(), 48 * GIB),
             (300, 1000), None, 300),
]  # fmt: skip


@pytest.mark.parametrize("case", FRAG_CASES, ids=lambda c: c.name)
def test_frag(case: FragCase) -> None:
    model = FragModel([case.request])
    assert model.frag(case.model, case.free, case.cpu, case.mem) == pytest.approx(case.fragmented)


def test_memory_states_are_remembered_apart_only_where_a_request_fits_differently() -> None:
    """The memo holds a node state once for every amount of memory between two
    typical requests' needs, and apart on either side of one."""
    model = FragModel(
        [
            replace(typical(), memory=48 * GIB, weight=0.5),
            replace(typical(1, 500), memory=8 * GIB, weight=0.5),
        ]
    )
    assert model.frag("", (1000,), None, 50 * GIB) == 0
    assert model.frag("", (1000,), None, 60 * GIB) == 0
    assert model.frag("", (1000,), None, 40 * GIB) == pytest.approx(500)
    assert model.frag("", (1000,), None, 4 * GIB) == pytest.approx(1000)
    assert len(model._memo) == 3


def test_memory_overcommitted_is_remembered_apart_from_some_memory_left() -> None:
    """A request that asks for no memory fits a node with none left but not one
    short of memory (below 0, foreign pods or a shrunk allocatable): two states,
    whichever is scored first (found by a review: both had one memo key)."""
    model = FragModel([typical()])
    assert model.frag("", (1000,), None, 4 * GIB) == 0
    assert model.frag("", (1000,), None, -1) == pytest.approx(1000)
    assert model.frag("", (1000,), None, 0) == 0


def test_fgd_measure_does_not_look_at_memory() -> None:
    request = [_with_memory(typical(), 48 * GIB)]
    assert FragModel(request, cpu_feeds=False).frag("", (1000,), None, GIB) == 0
    assert FragModel(request).frag("", (1000,), None, GIB) == 1000


def test_typical_pods_carry_their_shapes_median_memory() -> None:
    pods = [PodShape(gpus=1, memory=m * GIB) for m in (16, 48, 48, 64)] + [
        PodShape(gpus=1, gpu_milli=500, memory=8 * GIB)
    ] * 3
    memory = {(t.gpus, t.gpu_milli): t.memory for t in typical_pods(pods, coverage=1.0)}
    assert memory == {(1, 1000): 48 * GIB, (1, 500): 8 * GIB}


def test_a_pod_leaves_memory_for_the_typical_request() -> None:
    """Every typical request asks for one GPU and 48 GiB. A pod asking for 60 GiB
    on node a (100 GiB) would leave its other GPU without memory for one; on b
    (200 GiB) it would not, so it goes to b. Counting GPUs and CPU alone, the two
    tie and the name (a) would win."""
    model = FragModel([_with_memory(typical(), 48 * GIB)])
    nodes = [Node("a", 2, memory=100 * GIB), Node("b", 2, memory=200 * GIB)]
    snap = _snap(model, nodes, [])
    placement = place(snap, _gang("new", PodShape(gpus=1, memory=60 * GIB)))
    assert placement is not None and placement.pods[0].node == "b"
    blind = _snap(FragModel([typical()]), nodes, [])
    placement = place(blind, _gang("new", PodShape(gpus=1, memory=60 * GIB)))
    assert placement is not None and placement.pods[0].node == "a"


def test_fgd_measure_counts_a_wrong_model_as_all_fragment() -> None:
    """FGD's own measure (the `fgd` baseline): every free GPU of a model a
    request refuses is a fragment for it, so taking such a GPU looks like it
    lowers fragmentation, and any-model pods drift onto the models the
    restricted requests need. The core's measure leaves them out."""
    request = [typical(1, 500, 0, "A100")]
    assert FragModel(request, cpu_feeds=False).frag("T4", (1000,), None) == 1000
    assert FragModel(request).frag("T4", (1000,), None) == 0


def test_pressure_follows_restricted_demand_over_free_gpus() -> None:
    model = FragModel(
        [
            TypicalPod(1, 1000, 0, frozenset(), 0.5),
            TypicalPod(1, 1000, 0, frozenset({"T4"}), 0.25),
            TypicalPod(1, 1000, 0, frozenset({"G2", "T4"}), 0.25),
        ]
    )
    assert model.restricted == {"T4": 0.375, "G2": 0.125}
    even = model.pressure({"T4": 3000, "G2": 1000})
    assert even == pytest.approx({"T4": 0.5, "G2": 0.5})
    short = model.pressure({"T4": 1000, "G2": 3000})
    assert short["T4"] > short["G2"]
    assert model.pressure({"T4": 0, "G2": 1000}) == {"G2": 0.125}


def test_any_model_pod_spares_the_model_restricted_requests_run_short_of() -> None:
    """Two identical nodes but for the model; restricted requests want T4 and
    G2 equally, and T4 has one free GPU against G2's three: a pod that takes
    any model goes to G2. Without the pressure both tie and the name (a)
    would win."""
    model = FragModel(
        [
            TypicalPod(1, 1000, 0, frozenset(), 0.5),
            TypicalPod(1, 1000, 0, frozenset({"T4"}), 0.25),
            TypicalPod(1, 1000, 0, frozenset({"G2"}), 0.25),
        ]
    )
    nodes = [
        Node("a", 4, cpu_milli=64000, gpu_model="T4"),
        Node("b", 4, cpu_milli=64000, gpu_model="G2"),
    ]
    used = [("a", PodShape(gpus=1), d) for d in range(3)] + [("b", PodShape(gpus=1), 0)]
    snap = _snap(model, nodes, used)
    assert snap.free_by_model == {"T4": 1000, "G2": 3000}
    placement = place(snap, _gang("new", PodShape(gpus=1)))
    assert placement is not None and placement.pods[0].node == "b"
    snap.forget(JobId("used-3"))
    assert snap.free_by_model == {"T4": 1000, "G2": 4000}


def test_a_large_pod_first_leaves_small_pods_every_node() -> None:
    """Which nodes a pod may use is cached per constraint; an 8-GPU pod may
    use only the 8-GPU nodes, and a 1-GPU pod asked about after it must still
    get the small ones (the cache key once left the GPU count out, and the
    first pod's shape decided for all later ones)."""
    snap = _snap(WORKLOAD, [Node("big", 8, cpu_milli=96000), Node("small", 2, cpu_milli=96000)], [])
    assert [ns.name for ns in snap.candidates(PodShape(gpus=8))] == ["big"]
    assert [ns.name for ns in snap.candidates(PodShape(gpus=1))] == ["big", "small"]
    assert {ns.name for ns, _ in snap.open_slots(PodShape(gpus=1), frozenset())} == {"big", "small"}


@pytest.mark.parametrize(
    ("blocks", "chosen"),
    [
        (0.0, "block"),  # no whole-node requests: the tightest fit, the empty 8-GPU node
        (0.3, "block"),  # its 8 free GPUs are above 30 % of the 20 free
        (0.5, "big"),  # at or below half of them: kept for a whole-node request
    ],
)
def test_a_small_pod_leaves_the_last_empty_blocks(blocks: float, chosen: str) -> None:
    """An empty node of 8 or more GPUs (a whole block) is opened by a smaller pod
    only while the free GPUs of such nodes are above the model's `blocks` share of
    all free GPUs, else only when no other node fits."""
    model = FragModel([TypicalPod(1, 1000, 0, frozenset(), 1.0)], blocks=blocks)
    nodes = [Node("block", 8, cpu_milli=96000), Node("big", 16, cpu_milli=192000)]
    used = [("big", PodShape(gpus=1), d) for d in range(4)]
    snap = _snap(model, nodes, used)
    assert (snap.empty_blocks, snap.free_milli) == (8000, 20000)
    placement = place(snap, _gang("new", PodShape(gpus=1)))
    assert placement is not None and placement.pods[0].node == chosen
    eight = place(snap, _gang("eight", PodShape(gpus=8)))
    assert eight is not None and eight.pods[0].node == "block"


def _heavy_snap(model: FragModel, g3_nodes: int) -> Snapshot:
    """`g3_nodes` empty 8-GPU, 128-core nodes beside a 32-GPU, 64-core node with 16
    GPUs used (by pods asking for no CPU)."""
    nodes = [Node(f"g3-{i}", 8, cpu_milli=128000) for i in range(g3_nodes)]
    nodes.append(Node("big", 32, cpu_milli=64000))
    return _snap(model, nodes, [("big", PodShape(gpus=1), d) for d in range(16)])


def _heavy_model(heavy: int) -> FragModel:
    return FragModel(
        [TypicalPod(1, 1000, 16000, frozenset(), 1.0)], blocks=0.25, heavy_block_cpu=heavy
    )


@pytest.mark.parametrize(("heavy", "chosen"), [(0, "g3-0"), (120000, "big")])
def test_a_small_pod_leaves_the_blocks_only_the_heaviest_request_fits(
    heavy: int, chosen: str
) -> None:
    """An empty block with CPU enough for the CPU-heaviest whole-node request
    (a 128-core node for a 120-core 8-GPU pod) is kept for it whatever the share:
    a smaller pod takes the partly used node instead, though both raise the
    fragmentation alike and the empty node is the tighter fit. (The empty block's
    8 GPUs are above the share, a quarter of the 24 free.)"""
    snap = _heavy_snap(_heavy_model(heavy), 1)
    placement = place(snap, _gang("new", PodShape(gpus=1, cpu_milli=16000)))
    assert placement is not None and placement.pods[0].node == chosen


def test_blocks_are_kept_for_the_heaviest_request_only_while_they_are_few() -> None:
    """Keeping every block with CPU for the heaviest whole-node request is right while
    such blocks are scarce (openb's 39 G3 nodes, 5 % of its GPUs, for a 120-core
    pod). When they hold more GPUs than the whole-node requests' share of the
    cluster's (here a quarter: one 8-GPU node of 40 GPUs is 20 %, two of 48 are a
    third) that request is not short of them, and they are opened like any block: a
    window of jobs whose heaviest whole-node pod asked for 88 cores kept every
    96-core G2 node of openb and lost 11.6 points on `gpuspec33`."""
    snap = _heavy_snap(_heavy_model(120000), 2)
    assert (snap.block_gpus(120000), snap.block_gpus(64000), snap.block_gpus(200000)) == (16, 48, 0)
    placement = place(snap, _gang("new", PodShape(gpus=1, cpu_milli=16000)))
    assert placement is not None and placement.pods[0].node == "g3-0"


def test_empty_blocks_follow_assume_and_forget() -> None:
    snap = _snap(WORKLOAD, [Node("block", 8), Node("small", 4)], [])
    assert snap.empty_blocks == 8000
    snap.assume(Running(_gang("a", PodShape(gpus=1)), Placement((PodPlacement("block", (0,)),)), 0))
    assert snap.empty_blocks == 0
    snap.forget(JobId("a"))
    assert snap.empty_blocks == 8000


def test_block_share_is_the_whole_node_requests_share_of_gpu_demand() -> None:
    pods = [PodShape(gpus=8), PodShape(gpus=1), PodShape(gpus=1, gpu_milli=500), PodShape(gpus=0)]
    assert block_share(pods) == pytest.approx(8000 / 9500)
    assert block_share([PodShape(gpus=0)]) == 0.0
    assert (
        block_cpu([PodShape(gpus=8, cpu_milli=120000), PodShape(gpus=1, cpu_milli=200000)])
        == 120000
    )
    assert block_cpu([PodShape(gpus=1)]) == 0


def test_frag_weights_requests_by_frequency() -> None:
    model = FragModel(
        [TypicalPod(1, 1000, 0, frozenset(), 0.75), TypicalPod(1, 500, 0, frozenset(), 0.25)]
    )
    assert model.frag("", (400, 1000), None) == pytest.approx(0.75 * 400 + 0.25 * 400)


def _gang(name: str, pod: PodShape) -> Gang:
    return Gang(JobId(name), "p", "u", "normal", 1, 0.0, 1, pod)


def _snap(model: FragModel, nodes: list[Node], used: list[tuple[str, PodShape, int]]) -> Snapshot:
    snap = Snapshot(nodes, levels=(), fragmentation=model)
    for i, (node_name, pod, device) in enumerate(used):
        placement = Placement((PodPlacement(node_name, (device,) if pod.gpus else ()),))
        snap.assume(Running(_gang(f"used-{i}", pod), placement, 0))
    return snap


@dataclass
class PlaceCase:
    name: str
    nodes: list[Node]
    used: list[tuple[str, PodShape, int]]
    pod: PodShape
    chosen: str


WORKLOAD = FragModel([TypicalPod(1, 1000, 8000, frozenset(), 1.0)])
"""Every typical request: one whole GPU and 8 CPUs."""

PLACE_CASES = [
    PlaceCase(
        "a CPU-only pod goes where the CPU left still feeds every free GPU",
        [Node("a", 2, cpu_milli=32000), Node("b", 2, cpu_milli=24000)],
        [],
        PodShape(gpus=0, cpu_milli=16000),
        "a",
    ),
    PlaceCase(
        "ties pack: onto the node with the fewest GPUs left",
        [Node("a", 4, cpu_milli=64000), Node("b", 4, cpu_milli=64000)],
        [("b", PodShape(gpus=1), 0)],
        PodShape(gpus=0, cpu_milli=1000),
        "b",
    ),
    PlaceCase(
        "ties pack: a whole-GPU pod joins the node in use",
        [Node("a", 4, cpu_milli=64000), Node("b", 4, cpu_milli=64000)],
        [("b", PodShape(gpus=1), 0)],
        PodShape(gpus=1, cpu_milli=8000),
        "b",
    ),
]


@pytest.mark.parametrize("case", PLACE_CASES, ids=lambda c: c.name)
def test_place_single_pod(case: PlaceCase) -> None:
    snap = _snap(WORKLOAD, case.nodes, case.used)
    placement = place(snap, _gang("new", case.pod))
    assert placement is not None
    assert [p.node for p in placement.pods] == [case.chosen]


def test_scores_kept_by_node_state_tell_apart_what_the_score_reads() -> None:
    """The model keeps each score by pod shape and node state (`FragModel.scores`),
    across nodes and snapshots. Nodes alike but for what a score reads (GPUs out of
    service, which a share may not take whole; memory left, which decides whether
    a typical pod still fits) must not share one."""
    gib = 1 << 30
    model = FragModel([TypicalPod(1, 500, 0, frozenset(), 1.0, memory=64 * gib)])
    nodes = [Node(n, 2, cpu_milli=32000, memory=m * gib) for n, m in
             (("a", 128), ("bad", 128), ("small", 64))]  # fmt: skip
    half = PodShape(gpus=1, gpu_milli=500)
    snap = _snap(model, nodes, [(n.name, half, 0) for n in nodes])
    snap.set_unhealthy("bad", frozenset({1}))
    pod = PodShape(gpus=1, gpu_milli=300, memory=32 * gib)
    for name in ("a", "bad", "small"):
        ns = snap.by_name[name]
        kept = _score({}, model, ns, pod)
        assert kept == frag_score(FragModel(model.typical), ns, pod), name
    assert _score({}, model, snap.by_name["a"], pod)[4] == (1,), "leaves room for a typical share"
    assert _score({}, model, snap.by_name["bad"], pod)[4] == (0,), "the whole GPU is out"
    assert len(model.scores) == 3
