"""Quota requests end to end on the local control plane, with a real Git remote.

A job blocked by its project's max, its QuotaRequest, the branch pushed with a
one-line diff and the pull request opened, the merge (a real merge commit on
the remote), the push webhook, the reconciler applying the merge, the job
admitted; a pull request closed unmerged; a forge outage (Retry, then
recovery); a temporary grant reverted on expiry; an unauthorised requester
refused by the API server.

The forge is the one part that is not real: Gitea did not build here (see
docs/quota-requests.md), so the `Forge` seam is `tests/unit/quota/fake_forge`,
which merges on the real bare repository. Everything else (the API server,
the admission policy, the Git remote, the reconciler, the gang scheduler and
the quota-request loop) is the real thing.
"""

from __future__ import annotations

import base64
import datetime as dt
import difflib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from controller.gang.cli import explain_job
from controller.gitauth import auth_from_secret
from controller.kube.client import RESOURCES, ApiError, Kube
from controller.kube.clock import SystemClock
from controller.quota.branch import GitUnavailable, PolicyRepo
from controller.quota.controller import QuotaController, QuotaSettings
from controller.reconciler.webhook import Deliveries, handle_push
from controller.run import cluster_what_if
from tests.unit.quota.fake_forge import FakeForge

from .gang_helpers import GangEnv
from .git_auth_servers import HttpGit
from .kube import wait_for
from .reconciler_helpers import CLUSTER_POLICY, ReconcileEnv, git, tier

pytest_plugins = ["tests.integration.gang_fixtures", "tests.integration.reconciler_fixtures"]

Obj = dict[str, Any]
_QR = RESOURCES["QuotaRequest"]
SECRET = b"hook-secret"


@dataclass
class QuotaEnv:
    gang: GangEnv
    rec: ReconcileEnv
    kube: Kube
    remote: Path
    forge: FakeForge
    source: str
    project: str
    tier: str
    ctl: QuotaController

    def request(self, name: str, *, as_: Kube | None = None, **spec: Any) -> Obj:
        obj = {
            "apiVersion": "ai.operator/v1",
            "kind": "QuotaRequest",
            "metadata": {
                "name": name,
                "namespace": self.gang.namespace,
                "labels": {"ai.operator/user": spec.pop("requester", "alice")},
            },
            "spec": {
                "project": self.project,
                "resource": "gpu",
                "amount": 8,
                "reason": "the pretraining run needs 12 GPUs",
                **spec,
            },
        }
        return (as_ or self.kube).create(obj, field_manager="gangops-tests")

    def status(self, name: str) -> Obj:
        obj = self.kube.get(_QR, name, self.gang.namespace) or {}
        return dict(obj.get("status") or {})

    def wait_state(self, name: str, state: str, *, timeout: float = 30.0) -> Obj:
        def probe() -> Obj | None:
            s = self.status(name)
            return s if s.get("state") == state else None

        return wait_for(f"QuotaRequest {name} {state}", probe, timeout=timeout)

    def push_hook(self) -> None:
        """What the forge sends after a merge: a signed push webhook."""
        url = self.remote.as_uri()
        resp = handle_push(
            self.kube,
            path=f"/hook/{self.source}",
            headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET.decode()},
            body=json.dumps({"project": {"git_http_url": url}}).encode(),
            secret=SECRET,
            clock=SystemClock(),
            deliveries=Deliveries(),
        )
        assert resp.status == 202, resp

    def quota_hard(self) -> str:
        items, _ = self.kube.list(RESOURCES["ResourceQuota"], namespace=self.gang.namespace)
        return str(items[0]["spec"]["hard"].get("requests.nvidia.com/gpu")) if items else ""

    def main_project(self) -> str:
        return git(self.remote, "show", "main:policies/projects/p.yaml")


PROJECT = """\
# The test's project (a comment the quota edit keeps).
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {{name: {name}}}
spec:
  namespaces: [{namespace}]
  quota:
    guaranteed: {{gpu: 4}}
    max: {{gpu: 4, cpu: "64", memory: 256Gi}}   # raised by pull request
"""


