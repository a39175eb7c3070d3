"""The victim search's shortlist (`cycle._Victims`): a cycle walks it instead of
every running gang for each blocked gang, so it must hold every gang
`_victim_ok` accepts, and it must leave out the ones priority alone refuses."""

from __future__ import annotations

from hypothesis import given, settings

from controller.scheduler.cycle import _victim_ok, _Victims
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
