"""Table-driven cases for the scheduling cycle: jobs, nodes and quotas in;
admitted, pending and preempted out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from controller.scheduler.cycle import schedule
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Foreign, Snapshot, Usage, node_base
from controller.scheduler.telemetry import Hints
from controller.scheduler.types import (
    Admit,
    Gang,
    JobId,
    NamespaceQuota,
    Node,
    Pending,
    Placement,
    PodPlacement,
    PodShape,
    Preempt,
    QuotaHold,
    QuotaLimit,
    Running,
    Taint,
)
from tests.unit.scheduler.builders import job, node, policy, running

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")


@dataclass
class Case:
    name: str
    nodes: list[Node]
    queue: list[Gang]
    running: list[Running] = field(default_factory=list)
    policy: SchedulingPolicy = field(default_factory=policy)
    now: float = 0.0
    admitted: dict[str, dict[str, int]] = field(default_factory=dict)
    """job -> workers per node (checked exactly)."""
    pending: dict[str, str] = field(default_factory=dict)
    """job -> a substring of its reason."""
    preempted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """preemptor -> victims."""
    shrunk: dict[str, dict[str, int]] = field(default_factory=dict)
    """preemptor -> {elastic job shrunk for it: workers it keeps}."""
    grown: dict[str, dict[str, int]] = field(default_factory=dict)
    """elastic job grown onto idle GPUs -> its new workers per node."""
    quotas: dict[str, NamespaceQuota] = field(default_factory=dict)
    """namespace -> its ResourceQuota ceiling (jobs named `namespace/name`)."""
    other: dict[str, Usage] = field(default_factory=dict)
    """namespace -> what pods gangops does not schedule request there."""


_GROWN = job("e").gang(4).elastic(2, 8).build().resized(8)
"""An elastic gang submitted at 4 GPUs and grown to 8."""


CASES = [
    Case(
        "seed: a gang of 8 goes on two nodes with 4 free each, never on the one with 3",
        nodes=[node("n1", rack="r1"), node("n2", rack="r1"), node("n3", rack="r2")],
        running=[
            running(job("f1").gang(4).build(), {"n1": 4}),
            running(job("f2").gang(4).build(), {"n2": 4}),
            running(job("f3").gang(5).build(), {"n3": 5}),
        ],
        queue=[job("bert").gang(8).build()],
        admitted={"bert": {"n1": 4, "n2": 4}},
    ),
    Case(
        "one node preferred over several; the fullest node that fits",
        nodes=[node("big"), node("small", 4)],
        queue=[job("a").gang(4).build()],
        admitted={"a": {"small": 4}},
    ),
    Case(
        "the tightest domain that holds the gang: the NVLink domain, not the rack",
        nodes=[
            node("a", 4, clique="c1", rack="r1"),
            node("b", 4, clique="c1", rack="r1"),
            node("c", 4, clique="c2", rack="r1"),
            node("d", 4, clique="c2", rack="r1"),
        ],
        running=[running(job("f").gang(1).build(), {"a": 1})],
        queue=[job("g").gang(8, per_worker=4).build()],
        admitted={"g": {"c": 1, "d": 1}},
    ),
    Case(
        "all or nothing: a gang larger than the free GPUs places nothing",
        nodes=[node("n1"), node("n2")],
        running=[running(job("f").gang(10).build(), {"n1": 8, "n2": 2})],
        queue=[job("big").gang(8).build()],
        pending={"big": "hold 6 of 8"},
    ),
    Case(
        "workers need whole free blocks: 3 free GPUs hold no 4-GPU worker",
        nodes=[node("n1", 4), node("n2", 4)],
        running=[running(job("f").gang(2).build(), {"n1": 1, "n2": 1})],
        queue=[job("g").gang(8, per_worker=4).build()],
        pending={"g": "hold 0 of 2"},
    ),
    Case(
        "project max is never exceeded; the reason names the project and figures",
        nodes=[node("n1")],
        policy=policy({"nlp": {"guaranteed": 2, "max": 4}}),
        running=[running(job("r").project("nlp").gang(3).build(), {"n1": 3})],
        queue=[job("q").project("nlp").gang(2).build()],
        pending={"q": "project nlp at max: 3 of 4 GPUs in use, this job needs 2"},
    ),
    Case(
        "user max inside the project",
        nodes=[node("n1")],
        policy=policy({"p": {"guaranteed": 8, "users": {"alice": (1, 2)}}}),
        queue=[job("a").user("alice").gang(3).build(), job("b").user("bob").gang(3).build()],
        admitted={"b": {"n1": 3}},
        pending={"a": "user alice at max"},
    ),
    Case(
        "a tier the project may not use is refused",
        nodes=[node("n1")],
        policy=policy({"p": {"tiers": ["normal"]}}),
        queue=[job("a").tier("high").build()],
        pending={"a": "tier 'high' is not allowed for project p"},
    ),
    Case(
        "a job over the project's job limit is refused",
        nodes=[node("n1")],
        policy=policy({"p": {"job_max": 4}}),
        queue=[job("a").gang(8).build()],
        pending={"a": "allows at most 4 per job"},
    ),
    Case(
        "borrowing off: a project stops at its guarantee",
        nodes=[node("n1")],
        policy=policy({"p": {"guaranteed": 2}}, borrowing=False),
        queue=[job("a").gang(3).build()],
        pending={"a": "borrowing is disabled"},
    ),
    Case(
        "the reserve is only for its tiers",
        nodes=[node("n1")],
        policy=policy(reserve=4),
        queue=[job("a").gang(6).build(), job("c").tier("critical").gang(6).build()],
        admitted={"c": {"n1": 6}},
        pending={"a": "held for critical"},
    ),
    Case(
        "order: higher tier first, then the project furthest below its guarantee",
        nodes=[node("n1", 4)],
        policy=policy({"rich": {"guaranteed": 2}, "poor": {"guaranteed": 2}}),
        running=[running(job("r").project("rich").gang(2).build(), {"n1": 2})],
        queue=[
            job("rich-2").project("rich").gang(2).at(1).build(),
            job("poor-1").project("poor").gang(2).at(2).build(),
        ],
        admitted={"poor-1": {"n1": 2}},
        pending={"rich-2": "hold 0 of 2"},
    ),
    Case(
        "a higher tier preempts a preemptible batch gang, whole",
        nodes=[node("n1")],
        running=[running(job("sweep").tier("batch").gang(8).build(), {"n1": 8})],
        queue=[job("prod").tier("high").gang(4).build()],
        preempted={"prod": ("sweep",)},
    ),
    Case(
        "the fewest victims: the smaller of two batch gangs is kept if not needed",
        nodes=[node("n1")],
        running=[
            running(job("b1").tier("batch").gang(4).build(), {"n1": 4}, started=-5000),
            running(job("b2").tier("batch").gang(4).build(), {"n1": 4}, started=-6000),
        ],
        queue=[job("prod").tier("high").gang(4).build()],
        preempted={"prod": ("b1",)},
    ),
    Case(
        "young jobs are protected by minRuntimeSeconds",
        nodes=[node("n1")],
        policy=policy(min_runtime=600),
        running=[running(job("sweep").tier("batch").gang(8).build(), {"n1": 8}, started=-60)],
        queue=[job("prod").tier("high").gang(4).build()],
        pending={"prod": "hold 0 of 4"},
    ),
    Case(
        "non-preemptible tiers are never victims",
        nodes=[node("n1")],
        running=[running(job("n").tier("normal").gang(8).build(), {"n1": 8})],
        queue=[job("prod").tier("high").gang(4).build()],
        pending={"prod": "hold 0 of 4"},
    ),
    Case(
        "maxPerHour bounds churn",
        nodes=[node("n1")],
        policy=policy(max_per_hour=0),
        running=[running(job("sweep").tier("batch").gang(8).build(), {"n1": 8})],
        queue=[job("prod").tier("high").gang(4).build()],
        pending={"prod": "hold 0 of 4"},
    ),
    Case(
        "a project under its guarantee reclaims GPUs lent to another project",
        nodes=[node("n1")],
        policy=policy({"owner": {"guaranteed": 4}, "borrower": {"guaranteed": 0}}),
        running=[running(job("lent").project("borrower").gang(8).build(), {"n1": 8})],
        queue=[job("mine").project("owner").gang(4).build()],
        preempted={"mine": ("lent",)},
    ),
    Case(
        "the top blocked gang reserves its nodes; a small non-preemptible job waits",
        nodes=[node("n1", 4), node("n2", 4)],
        running=[running(job("r").gang(4).build(), {"n1": 4})],
        queue=[
            job("big").gang(8, per_worker=4).at(1).build(),
            job("small").gang(2).at(2).build(),
            job("filler").tier("batch").gang(2).at(3).build(),
        ],
        pending={"big": "hold 1 of 2", "small": "held for a gang ahead of it"},
        admitted={"filler": {"n2": 2}},
    ),
    Case(
        "taints are honoured: a tainted node is skipped without a toleration",
        nodes=[
            node("t4", 4, taints=(Taint("nvidia.com/gpu", "NoSchedule", "present"),)),
            node("n1", 8),
        ],
        queue=[job("a").gang(4).build()],
        admitted={"a": {"n1": 4}},
    ),
    Case(
        "node selector: only matching nodes",
        nodes=[node("a", 8, zone="z1"), node("b", 4, zone="z2")],
        queue=[job("a").gang(4).on("topology.kubernetes.io/zone", "z1").build()],
        admitted={"a": {"a": 4}},
    ),
    Case(
        "elastic: idle GPUs grow a running gang up to its maxGPU, next to its workers",
        nodes=[node("n1"), node("n2")],
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4})],
        queue=[],
        grown={"e": {"n1": 8}},
    ),
    Case(
        "elastic: growth stops at the project's max",
        nodes=[node("n1")],
        policy=policy({"p": {"max": 6}}),
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4})],
        queue=[],
        grown={"e": {"n1": 6}},
    ),
    Case(
        "elastic: no growth while a gang waits for capacity",
        nodes=[node("n1")],
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4})],
        queue=[job("big").gang(8).build()],
        pending={"big": "8 GPUs"},
    ),
    Case(
        "elastic: no growth within the grow interval of the gang's (re)start",
        nodes=[node("n1")],
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4}, started=-60)],
        queue=[],
    ),
    Case(
        "elastic: a waiting gang takes back only what an elastic gang grew by",
        nodes=[node("n1")],
        running=[running(_GROWN, {"n1": 8})],
        queue=[job("a").gang(2).build()],
        shrunk={"a": {"e": 6}},
    ),
    Case(
        "elastic: a lower tier does not take back a higher tier's growth",
        nodes=[node("n1")],
        running=[
            running(job("e").tier("high").gang(4).elastic(2, 8).build().resized(8), {"n1": 8})
        ],
        queue=[job("a").tier("normal").gang(2).build()],
        pending={"a": "2 GPUs"},
    ),
    Case(
        "elastic: a higher tier shrinks a preemptible gang to its minGPU, evicting nobody",
        nodes=[node("n1"), node("n2")],
        running=[
            running(job("e").tier("batch").gang(8).elastic(4, 8).build(), {"n1": 8}),
            running(job("f").tier("batch").gang(8).build(), {"n2": 8}),
        ],
        queue=[job("hi").tier("high").gang(4).build()],
        shrunk={"hi": {"e": 4}},
    ),
    Case(
        "elastic: when shrinking to minGPU is not enough, whole gangs are evicted",
        nodes=[node("n1")],
        running=[running(job("e").tier("batch").gang(8).elastic(6, 8).build(), {"n1": 8})],
        queue=[job("hi").tier("high").gang(8).build()],
        preempted={"hi": ("e",)},
    ),
    Case(
        "elastic: shrinking below the submitted size needs preemption allowed",
        nodes=[node("n1")],
        policy=policy(preemption=False),
        running=[running(job("e").tier("batch").gang(8).elastic(4, 8).build(), {"n1": 8})],
        queue=[job("hi").tier("high").gang(4).build()],
        pending={"hi": "4 GPUs"},
    ),
    Case(
        "elastic: growth stops at the project's per-job limit",
        nodes=[node("n1")],
        policy=policy({"p": {"job_max": 6}}),
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4})],
        queue=[],
        grown={"e": {"n1": 6}},
    ),
    Case(
        "elastic: a gang waiting for its project's max takes back what a sibling grew by",
        nodes=[node("n1"), node("n2")],
        policy=policy({"p": {"max": 8}}),
        running=[running(_GROWN, {"n1": 8})],
        queue=[job("a").gang(4).build()],
        shrunk={"a": {"e": 4}},
    ),
    Case(
        "elastic: no growth in a project whose gangs wait for its quota",
        nodes=[node("n1"), node("n2")],
        policy=policy({"p": {"max": 8}}),
        running=[running(job("e").gang(4).elastic(2, 8).build(), {"n1": 4})],
        queue=[job("b").gang(6).build()],
        pending={"b": "at max"},
    ),
    Case(
        "elastic: a gang shrunk on the way but not needed in the end keeps its GPUs",
        nodes=[node("n1", zone="z1"), node("n2", zone="z2")],
        running=[
            running(job("e1").gang(4).elastic(2, 8).build().resized(8), {"n1": 8}, started=-10),
            running(_GROWN, {"n2": 8}, started=-20),
        ],
        queue=[job("a").gang(4).on("topology.kubernetes.io/zone", "z2").build()],
        shrunk={"a": {"e": 4}},
    ),
    Case(
        "namespace quota: a gang above its namespace's ResourceQuota is refused, though "
        "its project's max (split across namespaces) allows it",
        nodes=[node("n1"), node("n2"), node("n3"), node("n4")],
        policy=policy({"p": {"max": 60}}),
        quotas={"nlp": NamespaceQuota(gpu_milli=30_000)},
        queue=[job("nlp/big").gang(32, per_worker=4).build()],
        pending={
            "nlp/big": "asks for 32 GPUs, more than namespace nlp's ResourceQuota allows (30)"
        },
    ),
    Case(
        "namespace quota: a gang waits while its namespace is full; one in the project's "
        "other namespace starts",
        nodes=[node("n1"), node("n2"), node("n3"), node("n4")],
        policy=policy({"p": {"max": 60}}),
        quotas={"nlp": NamespaceQuota(gpu_milli=30_000), "nlp-dev": NamespaceQuota(30_000)},
        running=[running(job("nlp/a").gang(24, per_worker=8).build(), {"n1": 1, "n2": 1, "n3": 1})],
        queue=[job("nlp/b").gang(8).build(), job("nlp-dev/c").gang(8).at(1).build()],
        pending={
            "nlp/b": "namespace nlp at its ResourceQuota: 24 of 30 GPUs requested, this job needs 8"
        },
        admitted={"nlp-dev/c": {"n4": 8}},
    ),
    Case(
        "namespace quota: pods gangops does not schedule count, on a node or not",
        nodes=[node("n1"), node("n2")],
        quotas={"nlp": NamespaceQuota(gpu_milli=8_000)},
        other={"nlp": (4_000, 0, 0, 1)},
        queue=[job("nlp/a").gang(8).build()],
        pending={"nlp/a": "4 of 8 GPUs requested"},
    ),
    Case(
        "namespace quota: every resource it limits counts (here pods)",
        nodes=[node("n1")],
        quotas={"nlp": NamespaceQuota(pods=3)},
        queue=[job("nlp/a").gang(4).build()],
        pending={"nlp/a": "asks for 4 pods, more than namespace nlp's ResourceQuota allows (3)"},
    ),
    Case(
        "namespace quota: an elastic gang grows only up to its namespace's ResourceQuota",
        nodes=[node("n1"), node("n2")],
        quotas={"nlp": NamespaceQuota(gpu_milli=6_000)},
        running=[running(job("nlp/e").gang(4).elastic(4, 16).build(), {"n1": 4}, started=-10_000)],
        queue=[],
        now=1.0,
        grown={"nlp/e": {"n1": 6}},
    ),
    Case(
        "shared GPUs: two half-GPU pods share one device",
        nodes=[node("n1", 1)],
        queue=[job("a").share(500).build(), job("b").share(500).at(1).build()],
        admitted={"a": {"n1": 1}, "b": {"n1": 1}},
    ),
    # A gang of no GPUs that does not fit was told "needs 0 GPUs; ... hold 0 of 2".
    Case(
        "no GPUs: a CPU-only gang is told the CPU it lacks",
        nodes=[node("n0", cpu=16), node("n1", cpu=16)],
        running=[
            running(job("c/a").no_gpus(1, cpu=12).build(), {"n0": 1}),
            running(job("c/b").no_gpus(1, cpu=8).build(), {"n1": 1}),
        ],
        queue=[job("c/new").no_gpus(2, cpu=8).build()],
        pending={
            "c/new": "needs no GPUs (2 workers x 8 CPU); the nodes it may use have free CPU "
            "for 1 of 2; at most 1 on one node (n1)"
        },
    ),
    Case(
        "no GPUs: a CPU-only gang is told the memory it lacks",
        nodes=[node("n0", cpu=32, memory_gib=64)],
        running=[running(job("c/a").no_gpus(1, cpu=4, memory_gib=48).build(), {"n0": 1})],
        queue=[job("c/new").no_gpus(1, cpu=4, memory_gib=32).build()],
        pending={
            "c/new": "needs no GPUs (4 CPU, 32Gi of memory); the nodes it may use have free "
            "memory for 0 of 1"
        },
    ),
    Case(
        "no GPUs: CPU on one node and memory on another are named together",
        nodes=[node("n0", cpu=16, memory_gib=64), node("n1", cpu=16, memory_gib=64)],
        running=[
            running(job("c/a").no_gpus(1, cpu=14).build(), {"n0": 1}),
            running(job("c/b").no_gpus(1, cpu=2, memory_gib=60).build(), {"n1": 1}),
        ],
        queue=[job("c/new").no_gpus(1, cpu=4, memory_gib=8).build()],
        pending={
            "c/new": "needs no GPUs (4 CPU, 8Gi of memory); the nodes it may use have free "
            "CPU and memory for 0 of 1"
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cycle(case: Case) -> None:
    snap = Snapshot(
        case.nodes,
        levels=LEVELS,
        running=case.running,
        namespace_quota=case.quotas,
        namespace_other=case.other,
    )
    result = schedule(snap, case.queue, case.policy, now=case.now)
    admitted = {d.gang.id: d.placement.nodes() for d in result.decisions if isinstance(d, Admit)}
    pending = {d.gang.id: d.reason for d in result.decisions if isinstance(d, Pending)}
    preempted = {
        d.gang.id: d.victims for d in result.decisions if isinstance(d, Preempt) and d.victims
    }
    shrunk = {
        d.gang.id: dict(d.shrinks) for d in result.decisions if isinstance(d, Preempt) and d.shrinks
    }
    grown = {r.gang.id: r.placement.nodes() for r in result.resizes}
    assert admitted == case.admitted
    assert preempted == case.preempted
    assert shrunk == case.shrunk
    assert grown == case.grown
    assert set(pending) == set(case.pending), pending
    for name, text in case.pending.items():
        assert text in pending[name]


def test_a_nominated_gang_waits_for_its_shrinks_instead_of_deciding_them_again() -> None:
    pol = policy({"p": {"max": 8}})
    snap = Snapshot([node("n1"), node("n2")], levels=LEVELS, running=[running(_GROWN, {"n1": 8})])
    a = job("a").gang(4).build()
    first = schedule(snap, [a], pol, now=0.0)
    (d,) = first.decisions
    assert isinstance(d, Preempt) and d.shrinks == (("e", 4),)
    # Next cycle: the shrink has not landed (e still holds 8), a holds its nomination.
    snap = Snapshot([node("n1"), node("n2")], levels=LEVELS, running=[running(_GROWN, {"n1": 8})])
    again = schedule(snap, [a], pol, now=1.0, nominated={a.id: d.placement})
    (d2,) = again.decisions
    assert isinstance(d2, Pending) and "shrank" in d2.reason


def test_a_gang_an_earlier_nomination_shrinks_or_evicts_is_not_chosen_again() -> None:
    snap = Snapshot([node("n1")], levels=LEVELS, running=[running(_GROWN, {"n1": 8})])
    b = job("b").gang(2).build()
    result = schedule(snap, [b], policy(), now=0.0, protected=frozenset({_GROWN.id}))
    (d,) = result.decisions
    assert isinstance(d, Pending)


# A nomination holds its nodes until its victims' pods are gone. Until it is admitted,
# its GPUs count against the reserve and its quotas too: a gang decided after it in a
# cycle where its victims' pods still terminate must not take what its admission needs.
_FIVE = [node(f"n{i}") for i in range(1, 6)]
_NOMINEE = job("n").user("alice").tier("high").gang(24, per_worker=4).build()
_ON_THREE = running(_NOMINEE, {"n1": 2, "n2": 2, "n3": 2}).placement


def test_a_nominee_counts_against_the_reserve_while_its_victims_pods_terminate() -> None:
    pol = policy(reserve=8)  # 40 GPUs, 32 outside the reserve
    other = running(job("b").tier("batch").gang(8, per_worker=4).build(), {"n5": 2})
    requeued = job("v").tier("batch").gang(8, per_worker=4).at(1).build()
    # The victims' pods still hold n1 and n2: the nominee cannot be placed yet.
    snap = Snapshot(
        _FIVE, levels=LEVELS, running=[other], foreign=[Foreign("n1", 8), Foreign("n2", 8)]
    )
    result = schedule(snap, [_NOMINEE, requeued], pol, now=1.0, nominated={"n": _ON_THREE})
    by_name = {d.gang.id: d for d in result.decisions}
    assert isinstance(by_name["n"], Pending) and "release" in by_name["n"].reason
    # 8 (b) + 24 (n, nominated) + 8 would eat into the reserve: v waits
    assert isinstance(by_name["v"], Pending), by_name["v"]
    assert "left outside the reserve" in by_name["v"].reason
    # Once the pods are gone, the nominee takes its nodes.
    snap = Snapshot(_FIVE, levels=LEVELS, running=[other])
    result = schedule(snap, [_NOMINEE, requeued], pol, now=2.0, nominated={"n": _ON_THREE})
    by_name = {d.gang.id: d for d in result.decisions}
    assert isinstance(by_name["n"], Admit)
    assert by_name["n"].placement.nodes() == _ON_THREE.nodes()
    assert isinstance(by_name["v"], Pending)


def test_a_nominee_counts_against_its_users_quota_while_it_waits() -> None:
    pol = policy({"p": {"users": {"alice": (0, 28)}}})
    held = [Foreign("n1", 8), Foreign("n2", 8), Foreign("n5", 8)]
    snap = Snapshot(_FIVE, levels=LEVELS, foreign=held)
    second = job("x").user("alice").tier("high").gang(8, per_worker=4).at(1).build()
    result = schedule(snap, [_NOMINEE, second], pol, now=1.0, nominated={"n": _ON_THREE})
    by_name = {d.gang.id: d for d in result.decisions}
    assert isinstance(by_name["n"], Pending)
    # 24 promised to n + 8 > alice's 28, though n4 is free
    assert isinstance(by_name["x"], Pending) and by_name["x"].code == "Quota", by_name["x"]


def test_a_victim_still_running_is_not_counted_twice_with_its_nominee() -> None:
    # p may hold 32: v (8, evicted for n, its eviction not written yet) and n (24).
    pol = policy({"p": {"max": 32}})
    victim = running(job("v").tier("batch").gang(8, per_worker=4).build(), {"n1": 2})
    third = job("x").gang(8, per_worker=4).at(1).build()
    held = [Foreign("n2", 4), Foreign("n5", 8)]  # n cannot be placed yet
    snap = Snapshot(_FIVE, levels=LEVELS, running=[victim], foreign=held)
    result = schedule(
        snap, [_NOMINEE, third], pol, now=1.0, nominated={"n": _ON_THREE},
        protected=frozenset({victim.gang.id}), releasing={victim.gang.id: 0},
    )  # fmt: skip
    by_name = {d.gang.id: d for d in result.decisions}
    assert isinstance(by_name["n"], Pending)
    # after the eviction p holds 24 (n) + 8 (x) = 32: x fits, on the node n does not hold
    assert isinstance(by_name["x"], Admit), by_name["x"]
    assert by_name["x"].placement.nodes() == {"n4": 2}


def test_reclaiming_a_guarantee_takes_the_borrowed_work_that_leaves_the_lender_its_own() -> None:
    """a and b are each guaranteed 8 of 16 GPUs; b holds 12: b4 (4 GPUs) and b8 (8,
    started later). a asks for its 8 with 4 free: evicting b4 is enough, and leaves b
    its guarantee (found by a review: b8, the most recent, went, leaving b at 4)."""
    pol = policy({"a": {"guaranteed": 8}, "b": {"guaranteed": 8}})
    b8 = job("b8").project("b").gang(8).build()
    b4 = job("b4").project("b").gang(4).build()
    snap = Snapshot(
        [node("n1"), node("n2")], levels=LEVELS,
        running=[running(b4, {"n1": 4}, started=-20_000), running(b8, {"n2": 8}, started=-10_000)],
    )  # fmt: skip
    a = job("a").project("a").gang(8, per_worker=1).build()
    (d,) = schedule(snap, [a], pol, now=0.0).decisions
    assert isinstance(d, Preempt) and list(d.victims) == ["b4"], d
    assert snap.project_usage["b"] == 8_000


def test_shrinking_its_own_elastic_job_does_not_let_a_project_borrow_past_the_forecast() -> None:
    """b is forecast to want its idle guarantee (8) back, so a may not borrow it; taking
    a worker from a's own grown job does not change that (found by a review: the
    shrink path checked the quota only, and a1 was admitted)."""
    pol = policy({"a": {"guaranteed": 4}, "b": {"guaranteed": 8}})
    hints = Hints(protect={"b": 8_000})
    a1 = job("a1").project("a").gang(4).build()
    plain = job("x").project("a").gang(4).build()
    ref = Snapshot([node("n1", 12)], levels=LEVELS, running=[running(plain, {"n1": 4})])
    (r,) = schedule(ref, [a1], pol, now=0.0, hints=hints).decisions
    assert isinstance(r, Pending), r
    e = job("e").project("a").gang(2).elastic(2, 4).build().resized(4)
    snap = Snapshot([node("n1", 12)], levels=LEVELS, running=[running(e, {"n1": 4})])
    (d,) = schedule(snap, [a1], pol, now=0.0, hints=hints).decisions
    assert isinstance(d, Pending), (d, snap.project_usage)


def test_a_holder_that_preempts_on_retry_releases_its_reserved_nodes() -> None:
    """Found by a review: admitted, a holder gave its reservation back; preempting
    (or shrinking) for other nodes, it kept it, and z waited as Reserved in vain."""
    # n0: 8 GPUs, another scheduler holds 4. n1: v (high, preemptible) 8. n2: y (batch) 8.
    nodes = [node("n0", rack="r1"), node("n1", rack="r1"), node("n2", rack="r2")]
    v = replace(job("v").tier("high").gang(8).build(), preemptible=True)
    y = job("y").tier("batch").gang(8).build()
    snap = Snapshot(
        nodes,
        levels=LEVELS,
        foreign=[Foreign("n0", 4)],
        running=[running(v, {"n1": 8}), running(y, {"n2": 8})],
    )
    h = job("h").tier("high").gang(8).on("topology.kubernetes.io/rack", "r1").at(0).build()
    x = job("x").tier("normal").gang(8).at(1).build()
    z = job("z").tier("normal").gang(4).at(2).build()
    res = schedule(snap, [h, x, z], policy(), now=0.0)
    by = {d.gang.id: d for d in res.decisions}
    assert isinstance(by["x"], Preempt) and by["x"].victims == ("y",)
    assert isinstance(by["h"], Preempt) and by["h"].victims == ("v",), by["h"]
    assert by["h"].placement.nodes() == {"n1": 8}
    # h is placed on n1; n0's 4 free GPUs are not needed by anyone ahead of z
    assert not isinstance(by["z"], Pending), (by["z"], res.reserved_for, res.reserved_nodes)


def test_a_users_guarantee_is_taken_back_from_a_user_above_theirs() -> None:
    """alice and bob are each guaranteed 4 of project p's 8; bob holds all 8 GPUs of
    the only node. alice's 4 are taken back from bob (found by a review: she waited
    for capacity for good; the guarantee only ordered the queue)."""
    pol = policy({"p": {"guaranteed": 8, "users": {"alice": (4, 8), "bob": (4, 8)}}})
    bob = job("bob").user("bob").gang(8).build()
    snap = Snapshot([node("n1")], levels=LEVELS, running=[running(bob, {"n1": 8})])
    alice = job("alice").user("alice").gang(4).build()
    (d,) = schedule(snap, [alice], pol, now=0.0).decisions
    assert isinstance(d, Preempt) and list(d.victims) == ["bob"], d
    # not beyond alice's guarantee, nor from a user within theirs
    carol = job("carol").user("alice").gang(8).build()
    snap = Snapshot([node("n1")], levels=LEVELS, running=[running(bob, {"n1": 8})])
    assert isinstance(schedule(snap, [carol], pol, now=0.0).decisions[0], Pending)
    half = job("bob").user("bob").gang(4).build()
    snap = Snapshot([node("n1", 4)], levels=LEVELS, running=[running(half, {"n1": 4})])
    assert isinstance(schedule(snap, [alice], pol, now=0.0).decisions[0], Pending)


def _from(r: Running, first: int) -> Running:
    """`r` on devices from `first` (`running` numbers each gang's from 0)."""
    pods = tuple(
        PodPlacement(p.node, tuple(d + first for d in p.devices)) for p in r.placement.pods
    )
    return Running(r.gang, Placement(pods), r.started)


def test_no_gang_is_admitted_onto_gpus_a_victim_of_the_same_cycle_still_holds() -> None:
    """Found by a review (a two-cycle property): n0's 4 GPUs are r0's (1) and r1's (3).
    q0 preempts r1 and is nominated; its pods keep their GPUs until they terminate.
    q1, decided after it in the same cycle, was admitted onto r1's GPUs (the
    snapshot counts them free once q0 is placed), and the kubelet refused its pod.
    The victim's node is now left alone for the rest of the cycle."""
    r0 = running(job("r0").tier("high").gang(1).build(), {"n0": 1})
    r1 = _from(running(job("r1").tier("batch").gang(3).build(), {"n0": 3}), 1)
    snap = Snapshot([node("n0", 4), node("n1", 4)], levels=LEVELS, running=[r0, r1])
    q0 = job("q0").tier("high").gang(1).at(0).build()
    q1 = job("q1").tier("high").gang(1).at(1).build()
    q2 = job("q2").tier("high").gang(5).at(2).build()  # n1's 4 do not hold it
    busy = Running(job("x").gang(4).build(), Placement((PodPlacement("n1", (0, 1, 2, 3)),)), -1)
    snap.assume(busy)
    by = {d.gang.id: d for d in schedule(snap, [q0, q1, q2], policy(), now=0.0).decisions}
    assert isinstance(by["q0"], Preempt) and by["q0"].victims == ("r1",)
    assert isinstance(by["q1"], Pending) and by["q1"].code == "Reserved", by["q1"]
    assert isinstance(by["q2"], Pending)


@pytest.mark.parametrize("awaiting", [frozenset(), frozenset({"c/w"})])
def test_a_nominee_waits_while_a_gang_it_evicts_still_runs(awaiting: frozenset[str]) -> None:
    """Found by a review: the next cycle, big (borrowed) not evicted yet, counted as
    released: w was admitted beside it, its record named no victim any more, and big,
    never evicted, kept 9 GPUs outside a reserve that leaves 8. A nominee whose
    victims still run as they were (`awaiting`, from the gang controller) waits."""
    pol = policy({"a": {}, "b": {}, "c": {"guaranteed": 1}}, reserve=4)
    r0 = running(job("a/r0").project("a").tier("critical").gang(1).build(), {"n0": 1})
    r1 = _from(running(job("a/r1").project("a").tier("critical").gang(1).build(), {"n0": 1}), 1)
    big = running(
        job("b/big").project("b").tier("high").gang(8, per_worker=2).build(), {"n1": 2, "n2": 2}
    )
    w = job("c/w").project("c").tier("high").gang(1).build()
    nodes = [node(f"n{i}", 4) for i in range(3)]
    snap = Snapshot(nodes, levels=LEVELS, running=[r0, r1, big], reserve_tiers=pol.reserve_tiers)
    (d1,) = schedule(snap, [w], pol, now=0.0).decisions
    assert isinstance(d1, Preempt) and d1.victims == ("b/big",), d1
    snap = Snapshot(nodes, levels=LEVELS, running=[r0, r1, big], reserve_tiers=pol.reserve_tiers)
    (d2,) = schedule(
        snap, [w], pol, now=1.0, nominated={w.id: d1.placement},
        protected=frozenset({big.gang.id}), releasing={big.gang.id: 0}, awaiting=awaiting,
    ).decisions  # fmt: skip
    assert isinstance(d2, Admit) != bool(awaiting), d2


def test_two_nominations_on_one_node_take_the_devices_each_was_promised() -> None:
    """Found by a review: a node held one nominee only (the last read), so the other
    was kept off its own node, and a gang decided after it took its GPU. q0 and q1
    were nominated on n0 (devices 2 and 3), their victims gone; r (lower tier) waits."""
    x = running(job("x").tier("high").gang(2).build(), {"n0": 2})
    snap = Snapshot([node("n0", 4)], levels=LEVELS, running=[x])
    q0 = job("q0").tier("high").gang(1).at(0).build()
    q1 = job("q1").tier("high").gang(1).at(1).build()
    r = job("r").tier("batch").gang(1).at(2).build()
    nominated = {
        q0.id: Placement((PodPlacement("n0", (3,)),)),
        q1.id: Placement((PodPlacement("n0", (2,)),)),
    }
    res = schedule(snap, [q0, q1, r], policy(), now=1.0, nominated=nominated)
    by = {d.gang.id: d for d in res.decisions}
    assert isinstance(by["q0"], Admit) and by["q0"].placement == nominated[q0.id]
    assert isinstance(by["q1"], Admit) and by["q1"].placement == nominated[q1.id]
    assert isinstance(by["r"], Pending)


@pytest.mark.parametrize("resumed", [False, True])
def test_a_gang_on_a_cordoned_node_takes_no_free_gpus_of_the_schedulable_ones(
    resumed: bool,
) -> None:
    """Found by a review: `old` still runs on node a, cordoned (the snapshot leaves
    it out), and its 8 GPUs were taken off the free GPUs of b and c: `new` waited
    for capacity ("hold 8 of 4") with b empty, and `hi` evicted `batch` to free
    GPUs that were free. Its GPUs still count against its project's quota and the
    reserve, as usage, and the reserve is measured against what it holds too."""
    old = job("p/old").gang(8).build()
    batch = job("p/batch").tier("batch").gang(8).build()
    nodes = [replace(node("a"), schedulable=False), node("b"), node("c")]

    def snapshot(*on_c: Gang) -> Snapshot:
        on = [running(old, {"a": 8}), *(running(g, {"c": 8}) for g in on_c)]
        if not resumed:
            return Snapshot(nodes, levels=LEVELS, running=on, reserve_tiers=frozenset({"critical"}))
        pods = [(g.pod, (d,)) for g in on_c for d in range(8)]
        bases = [
            node_base(node("b"), levels=LEVELS, foreign=None, pods=()),
            node_base(node("c"), levels=LEVELS, foreign=None, pods=pods),
        ]
        return Snapshot.resumed(
            bases, levels=LEVELS, running=on, reserve_tiers=frozenset({"critical"})
        )

    snap = snapshot(batch)
    assert (snap.free_milli, snap.project_usage["p"]) == (8_000, 16_000)
    new, hi = job("p/new").gang(4).build(), job("p/hi").tier("high").gang(4).build()
    for g in (new, hi):
        snap = snapshot(batch)
        (d,) = schedule(snap, [g], policy({"p": {"guaranteed": 24}}), now=0.0).decisions
        assert isinstance(d, Admit) and d.placement.nodes() == {"b": 4}, d
    # the project's max still counts old: 16 of 16
    snap = snapshot(batch)
    (d,) = schedule(snap, [new], policy({"p": {"max": 16}}), now=0.0).decisions
    assert isinstance(d, Pending) and "project p at max: 16 of 16" in d.reason, d
    # the reserve (8): 8 of the 16 free GPUs of b and c may go outside it, and no more
    pol = policy({"p": {"guaranteed": 24}}, reserve=8)
    snap = snapshot()
    eight, more = job("p/eight").gang(8).at(0).build(), job("p/more").gang(1).at(1).build()
    (d, e) = schedule(snap, [eight, more], pol, now=0.0).decisions
    assert isinstance(d, Admit) and d.placement.nodes() == {"b": 8}, d
    assert isinstance(e, Pending) and "0 are left outside the reserve" in e.reason, e
    # a reserve tier's gang on the cordoned node adds nothing to what the reserve is
    # measured against (found by the last review: capacity took its 8 GPUs and
    # outside_reserve did not, so normal work took the reserve of b and c, where the
    # critical gang would start again once a is drained)
    old_tier = old
    old = replace(old_tier, tier="critical")
    snap = snapshot()
    assert snap.capacity == 16_000
    sixteen = job("p/sixteen").gang(16, per_worker=8).build()
    (d,) = schedule(snap, [sixteen], pol, now=0.0).decisions
    assert isinstance(d, Pending) and "8 are left outside the reserve" in d.reason, d
    old = old_tier


def test_a_reclaim_takes_no_more_from_a_lender_than_it_borrows() -> None:
    """a and b are each guaranteed 8 of 16 GPUs; b holds 12 as b1, b2 (on n0) and b3
    (on n1). Found by a review: whether b borrows was asked once, before any victim
    went, so a's whole-node worker evicted b1 and b2 (b down to 4 of its 8). Evicting
    b3 alone frees n1 and leaves b its guarantee. With 4 of n1's GPUs held by another
    scheduler, no choice of b's borrowed 4 makes room for a's 8: a waits."""
    pol = policy({"a": {"guaranteed": 8}, "b": {"guaranteed": 8}})
    b1, b2, b3 = (job(f"b/b{i}").project("b").gang(4).build() for i in (1, 2, 3))

    def on(g: Gang, n: str, first: int) -> Running:
        return _from(running(g, {n: 4}), first)

    snap = Snapshot(
        [node("n0"), node("n1")], levels=LEVELS,
        running=[on(b1, "n0", 0), on(b2, "n0", 4), on(b3, "n1", 0)],
    )  # fmt: skip
    whole = job("a/whole").project("a").gang(8, per_worker=8).build()
    (d,) = schedule(snap, [whole], pol, now=0.0).decisions
    assert isinstance(d, Preempt) and d.victims == ("b/b3",), d
    assert snap.project_usage["b"] == 8_000
    snap = Snapshot(
        [node("n0"), node("n1")], levels=LEVELS, foreign=[Foreign("n1", 4)],
        running=[on(b1, "n0", 0), on(b3, "n0", 4), on(b2, "n1", 4)],
    )  # fmt: skip
    (d,) = schedule(snap, [job("a/want").project("a").gang(8).build()], pol, now=0.0).decisions
    assert isinstance(d, Pending) and d.code == "Capacity", d
    assert snap.project_usage["b"] == 12_000


def test_a_lender_loses_at_most_part_of_one_gang_below_its_guarantee() -> None:
    """b, guaranteed 10, holds 16: s (4 GPUs, on n0) and big (12, on n1 and n2).
    Evicting s leaves b 12 and big then straddles its guarantee. a asks for the
    whole cluster: both would have to go, and whichever went last would go with b
    at or below its guarantee (found by a review: b went from 20 to 0 of its 11).
    A single straddling gang may still go: a's 12 take big alone, leaving b its 4."""
    pol = policy({"a": {"guaranteed": 20}, "b": {"guaranteed": 10}})
    s = running(job("b/s").project("b").gang(4).build(), {"n0": 4})
    big = running(job("b/big").project("b").gang(12).build(), {"n1": 8, "n2": 4})
    nodes = [node("n0", 4), node("n1"), node("n2")]
    snap = Snapshot(nodes, levels=LEVELS, running=[s, big])
    (d,) = schedule(snap, [job("a/all").project("a").gang(20).build()], pol, now=0.0).decisions
    assert isinstance(d, Pending), d
    assert snap.project_usage["b"] == 16_000
    snap = Snapshot(nodes, levels=LEVELS, running=[s, big])
    (d,) = schedule(snap, [job("a/some").project("a").gang(12).build()], pol, now=0.0).decisions
    assert isinstance(d, Preempt) and d.victims == ("b/big",), d


def test_preemption_evicts_by_rank_and_spares_the_unneeded_not_the_fewest_gangs() -> None:
    """`_preempt` walks its ranking (of equal tier, the most recently started first:
    the least progress lost) and keeps every victim the placement does not need. A
    review found its docstring promised the fewest gangs: here x1 and x2 (100 s old)
    go, where y alone (5,000 s old) would do; that is the documented choice."""

    def on(g: Gang, n: str, devices: range | list[int], started: float) -> Running:
        return Running(g, Placement(tuple(PodPlacement(n, (d,)) for d in devices)), started)

    keep0, keep1 = (job(f"keep{i}").tier("high").gang(6).build() for i in (0, 1))
    x1, x2 = (job(f"x{i}").tier("batch").gang(1).build() for i in (1, 2))
    y = job("y").tier("batch").gang(2).build()
    snap = Snapshot([node("n0"), node("n1")], levels=LEVELS, running=[
        on(keep0, "n0", range(6), -9000), on(x1, "n0", [6], -100), on(x2, "n0", [7], -100),
        on(keep1, "n1", range(6), -9000), on(y, "n1", [6, 7], -5000),
    ])  # fmt: skip
    g = job("g").tier("high").gang(2, per_worker=2).build()
    (d,) = schedule(snap, [g], policy(), now=0.0).decisions
    assert isinstance(d, Preempt) and d.victims == ("x1", "x2"), d


@pytest.mark.parametrize("guaranteed", [0, 4])
def test_a_gang_that_needs_no_gpus_takes_back_no_guarantee(guaranteed: int) -> None:
    """Found by a review: a CPU-only pod (a simulator trace's) counted as within its
    project's guarantee (0 + 0 <= 0), so it evicted another project's critical work
    "to free 0 GPUs". A gang that needs no GPUs reclaims none, from a project or,
    within its project, from a user above their guarantee."""
    pol = policy({
        "a": {"guaranteed": guaranteed, "users": {"u": (guaranteed, None)}},
        "b": {"guaranteed": 0},
    })  # fmt: skip
    n0 = replace(node("n0"), cpu_milli=16_000)
    crit = replace(
        job("b/crit").project("b").tier("critical").gang(8).build(),
        pod=PodShape(gpus=1, cpu_milli=2000),
    )
    other = replace(
        job("a/other").project("a").user("v").gang(8).build(), pod=PodShape(gpus=1, cpu_milli=2000)
    )
    cpu = replace(job("a/cpu").project("a").build(), pod=PodShape(gpus=0, cpu_milli=1000))
    for victim in (crit, other):
        snap = Snapshot([n0], levels=LEVELS, running=[running(victim, {"n0": 8})])
        (d,) = schedule(snap, [cpu], pol, now=0.0).decisions
        assert isinstance(d, Pending), d
    # a gang that needs GPUs still takes its guarantee back
    if guaranteed:
        snap = Snapshot([n0], levels=LEVELS, running=[running(crit, {"n0": 8})])
        (d,) = schedule(snap, [job("a/g").project("a").build()], pol, now=0.0).decisions
        assert isinstance(d, Preempt) and d.victims == ("b/crit",), d


def test_a_zero_gpu_elastic_gang_grows_under_a_per_job_max() -> None:
    """Found by a review: growth divided the project's per-job max by the gang's GPUs
    per worker, and a CPU-only elastic gang raised ZeroDivisionError."""
    cpu = Gang(
        JobId("p/cpu"), "p", "u", "normal", 10_000, 0.0, 1, PodShape(gpus=0, cpu_milli=1000),
        min_workers=1, max_workers=4,
    )  # fmt: skip
    n0 = replace(node("n0"), cpu_milli=64_000)
    snap = Snapshot([n0], levels=LEVELS, running=[running(cpu, {"n0": 1})])
    res = schedule(snap, [], policy({"p": {"job_max": 8}}), now=0.0)
    assert [r.gang.workers for r in res.resizes] == [4]


@pytest.mark.parametrize("fragmentation", [False, True])
def test_a_shared_pod_of_no_gpu_share_is_placed(fragmentation: bool) -> None:
    """Found by a review: counting a node's slots for a shared pod asking for 0
    milli-GPUs divided by its share (ZeroDivisionError). It takes nothing."""
    model = FragModel.of([PodShape(gpus=1), PodShape(gpus=1, gpu_milli=500)])
    nothing = replace(job("p/a").build(), pod=PodShape(gpus=1, gpu_milli=0))
    snap = Snapshot([node("n0", 2)], levels=LEVELS, fragmentation=model if fragmentation else None)
    (d,) = schedule(snap, [nothing], policy(), now=0.0).decisions
    assert isinstance(d, Admit) and d.placement.nodes() == {"n0": 1}, d
    assert snap.free_milli == 2_000


_HeldCase = tuple[
    SchedulingPolicy, dict[str, NamespaceQuota], Hints | None, tuple[QuotaLimit, int, int]
]
"""Policy, namespace quotas, hints; the limit held on, its figure and how far over it."""

_HELD_CASES: dict[str, _HeldCase] = {
    "namespace": (
        policy({"p": {"guaranteed": 16}}), {"p": NamespaceQuota(gpu_milli=8_000)}, None,
        ("namespace", 0, 0),
    ),
    "project": (policy({"p": {"max": 10}}), {}, None, ("project", 10_000, 2_000)),
    "user": (
        policy({"p": {"guaranteed": 16, "users": {"u": (0, 10)}}}), {}, None,
        ("user", 10_000, 2_000),
    ),
    "guarantee": (
        policy({"p": {"guaranteed": 8}}, borrowing=False), {}, None, ("guarantee", 8_000, 4_000)
    ),
    "lending": (  # 8 idle, all of them b's forecast: none may be lent
        policy({"p": {"guaranteed": 4}, "b": {"guaranteed": 8}}), {}, Hints(protect={"b": 8_000}),
        ("lending", 0, 4_000),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_HELD_CASES))
def test_a_gang_held_on_quota_names_the_limit_and_by_how_much(case: str) -> None:
    """A gang left waiting on quota carries the limit that held it, its figure and
    how much must be given back, as the cycle saw them, so that what reads the
    decision (`explain`, the demand the controller forecasts) need not ask the
    limits again and come to another answer."""
    pol, quotas, hints, (limit, bound, over) = _HELD_CASES[case]
    old = job("p/old").gang(8).build()
    snap = Snapshot(
        [node("n0"), node("n1")], levels=LEVELS, running=[running(old, {"n0": 8})],
        namespace_quota=quotas,
    )  # fmt: skip
    (d,) = schedule(snap, [job("p/new").gang(4).build()], pol, now=0.0, hints=hints).decisions
    assert isinstance(d, Pending) and d.code == "Quota", d
    assert d.held == QuotaHold(limit, d.reason, bound=bound, over=over)
