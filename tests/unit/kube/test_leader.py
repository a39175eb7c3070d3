"""The Lease elector, two replicas on one fake API server, time driven by a FakeClock."""

from __future__ import annotations

from controller.kube.clock import FakeClock
from controller.kube.leader import ElectionSettings, LeaseElector

from .fakes import FakeKube

SETTINGS = ElectionSettings(
    name="lease", namespace="sys", lease_duration_s=15, renew_deadline_s=10, retry_period_s=2
)


def _pair() -> tuple[FakeKube, FakeClock, LeaseElector, LeaseElector]:
    kube, clock = FakeKube(), FakeClock()
    a = LeaseElector(kube, identity="a", settings=SETTINGS, clock=clock)
    b = LeaseElector(kube, identity="b", settings=SETTINGS, clock=clock)
    return kube, clock, a, b


def test_first_candidate_acquires_and_the_other_waits() -> None:
    kube, _, a, b = _pair()
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and not b.is_leader()
    lease = kube.objects[("Lease", "sys", "lease")]["spec"]
    assert lease["holderIdentity"] == "a" and lease["leaseDurationSeconds"] == 15
    assert lease["leaseTransitions"] == 0


def test_renewals_keep_the_lease_and_the_other_never_takes_it() -> None:
    _, clock, a, b = _pair()
    a.try_acquire_or_renew()
    for _ in range(20):
        clock.advance(2)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert a.is_leader()


def test_an_unrenewed_lease_is_taken_over_only_after_its_duration() -> None:
    kube, clock, a, b = _pair()
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b observes the record now
    clock.advance(14)
    assert not b.try_acquire_or_renew()
    clock.advance(2)
    assert b.try_acquire_or_renew() and b.is_leader()
    assert kube.objects[("Lease", "sys", "lease")]["spec"]["leaseTransitions"] == 1


def test_the_fence_drops_at_the_renew_deadline_before_anyone_else_can_lead() -> None:
    kube, clock, a, b = _pair()
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    kube.down = True  # a cannot renew
    clock.advance(9)
    assert a.try_acquire_or_renew()  # still within its renew deadline
    clock.advance(1.5)
    assert not a.is_leader()  # 10.5 s since the last renewal: stop writing
    kube.down = False
    assert not b.try_acquire_or_renew()  # but b must still wait out the lease
    clock.advance(5)
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()


def test_release_lets_another_replica_lead_at_once() -> None:
    _, _, a, b = _pair()
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader()
    assert b.try_acquire_or_renew()


def test_renew_deadline_must_be_shorter_than_the_lease() -> None:
    import pytest

    with pytest.raises(ValueError, match="renew_deadline_s"):
        LeaseElector(
            FakeKube(),
            identity="x",
            settings=ElectionSettings(lease_duration_s=5, renew_deadline_s=5),
        )
