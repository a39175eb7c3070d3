"""Telemetry as the scheduling core sees it: one frozen value per step, and the hints
derived from it. Pure: built by a provider (the controller's Prometheus client, the
simulator's replay), read by `cycle.schedule`.

What the core does with it:

1. health: GPUs out of service are never offered (`Node.unhealthy`; the provider's
   unhealthy GPUs are merged into the nodes by the caller, `with_health`);
2. friendly reclamation: when borrowed GPUs are taken back, among equally ranked
   victims the ones whose GPUs have been idlest over the window go first
   (`Hints.utilisation`);
3. lending by forecast: a gang may not borrow the part of another project's idle
   guarantee that project is forecast to ask for within the horizon
   (`Hints.protect`, from `forecast.forecast`);
4. herd protection: a gang the telemetry has not seen yet (started after the last
   reading, or some pods missing) counts as busy, never as idle.

Freshness is per signal: a signal older than `max_age_s` (on the provider's monotonic
clock where it keeps one: `Telemetry.age`), or never read, is unknown,
and unknown is never read as zero load: utilisation unknown is "busy", health
unknown keeps the GPUs known to be bad out (the provider keeps them until a healthy
reading).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller.scheduler.forecast import Forecast
from controller.scheduler.types import MILLI, JobId, Node

__all__ = [
    "BUSY",
    "Hints",
    "PodUsage",
    "Signal",
    "Telemetry",
    "job_utilisation",
    "protect_from_forecasts",
    "with_health",
]

BUSY = 100.0
"""The utilisation a gang is charged when the telemetry cannot say (herd protection)."""


@dataclass(frozen=True)
class PodUsage:
    """A pod's GPUs over sliding windows: utilisation in percent (mean over its GPUs)."""

    avg_1m: float
    avg_5m: float
    avg_15m: float
    p95_5m: float
    trend_per_min: float
    """Slope of the utilisation over 15 minutes, percent per minute."""
    memory_used_mib: float = 0.0
    gpus: int = 0


@dataclass(frozen=True)
class Signal:
    """One telemetry signal's freshness."""

    at: float | None = None
    """When it was last read successfully (epoch seconds, the wall clock: what the times
    jobs started are compared with, and what is shown); None: never."""
    error: str = ""
    """Why the last read failed ("" when it succeeded), in full: for logs and `explain`."""
    reason: str = ""
    """The kind of that failure in a word (`unreachable`, `timeout`, `error`, ...; the
    provider's error classes): what a waiting job's status may say, as it stays the
    same while the cause lasts and names no internal address."""
    read: float | None = None
    """The same moment as `at` on the provider's monotonic clock, which a step of the
    wall clock does not move (`Telemetry.age`); None: `at` alone dates the read."""


@dataclass(frozen=True)
class Telemetry:
    """What the cluster's telemetry said, as of one scheduling step."""

    health: Signal = Signal()
    usage: Signal = Signal()
    unhealthy: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """Per node, GPU indices out of service (kept while health is stale)."""
    pods: Mapping[tuple[str, str], PodUsage] = field(default_factory=dict)
    """Per (namespace, pod), the usage of the GPUs it holds."""
    max_age_s: float = 120.0
    taken: float | None = None
    """When the provider handed this value out, on the monotonic clock of `Signal.read`;
    None: the provider keeps no such clock (the simulator's replay)."""
    taken_at: float | None = None
    """The same moment on the wall clock (epoch seconds)."""

    def age(self, signal: Signal, now: float) -> float | None:
        """Seconds from `signal`'s last good read to `now` (epoch seconds); None: never
        read. Up to when the provider handed this value out, the age is read on its
        monotonic clock, so a step of the wall clock (NTP, a resumed VM) neither
        freshens nor ages a signal; only the moments after (the step using it) are read
        on the wall clock, and a `now` read before counts as then. Without a monotonic
        reading it is `now - at`: negative for a read dated after `now`."""
        if signal.at is None:
            return None
        if signal.read is None or self.taken is None or self.taken_at is None:
            return now - signal.at
        return self.taken - signal.read + max(0.0, now - self.taken_at)

    def fresh(self, signal: Signal, now: float) -> bool:
        """Whether `signal` is recent enough to use. A negative age (a read dated after
        `now`: the clock stepped back) says nothing of how old it is: not fresh."""
        age = self.age(signal, now)
        return age is not None and 0.0 <= age <= self.max_age_s

    def describe(self, now: float) -> str:
        """One line for `explain`, status and logs: what is known and how old."""
        parts = []
        for name, sig in (("health", self.health), ("utilisation", self.usage)):
            age = self.age(sig, now)
            why = f" ({sig.error})" if sig.error else ""
            if age is None:
                parts.append(f"{name}: none{why}")
            elif age < 0:
                parts.append(f"{name}: stale, dated {-age:.0f}s ahead of the clock{why}")
            elif age > self.max_age_s:
                parts.append(f"{name}: stale, {age:.0f}s old{why}")
            else:
                parts.append(f"{name}: {age:.0f}s old")
        fallback = "" if self.fresh(self.usage, now) else "; scheduling by requests alone"
        return "telemetry " + "; ".join(parts) + fallback


