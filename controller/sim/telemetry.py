"""Telemetry in the simulator: recorded GPU series attached to trace jobs, and the
feed that turns them, the fault schedule and the demand history into the core's
`Telemetry` and `Hints` each cycle, through the calls the controller makes
(`telemetry.with_health`, `telemetry.job_utilisation`,
`telemetry.protect_from_forecasts`, `forecast.forecast` over a `DemandHistory`).

Attachment (`Replayed`): pod `i` of job `J` plays the recorded container
`(crc32(J) + i) mod n` of the directory's `n` containers (sorted by id), from an
offset into the recording that is also drawn from crc32(J), at recorded speed (one
simulated second is one recorded second, so the 1-, 5- and 15-minute windows mean
what they mean on a cluster), looped; its clock restarts when the job (re)starts
(a preempted job starts over; a resized one restarts from its checkpoint). The
same job id always gets the same series, so runs with telemetry on and off replay
the same usage. Ground truth for the report (`idle_gpu_seconds`) comes from the
same series.

The feed reads usage once a simulated minute (the recording's resolution) and
health at every cycle (the agent publishes a fault on the Node within a second).
Utilisation is only read when the cycle ranks victims, so `Hints.utilisation`
calls `job_utilisation` on first use in a cycle (the figures are the same; a
cycle that preempts nothing does not pay for them).

Demand forecast: per project, demand = GPUs its running gangs hold + GPUs its
queued gangs ask for, sampled at every cycle onto a one-minute grid in a
`DemandHistory` of `WINDOW_S` (1 h); every minute the forecast over
`HORIZON_S` (10 min, the time a borrowed guarantee would take to be reclaimed
by a preemption cycle and the next jobs' starts) is made with the p90 band top,
and `protect_from_forecasts` turns it into `Hints.protect`. Every forecast is
kept and scored at the end against the realised peak demand over its horizon,
beside the seasonal-naive baseline (a day earlier) at the same moments.
"""

from __future__ import annotations

import bisect
import math
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.scheduler.forecast import DemandHistory, Forecast, forecast, seasonal_naive
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import (
    Hints,
    PodUsage,
    Signal,
    Telemetry,
    job_utilisation,
    protect_from_forecasts,
)
from controller.scheduler.types import MILLI, Gang, JobId
from controller.sim.faults import FaultSchedule
from controller.telemetry_data import Recording, Series

__all__ = ["HORIZON_S", "IDLE_BELOW", "WINDOW_S", "Feed", "Replayed"]

WINDOW_S = 3600.0
"""The demand history's sliding window."""
HORIZON_S = 600.0
"""How far ahead the demand forecast looks."""
USAGE_EVERY_S = 60.0
"""The simulated provider reads utilisation once a minute (the recording's step)."""
IDLE_BELOW = 5.0
"""Utilisation (%) under which a held GPU counts as idle (as `telemetry.idle_gpus`)."""
SEASON_S = 86_400.0
NAMESPACE = "sim"


class _Track:
    """One container's utilisation as a step function, with running integrals."""

    __slots__ = ("duration", "idle", "offsets", "total", "total_idle", "util", "values")

    def __init__(self, s: Series) -> None:
        self.offsets = s.offsets
        self.values = array("d", (min(100.0, max(0.0, v)) for v in s.values))
        self.duration = s.duration
        self.util = array("d", [0.0])
        self.idle = array("d", [0.0])
        ends = [*list(s.offsets[1:]), self.duration]
        for a, b, v in zip(s.offsets, ends, self.values, strict=True):
            self.util.append(self.util[-1] + v * (b - a))
            self.idle.append(self.idle[-1] + (b - a if v < IDLE_BELOW else 0.0))
        self.total, self.total_idle = self.util[-1], self.idle[-1]

    def _integral(self, x: float, cum: array[float], total: float, idle: bool) -> float:
        loops, r = divmod(x, self.duration)
        i = max(0, bisect.bisect_right(self.offsets, r) - 1)
        v = self.values[i]
        rate = (1.0 if v < IDLE_BELOW else 0.0) if idle else v
        return loops * total + cum[i] + rate * (r - self.offsets[i])

    def mean(self, a: float, b: float) -> float:
        if b <= a:
            return self.at(a)
        return (
            self._integral(b, self.util, self.total, False)
            - self._integral(a, self.util, self.total, False)
        ) / (b - a)

    def idle_seconds(self, a: float, b: float) -> float:
        if b <= a:
            return 0.0
        return self._integral(b, self.idle, self.total_idle, True) - self._integral(
            a, self.idle, self.total_idle, True
        )

    def at(self, x: float) -> float:
        i = max(0, bisect.bisect_right(self.offsets, x % self.duration) - 1)
        return self.values[i]


