"""The chart's Alertmanager example (charts/gangops/examples/alertmanager.yaml) is a
configuration Alertmanager accepts, routes gangops' alerts (every alert of the chart's
rules) to `gangops run`'s receiver and nothing else there, and points at the chart's
controller Service and webhook port. Needs amtool (Debian package
prometheus-alertmanager); without it the tests skip and say so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from .helm import CHART, find, render

EXAMPLE = CHART / "examples" / "alertmanager.yaml"
RULES = CHART / "files" / "prometheus" / "alert-rules.yaml"
AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(
    AMTOOL is None, reason="amtool is not installed (Debian package prometheus-alertmanager)"
)


def _alerts() -> list[str]:
    doc = YAML(typ="safe").load(RULES.read_text())
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The example with its credentials file where this test can create one."""
    token = tmp_path / "token"
    token.write_text("t\n")
    path = tmp_path / "alertmanager.yaml"
    path.write_text(
        EXAMPLE.read_text().replace(
            "/etc/alertmanager/secrets/gangops-alertmanager/token", str(token)
        )
    )
    return path


def _amtool(*args: str) -> str:
    assert AMTOOL is not None
    out = subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@needs_amtool
def test_alertmanager_accepts_the_example(config: Path) -> None:
    assert "SUCCESS" in _amtool("check-config", str(config))


@needs_amtool
@pytest.mark.parametrize("alert", [*_alerts(), "Watchdog"])
def test_gangops_alerts_and_only_they_reach_the_receiver(config: Path, alert: str) -> None:
    got = _amtool("config", "routes", "test", f"--config.file={config}", f"alertname={alert}")
    assert got.split() == (["gangops"] if alert.startswith("Gangops") else ["default"])


def test_the_example_points_at_the_charts_controller_service() -> None:
    objs = render(namespace="gangops-system", release="gangops")
    service = find(objs, "Service", "-controller")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "webhook")
    doc = YAML(typ="safe").load(EXAMPLE.read_text())
    (receiver,) = [r for r in doc["receivers"] if r["name"] == "gangops"]
    url = receiver["webhook_configs"][0]["url"]
    want = f"http://{service['metadata']['name']}.gangops-system.svc:{port}/alertmanager"
    assert url == want
