"""Shortcuts the cycle takes for gangs it cannot place, held to the long way.

The victim search's shortlist (`cycle._Victims`): a cycle walks it instead of
every running gang for each blocked gang, so it must hold every gang
`_victim_ok` accepts, and it must leave out the ones priority alone refuses.
`placement.fits` answers whether `place` would find a placement without
choosing one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduler.cycle import _victim_ok, _Victims
from controller.scheduler.fragmentation import FragModel, TypicalPod
from controller.scheduler.placement import fits, place
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import Gang
from tests.unit.scheduler.builders import job, node, policy, running
from tests.unit.scheduler.test_properties import LEVELS, scenarios


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_shortlist_holds_every_acceptable_victim(
    scenario: tuple[Snapshot, list[Gang], object],
) -> None:
    snap, queue, pol = scenario
    assert isinstance(pol, SchedulingPolicy)
    now = 0.0
    victims = _Victims(snap, pol, now)
    for g in queue:
        if g.project not in pol.projects:
            continue
        for holder in (False, True):
            pool = {r.gang.id for r in victims.pool(snap, pol, g, holder)}
            ok = {
                r.gang.id
                for r in snap.running.values()
                if _victim_ok(snap, pol, g, r, now, holder)[0]
            }
            assert ok <= pool


def test_the_shortlist_leaves_out_gangs_of_the_same_tier() -> None:
    """A project over its guarantee may only preempt lower, preemptible tiers: a
    full cluster of its own tier gives it nothing to look at."""
    pol = policy({"p": {"guaranteed": 8}})
    same = [job(f"r{i}").project("p").tier("normal").gang(8).build() for i in range(4)]
    low = job("low").project("p").tier("batch").gang(8).build()
    snap = Snapshot(
        [node(f"n{i}") for i in range(5)],
        levels=LEVELS,
        running=[running(g, {f"n{i}": 8}) for i, g in enumerate([*same, low])],
    )
    blocked = job("q").project("p").tier("normal").gang(8).build()
    victims = _Victims(snap, pol, now=0.0)
    assert [r.gang.id for r in victims.pool(snap, pol, blocked, holder=False)] == ["low"]
    assert len(victims.old) == 5


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.sets(st.sampled_from([f"n{i}" for i in range(6)])), st.booleans())
def test_fits_says_whether_place_finds_a_placement(
    scenario: tuple[Snapshot, list[Gang], object], exclude: set[str], frag: bool
) -> None:
    """`fits` answers the cycle's 'does it fit without the held nodes' without
    choosing a placement; it must agree with `place` for every gang."""
    snap, queue, _ = scenario
    snap.fragmentation = FragModel([TypicalPod(1, 1000, 8000, frozenset(), 1.0)]) if frag else None
    for g in queue:
        for shape in (g, g.resized(1)):
            ex = frozenset(exclude)
            assert fits(snap, shape, exclude=ex) == (place(snap, shape, exclude=ex) is not None)