@pytest.fixture
def quota_env(
    gang_env: GangEnv, kube: Kube, crds: None, prefix: str, tmp_path: Path
) -> Iterator[QuotaEnv]:
    env = gang_env
    remote = tmp_path / "policies.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp_path / "seed"
    (seed / "policies" / "projects").mkdir(parents=True)
    git(seed, "init", "-q", "-b", "main")
    project, batch = f"{prefix}-p", f"{prefix}-batch"
    (seed / "policies" / "cluster.yaml").write_text(CLUSTER_POLICY)
    (seed / "policies" / "tiers.yaml").write_text(tier(batch, 1000))
    (seed / "policies" / "projects" / "p.yaml").write_text(
        PROJECT.format(name=project, namespace=env.namespace)
    )
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "seed")
    git(seed, "push", "-q", str(remote), "main")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "forge-token", "namespace": env.system_namespace},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        },
        field_manager="gangops-tests",
    )
    rec = ReconcileEnv(kube, prefix, tmp_path / "cache", env.system_namespace)
    source = rec.create_source(
        "platform",
        remote.as_uri(),
        ref={"branch": "main"},
        forge={
            "type": "gitea",
            "api": "http://127.0.0.1:9/api/v1",
            "repository": "acme/policies",
            "secretRef": {"name": "forge-token"},
        },
    )
    rec.start()
    rec.wait_condition(source, "Ready")
    env.claim(1)
    env.start()
    forge = FakeForge(remote)
    ctl = QuotaController(
        kube,
        QuotaSettings(
            cache_dir=tmp_path / "quota-cache",
            system_namespace=env.system_namespace,
            interval_s=0.2,
            forge_poll_s=0.5,
        ),
        forge_factory=lambda spec, token: forge,
    )
    ctl.what_if = cluster_what_if(kube, system_namespace=env.system_namespace)
    ctl.start()
    yield QuotaEnv(env, rec, kube, remote, forge, source, project, batch, ctl)
    # A temporary request holds gangops' finalizer until nothing can be owed back:
    # deleted while the loop runs, each is withdrawn (or reverted) and goes, rather
    # than holding the namespace in Terminating after the loop stopped.
    for obj in kube.list(_QR, namespace=env.namespace)[0]:
        kube.delete(_QR, obj["metadata"]["name"], namespace=env.namespace)
    wait_for("the QuotaRequests gone", lambda: not kube.list(_QR, namespace=env.namespace)[0])
    ctl.stop()
    rec.cleanup()


