"""Benchmarks of quota requests (issue 15), on the local control plane.

The same parts as the end-to-end test (tests/integration/test_quota_requests.py),
at their production settings: a policy repository served over file:// whose
projects opted in to proposals (`quotaRequests: {autoPropose: true}`), an
in-process Reconciler, GangController and QuotaController (interval 1 s, its
default), and the forge seam's fake (tests/unit/quota/fake_forge: Gitea does
not build here), which merges on the real remote. Per round, a project of its
own whose max (4 GPUs) a running job already uses:

- shortfall to PR opened: from creating a 4-GPU TrainingJob (blocked by the
  project's max) to the pull request opened by the scheduler's proposal
  (the proposal, the branch pushed, validation and plan of the policy set,
  the pull request);
- merge to job admitted: from the merge on the remote, through the push
  webhook (`handle_push`, as `gangops run` serves it), the reconciler's
  apply and the scheduler, to the job Running.

The worst of 3 rounds is judged. Thresholds are the issue's targets: 10 s and
5 s. Measured 2026-12-03 on the 2-core development machine shared with three
other sessions' work, two runs of 3 rounds: shortfall to PR 0.85-2.16 s, merge
to Running 0.47-1.61 s. The loop's 1 s interval is most of the first; the
margin is wide on purpose: the Git push, validation and plan grow with the
policy repository.

Run: `.venv/bin/python -m tests.perf quota`.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from controller.clusterspec import load_cluster
from controller.devcluster import DEFAULT_CLUSTER_FILE, Options, ensure_binaries, start
from controller.gang.controller import GangController, GangSettings
from controller.kube.client import RESOURCES, Kube, connect
from controller.kube.clock import SystemClock
from controller.kube.crds import generate_crds, install
from controller.policy.validate import schema_dir
from controller.quota.controller import QuotaController, QuotaSettings
from controller.reconciler.controller import Reconciler, ReconcilerSettings
from controller.reconciler.webhook import Deliveries, handle_push
from tests.perf.harness import Result, print_table
from tests.unit.quota.fake_forge import FakeForge

__all__ = ["run"]

SHORTFALL_TO_PR_LIMIT_S = 10.0
MERGE_TO_ADMITTED_LIMIT_S = 5.0
ROUNDS = 3
SYSTEM = "gangops-system"
SECRET = b"bench-secret"
T = TypeVar("T")

CLUSTER = """\
apiVersion: policy.ai.operator/v1
kind: ClusterPolicy
metadata: {name: default}
spec:
  capacity: {gpu: 1000}
  reserve: {gpu: 0}
  preemption: {enabled: false}
"""
TIER = """\
apiVersion: policy.ai.operator/v1
kind: PriorityTier
metadata: {name: bench}
spec: {value: 1000, preemptionPolicy: PreemptLowerPriority}
"""
PROJECT = """\
# Round {i}'s project.
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {{name: q{i}}}
spec:
  namespaces: [q{i}]
  quota:
    guaranteed: {{gpu: 4}}
    max: {{gpu: 4}}
  quotaRequests: {{autoPropose: true}}
