"""The alert actions' Prometheus metrics, on the registry `gangops run` serves."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["AlertMetrics"]


class AlertMetrics:
    """Every metric of the receiver and the actor."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.deliveries = Counter(
            "gangops_alertmanager_deliveries",
            "Alertmanager webhook deliveries, by result: accepted, unauthorized, invalid,"
            " not_leader, queue_full.",
            ["result"],
            registry=r,
        )
        self.actions = Counter(
            "gangops_alert_actions",
            "What became of each alert instance, by alert name and outcome: acted,"
            " shadow (would have acted), circuit_open (held by the breaker), duplicate,"
            " resolved, lapsed (not sent again within the resolve timeout), kept (due to"
            " lapse, but Alertmanager still holds it: silenced, inhibited or firing),"
            " undone, restarted, ignored (no rule acts on it), no_node.",
            ["alert", "outcome"],
            registry=r,
        )
        self.alertmanager_queries = Counter(
            "gangops_alertmanager_queries",
            "Times Alertmanager's API (--alertmanager-url) was asked which alerts it"
            " holds before alerts lapse, by result: ok, or failed (unreachable, an error,"
            " an answer not understood: the alerts due lapsed as without it).",
            ["result"],
            registry=r,
        )
        for result in ("ok", "failed"):  # 0 from the start: `increase(...) > 0` can fire
            self.alertmanager_queries.labels(result)
        self.circuit_open = Counter(
            "gangops_alert_circuit_open",
            "Alerts the breaker held: too many nodes were acted on within its window.",
            registry=r,
        )
        self.latency = Histogram(
            "gangops_alert_action_seconds",
            "From the delivery's arrival to its node's write (or to the decision that"
            " nothing is to be written).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.queued = Gauge(
            "gangops_alert_queue", "Alerts received and not yet acted on.", registry=r
        )
        self.out_of_service = Gauge(
            "gangops_alert_nodes_acted_on",
            "Nodes on which an alert action is in force (GPUs quarantined or node cordoned).",
            registry=r,
        )
        self.errors = Counter(
            "gangops_alert_errors",
            "API calls of the alert actions that failed (retried at the next tick).",
            registry=r,
        )
