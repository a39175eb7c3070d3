"""`helm lint --strict` over every values file, and what values.schema.json refuses, in
Helm's own words; the seed's values-prod.yaml keys that are not chart settings are
refused with where the setting lives instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helm import CHART, helm, template_text, value_files


@pytest.mark.parametrize("values", value_files(), ids=lambda p: p.stem)
def test_helm_lint_strict_passes(values: Path) -> None:
    out = helm("lint", "--strict", str(CHART), "--values", str(values), check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # a wrong type
        (
            {"controller": {"replicas": "two"}},
            "at '/controller/replicas': got string, want integer",
        ),
        ({"agent": {"enabled": "yes"}}, "at '/agent/enabled': got string, want boolean"),
        # an unknown key, at the top and nested (closed objects)
        ({"replicaCount": 2}, "at '': additional properties 'replicaCount' not allowed"),
        (
            {"controller": {"replica": 2}},
            "at '/controller': additional properties 'replica' not allowed",
        ),
        # out of range, not in the enum, not a percentage, not a duration
        ({"controller": {"metricsPort": 70000}}, "at '/controller/metricsPort': maximum"),
        ({"admission": {"mutating": "maybe"}}, "value must be one of 'auto', 'on', 'off'"),
        ({"agent": {"maxUnavailable": "1"}}, "at '/agent/maxUnavailable': '1' does not match"),
        # what `gangops run` refuses at start, or the pod would crash-loop
        (
            {"controller": {"prometheusUrl": "http://prometheus:9090/?partial_response=true"}},
            "at '/controller/prometheusUrl'",
        ),
        (
            {"controller": {"alertmanager": {"url": "http://am:9093/#x"}}},
            "at '/controller/alertmanager/url'",
        ),
        (
            {"controller": {"alertmanager": {"url": "http:///x"}}},
            "at '/controller/alertmanager/url'",
        ),
        (
            {"monitoring": {"gpuMetrics": {"interval": "10"}}},
            "at '/monitoring/gpuMetrics/interval': '10' does not match",
        ),
    ],
)
def test_the_schema_refuses_with_helms_message(values: dict[str, Any], message: str) -> None:
    out = template_text(values=values, check=False)
    assert out.returncode != 0, out.stdout[:500]
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"scheduler": {"backoffLimit": 3}}, "ClusterPolicy spec.gang.backoffLimit"),
        (
            {"scheduler": {"gangScheduling": {"enable": True, "timeout": "300s"}}},
            "ClusterPolicy spec.gang.timeoutSeconds",
        ),
        (
            {
                "monitoring": {
                    "gpuMetrics": {"interval": "10s", "exporters": ["dcgm", "nvidia-smi"]}
                }
            },
            "the node agent (agent.enabled)",
        ),
        (
            {"resourceQuota": {"enabled": True, "defaults": {"gpu": 8, "memory": "64Gi"}}},
            "Project spec.quota.max",
        ),
    ],
    ids=["backoffLimit", "gang-timeout", "exporters", "resourceQuota"],
)
def test_seed_keys_that_are_policy_are_refused_saying_where_they_live(
    values: dict[str, Any], where: str
) -> None:
    out = template_text(values=values, check=False)
    assert out.returncode != 0
    assert "is not a chart setting" in out.stderr and where in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"controller": {"leaderElect": False}}, "every replica would schedule and write at once"),
        (
            {"controller": {"lease": {"durationSeconds": 15, "renewDeadlineSeconds": 30}}},
            "retryPeriodSeconds (2) < renewDeadlineSeconds (30) <= durationSeconds (15) - 1",
        ),
        (
            {"controller": {"lease": {"durationSeconds": 15, "renewDeadlineSeconds": 14.5}}},
            "renewDeadlineSeconds (14.5) <= durationSeconds (15) - 1",
        ),
        (
            {"controller": {"webhook": {"enabled": False}, "alertmanager": {"token": "t"}}},
            "the Alertmanager receiver is served on the webhook address",
        ),
        ({"controller": {"webhook": {"port": 8080}}}, "are both 8080"),
        (
            {"controller": {"podDisruptionBudget": {"minAvailable": 2}}},
            "kubectl drain would never finish",
        ),
        ({"agent": {"maxUnavailable": "0%"}}, "does not match"),
        ({"agent": {"maxUnavailable": "101%"}}, "does not match"),
        ({"networkPolicy": {"metricsFrom": []}}, "a NetworkPolicy rule with no peers"),
        (
            {"controller": {"lease": {"retryPeriodSeconds": 2.9, "renewDeadlineSeconds": 2.8}}},
            "retryPeriodSeconds (2.9) < renewDeadlineSeconds (2.8)",
        ),
    ],
    ids=["replicas-without-lease", "lease", "lease-gap", "alertmanager-without-webhook", "ports",
         "pdb", "max-unavailable-0", "max-unavailable-101", "metrics-from-anyone",
         "lease-fractions"],
)  # fmt: skip
def test_values_that_could_not_run_as_asked_are_refused_saying_what_to_change(
    values: dict[str, Any], message: str
) -> None:
    """Found by a review: each rendered, and failed (or did something else) only once
    installed."""
    out = template_text(values=values, check=False)
    assert out.returncode != 0, out.stdout[:300]
    assert message in out.stderr, out.stderr


def test_values_set_on_the_command_line_are_checked_alike() -> None:
    """`--set` gives integers where a values file gives floats (found by a review: the
    budget check was skipped for them)."""
    out = template_text(
        extra=[
            "--set",
            "controller.replicas=2",
            "--set",
            "controller.podDisruptionBudget.minAvailable=2",
        ],
        check=False,
    )
    assert out.returncode != 0 and "kubectl drain would never finish" in out.stderr, out.stderr


def test_reasonable_values_are_not_refused() -> None:
    for values in (
        {"controller": {"lease": {"retryPeriodSeconds": 2.5, "renewDeadlineSeconds": 2.8}}},
        {"networkPolicy": {"enabled": False, "metricsFrom": []}},
        {"networkPolicy": {"webhookFrom": [{"namespaceSelector": {}}], "alertmanagerFrom": None}},
    ):
        out = template_text(values=values, check=False)
        assert out.returncode == 0, (values, out.stderr)


def test_the_seeds_whole_values_prod_file_is_refused_at_its_first_misplaced_key(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "values-prod.yaml"
    seed.write_text(
        "scheduler:\n  backoffLimit: 3\n  gangScheduling:\n    enable: true\n    timeout: 300s\n"
        "monitoring:\n  gpuMetrics:\n    interval: 10s\n    exporters: [dcgm, nvidia-smi]\n"
        "resourceQuota:\n  enabled: true\n  defaults:\n    gpu: 8\n    memory: 64Gi\n"
    )
    out = template_text(seed, check=False)
    assert out.returncode != 0
    assert "scheduler.backoffLimit is not a chart setting" in out.stderr, out.stderr