NO_TELEMETRY = Telemetry()


@dataclass(frozen=True)
class Hints:
    """What telemetry adds to one cycle. Empty: scheduling by requests alone, exactly
    as without telemetry."""

    utilisation: Mapping[JobId, float] = field(default_factory=dict)
    """Running gangs' GPU utilisation (percent, the window's mean); absent = busy."""
    protect: Mapping[str, int] = field(default_factory=dict)
    """Per project, milli-GPUs of its idle guarantee not to lend (forecast demand)."""


def with_health(nodes: Iterable[Node], t: Telemetry) -> list[Node]:
    """The nodes with the telemetry's unhealthy GPUs added to what they already list."""
    out = []
    for n in nodes:
        bad = t.unhealthy.get(n.name)
        out.append(replace(n, unhealthy=n.unhealthy | bad) if bad else n)
    return out


def job_utilisation(
    t: Telemetry,
    jobs: Mapping[JobId, tuple[float, Sequence[tuple[str, str]]]],
    now: float,
    *,
    window_s: float = 300.0,
) -> dict[JobId, float]:
    """Per running job (started, its pods as (namespace, name)): the mean 5-minute GPU
    utilisation of its pods, for the jobs the telemetry has fully seen. A job started
    within the window before the last reading, or with a pod the telemetry does not
    know, is left out (counted busy: herd protection); stale telemetry gives nothing."""
    if not t.fresh(t.usage, now) or t.usage.at is None:
        return {}
    out: dict[JobId, float] = {}
    for job, (started, pods) in jobs.items():
        if not pods or started > t.usage.at - window_s:
            continue
        usages = [t.pods.get(p) for p in pods]
        if any(u is None for u in usages):
            continue
        out[job] = sum(u.avg_5m for u in usages if u is not None) / len(usages)
    return out


def protect_from_forecasts(
    forecasts: Mapping[str, Forecast],
    usage: Mapping[str, int],
    guaranteed: Mapping[str, int],
) -> dict[str, int]:
    """Per project, the milli-GPUs of its idle guarantee it is forecast to want back
    within the horizon: min(guarantee, forecast top) - what it uses now, at least 0."""
    out = {}
    for project, f in forecasts.items():
        want = min(guaranteed.get(project, 0), int(f.high)) - usage.get(project, 0)
        if want > 0:
            out[project] = want
    return out


IDLE_PERCENT = 5.0
"""GPU utilisation (%, over the window) under which held GPUs count as idle."""


def idle_gpus(
    utilisation: Mapping[JobId, float], gpus: Mapping[JobId, int], *, below: float = IDLE_PERCENT
) -> dict[JobId, int]:
    """Milli-GPUs held by jobs whose GPUs were idle (under `below` percent) over the
    window: the waste shared clusters exist to end (metric and `explain`)."""
    return {j: gpus[j] for j, u in utilisation.items() if u < below and j in gpus}


__all__ += ["IDLE_PERCENT", "MILLI", "NO_TELEMETRY", "idle_gpus"]
