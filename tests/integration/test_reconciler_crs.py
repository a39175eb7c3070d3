"""The policy kinds as custom resources (applied by Argo CD, Flux or kubectl) are a
source too; mixing them with PolicySources is refused on both sides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.kube.client import RESOURCES, Kube

from .kube import wait_for
from .reconciler_helpers import ReconcileEnv, managed

pytest_plugins = ["tests.integration.reconciler_fixtures"]


def _cr(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy.ai.operator/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def crs(reconcile_env: ReconcileEnv) -> Iterator[list[dict[str, Any]]]:
    made: list[dict[str, Any]] = []
    yield made
    for obj in made:
        reconcile_env.kube.delete(RESOURCES[obj["kind"]], obj["metadata"]["name"])


def _ready(kube: Kube, obj: dict[str, Any], status: str, reason: str) -> dict[str, Any] | None:
    live = kube.get(RESOURCES[obj["kind"]], obj["metadata"]["name"]) or {}
    st = live.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), None)
    if ready and ready["status"] == status and ready["reason"] == reason:
        return ready
    return None


def test_policy_custom_resources_are_reconciled_and_mixing_is_refused(
    reconcile_env: ReconcileEnv, crs: list[dict[str, Any]], tmp_path: Any
) -> None:
    env, p = reconcile_env, reconcile_env.prefix
    env.start()
    project = _cr(
        "Project",
        f"{p}-team",
        {
            "namespaces": [f"{p}-team"],
            "quota": {"guaranteed": {"gpu": 2}, "max": {"gpu": 4, "cpu": "8", "memory": "32Gi"}},
        },
    )
    for obj in (
        _cr("ClusterPolicy", p, {"capacity": {"gpu": 64}}),
        _cr("PriorityTier", f"{p}-gold", {"value": 4242}),
        project,
    ):
        env.kube.create(obj, field_manager="kubectl")
        crs.append(obj)
    for obj in crs:
        wait_for(
            f"{obj['kind']} Ready",
            lambda o=obj: _ready(env.kube, o, "True", "ReconciliationSucceeded"),
        )
    pc = managed(env.kube, "PriorityClass", f"{p}-gold")
    assert pc is not None and pc["value"] == 4242
    assert pc["metadata"]["labels"]["gangops.ai/policysource"] == "gangops-policy-crs"
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", f"{p}-team")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"

    # A semantic error (guaranteed above max) passes the CRD's schema but is refused.
    env.kube.merge_patch(
        RESOURCES["Project"],
        f"{p}-team",
        {"spec": {"quota": {"guaranteed": {"gpu": 9}}}},
        field_manager="kubectl",
    )
    ready = wait_for(
        "Project Stalled", lambda: _ready(env.kube, project, "False", "ValidationFailed")
    )
    assert f"project/{p}-team.yaml:" in ready["message"] and "GP303" in ready["message"]
    assert (managed(env.kube, "ResourceQuota", "gangops-quota", f"{p}-team") or {})["spec"]["hard"][
        "requests.nvidia.com/gpu"
    ] == "4"
    # While refused, what drifts is put back from the last set applied.
    env.kube.delete(RESOURCES["ResourceQuota"], "gangops-quota", namespace=f"{p}-team")
    wait_for(
        "the quota deleted by hand back from the last set applied",
        lambda: managed(env.kube, "ResourceQuota", "gangops-quota", f"{p}-team"),
    )
    assert _ready(env.kube, project, "False", "ValidationFailed")
    env.kube.merge_patch(
        RESOURCES["Project"],
        f"{p}-team",
        {"spec": {"quota": {"guaranteed": {"gpu": 3}}}},
        field_manager="kubectl",
    )
    wait_for(
        "Project Ready again", lambda: _ready(env.kube, project, "True", "ReconciliationSucceeded")
    )

    # A PolicySource as well: both sides are refused, with the reason.
    repo = tmp_path / "empty"
    repo.mkdir()
    src = env.create_source("git", repo.as_uri())
    obj = env.wait_condition(src, "Stalled", reason="MixedSources")
    msg = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")["message"]
    assert f"PriorityTier/{p}-gold" in msg
    wait_for(
        "the CRs to report MixedSources", lambda: _ready(env.kube, crs[0], "False", "MixedSources")
    )
    env.kube.delete(RESOURCES["PolicySource"], src)
    wait_for(
        "the CRs to be Ready once the PolicySource is gone",
        lambda: _ready(env.kube, crs[0], "True", "ReconciliationSucceeded"),
    )
