"""The containers' arguments are gangops' own: every values file renders arguments the
real command-line parser accepts, and the chart's defaults are the commands' defaults,
so the chart never runs a differently tuned controller or agent by accident."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from controller.cli import _parser

from .helm import find, render, template_text, value_files


def _parse(args: list[str]) -> argparse.Namespace:
    try:
        return _parser().parse_args(args)
    except SystemExit as e:  # argparse reports and exits on an unknown or bad flag
        raise AssertionError(f"gangops refused {args}") from e


def _args(kind: str, values_file: Path | None = None) -> list[str]:
    objs = render(*([values_file] if values_file else []))
    container = find(objs, kind)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gangops"]
    args: list[str] = container["args"]
    return args


@pytest.mark.parametrize("values", value_files(), ids=lambda p: p.stem)
def test_the_controller_and_agent_arguments_parse(values: Path) -> None:
    assert _parse(_args("Deployment", values)).command == "run"
    if any(o["kind"] == "DaemonSet" for o in render(values)):
        assert _parse(_args("DaemonSet", values)).command == "agent"


def test_the_chart_defaults_are_the_commands_defaults() -> None:
    chart, cli = _parse(_args("Deployment")), _parse(["run"])
    for name in ("lease_name", "lease_duration", "renew_deadline", "retry_period",
                 "grow_interval", "leader_elect", "scheduler", "forecast_horizon"):  # fmt: skip
        assert getattr(chart, name) == getattr(cli, name), name
    agent, agent_cli = _parse(_args("DaemonSet")), _parse(["agent"])
    for name in ("listen", "hostname_label", "pod_resources_socket"):
        assert getattr(agent, name) == getattr(agent_cli, name), name


def _deployment_args(values: dict[str, object]) -> list[str]:
    container = find(render(values=values), "Deployment")["spec"]["template"]["spec"]
    args: list[str] = container["containers"][0]["args"]
    return args


def test_the_prometheus_url_and_forecast_horizon_reach_the_controller() -> None:
    """Telemetry-driven scheduling, quota usage and minUsage auto-approval need
    `gangops run --prometheus-url`; the chart passes it (and --forecast-horizon) when
    set, and neither by default."""
    default = _deployment_args({})
    assert not [a for a in default if a.startswith(("--prometheus-url", "--forecast-horizon"))]
    url = "http://prometheus-operated.monitoring.svc:9090"
    values = {"controller": {"prometheusUrl": url, "forecastHorizonSeconds": 600}}
    args = _deployment_args(values)
    assert f"--prometheus-url={url}" in args and "--forecast-horizon=600" in args
    parsed = _parse(args)
    assert parsed.prometheus_url == url and parsed.forecast_horizon == 600.0


def test_the_prometheus_url_must_be_http() -> None:
    out = template_text(values={"controller": {"prometheusUrl": "prometheus:9090"}}, check=False)
    assert out.returncode != 0 and "prometheusUrl" in out.stderr


def test_the_alertmanager_url_reaches_the_controller_and_must_be_http() -> None:
    """Asked before an alert lapses, so a silenced alert keeps its action; not by default."""
    assert not [a for a in _deployment_args({}) if a.startswith("--alertmanager-url")]
    url = "http://alertmanager-operated.monitoring.svc:9093"
    args = _deployment_args({"controller": {"alertmanager": {"url": url}}})
    assert f"--alertmanager-url={url}" in args and _parse(args).alertmanager_url == url
    bad = {"controller": {"alertmanager": {"url": "alertmanager:9093"}}}
    out = template_text(values=bad, check=False)
    assert out.returncode != 0 and "url" in out.stderr
