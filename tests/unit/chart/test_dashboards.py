"""The Grafana dashboards the chart ships: the ConfigMaps hold the files, every file
parses, ids and titles are unique, and every query is valid PromQL (promtool parses
each as a rule). That each query returns data is tests/integration/test_dashboards.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from .dashboards import DASHBOARDS, load, queries
from .helm import render


def test_the_configmaps_hold_every_dashboard_for_the_sidecar() -> None:
    objs = render(values={"monitoring": {"grafanaDashboards": {"enabled": True}}})
    maps = [o for o in objs if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]]
    assert len(maps) == len(DASHBOARDS) >= 1
    held = {k: v for m in maps for k, v in m["data"].items()}
    for m in maps:
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
    for path in DASHBOARDS:
        assert json.loads(held[path.name]) == load(path)


def test_every_dashboard_has_unique_uid_title_and_panel_ids() -> None:
    docs = [load(p) for p in DASHBOARDS]
    assert len({d["uid"] for d in docs}) == len(docs)
    assert len({d["title"] for d in docs}) == len(docs)
    for d in docs:
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), d["uid"]
        assert all(p["targets"] for p in d["panels"]), d["uid"]


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    rules = [
        {"record": f"dashboard:query:{i}", "expr": expr}
        for i, (_, expr) in enumerate(q for p in DASHBOARDS for q in queries(load(p)))
    ]
    path = tmp_path / "queries.yaml"
    YAML(typ="safe").dump({"groups": [{"name": "dashboards", "rules": rules}]}, path)
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout
