"""The gang scheduler's Prometheus metrics.

Registered on the registry `gangops run` already serves (the reconciler's),
or on a fresh one in tests and benchmarks. Gauges describing the queue and
the allocation are set whole after every cycle, so a project that no longer
waits or holds GPUs drops out instead of keeping its last value; and they are
replaced at once, so a scrape during the update sees the last complete set,
never one half cleared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

__all__ = ["GangMetrics"]


class _WholeGauge:
    """A labelled gauge whose samples are only ever replaced all together."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = list(labels)
        self._samples: tuple[tuple[list[str], float], ...] = ()
        registry.register(self)

    def set(self, samples: Iterable[tuple[Sequence[str], float]]) -> None:
        """Replace every sample with `samples` ((label values, value) pairs)."""
        self._samples = tuple((list(labels), float(v)) for labels, v in samples)  # one swap

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._documentation, labels=self._labels)

    def _current(self) -> Iterable[tuple[Sequence[str], float]]:
        return self._samples

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        for labels, value in self._current():
            family.add_metric(list(labels), float(value))
        yield family


class _ScrapedGauge(_WholeGauge):
    """A labelled gauge read from `source` ((label values, value) pairs) each time
    it is scraped, set by whoever owns what it counts."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self.source: Callable[[], Iterable[tuple[Sequence[str], float]]] = tuple
        super().__init__(name, documentation, labels, registry)

    def _current(self) -> Iterable[tuple[Sequence[str], float]]:
        return self.source()


class GangMetrics:
    """Every metric of the job controller and scheduler."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.idle_gpus = _WholeGauge(
            "gangops_idle_gpus",
            "GPUs held by running TrainingJobs whose GPUs were idle (under 5 % utilised)"
            " over the last 5 minutes, per project and user: held and unused (needs"
            " telemetry: gangops run --prometheus-url).",
            ["project", "user"],
            r,
        )
        self.gang_bound = Histogram(
            "gangops_gang_bound_seconds",
            "Time from a TrainingJob's creation to its whole gang bound to nodes.",
            ["tier"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 7200),
            registry=r,
        )
        self.cycle = Histogram(
            "gangops_scheduling_cycle_seconds",
            "Duration of one scheduling cycle (snapshot, decisions), writes excluded.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.phase = Histogram(
            "gangops_scheduling_phase_seconds",
            "Duration of each phase of a scheduling step: plan (what each job needs "
            "next), snapshot, schedule (the decisions), grow (elastic gangs), write "
            "(handing the writes to the binder).",
            ["phase"],
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.queue = _WholeGauge(
            "gangops_queue_depth",
            "TrainingJobs waiting to be admitted, by project and tier.",
            ["project", "tier"],
            r,
        )
        self.forecast = _WholeGauge(
            "gangops_demand_forecast_gpus",
            "Forecast peak GPU demand (held plus queued) over the horizon (--forecast-horizon,"
            " or 10 minutes while lending by forecast is off), from the last hour's sliding"
            " window, per project (user empty) and per user: the point forecast and the top"
            " of its p90 band.",
            ["project", "user", "bound"],
            r,
        )
        self.waiting = _WholeGauge(
            "gangops_waiting_jobs",
            "TrainingJobs waiting, by project, tier and why: Quota (a project, user or"
            " namespace quota), Capacity (no room), Reserved (the room is held for a gang"
            " ahead), Refused (cannot run under the policy), Preempting (admitted once"
            " its victims are gone), Backoff (after a timeout or a refused launch),"
            " NotDecided (no decision about it this step).",
            ["project", "tier", "reason"],
            r,
        )
        self.preemptions = Counter(
            "gangops_preemptions",
            "Gangs evicted to make room for a higher tier or a reclaiming project, by the "
            "victim's project and tier.",
            ["project", "tier"],
            registry=r,
        )
        self.allocated = _WholeGauge(
            "gangops_gpus_allocated",
            "GPUs held by admitted gangs, by project, user and kind (guaranteed or borrowed).",
            ["project", "user", "kind"],
            r,
        )
        self.policy_errors = Counter(
            "gangops_scheduling_policy_errors",
            "Compiled scheduling policies the scheduler could not use, by reason"
            " (PolicyUnreadable, PolicyBreaksScheduling); each is also an Event on the"
            " policy ConfigMap.",
            ["reason"],
            registry=r,
        )
        self.policy_fallback = Gauge(
            "gangops_scheduling_policy_fallback",
            "1 while the scheduler schedules with the last good policy because the newest"
            " compiled one cannot be used (see gangops_scheduling_policy_errors_total).",
            registry=r,
        )
        self.decisions = Counter(
            "gangops_decisions",
            "Decisions applied, by kind (admit, preempt, rollback, restart, failed).",
            ["kind"],
            registry=r,
        )
        self.typical = _ScrapedGauge(
            "gangops_placement_typical_requests",
            "The typical requests one-pod TrainingJobs are placed for (fragmentation-aware,"
            " FGD), read from the most recent jobs (--fragmentation-window): each one's share"
            " of them, by GPUs per pod and milli-GPUs of each (1000: whole GPUs). None while"
            " placement is best-fit.",
            ["gpus", "gpu_milli"],
            r,
        )
        self.window_pods = Gauge(
            "gangops_placement_window_pods",
            "Pods of the most recent TrainingJobs the typical requests were read from.",
            registry=r,
        )
        self.cached = _ScrapedGauge(
            "gangops_cached_objects",
            "Objects in the scheduler's watch caches, by resource (what its memory grows"
            " with: nodes, pods, TrainingJobs).",
            ["resource"],
            r,
        )

    def set_queue(self, depth: Mapping[tuple[str, str], int]) -> None:
        """Replace the queue depth with `depth` ((project, tier) -> jobs)."""
        self.queue.set(depth.items())

    def set_allocated(self, gpus: Mapping[tuple[str, str, str], float]) -> None:
        """Replace the allocation with `gpus` ((project, user, kind) -> GPUs)."""
        self.allocated.set(gpus.items())

    def set_idle(self, gpus: Mapping[tuple[str, str], float]) -> None:
        """Replace the idle-but-held GPUs with `gpus` ((project, user) -> GPUs)."""
        self.idle_gpus.set(gpus.items())
