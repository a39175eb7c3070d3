"""Alert actions end to end, all real: the local control plane, node agents replaying
GPUs, a real Prometheus evaluating the chart's alerting rules, a real Alertmanager
(Debian's `prometheus-alertmanager`) posting to a `gangops run` subprocess.

- a storm of alerts on every node trips the breaker: one node is acted on, the
  rest get CircuitOpen Events; all of it is undone after the cool-down;
- 10,000 deliveries (direct replays, reordered, through Alertmanager's own
  `POST /api/v2/alerts`, and again after Alertmanager restarts) leave exactly one
  effect and one Event per alert;
- shadow mode records a ShadowAction Event and touches nothing;
- crash trials: `gangops run` SIGKILLed at random moments while deliveries fire
  and then resolve converges to one quarantine, cordon and taint, then to none;
- a scripted leak on one GPU of a running gang: Prometheus' GangopsGPUMemoryLeak
  fires, the GPU is quarantined, the job is asked to checkpoint and, after its
  grace period, its gang is restarted on another node (not counted against its
  backoffLimit); the leak stops and the GPU returns after the cool-down;
- a scripted fatal XID on one GPU of a running gang: GangopsGPUFatalXID fires on
  the agent's own count, naming the pod it hit, and the gang is restarted elsewhere;
- a silenced alert (Alertmanager's `POST /api/v2/silences`) is not sent again, yet
  with `--alertmanager-url` its action is kept past the resolve timeout; once the
  alert resolved and the silence is gone, it is undone.

Without Prometheus or Alertmanager installed the module skips, saying how to
install them (scripts/debian-deps.sh does).
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.alerts.machine import REASON_ANNOTATION, STATE_ANNOTATION, TAINT_KEY
from controller.devcluster import DevCluster
from controller.devcluster.alertmanager import (
    INSTALL_HINT,
    Alertmanager,
    AlertmanagerConfig,
    start_alertmanager,
)
from controller.devcluster.launcher import _free_ports
from controller.devcluster.prometheus import PrometheusConfig, start_prometheus
from controller.devcluster.telemetry import TelemetryOptions, start_agents, steady_recording
from controller.gang.cli import explain_job
from controller.kube.client import RESOURCES, Kube
from controller.nodehealth import (
    CHECKPOINT_ANNOTATION,
    CONDITION,
    QUARANTINE_ANNOTATION,
    RESTART_ANNOTATION,
    UNHEALTHY_ANNOTATION,
    parse_indices,
)
from tests.unit.chart.dashboards import DASHBOARDS, fed_by, load, queries

from .gang_helpers import GangEnv, policy_doc
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

if shutil.which("prometheus-alertmanager") is None and shutil.which("alertmanager") is None:
    pytest.skip(f"Alertmanager is not installed: {INSTALL_HINT}", allow_module_level=True)
if shutil.which("prometheus") is None:
    pytest.skip("prometheus is not installed: apt-get install prometheus", allow_module_level=True)

LEAK, XID = "GangopsGPUMemoryLeak", "GangopsGPUFatalXID"
TOKEN = "it-alert-token"
Obj = dict[str, Any]


@dataclass
class Alerting:
    am: Alertmanager
    config: AlertmanagerConfig
    port: int
    """gangops run's webhook port (Alertmanager posts there)."""
    token_file: Path
    work: Path


@pytest.fixture(scope="module")
def alerting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alerting]:
    work = tmp_path_factory.mktemp("alerts")
    token = work / "token"
    token.write_text(TOKEN + "\n")
    port = _free_ports(1)[0]
    config = AlertmanagerConfig(
        f"http://127.0.0.1:{port}/alertmanager", token, repeat_interval_s=30
    )
    a = Alerting(start_alertmanager(work / "alertmanager", config), config, port, token, work)
    yield a
    a.am.stop()


