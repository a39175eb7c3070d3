"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it.

Replicas of `gangops run` race for one Lease; the holder renews it every
`retry_period_s`, the others try as often and take it over once it has not
changed for `lease_duration_s` (by their own monotonic clock, so clock skew
between machines does not matter). The official client's elector locks only
ConfigMaps, hence this module.

`is_leader()` is the write fence: it turns False as soon as the last
successful renewal is older than `renew_deadline_s`, which is shorter than
`lease_duration_s`, so a replica stops writing (even one paused and resumed
mid-write) before any other replica can have acquired the Lease.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.kube.client import RESOURCES, ApiError, KubeApi
from controller.kube.clock import Clock, SystemClock

__all__ = ["ElectionSettings", "LeaseElector"]

log = logging.getLogger(__name__)

_LEASE = RESOURCES["Lease"]
_MANAGER = "gangops-leader-election"


@dataclass(frozen=True)
class ElectionSettings:
    """Timings of the election (client-go's defaults, scaled down for a small controller)."""

    name: str = "gangops-controller"
    """The Lease's name."""
    namespace: str = "gangops-system"
    """The Lease's namespace."""
    lease_duration_s: float = 15.0
    """How long a Lease that nobody renews keeps others from taking it."""
    renew_deadline_s: float = 10.0
    """How long the leader keeps leading after its last successful renewal."""
    retry_period_s: float = 2.0
    """How often the leader renews and candidates retry."""

    @property
    def request_timeout_s(self) -> float:
        """How long one Lease request may take: the time between the renew deadline
        and the lease's end, so a renewal hanging on a slow API server cannot keep
        the wings running past the moment another replica may lead (a candidate
        counts the lease from when its read of the last renewal returned, after
        the holder sent it)."""
        return min(30.0, self.lease_duration_s - self.renew_deadline_s)


def _micro_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One replica's view of the election."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        identity: str,
        settings: ElectionSettings = ElectionSettings(),
        clock: Clock | None = None,
    ) -> None:
        if settings.lease_duration_s - settings.renew_deadline_s < 1:
            raise ValueError("renew_deadline_s must be at least 1 s shorter than lease_duration_s")
        self.identity = identity
        self.settings = settings
        self._kube = kube
        self._clock = clock or SystemClock()
        self._renewed_at: float | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_for = 0.0
        """How long the Lease last seen held by another replica keeps it (seconds)."""

    def is_leader(self) -> bool:
        """True while this replica holds a Lease renewed within the renew deadline."""
        at = self._renewed_at
        return at is not None and self._clock.monotonic() - at < self.settings.renew_deadline_s

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease; True if this replica holds it now."""
        s = self.settings
        now_mono, now = self._clock.monotonic(), self._clock.now()
        if self._renewed_at is not None and now_mono - self._renewed_at >= s.renew_deadline_s:
            # The renew deadline passed: this term is over (the fence is down, and the
            # wings are told so) even if a renewal would still succeed, as in client-go.
            self._renewed_at = None
            return False
        try:
            lease = self._kube.get(_LEASE, s.name, s.namespace)
            # What the read shows was written before it returned: the lease it shows
            # is counted from now, never from before the read (which may take up to
            # a request timeout), or the holder could still be writing when it ends.
            seen_mono = self._clock.monotonic()
            if lease is None:
                held = self._observed is not None and self._observed[0] not in ("", self.identity)
                if held and seen_mono - self._observed_at < self._observed_for:
                    # deleted by hand while another replica held it: that replica may
                    # still be writing until its Lease would have run out
                    return False
                self._kube.create(self._record(None, now), field_manager=_MANAGER)
                return self._won(now_mono)
            spec = lease.get("spec", {})
            holder = spec.get("holderIdentity") or ""
            observed = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
            duration = float(spec.get("leaseDurationSeconds") or s.lease_duration_s)
            if observed != self._observed:
                self._observed, self._observed_at = observed, seen_mono
                self._observed_for = duration
            mine = holder == self.identity
            if holder and not mine and seen_mono - self._observed_at < duration:
                self._renewed_at = None
                return False
            updated = self._record(lease, now)
            self._kube.replace(updated, field_manager=_MANAGER)
        except ApiError as e:
            if not e.transient:
                log.warning("lease request refused lease=%s error=%r", s.name, str(e))
            return self.is_leader()
        if not mine:
            log.info(
                "acquired lease lease=%s/%s identity=%s previous=%s",
                s.namespace,
                s.name,
                self.identity,
                holder or "-",
            )
        return self._won(now_mono)

    def _won(self, now_mono: float) -> bool:
        self._renewed_at = now_mono
        self._observed = None
        return True

    def _record(self, lease: dict[str, Any] | None, now: dt.datetime) -> dict[str, Any]:
        s = self.settings
        spec = dict(lease.get("spec", {})) if lease else {}
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        spec.update(
            holderIdentity=self.identity,
            # whole seconds: rounded up, or the others would wait less than the
            # holder's fence stays up
            leaseDurationSeconds=math.ceil(s.lease_duration_s),
            renewTime=_micro_time(now),
        )
        spec.setdefault("leaseTransitions", 0)
        meta: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def release(self) -> None:
        """Give the Lease up (on shutdown) so another replica need not wait it out."""
        if not self.is_leader():
            return
        self._renewed_at = None
        s = self.settings
        try:
            lease = self._kube.get(_LEASE, s.name, s.namespace)
            if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            self._kube.replace(lease, field_manager=_MANAGER)
            log.info("released lease lease=%s/%s identity=%s", s.namespace, s.name, self.identity)
        except ApiError as e:
            log.warning("could not release lease lease=%s error=%r", s.name, str(e))

    def run(
        self,
        stop: threading.Event,
        *,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        """Campaign until `stop`; call `on_started` on winning and `on_stopped` on losing
        (or on `stop` while leading, after releasing the Lease)."""
        leading = False
        while not stop.is_set():
            held = self.try_acquire_or_renew()
            if held and not leading:
                leading = True
                on_started()
            elif leading and not self.is_leader():
                leading = False
                log.warning("lost lease lease=%s identity=%s", self.settings.name, self.identity)
                on_stopped()
                return
            self._clock.wait(stop, self.settings.retry_period_s)
        if leading:
            self.release()
            on_stopped()
