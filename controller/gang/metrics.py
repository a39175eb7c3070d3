"""The gang scheduler's Prometheus metrics.

Registered on the registry `gangops run` already serves (the reconciler's),
or on a fresh one in tests and benchmarks. Gauges describing the queue and
the allocation are set whole after every cycle, so a project that no longer
waits or holds GPUs drops out instead of keeping its last value.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GangMetrics"]


class GangMetrics:
    """Every metric of the job controller and scheduler."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
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
        self.queue = Gauge(
            "gangops_queue_depth",
            "TrainingJobs waiting to be admitted, by project and tier.",
            ["project", "tier"],
            registry=r,
        )
        self.preemptions = Counter(
            "gangops_preemptions",
            "Gangs evicted to make room for a higher tier or a reclaiming project, by the "
            "victim's project and tier.",
            ["project", "tier"],
            registry=r,
        )
        self.allocated = Gauge(
            "gangops_gpus_allocated",
            "GPUs held by admitted gangs, by project, user and kind (guaranteed or borrowed).",
            ["project", "user", "kind"],
            registry=r,
        )
        self.decisions = Counter(
            "gangops_decisions",
            "Decisions applied, by kind (admit, preempt, rollback, restart, failed).",
            ["kind"],
            registry=r,
        )

    def set_queue(self, depth: Mapping[tuple[str, str], int]) -> None:
        """Replace the queue depth with `depth` ((project, tier) -> jobs)."""
        self.queue.clear()
        for (project, tier), n in depth.items():
            self.queue.labels(project, tier).set(n)

    def set_allocated(self, gpus: Mapping[tuple[str, str, str], float]) -> None:
        """Replace the allocation with `gpus` ((project, user, kind) -> GPUs)."""
        self.allocated.clear()
        for (project, user, kind), n in gpus.items():
            self.allocated.labels(project, user, kind).set(n)
