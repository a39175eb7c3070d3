"""The containers' arguments are gangops' own: every values file renders arguments the
real command-line parser accepts, and the chart's defaults are the commands' defaults,
so the chart never runs a differently tuned controller or agent by accident."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from controller.cli import _parser

from .helm import find, render, value_files


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
                 "grow_interval", "leader_elect", "scheduler"):  # fmt: skip
        assert getattr(chart, name) == getattr(cli, name), name
    agent, agent_cli = _parse(_args("DaemonSet")), _parse(["agent"])
    for name in ("listen", "hostname_label", "pod_resources_socket"):
        assert getattr(agent, name) == getattr(agent_cli, name), name
