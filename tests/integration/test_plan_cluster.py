"""`gangops plan --cluster`: the live diff through server-side dry-run, on a real API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from controller.devcluster import DevCluster
from controller.kube.client import RESOURCES, Kube
from controller.policy.compiler import compile_policy_set
from controller.policy.sources import working_tree
from controller.policy.validate import validate_sources
from controller.reconciler.apply import FIELD_MANAGER, LABEL_SOURCE

from .reconciler_helpers import PolicyRepo, tier

pytest_plugins = ["tests.integration.reconciler_fixtures"]


def _plan(
    capsys: pytest.CaptureFixture[str], cluster: DevCluster, repo: PolicyRepo, system: str
) -> dict[str, Any]:
    code = main(
        [
            "plan",
            str(repo.path / "policies"),
            "--cluster",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--source",
            repo.prefix,
            "--system-namespace",
            system,
            "--format",
            "json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return dict(json.loads(out))


def _ids(plan: dict[str, Any], action: str) -> set[str]:
    return {
        "/".join(p for p in (c["kind"], c["namespace"], c["name"]) if p)
        for c in plan["changes"]
        if c["action"] == action
    }


def test_plan_against_the_live_cluster(
    capsys: pytest.CaptureFixture[str],
    dev_cluster: DevCluster,
    kube: Kube,
    policy_repo: PolicyRepo,
) -> None:
    system = f"{policy_repo.prefix}-sys"
    n = policy_repo.name
    kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}},
        field_manager="test",
    )
    try:
        # Nothing applied yet: everything is a create, and the dry runs wrote nothing.
        first = _plan(capsys, dev_cluster, policy_repo, system)
        # 2 PriorityClasses, 3 Namespaces, 3 ResourceQuotas and their 3 LimitRanges,
        # the policy ConfigMap
        assert first["counts"]["create"] == 12, first
        assert kube.get(RESOURCES["PriorityClass"], n("high")) is None

        # Applied as the reconciler would (source files named from the repository's
        # top, whatever the plan's current directory): no changes.
        sources, resolve = working_tree(policy_repo.path / "policies", in_repository=True)
        result = validate_sources(sources, root="policies", resolve=resolve)
        assert result.policy_set is not None
        for obj in compile_policy_set(
            result.policy_set,
            revision="r1",
            source_root="policies",
            system_namespace=system,
        ):
            obj["metadata"].setdefault("labels", {})[LABEL_SOURCE] = policy_repo.prefix
            kube.apply(obj, field_manager=FIELD_MANAGER)
        clean = _plan(capsys, dev_cluster, policy_repo, system)
        assert clean["changes"] == [] and clean["warnings"] == []

        # A hand edit of a quota shows as an update of exactly that field.
        kube.merge_patch(
            RESOURCES["ResourceQuota"],
            "gangops-quota",
            {"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}},
            namespace=n("b"),
            field_manager="someone",
        )
        drift = _plan(capsys, dev_cluster, policy_repo, system)
        [change] = drift["changes"]
        assert (change["action"], change["namespace"]) == ("update", n("b"))
        assert change["fields"] == [
            {"path": "spec.hard.requests.nvidia.com/gpu", "old": "1", "new": "8"}
        ]

        # A tier value change is a recreate; a project removed deletes its objects.
        policy_repo.write("tiers.yaml", tier(n("high"), 7000) + "---\n" + tier(n("low"), 100))
        policy_repo.remove("projects/b.yaml")
        changed = _plan(capsys, dev_cluster, policy_repo, system)
        assert _ids(changed, "recreate") == {f"PriorityClass/{n('high')}"}
        assert _ids(changed, "delete") == {
            f"LimitRange/{n('b')}/gangops-defaults",
            f"ResourceQuota/{n('b')}/gangops-quota",
            f"Namespace/{n('b')}",
        }
        assert changed["destructive"] is True
    finally:
        for kind, name, ns in [
            ("PriorityClass", n("high"), None),
            ("PriorityClass", n("low"), None),
            ("Namespace", n("a"), None),
            ("Namespace", n("a-dev"), None),
            ("Namespace", n("b"), None),
            ("Namespace", system, None),
        ]:
            kube.delete(RESOURCES[kind], name, namespace=ns)


def test_unreachable_cluster_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, policy_repo: PolicyRepo
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code = main(
        ["plan", str(policy_repo.path / "policies"), "--cluster", "--kubeconfig", str(config)]
    )
    assert code == 2
    assert "gangops plan:" in capsys.readouterr().err
