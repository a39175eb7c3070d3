"""A gang like one just left waiting, with nothing changed since, is answered from
that gang's decision (`cycle._decide`) instead of checked again (`cycle._decided`).
On random clusters and queues of many gangs alike (same kind, other names, ages and
runtimes; some with a nomination), one cycle with the memo and one where every gang
is decided afresh must decide the same, reasons included, and leave the same
snapshot."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduler import cycle
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang, JobId, Pending, Placement, PodPlacement
from tests.unit.scheduler.builders import job, node, policy
from tests.unit.scheduler.builders import running as running_gang
from tests.unit.scheduler.test_properties import queued, scenarios


@st.composite
def alike_queues(draw: st.DrawFn) -> tuple[Snapshot, list[Gang], Any, dict[JobId, Placement]]:
    snap, _, pol = draw(scenarios())
    kinds = [queued(draw, f"k{k}", most=3) for k in range(draw(st.integers(1, 4)))]
    queue = []
    for i in range(draw(st.integers(2, 14))):
        b = copy.deepcopy(draw(st.sampled_from(kinds)))
        b._name = f"q{i}"  # another gang of the same kind
        b.at(float(i))
        if draw(st.booleans()):
            b.lasts(draw(st.sampled_from([60.0, 3600.0, 86400.0])))
        queue.append(b.build())
    nominated = {}
    if queue and draw(st.booleans()):  # one of them already promised some nodes
        g = draw(st.sampled_from(queue))
        node = draw(st.sampled_from([ns.name for ns in snap.nodes]))
        nominated[g.id] = Placement(tuple(PodPlacement(node, (0,)) for _ in range(g.workers)))
    return snap, queue, pol, nominated


def _run(
    snap: Snapshot,
    queue: list[Gang],
    pol: Any,
    nominated: dict[JobId, Placement],
    now: float,
    budget_used: int,
) -> tuple[str, str]:
    result = cycle.schedule(
        snap, queue, pol, now=now, preemptions_last_hour=budget_used, nominated=nominated
    )
    state = repr(
        (sorted(snap.running.items()), sorted(snap.project_usage.items()), snap.outside_reserve)
    )
    return repr(
        (result.decisions, result.resizes, result.reserved_for, sorted(result.reserved_nodes))
    ), state


@settings(max_examples=300, deadline=None)
@given(alike_queues(), st.sampled_from([0.0, 700.0, 20_000.0]), st.sampled_from([0, 19, 20]))
def test_a_gang_like_one_left_waiting_gets_the_decision_it_would_get_afresh(
    case: tuple[Snapshot, list[Gang], Any, dict[JobId, Placement]],
    now: float,
    budget_used: int,
) -> None:
    snap, queue, pol, nominated = case
    fresh_snap = copy.deepcopy(snap)
    remembered = _run(snap, queue, pol, nominated, now, budget_used)
    with _afresh():
        fresh = _run(fresh_snap, queue, pol, nominated, now, budget_used)
    assert remembered == fresh


@contextmanager
def _afresh(count: list[str] | None = None) -> Iterator[None]:
    """Every gang decided afresh (`_decide` is `_decided`), or, with `count`, the
    memo kept and the names of the gangs decided afresh appended to `count`."""
    decide, decided = cycle._decide, cycle._decided
    if count is None:
        cycle._decide = decided  # type: ignore[assignment]
    else:

        def counting(*args: Any) -> Any:
            count.append(args[3].id)
            return decided(*args)

        cycle._decided = counting  # type: ignore[assignment]
    try:
        yield
    finally:
        cycle._decide, cycle._decided = decide, decided  # type: ignore[assignment]


def test_a_queue_of_gangs_alike_is_answered_from_the_first() -> None:
    """Twenty gangs alike behind a full project: the first is checked, the rest come
    from it (the memo is used, not only harmless)."""
    pol = policy({"p": {"guaranteed": 8, "max": 8}})
    snap = Snapshot([node("n0", 8)], levels=("topology.kubernetes.io/zone",))
    queue = [job(f"q{i}").project("p").gang(8).at(float(i)).build() for i in range(21)]
    checked: list[str] = []
    with _afresh(checked):
        result = cycle.schedule(snap, queue, pol, now=0.0)
    codes = [type(d).__name__ if not isinstance(d, Pending) else d.code for d in result.decisions]
    assert codes == ["Admit"] + ["Quota"] * 20
    assert checked == ["q0", "q1"]
    assert len({d.reason for d in result.decisions[1:]}) == 1


LEVELS = ("topology.kubernetes.io/zone",)


def _both(
    snap: Snapshot, queue: list[Gang], pol: Any, nominated: dict[JobId, Placement] | None = None
) -> list[str]:
    """Each decision's code (or kind) and reason, with the memo; asserted equal to
    those of every gang decided afresh, on a copy of the snapshot."""
    fresh_snap = copy.deepcopy(snap)
    got = cycle.schedule(snap, queue, pol, now=0.0, nominated=nominated)
    with _afresh():
        want = cycle.schedule(fresh_snap, queue, pol, now=0.0, nominated=nominated)
    assert repr(got.decisions) == repr(want.decisions)
    return [
        f"{d.code}: {d.reason}" if isinstance(d, Pending) else type(d).__name__
        for d in got.decisions
    ]


def test_a_short_job_alike_a_long_one_may_use_the_reserved_nodes_the_long_one_may_not() -> None:
    """Two gangs alike but for their runtime, behind a gang holding the nodes: the
    long one is held off, the short one ends before the holder could start and is
    admitted there (its kind differs in that)."""
    pol = policy({"p": {"guaranteed": 64, "max": 64}})
    running = [
        running_gang(job("r0").gang(8).lasts(20_000).build(), {"n0": 8}),
        running_gang(job("r1").gang(4, per_worker=4).lasts(10**6).build(), {"n1": 1}),
    ]
    snap = Snapshot([node("n0", 8), node("n1", 8)], levels=LEVELS, running=running)
    queue = [
        job("x").gang(16, per_worker=8).at(0).build(),
        job("long").gang(4, per_worker=4).lasts(10**7).at(1).build(),
        job("short").gang(4, per_worker=4).lasts(60).at(2).build(),
    ]
    kinds = _both(snap, queue, pol)
    assert kinds[1].startswith("Reserved") and kinds[2] == "Admit"


def test_a_gang_alike_one_left_waiting_before_a_reservation_is_decided_again_after_it() -> None:
    """`a` waits (its plan does not fit the free nodes, so it reserves nothing); `d`
    then reserves n0 and n2; `b`, of `a`'s kind, now may use none of the nodes, and
    its reason says so instead of repeating `a`'s."""
    pol = policy({"p": {"guaranteed": 64, "max": 64}})
    running = [
        running_gang(job("r0").gang(4, per_worker=4).build(), {"n0": 1}),
        running_gang(job("r2").gang(8).build(), {"n2": 8}),
    ]
    nodes = [node("n0", 8), node("n1", 8), node("n2", 8)]
    snap = Snapshot(nodes, levels=LEVELS, running=running)
    nominated = {JobId("n"): Placement((PodPlacement("n1", (0,)),))}
    queue = [
        job("a").gang(24, per_worker=4).at(0).build(),
        job("d").gang(16, per_worker=4).at(1).build(),
        job("b").gang(24, per_worker=4).at(2).build(),
    ]
    kinds = _both(snap, queue, pol, nominated)
    assert kinds[0] != kinds[2], kinds
