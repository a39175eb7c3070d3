"""The policy reconciler against the real control plane and real Git repositories.

Each test runs its own reconciler over a repository it creates (served over
file://) and checks what the API server holds afterwards: the objects, their
resourceVersions, the PolicySource's kstatus conditions, inventory and Events.
"""

from __future__ import annotations

from .reconciler_helpers import PolicyRepo, ReconcileEnv, managed

pytest_plugins = ["tests.integration.reconciler_fixtures"]


def _rv(kube, kind, name, ns=None) -> str:  # type: ignore[no-untyped-def]
    obj = managed(kube, kind, name, ns)
    assert obj is not None, f"{kind} {ns or ''}/{name} missing"
    return str(obj["metadata"]["resourceVersion"])


def test_first_sync_applies_everything_and_reports_ready(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    obj = env.wait_condition(src, "Ready", revision_sha=repo.head())
    status = obj["status"]
    assert status["lastAppliedRevision"] == f"main@sha1:{repo.head()}"
    assert {c["type"] for c in status["conditions"]} == {"Ready"}
    pc = managed(env.kube, "PriorityClass", n("high"))
    assert pc is not None and pc["value"] == 5000
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", n("a"))
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert managed(env.kube, "Namespace", n("a-dev")) is not None
    cm = managed(env.kube, "ConfigMap", "gangops-scheduling-policy", env.system_namespace)
    assert cm is not None and "policy.json" in cm["data"]
    ids = {e["id"] for e in status["inventory"]["entries"]}
    assert f"_{n('high')}_scheduling.k8s.io_PriorityClass" in ids
    assert f"{n('b')}_gangops-quota__ResourceQuota" in ids
    assert len(ids) == 2 + 3 + 3 + 1
    reasons = [e["reason"] for e in env.events(src)]
    assert "ReconciliationSucceeded" in reasons
