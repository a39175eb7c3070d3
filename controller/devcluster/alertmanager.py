"""A real Alertmanager beside the local control plane, for tests and benchmarks.

Issue 18 has Alertmanager post to `gangops run`'s receiver as it would in a cluster:
this module runs Debian's `prometheus-alertmanager` (or `alertmanager`) as a child
process on a free loopback port, with a generated configuration that routes every
alert, each in a group of its own (`group_by: ['...']`), to one webhook with a
bearer token read from a file, as a Secret mounted in its pod would be. Its waits
are short (`group_wait`, `group_interval`), so a test sees a delivery within a
second or two; gossip is off (one instance). `Alertmanager.post_alerts` uses its
API (`POST /api/v2/alerts`) as Prometheus does.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.devcluster.launcher import Component, DevClusterError, _free_ports, launch

__all__ = ["INSTALL_HINT", "Alertmanager", "AlertmanagerConfig", "start_alertmanager"]

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "apt-get install prometheus-alertmanager (scripts/debian-deps.sh does, under `make test`)"
)


@dataclass(frozen=True)
class AlertmanagerConfig:
    """What the generated alertmanager.yml says."""

    webhook_url: str
    """Where every notification goes (gangops run's POST /alertmanager)."""
    token_file: Path
    """The bearer token sent with each notification."""
    group_wait_s: float = 1.0
    group_interval_s: float = 1.0
    repeat_interval_s: float = 60.0
    max_alerts: int = 1000
    """At most this many alerts in one notification (keeps the body under 1 MiB)."""


def _seconds(s: float) -> str:
    return f"{round(s * 1000)}ms"


def render_config(config: AlertmanagerConfig) -> dict[str, Any]:
    """alertmanager.yml as a mapping (written as JSON, which is YAML)."""
    return {
        "route": {
            "receiver": "gangops",
            "group_by": ["..."],
            "group_wait": _seconds(config.group_wait_s),
            "group_interval": _seconds(config.group_interval_s),
            "repeat_interval": _seconds(config.repeat_interval_s),
        },
        "receivers": [
            {
                "name": "gangops",
                "webhook_configs": [
                    {
                        "url": config.webhook_url,
                        "send_resolved": True,
                        "max_alerts": config.max_alerts,
                        "http_config": {
                            "authorization": {
                                "type": "Bearer",
                                "credentials_file": str(config.token_file),
                            }
                        },
                    }
                ],
            }
        ],
    }


@dataclass
class Alertmanager:
    """A running Alertmanager."""

    url: str
    address: str
    """host:port, for Prometheus' `alerting` configuration."""
    component: Component

    def stop(self, grace: float = 5.0) -> None:
        self.component.stop(grace)

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """POST /api/v2/alerts: `alerts` as Prometheus sends them (labels,
        annotations, startsAt, endsAt, generatorURL)."""
        req = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(list(alerts)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def alerts(self) -> list[dict[str, Any]]:
        """GET /api/v2/alerts: what it holds now."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as resp:
            got: list[dict[str, Any]] = json.load(resp)
        return got


def find_binary() -> Path:
    for name in ("prometheus-alertmanager", "alertmanager"):
        found = shutil.which(name)
        if found is not None:
            return Path(found)
    raise DevClusterError(f"Alertmanager is not on PATH: install it ({INSTALL_HINT})")


def start_alertmanager(
    work_dir: Path,
    config: AlertmanagerConfig,
    *,
    tie_to_process: bool = True,
    timeout_s: float = 30.0,
) -> Alertmanager:
    """Start Alertmanager on 127.0.0.1 with `config` written to
    `work_dir/alertmanager.yml`; return once /-/ready answers (else DevClusterError,
    with the end of its log, after stopping it)."""
    exe = find_binary()
    work_dir.mkdir(parents=True, exist_ok=True)
    config_file = work_dir / "alertmanager.yml"
    config_file.write_text(json.dumps(render_config(config), indent=2) + "\n")
    port = _free_ports(1)[0]
    address = f"127.0.0.1:{port}"
    args = [
        str(exe),
        f"--config.file={config_file}",
        f"--storage.path={work_dir / 'data'}",
        f"--web.listen-address={address}",
        "--cluster.listen-address=",
    ]
    component = launch(
        "alertmanager",
        args,
        log_file=work_dir / "alertmanager.log",
        cwd=work_dir,
        tie_to_process=tie_to_process,
    )
    am = Alertmanager(url=f"http://{address}", address=address, component=component)
    deadline = time.monotonic() + timeout_s
    while True:
        if not component.alive():
            raise DevClusterError(
                f"Alertmanager exited while starting; the end of {component.log}:\n"
                f"{component.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{am.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    log.info("alertmanager ready url=%s pid=%d", am.url, component.pid)
                    return am
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            am.stop(2.0)
            raise DevClusterError(f"Alertmanager was not ready in time; see {component.log}")
        time.sleep(0.05)
