"""A real Prometheus beside the local control plane, for the dev cluster, tests and benchmarks.

Issue 12 has the node agents' GPU telemetry scraped by a real Prometheus, so
that PromQL, the recording rules the chart ships and the scheduler's queries
are tested against the server that runs in production, not a fake. This
module runs Debian's `prometheus` binary as a child process on a free
loopback port, with a generated configuration in a work directory:

- the agents' targets come from a Prometheus `file_sd_configs` JSON file
  (`write_targets` writes one atomically; Prometheus notices the change at
  once through inotify, and re-reads it every `file_sd_refresh_s` as well);
  fixed targets may be given too, and Prometheus scrapes itself;
- the recording rules in `RECORDING_RULES` and the alerting rules in
  `ALERT_RULES` are loaded (alerts go nowhere unless an Alertmanager is given);
- the scrape and rule-evaluation interval is 1 s by default, so a test sees a
  value within seconds (15 s, Prometheus' own default, is the production one).

`start_prometheus` starts one in any directory; `start_for_cluster` starts one
beside a `DevCluster` (scraping `cluster.prometheus_targets_file`, stopped
with the cluster and by `dev-cluster down`). `Prometheus` queries it through
the HTTP API; `scrape_health` reports whether it keeps up with its targets,
for benchmarks.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from controller.devcluster.launcher import (
    Component,
    DevCluster,
    DevClusterError,
    _free_ports,
    launch,
)

__all__ = [
    "AGENT_JOB",
    "ALERT_RULES",
    "INSTALL_HINT",
    "RECORDING_RULES",
    "STATIC_JOB",
    "Prometheus",
    "PrometheusConfig",
    "PrometheusError",
    "Sample",
    "ScrapeHealth",
    "Series",
    "Target",
    "TargetGroup",
    "find_binary",
    "render_config",
    "scrape_health",
    "start_for_cluster",
    "start_prometheus",
    "write_targets",
]

log = logging.getLogger(__name__)

RECORDING_RULES = (
    Path(__file__).resolve().parents[2]
    / "charts"
    / "gangops"
    / "files"
    / "prometheus"
    / "recording-rules.yaml"
)
"""The GPU recording rules the Helm chart ships (over dcgm-exporter's metric names)."""
ALERT_RULES = RECORDING_RULES.with_name("alert-rules.yaml")
"""The GPU alerting rules the Helm chart ships (docs/alerts.md)."""

INSTALL_HINT = "apt-get install prometheus (scripts/debian-deps.sh does, under `make test`)"

AGENT_JOB = "gangops-agent"
"""The job of the targets listed in the file_sd files (the node agents)."""
STATIC_JOB = "static"
"""The job of the fixed targets."""
SELF_JOB = "prometheus"
"""The job under which Prometheus scrapes itself (its `prometheus_*` metrics)."""

_START_ATTEMPTS = 3


class PrometheusError(DevClusterError):
    """Prometheus could not be started or queried; the message says why."""


class _PortTaken(PrometheusError):
    """The free port chosen was taken by another process before Prometheus bound it."""


class TargetGroup(TypedDict):
    """One entry of a file_sd file: `{"targets": ["127.0.0.1:9400"], "labels": {...}}`."""

    targets: list[str]
    labels: NotRequired[dict[str, str]]


@dataclass(frozen=True)
class PrometheusConfig:
    """What the generated prometheus.yml says."""

    scrape_interval_s: float = 1.0
    """How often every target is scraped and the rules evaluated. 1 s for the dev
    cluster and tests, so a value shows within seconds; in production use 15 s
    (Prometheus' default, and the chart's)."""
    file_sd_files: tuple[Path, ...] = ()
    """file_sd JSON files (lists of `TargetGroup`) naming the agents, job `AGENT_JOB`.
    `start_prometheus` creates a missing one, empty."""
    static_targets: tuple[TargetGroup, ...] = ()
    """Fixed targets, job `STATIC_JOB`."""
    rule_files: tuple[Path, ...] = (RECORDING_RULES, ALERT_RULES)
    """Rule files to load; by default the chart's GPU recording and alerting rules."""
    file_sd_refresh_s: float = 5.0
    """Re-read the file_sd files this often, besides on every change (inotify)."""
    alertmanagers: tuple[str, ...] = ()
    """Alertmanagers (host:port) the firing alerts are sent to; none: alerts only show
    in Prometheus' own /alerts."""
    scrape_timeout_s: float | None = None
    """Give up on a scrape after this long; by default the interval, at most 10 s
    (Prometheus rejects a timeout longer than the interval)."""
    remote_read: tuple[str, ...] = ()
    """Remote-read endpoints queried beside the local TSDB (a query whose remote read
    fails answers with `warnings` and the local data)."""
    flags: tuple[str, ...] = ()
    """More command-line flags (for example `--query.max-samples=1`)."""


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds, as `1s` or `250ms`."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be positive, not {seconds!r} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def render_config(config: PrometheusConfig, *, self_address: str) -> dict[str, Any]:
    """prometheus.yml as a mapping (written as JSON, which is YAML). `self_address`
    (host:port) is where this Prometheus listens, so it scrapes itself there.

    The agents' job honours their labels: dcgm-exporter's `pod`, `namespace` and
    `container` say which pod holds a GPU and must win over a target label of the
    same name (dcgm-exporter's ServiceMonitor sets honorLabels for this reason)."""
    interval = config.scrape_interval_s
    timeout = config.scrape_timeout_s if config.scrape_timeout_s is not None else min(interval, 10)
    if timeout > interval:
        raise ValueError(f"scrape timeout {timeout} s exceeds the scrape interval {interval} s")
    scrape_configs: list[dict[str, Any]] = [
        {"job_name": SELF_JOB, "static_configs": [{"targets": [self_address]}]}
    ]
    if config.file_sd_files:
        scrape_configs.append(
            {
                "job_name": AGENT_JOB,
                "honor_labels": True,
                "file_sd_configs": [
                    {
                        "files": [str(p) for p in config.file_sd_files],
                        "refresh_interval": _duration(config.file_sd_refresh_s),
                    }
                ],
            }
        )
    if config.static_targets:
        scrape_configs.append(
            {
                "job_name": STATIC_JOB,
                "honor_labels": True,
                "static_configs": [dict(g) for g in config.static_targets],
            }
        )
    rendered: dict[str, Any] = {
        "global": {
            "scrape_interval": _duration(interval),
            "scrape_timeout": _duration(timeout),
            "evaluation_interval": _duration(interval),
        },
        "rule_files": [str(p) for p in config.rule_files],
        "scrape_configs": scrape_configs,
        **(
            {"remote_read": [{"url": u, "read_recent": True} for u in config.remote_read]}
            if config.remote_read
            else {}
        ),
    }
    if config.alertmanagers:
        rendered["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(config.alertmanagers)}]}]
        }
    return rendered


def write_targets(path: Path, groups: Sequence[TargetGroup]) -> None:
    """Write a file_sd file atomically (a whole new file renamed over the old one),
    so Prometheus never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(list(groups), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


# ------------------------------------------------------------------- query results


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector."""

    labels: Mapping[str, str]
    """The series' labels, `__name__` included when the result has one."""
    value: float
    timestamp: float
    """Unix seconds."""


@dataclass(frozen=True)
class Series:
    """One series of a range result: its samples, oldest first."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]
    """(unix seconds, value) pairs."""


@dataclass(frozen=True)
class Target:
    """One active scrape target, from /api/v1/targets."""

    job: str
    scrape_url: str
    labels: Mapping[str, str]
    """The target's labels after relabelling (`job`, `instance`, file_sd labels)."""
    health: Literal["up", "down", "unknown"]
    last_error: str
    last_scrape_duration_s: float


def _labels(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()}


# ------------------------------------------------------------------- the process


@dataclass
class Prometheus:
    """A running Prometheus. Create it with `start_prometheus` or `start_for_cluster`."""

    url: str
    """http://127.0.0.1:<port>"""
    config: PrometheusConfig
    config_file: Path
    work_dir: Path
    component: Component
    """The process (its own process group); a dev cluster stops it with its own."""
    request_timeout_s: float = 30.0
    _stopped: bool = field(default=False, init=False, repr=False)

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.component.alive()

    def stop(self, *, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace` s: returns within grace + 5 s. Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        self.component.stop(grace)
        log.info("prometheus stopped url=%s elapsed_s=%.1f", self.url, time.monotonic() - t0)

    def query(self, promql: str, *, at: float | None = None) -> list[Sample]:
        """Evaluate an instant query (at `at`, unix seconds; now by default). A scalar
        result comes back as one sample without labels."""
        params = {"query": promql, **({"time": repr(at)} if at is not None else {})}
        data = self._api("query", params, what=promql)
        kind, result = data["resultType"], data["result"]
        if kind == "scalar":
            return [Sample(labels={}, value=float(result[1]), timestamp=float(result[0]))]
        if kind != "vector":
            raise PrometheusError(f"{promql}: a {kind} result; query an instant vector")
        return [
            Sample(
                labels=_labels(r["metric"]),
                value=float(r["value"][1]),
                timestamp=float(r["value"][0]),
            )
            for r in result
        ]

    def query_range(self, promql: str, *, start: float, end: float, step_s: float) -> list[Series]:
        """Evaluate `promql` at every `step_s` from `start` to `end` (unix seconds)."""
        params = {"query": promql, "start": repr(start), "end": repr(end), "step": repr(step_s)}
        return self._series(self._api("query_range", params, what=promql)["result"])

    def samples(self, selector: str, *, window_s: float, at: float | None = None) -> list[Series]:
        """The raw samples of the series `selector` selects, over the `window_s` seconds
        before `at` (now by default): what was scraped, not resampled at steps."""
        promql = f"{selector}[{_duration(window_s)}]"
        params = {"query": promql, **({"time": repr(at)} if at is not None else {})}
        return self._series(self._api("query", params, what=promql)["result"])

    def targets(self) -> list[Target]:
        """The active scrape targets and how their last scrape went."""
        data = self._api("targets", {"state": "active"}, what="targets")
        return [
            Target(
                job=str(t["scrapePool"]),
                scrape_url=str(t["scrapeUrl"]),
                labels=_labels(t["labels"]),
                health=t["health"],
                last_error=str(t["lastError"]),
                last_scrape_duration_s=float(t["lastScrapeDuration"]),
            )
            for t in data["activeTargets"]
        ]

    def reload(self) -> None:
        """Have Prometheus re-read its configuration and rule files (/-/reload)."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout_s):
                return
        except urllib.error.HTTPError as e:
            with e:
                body = e.read().decode("utf-8", "replace").strip()
            raise PrometheusError(
                f"Prometheus refused to reload {self.config_file}: {body}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise PrometheusError(f"{self.url}/-/reload: {e}") from None

    # -- internals

    @staticmethod
    def _series(result: Any) -> list[Series]:
        return [
            Series(
                labels=_labels(r["metric"]),
                points=tuple((float(t), float(v)) for t, v in r["values"]),
            )
            for r in result
        ]

    def _api(self, endpoint: str, params: Mapping[str, str], *, what: str) -> Any:
        """GET /api/v1/<endpoint>; the `data` of a success, else PrometheusError with
        Prometheus' own error."""
        url = f"{self.url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.request_timeout_s) as resp:
                body: Any = json.load(resp)
        except urllib.error.HTTPError as e:
            with e:
                raw = e.read()
            try:
                body = json.loads(raw)
            except ValueError:
                raise PrometheusError(f"{what}: HTTP {e.code} from {self.url}") from None
        except (urllib.error.URLError, OSError) as e:
            alive = "" if self.alive() else f" (Prometheus has exited; see {self.component.log})"
            raise PrometheusError(f"{what}: {self.url} unreachable: {e}{alive}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{what}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]


def find_binary() -> Path:
    """The `prometheus` binary on PATH (Debian: /usr/bin/prometheus)."""
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusError(f"prometheus is not on PATH: install it ({INSTALL_HINT})")
    return Path(found)


def start_prometheus(
    work_dir: Path,
    config: PrometheusConfig | None = None,
    *,
    port: int | None = None,
    binary: Path | None = None,
    log_file: Path | None = None,
    tie_to_process: bool = True,
    timeout_s: float = 30.0,
) -> Prometheus:
    """Start Prometheus on 127.0.0.1 with `config` written to `work_dir/prometheus.yml`
    and its TSDB in `work_dir/data`; return once /-/ready answers.

    `port` defaults to a free one (and another is tried if it is taken meanwhile).
    The log goes to `log_file` (default `work_dir/prometheus.log`). With
    `tie_to_process` the process receives SIGKILL if this one dies. Raises
    PrometheusError, after stopping the process, if the binary is missing, the port
    cannot be bound, the configuration is rejected (with Prometheus' own error) or
    it is not ready in `timeout_s`."""
    config = config or PrometheusConfig()
    exe = binary or find_binary()
    if not os.access(exe, os.X_OK):
        raise PrometheusError(f"{exe} is not an executable file ({INSTALL_HINT})")
    missing = [str(p) for p in config.rule_files if not p.is_file()]
    if missing:
        raise PrometheusError(f"rule file not found: {', '.join(missing)}")
    work_dir.mkdir(parents=True, exist_ok=True)
    for sd in config.file_sd_files:
        if not sd.exists():
            write_targets(sd, [])
    for attempt in range(1, _START_ATTEMPTS + 1):
        try:
            return _start(
                work_dir,
                config,
                exe=exe,
                port=port or _free_ports(1)[0],
                log_file=log_file or work_dir / "prometheus.log",
                tie_to_process=tie_to_process,
                timeout_s=timeout_s,
            )
        except _PortTaken as e:
            if port is not None or attempt == _START_ATTEMPTS:
                raise PrometheusError(str(e)) from None
            log.warning("prometheus port taken meanwhile; trying another error=%r", str(e))
    raise AssertionError("unreachable")


def _start(
    work_dir: Path,
    config: PrometheusConfig,
    *,
    exe: Path,
    port: int,
    log_file: Path,
    tie_to_process: bool,
    timeout_s: float,
) -> Prometheus:
    address = f"127.0.0.1:{port}"
    config_file = work_dir / "prometheus.yml"
    try:
        rendered = render_config(config, self_address=address)
    except ValueError as e:
        raise PrometheusError(f"cannot configure Prometheus: {e}") from None
    config_file.write_text(json.dumps(rendered, indent=2) + "\n", encoding="utf-8")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    args = [
        str(exe),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={work_dir / 'data'}",
        f"--web.listen-address={address}",
        "--web.enable-lifecycle",
        *config.flags,
    ]
    t0 = time.monotonic()
    log_start = log_file.stat().st_size if log_file.exists() else 0  # this attempt's lines
    component = launch(
        "prometheus", args, log_file=log_file, cwd=work_dir, tie_to_process=tie_to_process
    )
    prom = Prometheus(
        url=f"http://{address}",
        config=config,
        config_file=config_file,
        work_dir=work_dir,
        component=component,
    )
    try:
        _wait_ready(prom, deadline=t0 + timeout_s, log_start=log_start)
    except BaseException:
        prom.stop(grace=2.0)
        raise
    log.info(
        "prometheus ready url=%s pid=%d config=%s ready_s=%.2f",
        prom.url,
        component.pid,
        config_file,
        time.monotonic() - t0,
    )
    return prom


def _wait_ready(prom: Prometheus, *, deadline: float, log_start: int) -> None:
    while True:
        if not prom.alive():
            raise _exit_error(prom, log_start)
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise PrometheusError(
                f"Prometheus was not ready at {prom.url}/-/ready in time; its log is"
                f" {prom.component.log}:\n{prom.component.log_tail()}"
            )
        time.sleep(0.05)


def _exit_error(prom: Prometheus, log_start: int) -> PrometheusError:
    """Why Prometheus exited while starting, in its own words: the level=error lines
    it logged from `log_start` on (else its last lines)."""
    with prom.component.log.open("rb") as f:
        f.seek(log_start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    errors = [line for line in lines if "level=error" in line][-10:] or lines[-5:]
    said = "\n".join(errors)
    code = prom.component.popen.poll() if prom.component.popen else None
    where = f"(exit code {code}; log {prom.component.log})"
    if "address already in use" in said:
        return _PortTaken(f"Prometheus could not bind {prom.url} {where}:\n{said}")
    if "error loading config" in said.lower():
        return PrometheusError(
            f"Prometheus rejected its configuration {prom.config_file} {where}:\n{said}"
        )
    return PrometheusError(f"Prometheus exited while starting {where}:\n{said}")


def start_for_cluster(
    cluster: DevCluster, *, scrape_interval_s: float = 1.0, timeout_s: float = 30.0
) -> Prometheus:
    """Start Prometheus beside `cluster`, scraping the agents listed in
    `cluster.prometheus_targets_file` (created empty if missing; the agents' side
    writes it with `write_targets`). It works in the directory that file is in, logs
    to `cluster.log_dir/prometheus.log`, and is stopped with the cluster (first), by
    `dev-cluster down` too, and dies with this process when the cluster does. Its URL
    is `cluster.prometheus_url`, and in the state file for `dev-cluster env`."""
    targets = cluster.prometheus_targets_file
    prom = start_prometheus(
        targets.parent,
        PrometheusConfig(scrape_interval_s=scrape_interval_s, file_sd_files=(targets,)),
        log_file=cluster.log_dir / "prometheus.log",
        tie_to_process=cluster.options.tie_to_process,
        timeout_s=timeout_s,
    )
    cluster.prometheus_url = prom.url
    cluster.add_component(prom.component)
    return prom


# ------------------------------------------------------------------- scrape health


@dataclass(frozen=True)
class ScrapeHealth:
    """How well Prometheus kept up with one job's targets over a window (benchmarks)."""

    targets: int
    """Series of the job seen in the window (one per target)."""
    up: int
    """Targets whose last scrape succeeded."""
    window_s: float
    scrapes: int
    """Over all targets, the scrapes recorded in the window (samples of
    `scrape_duration_seconds`)."""
    missed_scrapes: int
    """Over all targets, the scrapes that should have happened and did not: a gap of
    n intervals between two of a target's scrapes (rounded, so jitter does not count)
    is n - 1 missed, and so is the time from its last scrape to the end of the window.
    Measure a set of targets that stays listed for the whole window (a target removed
    in it misses the rest; one added in it misses nothing before its first scrape)."""
    failed_scrapes: int
    """Over all targets, scrapes in the window that failed (`up` 0: a timeout, a
    refused connection, a bad exposition); they count as scrapes above."""
    scrape_duration_p50_s: float
    scrape_duration_p99_s: float
    scrape_duration_max_s: float
    """Over every scrape of the job in the window."""
    interval_p99_s: float | None
    """Prometheus' own 99th percentile of the time between two scrapes of a target
    (`prometheus_target_interval_length_seconds`, the worst interval configured;
    every job here has the one global interval); well above the interval means it
    falls behind. None before it has scraped itself."""


def _missed(times: Sequence[float], *, interval_s: float, end: float) -> int:
    """Scrapes missing between consecutive scrape times and from the last one to `end`."""
    ends = [*times, end]
    return sum(
        max(0, round((b - a) / interval_s) - 1) for a, b in zip(times, ends[1:], strict=True)
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def scrape_health(
    prom: Prometheus, *, job: str = AGENT_JOB, window_s: float = 60.0
) -> ScrapeHealth:
    """Scrape health of `job`'s targets over the last `window_s` seconds."""
    interval = prom.config.scrape_interval_s
    now = time.time()
    series = prom.samples(f'scrape_duration_seconds{{job="{job}"}}', window_s=window_s, at=now)
    durations = sorted(v for s in series for _, v in s.points)
    missed = sum(_missed([t for t, _ in s.points], interval_s=interval, end=now) for s in series)
    failed = sum(
        v == 0
        for s in prom.samples(f'up{{job="{job}"}}', window_s=window_s, at=now)
        for _, v in s.points
    )
    up = prom.query(f'up{{job="{job}"}} == 1', at=now)
    interval_p99 = prom.query(
        'max(prometheus_target_interval_length_seconds{quantile="0.99"})', at=now
    )
    return ScrapeHealth(
        targets=len(series),
        up=len(up),
        window_s=window_s,
        scrapes=len(durations),
        missed_scrapes=missed,
        failed_scrapes=failed,
        scrape_duration_p50_s=_quantile(durations, 0.5),
        scrape_duration_p99_s=_quantile(durations, 0.99),
        scrape_duration_max_s=durations[-1] if durations else math.nan,
        interval_p99_s=interval_p99[0].value if interval_p99 else None,
    )