class Replayed:
    """Recorded containers attached to trace jobs (see the module docstring)."""

    def __init__(self, recording: Recording) -> None:
        ids = [c for c in recording.containers if c in recording.duty]
        if not ids:
            raise ValueError("the recording has no utilisation series")
        self.containers = tuple(ids)
        self._tracks = [_Track(recording.duty[c]) for c in ids]

    def attach(self, job: str, pod: int) -> tuple[int, float]:
        """(container index, offset into its recording) that pod `pod` of `job` plays."""
        h = zlib.crc32(job.encode())
        c = (h + pod) % len(self._tracks)
        return c, float((h >> 8) % max(1, int(self._tracks[c].duration)))

    def usage(self, job: str, pod: int, elapsed: float) -> PodUsage:
        """What the telemetry reads for one pod `elapsed` seconds into its run."""
        c, o = self.attach(job, pod)
        tr, x = self._tracks[c], o + elapsed
        a1, a5, a15 = tr.mean(x - 60, x), tr.mean(x - 300, x), tr.mean(x - 900, x)
        return PodUsage(
            avg_1m=a1,
            avg_5m=a5,
            avg_15m=a15,
            p95_5m=max(tr.at(x - k * 60.0) for k in range(5)),
            trend_per_min=(a5 - tr.mean(x - 900, x - 600)) / 10.0,
        )

    def idle_seconds(self, job: str, pod: int, elapsed_from: float, elapsed_to: float) -> float:
        """Seconds pod `pod` of `job` held its GPUs idle between two points of its run."""
        c, o = self.attach(job, pod)
        return self._tracks[c].idle_seconds(o + elapsed_from, o + elapsed_to)


class _OnDemand(Mapping[JobId, float]):
    """`Hints.utilisation` computed by `job_utilisation` on first use in a cycle."""

    def __init__(self, compute: Callable[[], dict[JobId, float]]) -> None:
        self._compute = compute
        self._value: dict[JobId, float] | None = None

    def _get(self) -> dict[JobId, float]:
        if self._value is None:
            self._value = self._compute()
        return self._value

    def __getitem__(self, key: JobId) -> float:
        return self._get()[key]

    def __iter__(self) -> Iterator[JobId]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


@dataclass
class _Scored:
    project: str
    at: float
    f: Forecast