"""


def _wait(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.02)
    raise TimeoutError(f"bench quota: no {what} within {timeout:g}s")


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _job(i: int, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": f"q{i}", "labels": {"ai.operator/user": "bench"}},
        "spec": {
            "gangSize": 4,
            "priority": "bench",
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ],
                }
            },
        },
    }


def run() -> list[Result]:
    """Start a cluster, run the rounds, stop everything."""
    with tempfile.TemporaryDirectory(prefix="gangops-bench-quota-") as tmp:
        work = Path(tmp)
        spec = load_cluster(DEFAULT_CLUSTER_FILE)
        cluster = start(
            Options(cluster=spec, data_dir=work / "cluster", bin_dir=ensure_binaries().bin_dir)
        )
        try:
            nodes = [n.name for n in spec.nodes() if not n.taints and n.gpus >= 8][:ROUNDS]
            return _measure(work, connect(str(cluster.kubeconfig)), nodes)
        finally:
            cluster.stop()


def _measure(work: Path, kube: Kube, nodes: list[str]) -> list[Result]:
    install(kube, generate_crds(schema_dir()))
    for ns in [SYSTEM, *(f"q{i}" for i in range(ROUNDS))]:
        kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            field_manager="bench",
        )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "forge-token", "namespace": SYSTEM},
            "data": {"token": base64.b64encode(b"bench").decode()},
        },
        field_manager="bench",
    )
    remote = work / "policies.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = work / "seed"
    (seed / "policies").mkdir(parents=True)
    _git(seed, "init", "-q", "-b", "main")
    (seed / "policies" / "cluster.yaml").write_text(CLUSTER)
    (seed / "policies" / "tiers.yaml").write_text(TIER)
    for i in range(ROUNDS):
        (seed / "policies" / f"q{i}.yaml").write_text(PROJECT.format(i=i))
    _git(seed, "add", ".")
    _git(seed, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "seed")
    _git(seed, "push", "-q", str(remote), "main")
    source = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PolicySource",
        "metadata": {"name": "platform"},
        "spec": {
            "url": remote.as_uri(),
            "ref": {"branch": "main"},
            "path": "policies",
            "interval": "1h",
            "forge": {
                "type": "gitea",
                "api": "http://127.0.0.1:9/api/v1",
                "repository": "acme/policies",
                "secretRef": {"name": "forge-token"},
            },
        },
    }
    kube.create(source, field_manager="bench")
    rec = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=work / "cache", system_namespace=SYSTEM)
    )
    rec.start()
    selector = f"kubernetes.io/hostname in ({','.join(nodes)})"
    gang = GangController(
        kube, settings=GangSettings(system_namespace=SYSTEM, node_selector=selector)
    )
    gang.start()
    forge = FakeForge(remote)
    quota = QuotaController(
        kube,
        QuotaSettings(cache_dir=work / "quota-cache", system_namespace=SYSTEM),
        forge_factory=lambda spec, token: forge,
    )
    quota.start()
    job = RESOURCES["TrainingJob"]
    to_pr: list[float] = []
    to_running: list[float] = []
    try:
        _wait("Ready PolicySource", lambda: rec.ready() and _applied(kube))
        _wait("scheduler", gang.ready)
        for i in range(ROUNDS):
            kube.create(_job(i, "first"), field_manager="bench")
            _wait("first job Running", lambda i=i: _phase(kube, i, "first") == "Running")
            t0 = time.monotonic()
            kube.create(_job(i, "second"), field_manager="bench")
            try:
                number = _wait("pull request", lambda i=i: _pr_of(kube, i))
            except TimeoutError:
                print("job:", (kube.get(job, "second", f"q{i}") or {}).get("status"))
                print("qrs:", kube.list(RESOURCES["QuotaRequest"])[0])
                raise
            to_pr.append(time.monotonic() - t0)
            t1 = time.monotonic()
            forge.merge(number)
            resp = handle_push(
                kube,
                path="/hook/platform",
                headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET.decode()},
                body=json.dumps({"project": {"git_http_url": remote.as_uri()}}).encode(),
                secret=SECRET,
                clock=SystemClock(),
                deliveries=Deliveries(),
            )
            assert resp.status == 202, resp
            _wait("second job Running", lambda i=i: _phase(kube, i, "second") == "Running")
            to_running.append(time.monotonic() - t1)
            print(
                f"round {i}: shortfall->PR {to_pr[-1]:.2f}s, merge->Running {to_running[-1]:.2f}s"
            )
            assert kube.get(job, "second", f"q{i}") is not None
    finally:
        quota.stop()
        gang.stop()
        rec.stop()
    return [
        Result("quota shortfall->PR opened (worst of 3)", max(to_pr), "s", SHORTFALL_TO_PR_LIMIT_S),
        Result(
            "quota merge->job admitted, webhook (worst of 3)",
            max(to_running),
            "s",
            MERGE_TO_ADMITTED_LIMIT_S,
        ),
    ]


def _applied(kube: Kube) -> bool:
    src = kube.get(RESOURCES["PolicySource"], "platform") or {}
    return bool((src.get("status") or {}).get("lastAppliedRevision"))


def _phase(kube: Kube, i: int, name: str) -> str | None:
    obj = kube.get(RESOURCES["TrainingJob"], name, f"q{i}") or {}
    return (obj.get("status") or {}).get("phase")


def _pr_of(kube: Kube, i: int) -> int | None:
    obj = kube.get(RESOURCES["QuotaRequest"], "second-quota", f"q{i}") or {}
    pr = (obj.get("status") or {}).get("pullRequest") or {}
    return int(pr["number"]) if pr.get("number") else None


if __name__ == "__main__":
    print_table(run())
