"""The chart's Grafana dashboards (charts/gangops/files/dashboards/) and their queries,
shared by the unit tests (structure, PromQL syntax) and the integration test (every
query returns data from a real Prometheus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .helm import CHART

DASHBOARDS = sorted((CHART / "files" / "dashboards").glob("*.json"))
VARIABLES = {
    "$node": ".*",
    "$project": ".*",
    "$__rate_interval": "1m",
    "${datasource}": "prometheus",
}
"""What Grafana puts in place of the dashboards' variables (every node and project; a
rate window of four 15 s scrapes)."""


def fed_by(path: Path) -> str:
    """What feeds a dashboard, from its tags: "gpu" (the node agents, the recording
    rules), "scheduler" or "alerts" (`gangops run`'s metrics; the alert actions' are
    checked by tests/integration/test_alerts.py)."""
    tags = load(path)["tags"]
    (source,) = [t for t in tags if t in ("gpu", "scheduler", "alerts")]
    return str(source)


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL with the variables filled in) for every target of every panel."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            out.append((panel["title"], expr))
    return out
