"""The ClusterPolicy's `alertActions`, compiled and read back by the alert actions: the
compiled JSON passes its schema and `AlertPolicy.from_dict` reads what was written."""

from __future__ import annotations

from controller.alerts.policy import AlertPolicy, AlertRule, Breaker
from controller.policy.compiler import scheduling_policy
from controller.policy.validate import check_scheduling_policy
from tests.unit.policy.builders import validate
from tests.unit.policy.test_rules import ALERTS, CLUSTER, TIERS


def test_the_compiled_alert_actions_read_back_with_every_default_filled() -> None:
    result = validate({"cluster.yaml": CLUSTER + ALERTS, "tiers.yaml": TIERS})
    assert result.ok and result.policy_set is not None
    compiled = scheduling_policy(result.policy_set)
    check_scheduling_policy(compiled)
    got = AlertPolicy.from_dict(compiled["alertActions"])
    assert got.rules == {
        "GangopsGPUMemoryLeak": AlertRule("GangopsGPUMemoryLeak", "quarantine-gpus", "enforce"),
        "GangopsGPUFatalXID": AlertRule("GangopsGPUFatalXID", "cordon-node", "enforce"),
        "GangopsGPULost": AlertRule("GangopsGPULost", grace_s=60),
    }
    assert got.breaker == Breaker(10, 5, 600)


def test_without_alert_actions_nothing_acts() -> None:
    result = validate({"cluster.yaml": CLUSTER, "tiers.yaml": TIERS})
    assert result.policy_set is not None
    got = AlertPolicy.from_dict(scheduling_policy(result.policy_set)["alertActions"])
    assert got.rules == {}
    assert got.rule("GangopsGPUMemoryLeak").action == "none"
    assert AlertPolicy.from_dict(None) == AlertPolicy()


def test_the_resolve_timeout_is_compiled_and_read_back() -> None:
    cluster = CLUSTER + ALERTS + "    resolveTimeoutSeconds: 1800\n"
    result = validate({"cluster.yaml": cluster, "tiers.yaml": TIERS})
    assert result.ok and result.policy_set is not None
    compiled = scheduling_policy(result.policy_set)
    check_scheduling_policy(compiled)
    assert AlertPolicy.from_dict(compiled["alertActions"]).resolve_timeout_s == 1800
    default = validate({"cluster.yaml": CLUSTER + ALERTS, "tiers.yaml": TIERS}).policy_set
    assert default is not None
    got = AlertPolicy.from_dict(scheduling_policy(default)["alertActions"])
    assert got.resolve_timeout_s == 0  # off: a silenced alert is not sent either
    short = validate({"cluster.yaml": CLUSTER + ALERTS + "    resolveTimeoutSeconds: 60\n",
                      "tiers.yaml": TIERS})  # fmt: skip
    assert not short.ok  # under 10 minutes: would lapse between any route's repeats