def alert_policy(env: GangEnv, rules: list[Obj], **breaker: int) -> Obj:
    doc = policy_doc({"p": {"namespace": env.namespace, "guaranteed": 16}})
    doc["alertActions"] = {
        "rules": [
            {"action": "quarantine-gpus", "mode": "enforce", "cooldownSeconds": 5,
             "restartJob": True, "gracePeriodSeconds": 3, **r}
            for r in rules
        ],
        "circuitBreaker": {"maxPercent": 100, "maxNodes": 5, "windowSeconds": 60, **breaker},
    }  # fmt: skip
    return doc


def controller(
    env: GangEnv,
    dev_cluster: DevCluster,
    a: Alerting,
    log: Path,
    *,
    metrics_port: int = 0,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "controller.cli", "run",
        "--kubeconfig", str(dev_cluster.kubeconfig),
        "--no-leader-elect",
        "--webhook-addr", f"127.0.0.1:{a.port}",
        "--alertmanager-token-file", str(a.token_file),
        "--alert-tick", "1",
        "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--system-namespace", env.system_namespace,
        "--job-selector", env.job_selector,
        "--node-selector", env.node_selector,
        "--source-selector", f"gangops.ai/none={env.selector_value}",
        "--cache-dir", str(log.parent / "cache"),
        *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    wait_for("gangops run to lead", lambda: "leading" in log.read_text(), timeout=30)
    wait_for("the alert actor to list the nodes", lambda: _ready(a.port), timeout=30)
    return proc


def _accepted(metrics_port: int) -> float:
    """gangops run's count of accepted Alertmanager deliveries."""
    return _counter(metrics_port, 'gangops_alertmanager_deliveries_total{result="accepted"}')


def _counter(metrics_port: int, series: str) -> float:
    """The value of `series` (name and labels as exposed) on gangops run's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _ready(port: int) -> bool:
    return _post(port, b'{"version": "4", "alerts": []}') == 200


def _post(port: int, body: bytes, conn: http.client.HTTPConnection | None = None) -> int:
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(
            "POST", "/alertmanager", body=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )  # fmt: skip
        resp = c.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        if conn is None:
            c.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def node_annotations(kube: Kube, node: str) -> dict[str, str]:
    obj = kube.get(RESOURCES["Node"], node) or {}
    return dict((obj.get("metadata") or {}).get("annotations") or {})


_EARLIER: set[str] = set()
"""Uids of the Events that were there when the running test began (the tests share
nodes, and a Node's Events outlive a test)."""


def events(kube: Kube, name: str, reason: str, namespace: str = "default") -> list[Obj]:
    """This test's Events about object `name` with `reason`.

    Other components write Events to `default` too, and core/v1 lets an Event's
    involvedObject carry no name (a CI run met one, written before this module's
    first test, and every lookup here raised KeyError); those are not this test's."""
    got, _ = kube.list(RESOURCES["Event"], namespace=namespace)
    return [
        e
        for e in got
        if e["involvedObject"].get("name") == name
        and e.get("reason") == reason
        and e["metadata"].get("uid") not in _EARLIER
    ]


def _nameless_event(kube: Kube) -> None:
    """An Event in `default` whose involvedObject has no name, as another component may
    leave there: every test that counts Events meets one."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "it-nameless.", "namespace": "default"},
            "involvedObject": {"kind": "Node"},
            "type": "Normal",
            "reason": "ItNameless",
            "message": "an Event about no named object",
            "source": {"component": "it"},
        },
        field_manager="it",
    )


def clean_nodes(kube: Kube) -> None:
    """Strip what the alert actions may have left on the session's nodes."""
    nodes, _ = kube.list(RESOURCES["Node"])
    for n in nodes:
        ann = n["metadata"].get("annotations") or {}
        state = json.loads(ann.get(STATE_ANNOTATION) or "{}")
        spec = n.get("spec") or {}
        taints = [t for t in spec.get("taints") or () if t.get("key") != TAINT_KEY]
        if not (set(ann) & {STATE_ANNOTATION, QUARANTINE_ANNOTATION, REASON_ANNOTATION}) and (
            taints == (spec.get("taints") or [])
        ):
            continue
        patch: Obj = {
            "metadata": {
                "annotations": {STATE_ANNOTATION: None, QUARANTINE_ANNOTATION: None,
                                REASON_ANNOTATION: None}
            },
            "spec": {"taints": taints or None},
        }  # fmt: skip
        if state.get("cordoned"):
            patch["spec"]["unschedulable"] = None
        kube.merge_patch(RESOURCES["Node"], n["metadata"]["name"], patch, field_manager="it")


@pytest.fixture
def cleanup(gang_env: GangEnv) -> Iterator[None]:
    clean_nodes(gang_env.kube)
    _nameless_event(gang_env.kube)
    _EARLIER.clear()
    _EARLIER.update(
        e["metadata"]["uid"] for e in gang_env.kube.list(RESOURCES["Event"], namespace="default")[0]
    )
    yield
    clean_nodes(gang_env.kube)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def am_alert(
    name: str, node: str, gpu: int, *, ends: float | None = None, starts: str | None = None
) -> Obj:
    out: Obj = {"labels": {"alertname": name, "Hostname": node, "gpu": str(gpu)}}
    if ends is not None:
        out["endsAt"] = _iso(ends)
    if starts is not None:
        out["startsAt"] = starts  # as Prometheus sends it: the alert's activeAt, every time
    return out


def test_a_storm_on_every_node_trips_the_breaker_and_is_undone_after_the_cool_down(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    env = gang_env
    env.claim(1)
    nodes = [n["metadata"]["name"] for n in env.kube.list(RESOURCES["Node"])[0]]
    limit = max(1, min(len(nodes) * 10 // 100, 5))
    env.set_policy(alert_policy(env, [{"alert": XID}], maxPercent=10, maxNodes=5))
    metrics_port = _free_ports(1)[0]
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log", metrics_port=metrics_port)
    # the chart's alert-actions dashboard, read from a real Prometheus scraping gangops run
    prom = start_prometheus(
        tmp_path / "prometheus",
        PrometheusConfig(static_targets=({"targets": [f"127.0.0.1:{metrics_port}"]},)),
    )
    try:
        alerting.am.post_alerts([am_alert(XID, n, 3) for n in nodes])

        def circuit() -> list[str] | None:
            held = [n for n in nodes if QUARANTINE_ANNOTATION in node_annotations(env.kube, n)]
            opened = sum(len(events(env.kube, n, "CircuitOpen")) for n in nodes)
            return held if held and opened == len(nodes) - limit else None

        held = wait_for("the breaker to open", circuit, timeout=60)
        assert len(held) == limit, held
        alerting.am.post_alerts([am_alert(XID, n, 3, ends=time.time()) for n in nodes])
        wait_for(
            "the quarantine to be undone after the cool-down",
            lambda: all(QUARANTINE_ANNOTATION not in node_annotations(env.kube, n) for n in held),
            timeout=60,
        )
        wait_for(  # the Event follows the Node's write
            "a GPUReturned Event on each",
            lambda: [len(events(env.kube, n, "GPUReturned")) for n in held] == [1] * limit,
            timeout=10,
        )
        dashboard = [q for p in DASHBOARDS if fed_by(p) == "alerts" for q in queries(load(p))]
        assert dashboard
        for title, expr in dashboard:
            wait_for(f"dashboard panel {title!r}: {expr}", lambda e=expr: prom.query(e), timeout=30)
    finally:
        prom.stop()
        stop(proc)


def test_shadow_mode_records_what_it_would_do_and_does_nothing(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    env = gang_env
    (node,) = env.claim(1)
    env.set_policy(alert_policy(env, [{"alert": XID, "action": "cordon-node", "mode": "shadow"}]))
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log")
    try:
        alerting.am.post_alerts([am_alert(XID, node, 2)])
        shadow = wait_for(
            "a ShadowAction Event", lambda: events(env.kube, node, "ShadowAction"), timeout=30
        )
        assert "would taint" in shadow[0]["message"] and "shadow mode" in shadow[0]["message"]
        obj = env.kube.get(RESOURCES["Node"], node) or {}
        assert not (obj.get("spec") or {}).get("unschedulable")
        assert TAINT_KEY not in [t["key"] for t in (obj.get("spec") or {}).get("taints") or ()]
        assert QUARANTINE_ANNOTATION not in node_annotations(env.kube, node)
    finally:
        alerting.am.post_alerts([am_alert(XID, node, 2, ends=time.time())])
        stop(proc)


def test_ten_thousand_deliveries_leave_one_effect_each(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    env = gang_env
    (node,) = env.claim(1)
    env.set_policy(alert_policy(env, [{"alert": LEAK}]))
    metrics_port = _free_ports(1)[0]
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log", metrics_port=metrics_port)
    starts = _iso(time.time())

    def alert(gpu: int, status: str = "firing") -> Obj:
        return {
            "status": status,
            "labels": {"alertname": LEAK, "Hostname": node, "gpu": str(gpu)},
            "annotations": {},
            "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "",
            "fingerprint": f"replay-{gpu}",
        }

    def body(*alerts: Obj) -> bytes:
        return json.dumps({"version": "4", "status": "firing", "alerts": list(alerts)}).encode()

    firing = [body(alert(g)) for g in (5, 6)] + [body(alert(5), alert(6))]
    # GPU 7's resolved overtakes its firing: neither acts
    late = [body(alert(7, "resolved")), body(alert(7))]
    try:
        t0 = time.monotonic()
        statuses: list[int] = []

        def send(chunk: list[bytes]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", alerting.port, timeout=10)
            statuses.extend(_post(alerting.port, b, conn) for b in chunk)
            conn.close()

        # GPU 7's two in that order, before the flood: sent from the pool, the
        # firing could land first (then it acts, and is undone when the resolved
        # comes: a fourth AlertAction Event, as a CI run saw)
        send(late)
        deliveries = [firing[i % 3] for i in range(10_000 - len(late))]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, [deliveries[i::4] for i in range(4)]))
        sent_s = time.monotonic() - t0
        assert statuses.count(200) == len(late) + len(deliveries), set(statuses)
        # and Alertmanager's own API, whose notification is one delivery of GPU 4
        for _ in range(50):
            alerting.am.post_alerts([am_alert(LEAK, node, 4, starts=starts)])
        wait_for(
            "the quarantine",
            lambda: node_annotations(env.kube, node).get(QUARANTINE_ANNOTATION) == "4,5,6",
            timeout=60,
        )
        # Alertmanager restarts without its storage (no notification log): Prometheus
        # sends the firing alert again with the same startsAt, and it notifies again
        time.sleep(2)  # the first Alertmanager's notification is in
        accepted = _accepted(metrics_port)
        alerting.am.stop()
        alerting.am = start_alertmanager(
            alerting.work / f"alertmanager-{secrets.token_hex(2)}", alerting.config
        )
        for _ in range(5):
            alerting.am.post_alerts([am_alert(LEAK, node, 4, starts=starts)])
        wait_for(
            "the new Alertmanager's notification",
            lambda: _accepted(metrics_port) > accepted,
            timeout=30,
        )
        time.sleep(3)  # anything still queued lands
        assert node_annotations(env.kube, node).get(QUARANTINE_ANNOTATION) == "4,5,6"
        assert len(events(env.kube, node, "AlertAction")) == 3
        print(f"10,000 deliveries sent in {sent_s:.1f}s")
    finally:
        # not for later tests
        alerting.am.post_alerts([am_alert(LEAK, node, 4, ends=time.time(), starts=starts)])
        stop(proc)


def test_killed_at_random_moments_the_actions_converge_to_one_effect_each(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    """Crash trials: `gangops run` SIGKILLed at random moments while deliveries (firing,
    then resolved) keep arriving, as Alertmanager repeats them. The Node ends with one
    quarantine, one cordon and one taint while the alerts fire, and none of them once
    they resolved and the cool-down passed; no Event is recorded twice."""
    env = gang_env
    (node,) = env.claim(1)
    env.set_policy(alert_policy(env, [{"alert": LEAK}, {"alert": XID, "action": "cordon-node"}]))
    starts = _iso(time.time())
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def body(status: str) -> list[bytes]:
        alerts = [
            {"status": status, "labels": {"alertname": LEAK, "Hostname": node, "gpu": str(g)},
             "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z", "fingerprint": f"crash-{g}"}
            for g in (1, 2)
        ] + [
            {"status": status, "labels": {"alertname": XID, "Hostname": node},
             "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "crash-x"}
        ]  # fmt: skip
        return [json.dumps({"version": "4", "alerts": [a]}).encode() for a in alerts]

    def trials(status: str, count: int) -> None:
        for trial in range(count):
            log = tmp_path / f"run-{status}-{trial}.log"
            proc = controller(env, dev_cluster, alerting, log)
            until = time.monotonic() + rng.uniform(0.0, 1.5)
            while time.monotonic() < until:
                _post(alerting.port, rng.choice(body(status)))
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def taints() -> list[str]:
        obj = env.kube.get(RESOURCES["Node"], node) or {}
        return [t["key"] for t in (obj.get("spec") or {}).get("taints") or ()]

    def unschedulable() -> bool:
        obj = env.kube.get(RESOURCES["Node"], node) or {}
        return bool((obj.get("spec") or {}).get("unschedulable"))

    trials("firing", 6)
    final = controller(env, dev_cluster, alerting, tmp_path / "run-final.log")
    try:
        for b in body("firing"):  # Alertmanager's next repeat
            assert _post(alerting.port, b) == 200

        def acted() -> bool:
            q = node_annotations(env.kube, node).get(QUARANTINE_ANNOTATION)
            return q == "1,2" and unschedulable() and taints().count(TAINT_KEY) == 1

        wait_for(f"one quarantine, cordon and taint (seed {seed})", acted, timeout=30)
    finally:
        stop(final)
    trials("resolved", 4)
    final = controller(env, dev_cluster, alerting, tmp_path / "run-final2.log")
    try:
        for b in body("resolved"):
            assert _post(alerting.port, b) == 200

        def undone() -> bool:
            ann = node_annotations(env.kube, node)
            return (
                QUARANTINE_ANNOTATION not in ann
                and not unschedulable()
                and TAINT_KEY not in taints()
            )

        wait_for(f"everything undone after the cool-down (seed {seed})", undone, timeout=30)
        for reason in ("AlertAction", "NodeReturned"):
            counted = len(events(env.kube, node, reason))
            want = 3 if reason == "AlertAction" else 1
            assert counted <= want, f"{counted} {reason} Events (seed {seed})"
        # the two GPUs' alerts resolve at different moments, so their cool-downs may
        # end in different ticks: one GPUReturned each then, but never a GPU twice
        returned = [
            int(g)
            for e in events(env.kube, node, "GPUReturned")
            for g in re.match(r"GPU ([\d,]+) of node", e["message"])[1].split(",")  # type: ignore[index]
        ]
        assert sorted(returned) == sorted(set(returned)), f"{returned} (seed {seed})"
        assert set(returned) <= {1, 2}, f"{returned} (seed {seed})"
    finally:
        stop(final)


@dataclass
class Leak:
    at_s: float = 2.0
    mib_per_second: float = 5000.0
    seconds: float = 75.0


@contextmanager
def live_alerts(
    dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, scenario: str
) -> Iterator[float]:
    """The node agents replaying GPUs with `scenario` (YAML events), and a real
    Prometheus scraping them with the chart's rules, posting to `alerting`'s
    Alertmanager. The scenario's clock starts once Prometheus has scraped the agents
    (an XID before the first scrape would show at 1 there: no increase); yields that
    moment (time.monotonic), then stops both."""
    before = list(dev_cluster.components)
    prom = None
    try:
        path, start = tmp_path / "scenario.yaml", tmp_path / "scenario.start"
        path.write_text(scenario)
        start_agents(
            dev_cluster,
            TelemetryOptions(
                replay_dir=steady_recording(tmp_path / "rec"),
                scenario=path,
                scenario_start_file=start,
                speed=1,
            ),
        )
        prom = start_prometheus(
            tmp_path / "prometheus",
            PrometheusConfig(
                file_sd_files=(dev_cluster.prometheus_targets_file,),
                alertmanagers=(alerting.am.address,),
            ),
        )
        scraped = prom.query
        wait_for("Prometheus to scrape the agents", lambda: scraped("gangops_nvml_up"), timeout=60)
        start.touch()
        yield time.monotonic()
    finally:
        if prom is not None:
            prom.stop()
        for c in dev_cluster.components:
            if c not in before:
                c.stop(5.0)
        dev_cluster.components[:] = before


def quarantined(env: GangEnv, node: str, gpu: int) -> bool:
    return gpu in parse_indices(node_annotations(env.kube, node).get(QUARANTINE_ANNOTATION))


def acted_on(env: GangEnv, job: str, node: str, gpu: int, alert: str, spare: str) -> float:
    """Wait until `alert` has quarantined `gpu` of `node` and the 8-worker `job` runs
    again on `spare`, restarted by the alert action once (a relocation: not counted
    against its backoffLimit); when the quarantine came (time.monotonic)."""
    wait_for(f"GPU {gpu} of {node} quarantined", lambda: quarantined(env, node, gpu), timeout=150)
    t_action = time.monotonic()
    assert alert in env.get(job)["metadata"]["annotations"][CHECKPOINT_ANNOTATION]
    assert f"GPU {gpu}" in node_annotations(env.kube, node)[REASON_ANNOTATION]

    def relocated() -> bool:
        pods = env.pods(job)
        return (
            env.status(job).get("phase") == "Running"
            and len(pods) == 8
            and {p["spec"].get("nodeName") for p in pods} == {spare}
        )

    wait_for("the gang to run again on the spare node", relocated, timeout=90)
    st = env.status(job)
    assert st.get("relocations") == 1 and not st.get("restarts"), st  # backoffLimit 0
    assert RESTART_ANNOTATION in env.get(job)["metadata"]["annotations"]
    assert len(events(env.kube, job, "CheckpointRequested", env.namespace)) == 1
    assert len(events(env.kube, job, "RestartRequested", env.namespace)) == 1
    return t_action


def gang_on(env: GangEnv, job: str, node: str, spare: str) -> None:
    """The 8-worker `job` (backoffLimit 0) running on `node`, placed there while
    `spare` was full; `spare` is then freed for its restart."""
    blocker = env.occupy(spare, 8)
    env.create(env.job(job, gang=8, backoff_limit=0))
    env.wait_phase(job, "Running", timeout=60)
    assert {p["spec"]["nodeName"] for p in env.pods(job)} == {node}
    env.kube.delete(RESOURCES["Pod"], blocker["metadata"]["name"], namespace=env.namespace)


def test_a_leak_checkpoints_and_restarts_the_job_elsewhere_and_the_gpu_returns(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    env = gang_env
    leaky, spare = env.claim(2)
    env.set_policy(alert_policy(env, [{"alert": LEAK, "cooldownSeconds": 45}]))
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log")
    try:
        gang_on(env, "leaky", leaky, spare)
        leak = Leak()
        scenario = (
            "events:\n"
            f"  - {{at: {leak.at_s}, node: {leaky}, gpu: 0, kind: memory-ramp,"
            f" mib-per-second: {leak.mib_per_second}, seconds: {leak.seconds}}}\n"
        )
        with live_alerts(dev_cluster, alerting, tmp_path, scenario) as t_start:
            t_action = acted_on(env, "leaky", leaky, 0, LEAK, spare)
            text = explain_job(
                env.kube, f"{env.namespace}/leaky", system_namespace=env.system_namespace,
                node_selector=env.node_selector,
            )  # fmt: skip
            assert f"Held out of service by alert actions: {leaky}: GPU 0: {LEAK}" in text, text
            wait_for(
                "the GPU back after the leak stops and the cool-down passes",
                lambda: (
                    not quarantined(env, leaky, 0)
                    and QUARANTINE_ANNOTATION not in node_annotations(env.kube, leaky)
                ),
                timeout=leak.seconds + 120,
            )
            wait_for(
                "one GPUReturned Event",
                lambda: len(events(env.kube, leaky, "GPUReturned")) == 1,
                timeout=10,
            )
            print(
                f"leak to action {t_action - t_start - leak.at_s:.1f}s"
                f" (scrape and evaluation 1s, for 30s, group_wait 1s)"
            )
    finally:
        stop(proc)


def test_a_fatal_xid_restarts_the_job_it_hit_elsewhere_through_prometheus(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    """XID 48 (a double-bit ECC error: the GPU needs a reset) on GPU 3 under a running
    gang. The agent counts it on gangops_gpu_xid_errors_total and records the pod it
    hit; the real Prometheus fires the chart's GangopsGPUFatalXID naming that pod; the
    GPU is quarantined and the job checkpointed and restarted on the spare node, not
    counted against its backoffLimit of 0."""
    env = gang_env
    hit, spare = env.claim(2)
    env.set_policy(alert_policy(env, [{"alert": XID}]))
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log")
    try:
        gang_on(env, "hit", hit, spare)
        scenario = f"events:\n  - {{at: 5, node: {hit}, gpu: 3, kind: xid, xid: 48}}\n"
        with live_alerts(dev_cluster, alerting, tmp_path, scenario) as t_start:
            t_action = acted_on(env, "hit", hit, 3, XID, spare)
            print(f"XID to action {t_action - t_start - 5:.1f}s (scrape and evaluation 1s)")
    finally:
        stop(proc)
        forget_gpu_health(env.kube, hit)


def forget_gpu_health(kube: Kube, node: str) -> None:
    """Take the stopped agents' GPU health off `node` (the annotation the scheduler
    counts, and the condition), which the next tests share: XID 48 left GPU 3 out."""
    kube.merge_patch(
        RESOURCES["Node"], node, {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: None}}},
        field_manager="it",
    )  # fmt: skip
    obj = kube.get(RESOURCES["Node"], node) or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    kept = [c for c in conditions if c.get("type") != CONDITION]
    if kept != conditions:  # a merge patch replaces the list
        patch = {"status": {"conditions": kept}}
        kube.merge_patch(RESOURCES["Node"], node, patch, field_manager="it", subresource="status")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_receiver_refuses_a_caller_without_the_token(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path
) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(alert_policy(env, []))
    proc = controller(env, dev_cluster, alerting, tmp_path / "run.log")
    try:
        for auth in ("Bearer wrong", _basic("am", TOKEN), ""):
            c = http.client.HTTPConnection("127.0.0.1", alerting.port, timeout=10)
            c.request("POST", "/alertmanager", body=b"{}", headers={"Authorization": auth})
            with c.getresponse() as resp:
                resp.read()
                assert resp.status == 401, auth
            c.close()
        big = b"x" * (2 * 1024 * 1024)
        c = http.client.HTTPConnection("127.0.0.1", alerting.port, timeout=10)
        try:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            c.request("POST", "/alertmanager", body=big, headers=headers)
            with c.getresponse() as resp:
                assert resp.status == 413
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: the server closed on us mid-send
        finally:
            c.close()
    finally:
        stop(proc)


def _silence(am: Alertmanager, labels: dict[str, str]) -> str:
    """A silence of the alert with `labels`, for an hour (POST /api/v2/silences); its id."""
    now = time.time()
    body = {
        "matchers": [
            {"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in labels.items()
        ],
        "startsAt": _iso(now - 1),
        "endsAt": _iso(now + 3600),
        "createdBy": "gangops-tests",
        "comment": "maintenance",
    }
    req = urllib.request.Request(
        f"{am.url}/api/v2/silences",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        silence_id: str = json.load(resp)["silenceID"]
    return silence_id


def _unsilence(am: Alertmanager, silence_id: str) -> None:
    req = urllib.request.Request(f"{am.url}/api/v2/silence/{silence_id}", method="DELETE")
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def test_a_silenced_alert_keeps_its_action_past_the_resolve_timeout_until_it_resolves(
    gang_env: GangEnv, dev_cluster: DevCluster, alerting: Alerting, tmp_path: Path, cleanup: None
) -> None:
    """Found by a review: Alertmanager sends nothing for a silenced alert, so with a
    resolve timeout it lapsed and the faulty GPU went back into service. With
    --alertmanager-url gangops asks Alertmanager first, which still holds it."""
    env = gang_env
    (node,) = env.claim(1)
    timeout_s = 4  # the schema's least is 600 s; the compiled ConfigMap takes any
    doc = alert_policy(env, [{"alert": LEAK, "cooldownSeconds": 2, "restartJob": False}])
    doc["alertActions"]["resolveTimeoutSeconds"] = timeout_s
    env.set_policy(doc)
    metrics_port = _free_ports(1)[0]
    proc = controller(
        env, dev_cluster, alerting, tmp_path / "run.log", metrics_port=metrics_port,
        extra=["--alertmanager-url", alerting.am.url],
    )  # fmt: skip
    labels = {"alertname": LEAK, "Hostname": node, "gpu": "6"}
    kept = f'gangops_alert_actions_total{{alert="{LEAK}",outcome="kept"}}'
    starts = _iso(time.time())  # as Prometheus sends it (Alertmanager's own has no µs)
    try:
        alerting.am.post_alerts([am_alert(LEAK, node, 6, ends=time.time() + 600, starts=starts)])
        wait_for("the quarantine", lambda: quarantined(env, node, 6), timeout=30)
        silence_id = _silence(alerting.am, labels)

        def silenced() -> bool:
            return any(
                a["labels"] == labels and a["status"]["silencedBy"] == [silence_id]
                for a in alerting.am.alerts()
            )

        wait_for("Alertmanager to hold the alert silenced", silenced, timeout=10)
        # nothing sent for two timeouts and more (the repeat interval is 30 s)
        wait_for("two checks", lambda: _counter(metrics_port, kept) >= 2, timeout=30)
        assert quarantined(env, node, 6) and not events(env.kube, node, "AlertLapsed")
        assert _counter(metrics_port, 'gangops_alertmanager_queries_total{result="ok"}') >= 2
        assert not _counter(metrics_port, 'gangops_alertmanager_queries_total{result="failed"}')
        # the fault is gone while silenced (Alertmanager sends no resolve for it), and
        # the silence deleted: Alertmanager no longer holds it
        alerting.am.post_alerts([am_alert(LEAK, node, 6, ends=time.time(), starts=starts)])
        _unsilence(alerting.am, silence_id)
        wait_for(
            "the GPU back after the timeout and the cool-down",
            lambda: QUARANTINE_ANNOTATION not in node_annotations(env.kube, node),
            timeout=30,
        )
        assert events(env.kube, node, "AlertLapsed") or events(env.kube, node, "AlertResolved")
    finally:
        alerting.am.post_alerts([am_alert(LEAK, node, 6, ends=time.time(), starts=starts)])
        stop(proc)