def test_a_blocked_job_gets_its_quota_through_a_merged_pull_request(quota_env: QuotaEnv) -> None:
    q = quota_env
    q.gang.create(q.gang.job("first", gang=4, tier=q.tier))
    q.gang.wait_phase("first", "Running")
    q.gang.create(q.gang.job("big", gang=4, tier=q.tier))
    wait_for("the job blocked by quota", lambda: q.gang.status("big").get("reason") == "Quota")
    assert q.quota_hard() == "4"
    before = q.main_project()

    t0 = time.monotonic()
    q.request("more", trainingJob="big", amount=4, requester="admin")  # the job's owner
    pending = q.wait_state("more", "Pending", timeout=10)
    opened_s = time.monotonic() - t0
    pr = pending["pullRequest"]
    assert pr["url"] == "https://forge.test/acme/policies/pulls/1" and pr["valid"] is True
    head = git(q.remote, "show", f"{pr['branch']}:policies/projects/p.yaml")
    diff = [
        line
        for line in difflib.unified_diff(before.splitlines(), head.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert diff == [
        '-    max: {gpu: 4, cpu: "64", memory: 256Gi}   # raised by pull request',
        '+    max: {gpu: 8, cpu: "64", memory: 256Gi}   # raised by pull request',
    ]
    _, body = q.forge.bodies[1][0]
    assert "### Validation\n\nThe policy set validates." in body and "### Plan" in body
    # the simulator's what-if on the cluster's TrainingJobs (the two of this test among them)
    assert "### What-if (simulator, recent workload)" in body and "| with the change |" in body
    job = q.gang.status("big")
    assert job["quotaRequest"]["url"] == pr["url"] and job["quotaRequest"]["state"] == "Pending"
    assert job["phase"] != "Running"
    text = explain_job(
        q.kube,
        f"{q.gang.namespace}/big",
        system_namespace=q.gang.system_namespace,
        node_selector=q.gang.node_selector,
    )
    assert f"Quota request: more is Pending: {pr['url']}" in text

    t1 = time.monotonic()
    q.forge.merge(1)
    q.push_hook()
    q.gang.wait_phase("big", "Running", timeout=10)
    admitted_s = time.monotonic() - t1
    q.wait_state("more", "Ready", timeout=10)
    assert q.quota_hard() == "8"
    assert q.gang.status("big")["quotaRequest"]["state"] == "Ready"
    print(f"\nshortfall->PR opened {opened_s:.2f}s; merge->job Running {admitted_s:.2f}s")
    assert opened_s < 10 and admitted_s < 5


def test_a_pull_request_closed_unmerged_rejects_the_request(quota_env: QuotaEnv) -> None:
    q = quota_env
    q.request("denied")
    q.wait_state("denied", "Pending")
    q.forge.close(1)
    status = q.wait_state("denied", "Rejected")
    assert "closed unmerged" in status["message"]
    assert q.quota_hard() == "4"


def test_a_forge_outage_is_retried_with_backoff_until_it_recovers(quota_env: QuotaEnv) -> None:
    q = quota_env
    q.forge.down = True
    q.request("patient")
    status = q.wait_state("patient", "Retry")
    assert "HTTP 503" in status["message"] and status["retry"]["attempts"] >= 1
    q.forge.down = False
    status = q.wait_state("patient", "Pending", timeout=30)
    assert "retry" not in status and len(q.forge.prs) == 1


def test_a_temporary_grant_is_reverted_when_it_expires(quota_env: QuotaEnv) -> None:
    q = quota_env
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=6)
    q.request("burst", expiresAt=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    q.wait_state("burst", "Pending")
    q.forge.merge(1)
    q.push_hook()
    q.wait_state("burst", "Ready")
    assert q.quota_hard() == "12"

    def revert_opened() -> Obj | None:
        return (q.status("burst").get("revert") or {}) or None

    revert = wait_for("the revert pull request", revert_opened, timeout=20)
    assert revert["branch"].startswith("gangops/quota-revert/")
    q.forge.merge(int(revert["number"]))
    q.push_hook()
    q.wait_state("burst", "Expired", timeout=20)
    assert q.quota_hard() == "4"
    assert "max: {gpu: 4," in q.main_project()


def test_a_temporary_grant_deleted_once_granted_is_taken_back_before_it_goes(
    quota_env: QuotaEnv, alice_requests: Kube
) -> None:
    """Found by a review: deleting a temporary grant kept the quota for good (the
    revert was driven by the live object alone)."""
    q = quota_env
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=8)
    q.request("burst", as_=alice_requests, expiresAt=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    q.wait_state("burst", "Pending")
    obj = q.kube.get(_QR, "burst", q.gang.namespace)
    assert obj is not None and obj["metadata"]["finalizers"] == [
        "gangops.ai/revert-temporary-grant"
    ]

    def refused() -> ApiError | None:  # its requester may not take gangops' finalizer off
        try:
            alice_requests.merge_patch(_QR, "burst", {"metadata": {"finalizers": None}},
                                       field_manager="t", namespace=q.gang.namespace)  # fmt: skip
        except ApiError as e:
            return None if "cannot patch resource" in str(e) else e  # RBAC not yet in force
        raise AssertionError("the finalizer was removed by its requester")

    err = wait_for("the admission policy to refuse", refused)
    assert err.status == 403 and "is gangops'" in err.message, err
    q.forge.merge(1)
    q.push_hook()
    q.wait_state("burst", "Ready")
    assert q.quota_hard() == "12"
    alice_requests.delete(_QR, "burst", namespace=q.gang.namespace)

    def revert_opened() -> Obj | None:
        return (q.status("burst").get("revert") or {}) or None

    revert = wait_for("the revert pull request", revert_opened, timeout=20)
    assert "was deleted" in q.forge.bodies[int(revert["number"])][0][1]
    obj = q.kube.get(_QR, "burst", q.gang.namespace)
    assert obj is not None and obj["metadata"].get("deletionTimestamp")  # held until then
    q.forge.merge(int(revert["number"]))
    q.push_hook()
    wait_for("the request gone", lambda: q.kube.get(_QR, "burst", q.gang.namespace) is None)
    assert q.quota_hard() == "4"


@pytest.fixture
def alice_requests(api: Any, gang_env: GangEnv, dev_cluster: Any) -> Kube:
    """Alice's client, allowed to create QuotaRequests in the test's namespace."""
    from kubernetes import client

    from controller.kube.client import connect

    rbac = client.RbacAuthorizationV1Api(api)
    # What the chart's aggregated edit role grants: no "*", which would include the
    # verb propose (creating requests on others' behalf, as the scheduler does).
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [{"apiGroups": ["ai.operator"], "resources": ["quotarequests"], "verbs": verbs}]
    rbac.create_namespaced_role(gang_env.namespace, {"metadata": {"name": "qr"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        gang_env.namespace,
        {
            "metadata": {"name": "qr"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "qr"},
            "subjects": [
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    return connect(str(dev_cluster.user_kubeconfigs["alice"]))


def _refused(q: QuotaEnv, name: str, create: Callable[[], object]) -> ApiError:
    """The refusal, waiting out the few seconds a new admission policy (or RBAC) takes."""

    def attempt() -> ApiError | None:
        try:
            create()
        except ApiError as e:
            return None if "cannot create resource" in str(e) else e  # RBAC not yet in force
        q.kube.delete(_QR, name, namespace=q.gang.namespace)
        return None

    return wait_for("the admission policy to refuse", attempt)


def test_the_requester_is_the_authenticated_creator(
    quota_env: QuotaEnv, alice_requests: Kube
) -> None:
    q = quota_env
    err = _refused(q, "forged", lambda: q.request("forged", as_=alice_requests, requester="bob"))
    assert err.status == 403
    assert 'must name the user creating the request (the requester): set it to "alice"' in str(err)
    err = _refused(q, "for-bob", lambda: q.request("for-bob", as_=alice_requests, user="bob"))
    assert "you may request more quota for yourself only" in str(err)
    mine = q.request("mine", as_=alice_requests, user="alice")
    assert mine["metadata"]["labels"]["ai.operator/user"] == "alice"
    # found by a review: retargeted (or shrunk) after the grant, the revert of a
    # temporary one took from someone else (or less than was granted)
    for change in ({"user": "bob"}, {"amount": 1}):
        with pytest.raises(ApiError) as e:
            alice_requests.merge_patch(_QR, "mine", {"spec": change}, field_manager="t",
                                       namespace=mine["metadata"]["namespace"])  # fmt: skip
        assert e.value.status == 403 and "spec cannot change" in e.value.message, e.value


def test_gangops_quota_request_labels_the_request_with_who_the_api_server_says_you_are(
    quota_env: QuotaEnv, alice_requests: Kube, dev_cluster: Any
) -> None:
    q = quota_env
    argv = ["quota", "request", "--project", q.project, "--gpu", "2", "--reason", "cli"]
    argv += ["-n", q.gang.namespace, "--name", "via-cli", "--for", "8h", "--wait"]
    argv += ["--kubeconfig", str(dev_cluster.user_kubeconfigs["alice"])]

    def created() -> bool:
        return main(argv) == 0  # refused (nothing created) until alice's RBAC is in force

    wait_for("gangops quota request", created)
    obj = q.kube.get(_QR, "via-cli", q.gang.namespace)
    assert obj is not None and obj["metadata"]["labels"]["ai.operator/user"] == "alice"
    assert obj["spec"]["amount"] == 2 and "expiresAt" in obj["spec"]
    assert q.status("via-cli")["state"] == "Pending"


def test_branches_are_pushed_with_the_policy_sources_own_git_credentials(tmp_path: Path) -> None:
    """Over HTTP to `git http-backend` that wants Basic credentials (no cluster needed)."""
    root = tmp_path / "srv"
    bare = root / "policies.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    seed = tmp_path / "seed"
    (seed / "policies").mkdir(parents=True)
    git(seed, "init", "-q", "-b", "main")
    (seed / "policies" / "p.yaml").write_text(PROJECT.format(name="p", namespace="p"))
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "seed")
    git(seed, "push", "-q", str(bare), "main")
    server = HttpGit(root, "gangops", "s3cret", "unused-token")
    server.start()
    try:
        url = server.url("policies.git")
        auth = auth_from_secret({"username": b"gangops", "password": b"s3cret"}, key_dir=tmp_path)
        repo = PolicyRepo(url, "main", "policies", tmp_path / "cache", env=auth.env)
        path, text = repo.project_file("p")
        edited = text.replace("max: {gpu: 4,", "max: {gpu: 8,")
        proposed = repo.propose(branch="gangops/quota/p/gpu", file=path, text=edited, message="m")
        assert git(bare, "rev-parse", "gangops/quota/p/gpu") == proposed.commit
        assert proposed.pushed
        anonymous = PolicyRepo(url, "main", "policies", tmp_path / "cache-anonymous")
        with pytest.raises(GitUnavailable, match="git fetch"):
            anonymous.project_file("p")
    finally:
        server.stop()
