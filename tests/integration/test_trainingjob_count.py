"""`jobs.maxCount` against the real API server: the ResourceQuota the reconciler
applies counts a namespace's TrainingJobs, and the API server's quota admission
refuses the create past it; drift on the count is put back, and a policy that
drops the field takes the count off the quota.

The count is an object count quota (`count/trainingjobs.ai.operator`): the API
server admits against the usage kube-controller-manager has computed, so the
test waits for that usage instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller.kube.client import RESOURCES, ApiError, Kube
from controller.policy.compiler import QUOTA_NAME
from controller.reconciler.spec import ANNOTATION_REQUESTED

from .kube import GPU, wait_for
from .reconciler_helpers import PolicyRepo, ReconcileEnv, managed, project

pytest_plugins = ["tests.integration.reconciler_fixtures"]

Obj = dict[str, Any]
MAX_COUNT = 3
COUNT = "count/trainingjobs.ai.operator"
"""The object count quota key of TrainingJobs (`count/<plural>.<group>`)."""


def _job(name: str, namespace: str) -> Obj:
    """A small valid TrainingJob; no scheduler runs here, so it only waits."""
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"ai.operator/user": "admin"}},
        "spec": {
            "gangSize": 1,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "pause:3.10",
                            "resources": {"limits": {GPU: 1}},
                        }
                    ]
                }
            },
        },
    }


def _quota_controller_counts_trainingjobs(kube: Kube, namespace: str) -> None:
    """Wait until kube-controller-manager counts TrainingJobs at all.

    It learns a new CRD by discovery, every 30 s, and then counts it only in the
    quotas it syncs afterwards: a quota created before (this session's CRDs may be
    minutes old or moments old) would wait for the 5-minute full resync. So a
    scratch quota in `namespace` is changed (which makes the controller sync it)
    until its usage shows the count; the project's quota is applied after that."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"hard": {COUNT: "1"}},
        },
        field_manager="test",
    )
    last = {"value": 1, "at": time.monotonic()}

    def counted() -> bool:
        q = kube.get(RESOURCES["ResourceQuota"], "probe", namespace) or {}
        if COUNT in ((q.get("status") or {}).get("used") or {}):
            return True
        if time.monotonic() - last["at"] > 2:
            last["value"] += 1
            last["at"] = time.monotonic()
            kube.merge_patch(
                RESOURCES["ResourceQuota"],
                "probe",
                {"spec": {"hard": {COUNT: str(last["value"])}}},
                field_manager="test",
                namespace=namespace,
            )
        return False

    wait_for("kube-controller-manager to count TrainingJobs", counted, timeout=90)


def _quota(kube: Kube, ns: str) -> Obj:
    q = managed(kube, "ResourceQuota", QUOTA_NAME, ns)
    assert q is not None, f"ResourceQuota {ns}/{QUOTA_NAME} missing"
    return q


def test_the_api_server_refuses_the_trainingjob_past_the_projects_count(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo, namespace: str
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    _quota_controller_counts_trainingjobs(env.kube, namespace)
    ns = n("b")
    repo.write("projects/b.yaml", project(ns, [ns]) + f"  jobs: {{maxCount: {MAX_COUNT}}}\n")
    sha = repo.commit("b holds at most 3 TrainingJobs")
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=sha)
    assert _quota(env.kube, ns)["spec"]["hard"][COUNT] == str(MAX_COUNT)
    wait_for(
        "the quota controller to count b's TrainingJobs",
        lambda: (_quota(env.kube, ns).get("status") or {}).get("used", {}).get(COUNT) == "0",
    )

    for i in range(MAX_COUNT):
        env.kube.create(_job(f"job-{i}", ns), field_manager="test")
    with pytest.raises(ApiError) as refused:
        env.kube.create(_job("one-more", ns), field_manager="test")
    assert refused.value.status == 403, refused.value
    assert "exceeded quota" in refused.value.message
    assert f"limited: {COUNT}={MAX_COUNT}" in refused.value.message

    # A hand edit of the count is drift, put back like any other quota field.
    env.kube.merge_patch(
        RESOURCES["ResourceQuota"],
        QUOTA_NAME,
        {"spec": {"hard": {COUNT: "999"}}},
        field_manager="kubectl-edit",
        namespace=ns,
    )
    wait_for(
        "the count's edit to be reverted",
        lambda: _quota(env.kube, ns)["spec"]["hard"].get(COUNT) == str(MAX_COUNT),
    )

    # Without the field, the count leaves the quota (the GPU max stays) and the
    # create goes through.
    repo.write("projects/b.yaml", project(ns, [ns]))
    sha = repo.commit("no count for b")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "no-count"}}})
    env.wait_condition(src, "Ready", revision_sha=sha)
    quota = _quota(env.kube, ns)
    assert COUNT not in quota["spec"]["hard"]
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    wait_for(
        "the quota controller to drop the count",
        lambda: COUNT not in (_quota(env.kube, ns).get("status") or {}).get("hard", {}),
    )
    env.kube.create(_job("one-more", ns), field_manager="test")
