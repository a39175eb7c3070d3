"""The reconciler's Prometheus metrics, on a registry of its own.

Names follow Prometheus conventions (`_total` counters, `_seconds` units,
`_info`-style gauges carrying a label). Each replica has its own registry, so
two controllers in one test process do not share counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ReconcilerMetrics"]


@dataclass
class ReconcilerMetrics:
    """Every metric `gangops run` exports for the policy reconciler."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.reconciles = Counter(
            "gangops_reconcile",
            "Policy reconciles, by source and result (applied, unchanged, stalled, failed).",
            ["source", "result"],
            registry=r,
        )
        self.duration = Histogram(
            "gangops_reconcile_duration_seconds",
            "Time from the start of a reconcile to its status.",
            ["source"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.applied_revision = Gauge(
            "gangops_applied_revision_info",
            "1 for the revision a source has applied (the revision is a label).",
            ["source", "revision"],
            registry=r,
        )
        self.last_success = Gauge(
            "gangops_reconcile_last_success_timestamp_seconds",
            "Unix time of a source's last successful reconcile.",
            ["source"],
            registry=r,
        )
        self.stalled = Gauge(
            "gangops_reconcile_stalled",
            "1 while a source is Stalled (a revision refused), else 0.",
            ["source"],
            registry=r,
        )
        self.objects = Gauge(
            "gangops_managed_objects",
            "Objects in a source's inventory.",
            ["source"],
            registry=r,
        )
        self.leader = Gauge(
            "gangops_leader",
            "1 while this replica holds the leader Lease.",
            registry=r,
        )
        self.webhooks = Counter(
            "gangops_webhook_requests",
            "Git push webhook requests, by result (accepted, rejected, unknown_source).",
            ["result"],
            registry=r,
        )

    def set_revision(self, source: str, revision: str) -> None:
        """Make `revision` the one applied revision of `source`."""
        for metric in next(iter(self.applied_revision.collect())).samples:
            if metric.labels.get("source") == source and metric.labels["revision"] != revision:
                self.applied_revision.remove(source, metric.labels["revision"])
        self.applied_revision.labels(source, revision).set(1)