@dataclass
class Feed:
    """What a telemetry-aware scheduler reads each cycle in the simulator."""

    policy: SchedulingPolicy
    replay: Replayed | None = None
    faults: FaultSchedule | None = None
    t0: float = 0.0
    """The first arrival: fault times count from it."""
    window_s: float = WINDOW_S
    horizon_s: float = HORIZON_S
    history: DemandHistory = field(init=False)
    record: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Per project, every demand sample (one-minute grid), for scoring."""
    forecasts: list[_Scored] = field(default_factory=list)
    _current: dict[str, Forecast] = field(default_factory=dict)
    _pods: dict[tuple[str, str], PodUsage] = field(default_factory=dict)
    _pods_at: float = -math.inf
    _forecast_at: float = -math.inf

    def __post_init__(self) -> None:
        self.history = DemandHistory(self.window_s)
        self._guaranteed = {p.name: p.guaranteed for p in self.policy.projects.values()}

    def unhealthy(self, now: float) -> Mapping[str, frozenset[int]]:
        return self.faults.at(now - self.t0) if self.faults is not None else {}

    def telemetry(self, now: float, snap: Snapshot) -> Telemetry:
        """The step's snapshot: health as of now, usage as of the last minute."""
        usage_at = math.floor(now / USAGE_EVERY_S) * USAGE_EVERY_S
        if usage_at != self._pods_at:  # one reading a minute, as the provider's
            self._pods_at, self._pods = usage_at, {}
        pods = self._pods
        if self.replay is not None:
            for r in snap.running.values():
                if r.started <= usage_at:
                    for i in range(r.gang.workers):
                        key = (NAMESPACE, f"{r.gang.id}#{i}#{r.started}")
                        if key not in pods:
                            pods[key] = self.replay.usage(r.gang.id, i, usage_at - r.started)
        return Telemetry(
            health=Signal(now),
            usage=Signal(usage_at) if self.replay is not None else Signal(),
            unhealthy=self.unhealthy(now),
            pods=pods,
        )

    def _utilisation(self, now: float, snap: Snapshot) -> dict[JobId, float]:
        t = self.telemetry(now, snap)
        jobs = {
            r.gang.id: (
                r.started,
                [(NAMESPACE, f"{r.gang.id}#{i}#{r.started}") for i in range(r.gang.workers)],
            )
            for r in snap.running.values()
        }
        return job_utilisation(t, jobs, now)

    def hints(self, now: float, snap: Snapshot, queue: Sequence[Gang]) -> Hints:
        """The cycle's hints: utilisation (on demand) and protection by forecast."""
        demand = dict.fromkeys(self._guaranteed, 0)
        for p, used in snap.project_usage.items():
            demand[p] = demand.get(p, 0) + used
        for g in queue:
            demand[g.project] = demand.get(g.project, 0) + g.gpu_total
        minute = math.floor(now / USAGE_EVERY_S) * USAGE_EVERY_S
        for p, d in demand.items():
            self.history.add(p, minute, float(d))
            rec = self.record.setdefault(p, [])
            if rec and rec[-1][0] == minute:
                rec[-1] = (minute, float(d))
            else:
                rec.append((minute, float(d)))
        if now - self._forecast_at >= USAGE_EVERY_S:
            self._forecast_at = now
            for p in demand:
                if self._guaranteed.get(p, 0) > 0:
                    f = forecast(self.history.series(p), horizon_s=self.horizon_s)
                    self._current[p] = f
                    self.forecasts.append(_Scored(p, minute, f))
        protect = protect_from_forecasts(self._current, snap.project_usage, self._guaranteed)
        utilisation: Mapping[JobId, float] = (
            _OnDemand(lambda: self._utilisation(now, snap)) if self.replay is not None else {}
        )
        return Hints(utilisation=utilisation, protect=protect)

    def score(self) -> dict[str, Any]:
        """The forecasts against the realised peak demand over their horizons, and
        the seasonal-naive baseline at the same moments (GPUs; None when unscored)."""
        hits = n = 0
        err: list[float] = []
        base_err: list[float] = []
        same_err: list[float] = []
        base_hits = 0
        times = {p: [t for t, _ in rec] for p, rec in self.record.items()}
        for s in self.forecasts:
            rec, ts = self.record[s.project], times[s.project]
            if not ts or s.at + self.horizon_s > ts[-1]:
                continue
            a = bisect.bisect_right(ts, s.at) - 1
            b = bisect.bisect_right(ts, s.at + self.horizon_s)
            peak = max(v for _, v in rec[max(a, 0) : b])
            n += 1
            hits += peak <= s.f.high
            err.append(abs(s.f.point - peak))
            lo = bisect.bisect_left(ts, s.at - SEASON_S - self.horizon_s)
            base = seasonal_naive(rec[lo : a + 1], horizon_s=self.horizon_s, season_s=SEASON_S)
            if base is not None:
                base_err.append(abs(base.point - peak))
                same_err.append(abs(s.f.point - peak))
                base_hits += peak <= base.high
        return {
            "forecasts_scored": n,
            "forecast_p90_coverage": round(hits / n, 4) if n else None,
            "forecast_mae_gpus": round(sum(err) / n / MILLI, 3) if n else None,
            "seasonal_naive_scored": len(base_err),
            "forecast_mae_gpus_same_moments": (
                round(sum(same_err) / len(same_err) / MILLI, 3) if same_err else None
            ),
            "seasonal_naive_coverage": round(base_hits / len(base_err), 4) if base_err else None,
            "seasonal_naive_mae_gpus": (
                round(sum(base_err) / len(base_err) / MILLI, 3) if base_err else None
            ),
        }
