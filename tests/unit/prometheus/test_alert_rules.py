"""The GPU alerting rules the chart ships (charts/gangops/files/prometheus/alert-rules.yaml),
checked and run by the real `promtool`: `check rules`, and `test rules` over
alert-rules.test.yaml, where every alert has a case that fires and one that must not
(among them a job crash raising the same XID on every GPU of its gang).

Without promtool (Debian package `prometheus`) the tests skip, saying how to install it.
"""

from __future__ import annotations

import re

from controller.devcluster.prometheus import ALERT_RULES
from tests.unit.prometheus.test_recording_rules import HERE, promtool

RULE_TESTS = HERE / "alert-rules.test.yaml"


def test_the_alert_rules_pass_promtool_check() -> None:
    out = promtool("check", "rules", str(ALERT_RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


def test_each_alert_fires_and_holds_back_as_its_cases_expect() -> None:
    out = promtool("test", "rules", str(RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\S+)", ALERT_RULES.read_text(), re.M))
    fires: set[str] = set()
    silent: set[str] = set()
    name = ""
    for line in RULE_TESTS.read_text().splitlines():
        m = re.match(r"^\s*- alertname: (\S+)", line)
        if m:
            name = m.group(1)
        elif re.match(r"^\s*exp_alerts: \[\]", line):
            silent.add(name)
        elif re.match(r"^\s*exp_alerts:\s*$", line):
            fires.add(name)
    assert alerts == fires == silent


def test_every_alert_names_what_the_receiver_acts_on() -> None:
    """`gangops_action` says whether an alert concerns one GPU (`gpu`: it carries
    Hostname and gpu), a whole node (`node`) or nothing gangops can act on (`none`)."""
    text = ALERT_RULES.read_text()
    blocks = re.split(r"^\s*- alert: ", text, flags=re.M)[1:]
    assert len(blocks) == 6
    for block in blocks:
        assert re.search(r"gangops_action: (gpu|node|none)\b", block), block.split()[0]
