"""The GPU alerting rules the chart ships (charts/gangops/files/prometheus/alert-rules.yaml),
checked and run by the real `promtool`: `check rules`, and `test rules` over
alert-rules.test.yaml, where every alert has a case that fires and one that must not
(among them a job crash raising the same XID on every GPU of its gang).

Without promtool (Debian package `prometheus`) the tests skip, saying how to install it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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


def _promtool_series(scrapes: list[str]) -> list[dict[str, str]]:
    """Scrapes of the agent's `/metrics` as promtool input series, one value per
    scrape: `_` before a series first shows, `stale` in the scrape after it goes (as
    Prometheus marks it). The agent writes one sample a line, `name{labels} value`
    (prometheus_client's parser would add `_total` to DCGM's counters)."""
    seen = [
        {
            series: float(value)
            for line in text.splitlines()
            if line and not line.startswith("#")
            for series, value in [line.rsplit(" ", 1)]
        }
        for text in scrapes
    ]
    out = []
    for name in sorted({n for values in seen for n in values}):
        row, present = [], False
        for values in seen:
            if name in values:
                row.append(f"{values[name]:g}")
                present = True
            else:
                row.append("stale" if present else "_")
                present = False
        out.append({"series": name, "values": " ".join(row)})
    return out


TRAIN_0 = {"namespace": "team-a", "pod": "train-0", "container": "trainer"}


@pytest.mark.parametrize(
    ("repeat_at", "expect"),
    [
        # a burst: the repeat 2 s later, train-0 gone, is still train-0's
        (42.2, {30: None, 45: TRAIN_0, 60: TRAIN_0, 105: TRAIN_0}),
        # a repeat long after the alert resolved, on the idle GPU: no one's
        (520.2, {45: TRAIN_0, 345: None, 540: {}, 600: {}}),
    ],
)
def test_the_agents_own_series_fire_the_fatal_xid_alert_when_the_xid_ends_the_pod(
    tmp_path: Path, repeat_at: float, expect: dict[int, dict[str, str] | None]
) -> None:
    """The agent's exposition, scraped every 15 s, through the chart's rule in promtool.
    train-0 holds GPU 1; XID 79 comes and train-0 ends before the next scrape, as a
    fatal XID's pod usually does, and XID 79 comes again. The alert fires at that
    scrape, naming train-0 (so its job is restarted); a repeat while it fires goes on
    naming train-0, one long after it resolved names no pod. Found by reviews: the
    rule read DCGM's count, whose pod labels follow the GPU's holder at each scrape,
    so the count first showed on a new series already at 1, and nothing fired; then a
    repeat, finding no pod, dropped train-0; then a repeat 8 minutes later named it."""
    from controller.agent.agent import Agent, AgentConfig, Owner
    from controller.agent.exposition import render
    from controller.agent.replay import Event, Replay, Scenario, fake_gpu_uuid

    clock = [1000.0]
    uuid = fake_gpu_uuid("node-a", 1)
    owners = {uuid: Owner("team-a", "train-0", "trainer")}
    replay = Replay(
        node="node-a", gpus=2, clock=lambda: clock[0],
        scenario=Scenario(
            (Event(at=40.2, kind="xid", gpu=1, xid=79),
             Event(at=repeat_at, kind="xid", gpu=1, xid=79))
        ),
    )  # fmt: skip
    agent = Agent(
        replay,
        AgentConfig(node="node-a"),
        owners=lambda: owners,
        clock=lambda: clock[0],
        wall=lambda: clock[0] - 1000.0,  # promtool's time: its first sample is at 0
    )
    scrapes = []
    for t in range(max(expect) + 1):  # a round a second, a scrape every 15 s
        clock[0] = 1000.0 + t
        if agent.poll_xids(0):
            owners.clear()  # the XID ends train-0 before the next scrape
        agent.tick()
        if t % 15 == 0:
            scrapes.append(render(agent.snapshot()).decode())
    series = _promtool_series(scrapes)

    def gpu_1_xid_79(name: str) -> list[dict[str, str]]:
        return [
            s for s in series
            if s["series"].startswith(name + "{")
            and 'gpu="1"' in s["series"] and 'xid="79"' in s["series"]
        ]  # fmt: skip

    for dcgm in gpu_1_xid_79("DCGM_EXP_XID_ERRORS_COUNT"):  # the first XID, for contrast
        first = {v for v in dcgm["values"].split()[:6] if v not in ("_", "stale")}
        assert len(first) <= 1, f"DCGM's count shows the first XID on no rising series: {dcgm}"
    (count,) = gpu_1_xid_79("gangops_gpu_xid_errors_total")
    assert count["values"].startswith("0 0 0 1 ") or count["values"].startswith("0 0 0 2 ")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', count["series"]))
    from ruamel.yaml import YAML

    (rule,) = [
        r
        for g in YAML(typ="safe").load(ALERT_RULES.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GangopsGPUFatalXID"
    ]

    def fired(owner: dict[str, str]) -> dict[str, object]:
        got = {
            **labels, "alertname": "GangopsGPUFatalXID", "severity": "critical",
            "gangops_action": "gpu", **owner,
        }  # fmt: skip
        annotations = {
            k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: got[m.group(1)], v)
            for k, v in rule["annotations"].items()
        }
        return {"exp_labels": got, "exp_annotations": annotations}

    case = {
        "rule_files": [str(ALERT_RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": f"XID 79 on GPU 1, train-0 ended, XID 79 again at {repeat_at}s",
                "interval": "15s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": f"{t}s",
                        "alertname": "GangopsGPUFatalXID",
                        "exp_alerts": [] if owner is None else [fired(owner)],
                    }
                    for t, owner in expect.items()
                ],
            }
        ],
    }
    path = tmp_path / "agent-xid.test.yaml"
    path.write_text(json.dumps(case))
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
