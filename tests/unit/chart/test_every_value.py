"""Every value in values.schema.json changes the rendering: the class of bug where a
value is accepted and silently ignored (reported against Volcano and HAMi).

`CHANGES` holds one case per leaf value: the value, a different setting, and what
must already be set for it to matter; a test checks the table names every leaf the
schema has, so a new value without a case fails here.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from .helm import CHART, render

Case = tuple[Any, dict[str, Any]]
"""(the value to set, the other values it needs to matter)."""

MONITORING_ON = {"monitoring.serviceMonitor.enabled": True, "monitoring.podMonitor.enabled": True}

CHANGES: dict[str, Case] = {
    "image.repository": ("example/gangops", {}),
    "image.tag": ("9.9.9", {}),
    "image.pullPolicy": ("Always", {}),
    "imagePullSecrets": ([{"name": "pull"}], {}),
    "crds.install": (False, {}),
    "crds.keep": (False, {}),
    "admission.validating": (False, {}),
    "admission.mutating": ("on", {}),
    "controller.replicas": (3, {}),
    "controller.leaderElect": (False, {"controller.replicas": 1}),
    "controller.lease.name": ("other-lease", {}),
    "controller.lease.durationSeconds": (30, {}),
    "controller.lease.renewDeadlineSeconds": (12, {}),
    "controller.lease.retryPeriodSeconds": (5, {}),
    "controller.sourceSelector": ("shard=a", {}),
    "controller.jobSelector": ("team=nlp", {}),
    "controller.gangNodeSelector": ("pool=a100", {}),
    "controller.growIntervalSeconds": (900, {}),
    "controller.fragmentationWindow": (0, {}),
    "controller.messageRefreshSeconds": (60, {}),
    "controller.prometheusUrl": ("http://prometheus-operated.monitoring.svc:9090", {}),
    "controller.forecastHorizonSeconds": (600, {}),
    "controller.verbose": (True, {}),
    "controller.metricsPort": (8181, {}),
    "controller.webhook.enabled": (False, {}),
    "controller.webhook.port": (9393, {}),
    "controller.webhook.secret": ("s3cret", {}),
    "controller.webhook.existingSecret": ("mine", {}),
    "controller.alertmanager.token": ("t0ken", {}),
    "controller.alertmanager.existingSecret": ("am-token", {}),
    "controller.alertmanager.url": ("http://alertmanager-operated.monitoring.svc:9093", {}),
    "controller.resources.requests": ({"cpu": "1"}, {}),
    "controller.resources.limits": ({"memory": "2Gi"}, {}),
    "controller.podDisruptionBudget.enabled": (False, {}),
    "controller.podDisruptionBudget.minAvailable": (2, {"controller.replicas": 3}),
    "controller.topologySpread.topologyKey": ("topology.kubernetes.io/zone", {}),
    "controller.topologySpread.whenUnsatisfiable": ("DoNotSchedule", {}),
    "controller.nodeSelector": ({"role": "system"}, {}),
    "controller.tolerations": ([{"key": "system", "operator": "Exists"}], {}),
    "controller.podAnnotations": ({"team": "platform"}, {}),
    "controller.priorityClassName": ("system-cluster-critical", {}),
    "scheduler.gangScheduling.enable": (False, {}),
    "agent.enabled": (False, {}),
    "agent.publishNode": (False, {}),
    "agent.port": (9500, {}),
    "agent.hostnameLabel": ("hostname", {}),
    "agent.podResourcesDir": ("/var/lib/k0s/kubelet/pod-resources", {}),
    "agent.runtimeClassName": ("nvidia", {}),
    "agent.nodeSelector": ({"gpu": "yes"}, {}),
    "agent.tolerations": ([], {}),
    "agent.maxUnavailable": ("50%", {}),
    "agent.resources.requests": ({"cpu": "100m"}, {}),
    "agent.resources.limits": ({"memory": "256Mi"}, {}),
    "agent.priorityClassName": ("", {}),
    "monitoring.gpuMetrics.interval": ("30s", {}),
    "monitoring.serviceMonitor.enabled": (True, {}),
    "monitoring.serviceMonitor.interval": ("1m", MONITORING_ON),
    "monitoring.podMonitor.enabled": (True, {}),
    "monitoring.prometheusRule.enabled": (True, {}),
    "monitoring.grafanaDashboards.enabled": (True, {}),
    "monitoring.grafanaDashboards.sidecarLabel": (
        "dashboards",
        {"monitoring.grafanaDashboards.enabled": True},
    ),
    "networkPolicy.enabled": (False, {}),
    "networkPolicy.metricsFrom": ([{"podSelector": {"matchLabels": {"app": "prom"}}}], {}),
    "networkPolicy.webhookFrom": ([{"namespaceSelector": {}}], {}),
    "networkPolicy.alertmanagerFrom": (
        [{"podSelector": {"matchLabels": {"app": "alertmanager"}}}],
        {"networkPolicy.webhookFrom": [{"namespaceSelector": {"matchLabels": {"x": "y"}}}]},
    ),
    "rbac.aggregateToDefaultRoles": (False, {}),
    "rbac.tenantRole": (False, {}),
}


def _leaves(schema: dict[str, Any], path: str = "") -> list[str]:
    out = []
    for key, sub in schema.get("properties", {}).items():
        p = f"{path}.{key}" if path else key
        if "properties" in sub:
            out += _leaves(sub, p)
        elif key != "global" and not sub.get("description", "").startswith("Refused"):
            out.append(p)
    return out


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, last = path.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


@functools.cache
def _render(values: str) -> list[dict[str, Any]]:
    return render(values=json.loads(values))


def test_every_leaf_value_of_the_schema_has_a_case() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert sorted(_leaves(schema)) == sorted(CHANGES)


@pytest.mark.parametrize("path", sorted(CHANGES))
def test_the_value_changes_the_rendering(path: str) -> None:
    value, needs = CHANGES[path]
    before = _render(json.dumps(_nested(needs)))
    after = _render(json.dumps(_nested({**needs, path: value})))
    assert after != before, f"{path}={value!r} left the rendering unchanged"
