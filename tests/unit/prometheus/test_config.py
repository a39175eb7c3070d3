"""The generated prometheus.yml (`render_config`), the file_sd writer, and the errors
`start_prometheus` reports before it starts anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.devcluster.prometheus import (
    AGENT_JOB,
    ALERT_RULES,
    RECORDING_RULES,
    STATIC_JOB,
    PrometheusConfig,
    PrometheusError,
    TargetGroup,
    find_binary,
    render_config,
    start_prometheus,
    write_targets,
)

SELF = "127.0.0.1:9090"


def test_defaults_scrape_every_second_and_load_the_charts_rules() -> None:
    config = render_config(PrometheusConfig(), self_address=SELF)
    assert config == {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RECORDING_RULES), str(ALERT_RULES)],
        "scrape_configs": [{"job_name": "prometheus", "static_configs": [{"targets": [SELF]}]}],
    }


@pytest.mark.parametrize(
    ("interval", "timeout", "want"),
    [
        (1.0, None, ("1s", "1s")),
        (15.0, None, ("15s", "10s")),  # production: Prometheus' default timeout
        (0.5, None, ("500ms", "500ms")),
        (30.0, 2.5, ("30s", "2500ms")),
    ],
)
def test_intervals_and_timeouts(
    interval: float, timeout: float | None, want: tuple[str, str]
) -> None:
    config = PrometheusConfig(scrape_interval_s=interval, scrape_timeout_s=timeout)
    g = render_config(config, self_address=SELF)["global"]
    assert (g["scrape_interval"], g["scrape_timeout"]) == want
    assert g["evaluation_interval"] == want[0]


def test_a_timeout_longer_than_the_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the scrape interval"):
        render_config(PrometheusConfig(scrape_timeout_s=2.0), self_address=SELF)


def test_file_sd_and_static_targets_are_jobs_that_honour_the_exporters_labels(
    tmp_path: Path,
) -> None:
    static: TargetGroup = {"targets": ["127.0.0.1:9400"], "labels": {"node": "n1"}}
    config = PrometheusConfig(
        file_sd_files=(tmp_path / "targets.json",),
        static_targets=(static,),
        rule_files=(),
        file_sd_refresh_s=2,
    )
    jobs = {j["job_name"]: j for j in render_config(config, self_address=SELF)["scrape_configs"]}
    assert jobs[AGENT_JOB] == {
        "job_name": AGENT_JOB,
        "honor_labels": True,
        "file_sd_configs": [{"files": [str(tmp_path / "targets.json")], "refresh_interval": "2s"}],
    }
    assert jobs[STATIC_JOB] == {
        "job_name": STATIC_JOB,
        "honor_labels": True,
        "static_configs": [static],
    }
    assert render_config(config, self_address=SELF)["rule_files"] == []


def test_write_targets_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "sd" / "targets.json"
    write_targets(path, [{"targets": ["127.0.0.1:1"], "labels": {"node": "a"}}])
    write_targets(path, [{"targets": ["127.0.0.1:2"]}])
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:2"]}]
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]


def test_a_missing_binary_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PrometheusError, match=r"apt-get install prometheus"):
        find_binary()


def test_a_missing_rule_file_is_reported_before_starting(tmp_path: Path) -> None:
    config = PrometheusConfig(rule_files=(tmp_path / "nope.yaml",))
    with pytest.raises(PrometheusError, match=r"rule file not found: .*nope\.yaml"):
        start_prometheus(tmp_path, config, binary=Path("/bin/false"))
    assert not (tmp_path / "prometheus.yml").exists()


def test_a_binary_that_is_not_executable_is_reported(tmp_path: Path) -> None:
    with pytest.raises(PrometheusError, match=r"not an executable file .*apt-get install"):
        start_prometheus(tmp_path, PrometheusConfig(rule_files=()), binary=tmp_path / "nope")


def test_a_timeout_longer_than_the_interval_is_a_prometheus_error(tmp_path: Path) -> None:
    config = PrometheusConfig(scrape_timeout_s=2.0, rule_files=())
    with pytest.raises(PrometheusError, match="cannot configure Prometheus: scrape timeout"):
        start_prometheus(tmp_path, config, binary=Path("/bin/false"))


def test_alerts_go_to_the_alertmanagers_given() -> None:
    config = render_config(PrometheusConfig(alertmanagers=("127.0.0.1:9093",)), self_address=SELF)
    assert config["alerting"] == {
        "alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]
    }
    assert "alerting" not in render_config(PrometheusConfig(), self_address=SELF)
