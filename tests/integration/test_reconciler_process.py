"""`gangops run` as real processes: leader election and failover, metrics and health,
and the Git push webhook.

Each controller is a `python -m controller.cli run` process with its own ports,
logging at debug level so every API write it makes is in its log ("api write").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from controller.devcluster import DevCluster
from controller.kube.client import RESOURCES, Kube

from .kube import free_port, wait_for
from .reconciler_helpers import TEST_LABEL, PolicyRepo, ReconcileEnv, managed, project

pytest_plugins = ["tests.integration.reconciler_fixtures"]


@dataclass
class Controller:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    webhook_port: int

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5
            ) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.webhook_port}{path}", data=body, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def controllers(
    dev_cluster: DevCluster, reconcile_env: ReconcileEnv, tmp_path: Path
) -> Iterator[list[Controller]]:
    """Start controllers with `controllers.append(...)`, via the returned starter."""
    procs: list[Controller] = []
    yield procs
    for c in procs:
        if c.proc.poll() is None:
            c.proc.send_signal(signal.SIGCONT)
            c.proc.terminate()
            try:
                c.proc.wait(10)
            except subprocess.TimeoutExpired:
                c.proc.kill()


def _start(
    dev_cluster: DevCluster,
    env: ReconcileEnv,
    tmp_path: Path,
    identity: str,
    *extra: str,
) -> Controller:
    log = tmp_path / f"{identity}.log"
    metrics_port, webhook_port = free_port(), free_port()
    with log.open("wb") as out:
        proc = _popen(
            out,
            [
                sys.executable,
                "-m",
                "controller.cli",
                "run",
                "-v",
                "--kubeconfig",
                str(dev_cluster.kubeconfig),
                "--system-namespace",
                env.system_namespace,
                "--metrics-addr",
                f"127.0.0.1:{metrics_port}",
                "--webhook-addr",
                f"127.0.0.1:{webhook_port}",
                "--cache-dir",
                str(tmp_path / f"cache-{identity}"),
                "--source-selector",
                f"{TEST_LABEL}={env.prefix}",
                "--identity",
                identity,
                "--lease-name",
                f"{env.prefix}-lease",
                "--lease-duration",
                "3",
                "--renew-deadline",
                "2",
                "--retry-period",
                "0.3",
                *extra,
            ],
        )
    c = Controller(identity, proc, log, metrics_port, webhook_port)
    wait_for(f"{identity} to serve /healthz", lambda: _alive_and(c, "/healthz"), timeout=20)
    return c


def _popen(out: IO[bytes], argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _alive_and(c: Controller, path: str) -> bool:
    assert c.proc.poll() is None, f"{c.identity} exited:\n{c.text()[-3000:]}"
    try:
        return c.get(path)[0] == 200
    except OSError:
        return False


def _holder(kube: Kube, env: ReconcileEnv) -> str:
    lease = kube.get(RESOURCES["Lease"], f"{env.prefix}-lease", env.system_namespace) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _request(env: ReconcileEnv, src: str, value: str) -> None:
    env.patch_source(
        src, {"metadata": {"annotations": {"gangops.ai/reconcile-requested-at": value}}}
    )


def test_leader_failover_and_a_paused_leader_never_writes_after_losing_the_lease(
    dev_cluster: DevCluster,
    reconcile_env: ReconcileEnv,
    policy_repo: PolicyRepo,
    controllers: list[Controller],
    tmp_path: Path,
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    a = _start(dev_cluster, env, tmp_path, "ctl-a")
    controllers.append(a)
    wait_for("ctl-a to lead", lambda: _holder(env.kube, env) == "ctl-a")
    b = _start(dev_cluster, env, tmp_path, "ctl-b")
    controllers.append(b)
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    # Metrics and health on both replicas; only the leader reconciled.
    code, text = a.get("/metrics")
    assert code == 200 and "gangops_leader 1.0" in text
    assert f'gangops_reconcile_total{{result="applied",source="{src}"}} 1.0' in text
    assert "gangops_reconcile_duration_seconds_bucket" in text
    assert f'gangops_applied_revision_info{{revision="main@sha1:{repo.head()}"' in text
    assert "gangops_reconcile_last_success_timestamp_seconds" in text
    assert "gangops_leader 0.0" in b.get("/metrics")[1]
    assert a.get("/readyz")[0] == 200 and b.get("/readyz")[0] == 200
    assert "api write" not in b.text()

    # Kill the leader: the other replica takes over and applies the next commit.
    a.proc.kill()
    a.proc.wait(5)
    wait_for("ctl-b to take the lease", lambda: _holder(env.kube, env) == "ctl-b", timeout=15)
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=10))
    sha = repo.commit("after failover")
    _request(env, src, "after-kill")
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=20)

    # Freeze the new leader until its lease lapses; a third replica takes over.
    c = _start(dev_cluster, env, tmp_path, "ctl-c")
    controllers.append(c)
    b.proc.send_signal(signal.SIGSTOP)
    wait_for("ctl-c to take the lease", lambda: _holder(env.kube, env) == "ctl-c", timeout=15)
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=12))
    sha = repo.commit("while b is frozen")
    _request(env, src, "while-frozen")
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=20)
    # Drift while b is frozen: b's watch will deliver it once b runs again.
    env.kube.merge_patch(
        RESOURCES["ResourceQuota"],
        "gangops-quota",
        {"spec": {"hard": {"requests.nvidia.com/gpu": "99"}}},
        field_manager="test",
        namespace=n("b"),
    )
    resumed_at = len(b.text())
    b.proc.send_signal(signal.SIGCONT)
    assert b.proc.wait(15) == 1, "a leader that lost its lease exits with status 1"
    after = b.text()[resumed_at:]
    assert "lost the leader lease" in after, after
    # The one write it may still send is the Lease renewal it was frozen in the
    # middle of (its GET before SIGSTOP, its PUT after SIGCONT): that PUT carries
    # the Lease's old resourceVersion, so the API server refuses it and ctl-c
    # keeps the Lease. Nothing else is written.
    lease_path = f"/leases/{env.prefix}-lease"
    writes = [line for line in after.splitlines() if "api write" in line]
    assert all(lease_path in line and "method=PUT" in line for line in writes), after
    assert _holder(env.kube, env) == "ctl-c"
    # The current leader corrected the drift; the old one never wrote again.
    wait_for(
        "ctl-c to revert the drift",
        lambda: (
            (managed(env.kube, "ResourceQuota", "gangops-quota", n("b")) or {})["spec"]["hard"][
                "requests.nvidia.com/gpu"
            ]
            == "12"
        ),
    )


def _github(secret: bytes, body: bytes) -> dict[str, str]:
    sig = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": "push",
        "X-Hub-Signature-256": sig,
        "Content-Type": "application/json",
    }


def test_push_webhook_applies_a_commit_and_refuses_bad_signatures(
    dev_cluster: DevCluster,
    reconcile_env: ReconcileEnv,
    policy_repo: PolicyRepo,
    controllers: list[Controller],
    tmp_path: Path,
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    secret = b"s3cret-for-tests"
    (tmp_path / "hook-secret").write_bytes(secret + b"\n")
    ctl = _start(
        dev_cluster,
        env,
        tmp_path,
        "ctl-hook",
        "--no-leader-elect",
        "--webhook-secret-file",
        str(tmp_path / "hook-secret"),
    )
    controllers.append(ctl)
    src = env.create_source("main", repo.url)
    applied = env.wait_condition(src, "Ready", revision_sha=repo.head())["status"][
        "lastAppliedRevision"
    ]
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=14))
    sha = repo.commit("pushed")
    # what a forge sends: the pushed commit in the body (a body accepted once is a replay)
    push = {"ref": "refs/heads/main", "after": sha, "repository": {"clone_url": repo.url}}
    body = json.dumps(push).encode()

    # Bad signatures: refused, nothing requested.
    assert ctl.post(f"/hook/{src}", body, _github(b"wrong", body))[0] == 401
    assert ctl.post(f"/hook/{src}", body, {"X-GitHub-Event": "push"})[0] == 401
    tampered = body.replace(b"main", b"evil")
    assert ctl.post(f"/hook/{src}", tampered, _github(secret, body))[0] == 401
    gitlab_bad = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "nope"}
    assert ctl.post(f"/hook/{src}", body, gitlab_bad)[0] == 401
    time.sleep(0.5)
    assert env.source(src)["status"]["lastAppliedRevision"] == applied
    assert "gangops.ai/reconcile-requested-at" not in (
        env.source(src)["metadata"].get("annotations") or {}
    )
    # Unknown source, non-push events.
    assert ctl.post("/hook/nope", body, _github(secret, body))[0] == 404
    ping = {**_github(secret, body), "X-GitHub-Event": "ping"}
    assert ctl.post(f"/hook/{src}", body, ping)[0] == 200

    # A good GitHub signature: the commit is applied.
    t0 = time.monotonic()
    code, text = ctl.post(f"/hook/{src}", body, _github(secret, body))
    assert code == 202, text
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=10)
    assert time.monotonic() - t0 < 5
    # A GitLab token works too.
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=16))
    sha = repo.commit("pushed again")
    gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret.decode()}
    body = json.dumps({**push, "after": sha}).encode()
    assert ctl.post(f"/hook/{src}", body, gitlab)[0] == 202
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=10)
    text = ctl.get("/metrics")[1]
    assert 'gangops_webhook_requests_total{result="accepted"} 2.0' in text
    assert 'gangops_webhook_requests_total{result="rejected"} 4.0' in text


def test_run_fails_fast_and_says_what_is_missing(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """On a cluster without gangops' system namespace (or without an API server at all),
    `run` exits at once with status 2 and says what to do, instead of waiting silently
    on a Lease it can never write."""
    base = [sys.executable, "-m", "controller.cli", "run", "--metrics-addr", "127.0.0.1:0"]
    base += ["--webhook-addr", "", "--cache-dir", str(tmp_path / "cache")]
    missing = f"gangops-missing-{os.getpid()}"
    out = subprocess.run(
        [*base, "--kubeconfig", str(dev_cluster.kubeconfig), "--system-namespace", missing],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert f'the system namespace "{missing}" does not exist: `gangops install-crds`' in out.stderr

    port = free_port()  # nothing listens there
    unreachable = tmp_path / "unreachable.kubeconfig"
    text = dev_cluster.kubeconfig.read_text(encoding="utf-8")
    server = next(line for line in text.splitlines() if "server:" in line).split("server:")[1]
    unreachable.write_text(
        text.replace(server.strip(), f"https://127.0.0.1:{port}"), encoding="utf-8"
    )
    out = subprocess.run(
        [*base, "--kubeconfig", str(unreachable)], capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 2, out.stderr
    assert f"the API server at https://127.0.0.1:{port} did not answer" in out.stderr


def test_ctrl_c_then_sigterm_stops_the_controller_promptly(
    dev_cluster: DevCluster,
    reconcile_env: ReconcileEnv,
    controllers: list[Controller],
    tmp_path: Path,
) -> None:
    """A shell's Ctrl-C and its clean-up's SIGTERM arrive together; the controller stops
    well within a termination grace period (30 s), every time, also with a reconcile
    in flight."""
    for attempt in range(3):
        c = _start(dev_cluster, reconcile_env, tmp_path, f"ctl-stop-{attempt}")
        controllers.append(c)
        wait_for(f"{c.identity} to lead", lambda: _holder(reconcile_env.kube, reconcile_env))
        c.proc.send_signal(signal.SIGINT)
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(25) in (0, 1), c.text()[-3000:]
        assert "signal received signal=" in c.text()
