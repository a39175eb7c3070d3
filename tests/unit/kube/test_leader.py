"""The Lease elector, two replicas on one fake API server, time driven by a FakeClock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from controller.kube.client import ApiError, Resource
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


class FlakyKube(FakeKube):
    """Down while `outage(t)` is true; counts the gets."""

    def __init__(self, clock: FakeClock, outage: Any) -> None:
        super().__init__()
        self.clock, self.outage = clock, outage

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        self.down = self.outage(self.clock.monotonic())
        return super().get(res, name, namespace)


class ProbingClock(FakeClock):
    """Advances in 0.5 s steps and reads the fence at each, as a wing's write would."""

    def __init__(self) -> None:
        super().__init__()
        self.fence: Any = None
        self.readings: list[tuple[float, bool]] = []
        self.until = 0.0

    def wait(self, event: threading.Event, seconds: float) -> bool:
        for _ in range(int(seconds / 0.5)):
            self.advance(0.5)
            self.readings.append((self.monotonic(), self.fence()))
        if self.monotonic() >= self.until:
            event.set()
        return event.is_set()


def test_a_lease_request_gives_up_before_the_lease_could_run_out() -> None:
    assert SETTINGS.request_timeout_s == 5  # 15 - 10
    assert ElectionSettings(lease_duration_s=137, renew_deadline_s=15).request_timeout_s == 30
    assert ElectionSettings(lease_duration_s=11.5, renew_deadline_s=10).request_timeout_s == 1.5
    with pytest.raises(ValueError, match="at least 1 s shorter"):  # no time for a write to land
        LeaseElector(
            FakeKube(),
            identity="a",
            settings=ElectionSettings(lease_duration_s=10.5, renew_deadline_s=10),
        )


def test_once_the_fence_has_dropped_the_term_is_over() -> None:
    """Renewals fail from t0+1 to t0+10; the fence drops at t0+10 (wings get
    NotLeaderError). A renewal that succeeds after that does not bring the term
    back, as in client-go (found by a review: it did, and the wings had stopped)."""
    clock = ProbingClock()
    t0 = clock.monotonic()
    kube = FlakyKube(clock, lambda t: t0 + 1 <= t < t0 + 11)
    slow = ElectionSettings(
        name="lease", namespace="sys", lease_duration_s=15, renew_deadline_s=10, retry_period_s=3
    )
    a = LeaseElector(kube, identity="a", settings=slow, clock=clock)
    clock.fence, clock.until = a.is_leader, t0 + 20
    stopped: list[float] = []
    a.run(
        threading.Event(),
        on_started=lambda: None,
        on_stopped=lambda: stopped.append(clock.monotonic()),
    )
    dropped = next(t for t, leader in clock.readings if not leader)
    back = [t for t, leader in clock.readings if leader and t > dropped]
    # The fence refused writes at `dropped`, yet the same term resumed writing later
    # and on_stopped was called only by the final stop.
    assert not back, f"fence dropped at {dropped - t0}, leading again at {back[0] - t0}"


def test_a_deleted_lease_is_not_taken_while_its_holder_still_writes() -> None:
    """Found by a review: a candidate created it at once, beside a leader whose
    fence still said so; the holder itself takes it again."""
    kube, clock = FakeKube(), FakeClock()
    a = LeaseElector(kube, identity="a", settings=SETTINGS, clock=clock)
    b = LeaseElector(kube, identity="b", settings=SETTINGS, clock=clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b has seen a hold it
    del kube.objects[("Lease", "sys", "lease")]  # an operator's `kubectl delete lease`
    clock.advance(1)
    b_leads = b.try_acquire_or_renew()
    assert not (b_leads and a.is_leader()), "split brain: both fences say leader"
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    # a stops renewing, and the Lease is deleted again: b takes it once a's would
    # have run out
    del kube.objects[("Lease", "sys", "lease")]
    clock.advance(SETTINGS.lease_duration_s)
    assert b.try_acquire_or_renew()


class HangingKube(FakeKube):
    """After the first renewal the API server hangs each request for the client's
    timeout, then the connection fails (run.py gives the elector's client
    `request_timeout_s`)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock, self.hang = clock, False

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        if self.hang:
            self.clock.advance(SETTINGS.request_timeout_s)
            raise ApiError(0, "Unreachable", "read timed out")
        return super().get(res, name, namespace)


def test_leadership_ends_before_the_lease_runs_out_even_if_renewals_hang() -> None:
    """Found by a review: with the 30 s client a hung renewal kept the wings running
    for 33 s, past the 15 s after which another replica may lead."""
    clock = FakeClock()
    t0 = clock.monotonic()
    kube = HangingKube(clock)
    a = LeaseElector(kube, identity="a", settings=SETTINGS, clock=clock)
    stopped: list[float] = []

    def started() -> None:
        kube.hang = True

    a.run(
        threading.Event(), on_started=started, on_stopped=lambda: stopped.append(clock.monotonic())
    )
    assert stopped[0] - t0 <= SETTINGS.lease_duration_s, (
        f"on_stopped at t0+{stopped[0] - t0}, after any other replica may lead (t0+15)"
    )


class SlowReads(FakeKube):
    """b's view of the API server: the same objects, and while `during` is set each
    read runs it (the clock passing, a's renewals) before it answers."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__()
        self.objects = kube.objects
        self.during: Any = None

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        if self.during is not None:
            self.during()
        return super().get(res, name, namespace)


def test_a_candidate_counts_the_lease_from_when_its_read_returned() -> None:
    """Found by a review: the candidate dated what it saw from before its read. A read
    that took long (urllib3 sent it four times, each after a timeout) showed a renewal
    made late in it, and the candidate took the Lease while the holder still led."""
    clock, kube = FakeClock(), FakeKube()
    slow = SlowReads(kube)
    a = LeaseElector(kube, identity="a", settings=SETTINGS, clock=clock)
    b = LeaseElector(slow, identity="b", settings=SETTINGS, clock=clock)
    assert a.try_acquire_or_renew()
    read_s = 4 * SETTINGS.request_timeout_s

    def overtaken() -> None:
        for _ in range(int(read_s * 3 / 4 / SETTINGS.retry_period_s)):
            clock.advance(SETTINGS.retry_period_s)
            assert a.try_acquire_or_renew()  # a renews meanwhile, the last time late in it
        clock.advance(read_s / 4)  # and is cut off from the API server

    slow.during = overtaken
    assert not b.try_acquire_or_renew()
    slow.during = None
    while a.is_leader():
        assert not b.try_acquire_or_renew(), "split brain: both fences say leader"
        clock.advance(0.5)
    clock.advance(SETTINGS.lease_duration_s)
    assert b.try_acquire_or_renew()


def test_a_fractional_lease_duration_is_written_rounded_up() -> None:
    """Found by a review: 10.9 s was written as 10, so the others waited less than the
    holder's fence (renew deadline 10.5 s) stayed up."""
    kube, clock = FakeKube(), FakeClock()
    settings = ElectionSettings(lease_duration_s=11.9, renew_deadline_s=10.5)
    a = LeaseElector(kube, identity="a", settings=settings, clock=clock)
    assert a.try_acquire_or_renew()
    lease = kube.objects[("Lease", settings.namespace, settings.name)]["spec"]
    assert lease["leaseDurationSeconds"] == 12
