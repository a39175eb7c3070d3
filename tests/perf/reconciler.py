"""Benchmarks of the policy reconciler (issue 4), against the local control plane.

A policy repository of 200 projects (half with two namespaces: 605 objects
with the tiers and the scheduling-policy ConfigMap) served over file://.

- first sync: `gangops run` (a real process, leader election off) is already
  running; from creating the PolicySource to its Ready=True with the commit.
- commit to applied through the webhook: commit a change to one project, POST
  a GitHub-signed push to the controller's webhook, wait for Ready=True with
  that commit; the median of 7.
- no-op reconcile: an in-process Reconciler on the same cluster, polling the
  unchanged branch (`ls-remote`, the compiled revision from its cache, 605
  objects compared with the informers' cache); the median of 5 after one
  warm-up, and the number of API writes it attempted (every write passes the
  client's fence, which counts them) and resourceVersions that moved.

Thresholds are the issue's targets: 10 s, 3 s, 1 s and zero writes. Measured
2026-12-02 on the 2-core development machine, where the API server, etcd and
the controller share the two cores: first sync 7.3 s (the API server's CPU is
the limit: ~1,000 server-side applies and dry-runs), commit to applied 0.8 s
median (0.35 s of it validating the 200 files), no-op 0.04-0.08 s with 0
writes. The first-sync margin is the thinnest; a 2x slower machine would miss it.

Run: `.venv/bin/python -m tests.perf reconciler` (once registered), or
`.venv/bin/python -m tests.perf.reconciler`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from controller.clusterspec import load_cluster
from controller.devcluster import DEFAULT_CLUSTER_FILE, Options, ensure_binaries, start
from controller.kube.client import RESOURCES, Kube, connect
from controller.kube.crds import generate_crds, install
from controller.policy.validate import schema_dir
from controller.reconciler.controller import Reconciler, ReconcilerSettings
from tests.perf.harness import Result, print_table

__all__ = ["run"]

PROJECTS = 200
FIRST_SYNC_LIMIT_S = 10.0
WEBHOOK_MEDIAN_LIMIT_S = 3.0
NOOP_LIMIT_S = 1.0
NOOP_WRITES_LIMIT = 0
SYSTEM = "gangops-system"
SECRET = b"bench-secret"
_ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _project(i: int, gpu: int = 8) -> str:
    namespaces = [f"team-{i:03d}"] + ([f"team-{i:03d}-dev"] if i % 2 == 0 else [])
    return (
        f"apiVersion: policy.ai.operator/v1\nkind: Project\nmetadata: {{name: team-{i:03d}}}\n"
        f"spec:\n  namespaces: [{', '.join(namespaces)}]\n"
        f'  quota:\n    guaranteed: {{gpu: 2}}\n    max: {{gpu: {gpu}, cpu: "64", memory: 256Gi}}\n'
    )


def _repo(path: Path) -> None:
    policies = path / "policies"
    (policies / "projects").mkdir(parents=True)
    (policies / "cluster.yaml").write_text(
        "apiVersion: policy.ai.operator/v1\nkind: ClusterPolicy\nmetadata: {name: default}\n"
        "spec: {capacity: {gpu: 100000}, reserve: {gpu: 0}}\n"
    )
    (policies / "tiers.yaml").write_text(
        "---\n".join(
            f"apiVersion: policy.ai.operator/v1\nkind: PriorityTier\nmetadata: {{name: {n}}}\n"
            f"spec: {{value: {v}}}\n"
            for n, v in (("critical", 1000000), ("high", 100000), ("normal", 10000), ("batch", 1))
        )
    )
    for i in range(PROJECTS):
        (policies / "projects" / f"team-{i:03d}.yaml").write_text(_project(i))
    _git(path, "init", "-q", "-b", "main")
    _git(path, "-c", "user.email=b@x", "-c", "user.name=bench", "add", "-A")
    _git(path, "-c", "user.email=b@x", "-c", "user.name=bench", "commit", "-qm", "seed")


def _wait(what: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _applied(kube: Kube, name: str, sha: str) -> bool:
    obj = kube.get(RESOURCES["PolicySource"], name) or {}
    st = obj.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
    return ready.get("status") == "True" and str(st.get("lastAppliedRevision")).endswith(sha)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _versions(kube: Kube) -> dict[str, str]:
    out = {}
    for kind in ("PriorityClass", "Namespace", "ResourceQuota", "ConfigMap", "PolicySource"):
        items, _ = kube.list(RESOURCES[kind])
        for o in items:
            meta = o["metadata"]
            out[f"{kind}/{meta.get('namespace', '')}/{meta['name']}"] = meta["resourceVersion"]
    return out


def run() -> list[Result]:
    """Start a cluster, run the three measurements, stop everything."""
    with tempfile.TemporaryDirectory(prefix="gangops-bench-reconciler-") as tmp:
        work = Path(tmp)
        cluster = start(
            Options(
                cluster=load_cluster(DEFAULT_CLUSTER_FILE),
                data_dir=work / "cluster",
                bin_dir=ensure_binaries().bin_dir,
            )
        )
        try:
            return _measure(work, cluster.kubeconfig)
        finally:
            cluster.stop()


def _measure(work: Path, kubeconfig: Path) -> list[Result]:
    kube = connect(str(kubeconfig))
    install(kube, generate_crds(schema_dir()))
    kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}},
        field_manager="bench",
    )
    repo = work / "repo"
    repo.mkdir()
    _repo(repo)
    (work / "secret").write_bytes(SECRET)
    metrics_port, webhook_port = _free_port(), _free_port()
    with (work / "controller.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "run",
                "--no-leader-elect",
                "--kubeconfig",
                str(kubeconfig),
                "--system-namespace",
                SYSTEM,
                "--metrics-addr",
                f"127.0.0.1:{metrics_port}",
                "--webhook-addr",
                f"127.0.0.1:{webhook_port}",
                "--webhook-secret-file",
                str(work / "secret"),
                "--cache-dir",
                str(work / "cache"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=_ROOT,
        )
    try:

        def ready() -> bool:
            try:
                url = f"http://127.0.0.1:{metrics_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as r:
                    return int(r.status) == 200
            except OSError:
                return False

        _wait("gangops run to be ready", ready)
        sha = _git(repo, "rev-parse", "HEAD")
        t0 = time.monotonic()
        kube.create(
            {
                "apiVersion": "policy.ai.operator/v1",
                "kind": "PolicySource",
                "metadata": {"name": "bench"},
                "spec": {"url": repo.as_uri(), "path": "policies", "interval": "1h"},
            },
            field_manager="bench",
        )
        _wait("first sync", lambda: _applied(kube, "bench", sha), timeout=120)
        first_sync = time.monotonic() - t0
        objects = len(
            (kube.get(RESOURCES["PolicySource"], "bench") or {})["status"]["inventory"]["entries"]
        )
        print(f"first sync: {objects} objects in {first_sync:.2f} s", flush=True)

        latencies = []
        for k in range(7):
            (repo / "policies" / "projects" / "team-007.yaml").write_text(_project(7, gpu=10 + k))
            _git(repo, "-c", "user.email=b@x", "-c", "user.name=bench", "commit", "-qam", f"c{k}")
            sha = _git(repo, "rev-parse", "HEAD")
            # Signed, and naming the source's repository, as the webhook requires
            # (2470e5b); the pushed commit in it, as a forge's (a body accepted once is a
            # replay for ten minutes).
            push = {
                "ref": "refs/heads/main",
                "after": sha,
                "repository": {"clone_url": repo.as_uri()},
            }
            body = json.dumps(push).encode()
            signature = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
            t0 = time.monotonic()
            req = urllib.request.Request(
                f"http://127.0.0.1:{webhook_port}/hook/bench",
                data=body,
                headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": signature},
            )
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 202
            _wait("the pushed commit", lambda s=sha: _applied(kube, "bench", s))  # type: ignore[misc]
            latencies.append(time.monotonic() - t0)
        print("commit to applied: " + " ".join(f"{x:.2f}" for x in latencies) + " s", flush=True)
    finally:
        proc.terminate()
        proc.wait(20)

    noop, writes, moved = _noop(kube, work)
    return [
        Result("reconciler.first_sync_200_projects", first_sync, "s", FIRST_SYNC_LIMIT_S),
        Result(
            "reconciler.webhook_commit_to_applied_p50",
            statistics.median(latencies),
            "s",
            WEBHOOK_MEDIAN_LIMIT_S,
        ),
        Result("reconciler.noop_reconcile_p50", noop, "s", NOOP_LIMIT_S),
        Result("reconciler.noop_reconcile_writes", writes + moved, "n", NOOP_WRITES_LIMIT),
    ]


def _noop(kube: Kube, work: Path) -> tuple[float, int, int]:
    attempts = [0]

    def count() -> bool:
        attempts[0] += 1
        return True

    rec = Reconciler(
        kube.fenced(count),
        settings=ReconcilerSettings(cache_dir=work / "cache", system_namespace=SYSTEM),
    )
    rec.start()
    try:
        _wait("informers", rec.ready)
        time.sleep(1.0)  # let the startup reconcile (the worker's own) finish
        rec.reconcile("bench", fetch=True)  # warm-up: compiles the revision once
        before, attempts[0] = _versions(kube), 0
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            rec.reconcile("bench", fetch=True)
            times.append(time.monotonic() - t0)
        after = _versions(kube)
    finally:
        rec.stop()
    moved = sum(1 for k, v in after.items() if before.get(k) != v)
    print(
        f"no-op reconcile: {' '.join(f'{x:.3f}' for x in times)} s; "
        f"write attempts {attempts[0]}, resourceVersions moved {moved}",
        flush=True,
    )
    return statistics.median(times), attempts[0], moved


def main() -> int:
    results = run()
    print_table(results)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
