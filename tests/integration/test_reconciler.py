"""The policy reconciler against the real control plane and real Git repositories.

Each test runs its own reconciler over a repository it creates (served over
file://) and checks what the API server holds afterwards: the objects, their
resourceVersions, the PolicySource's kstatus conditions, inventory and Events.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from controller.kube.client import RESOURCES, ApiError, Kube
from controller.reconciler.apply import ANNOTATION_PRUNE
from controller.reconciler.spec import ANNOTATION_REQUESTED

from .kube import pod, wait_for
from .reconciler_helpers import PolicyRepo, ReconcileEnv, managed, project, tier

pytest_plugins = ["tests.integration.reconciler_fixtures"]


def _rv(kube: Kube, kind: str, name: str, ns: str | None = None) -> str:
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
    assert f"{n('b')}_gangops-defaults__LimitRange" in ids
    limits = managed(env.kube, "LimitRange", "gangops-defaults", n("a"))
    assert limits is not None and limits["spec"]["limits"][0]["defaultRequest"]["cpu"] == "1"
    assert len(ids) == 2 + 3 + 3 + 3 + 1
    reasons = [e["reason"] for e in env.events(src)]
    assert "ReconciliationSucceeded" in reasons


def test_new_commit_is_applied_and_only_what_changed_is_written(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    untouched = _rv(env.kube, "ResourceQuota", "gangops-quota", n("b"))
    repo.write("projects/a.yaml", project(n("a"), [n("a"), n("a-dev")], gpu=12))
    sha = repo.commit("grow a")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "1"}}})
    obj = env.wait_condition(src, "Ready", revision_sha=sha)
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", n("a"))
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "6"
    assert quota["metadata"]["annotations"]["gangops.ai/revision"] == f"main@sha1:{sha}"
    assert _rv(env.kube, "ResourceQuota", "gangops-quota", n("b")) == untouched
    assert obj["status"]["lastHandledReconcileAt"] == "1"


def test_invalid_commit_is_not_applied_at_all_and_the_next_valid_one_recovers(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    good = repo.head()
    env.wait_condition(src, "Ready", revision_sha=good)
    before = _rv(env.kube, "ResourceQuota", "gangops-quota", n("b"))
    # A valid change to project b and a broken project c in the same commit.
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=20))
    repo.write(
        "projects/c.yaml",
        project(n("c"), [n("c")]).replace("namespaces:", "namespaecs:"),
    )
    bad = repo.commit("break")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "bad"}}})
    obj = env.wait_condition(src, "Stalled", reason="ValidationFailed", revision_sha=bad)
    stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert "policies/projects/c.yaml:5:3: GP201" in stalled["message"], stalled["message"]
    assert "namespaecs" in stalled["message"]
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ValidationFailed"
    assert obj["status"]["lastAppliedRevision"] == f"main@sha1:{good}"
    assert obj["status"]["lastAttemptedRevision"] == f"main@sha1:{bad}"
    # Nothing of the bad revision reached the cluster.
    assert _rv(env.kube, "ResourceQuota", "gangops-quota", n("b")) == before
    assert managed(env.kube, "Namespace", n("c")) is None
    assert any(
        e["reason"] == "ValidationFailed" and e["type"] == "Warning" for e in env.events(src)
    )
    text = _metrics(env)
    assert f'gangops_reconcile_stalled{{source="{src}"}} 1.0' in text
    # The next valid commit recovers.
    repo.write("projects/c.yaml", project(n("c"), [n("c")]))
    fixed = repo.commit("fix")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "fixed"}}})
    obj = env.wait_condition(src, "Ready", revision_sha=fixed)
    assert {c["type"] for c in obj["status"]["conditions"]} == {"Ready"}
    assert managed(env.kube, "Namespace", n("c")) is not None
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", n("b"))
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "20"


def test_removed_objects_are_pruned_but_namespaces_and_opted_out_objects_are_kept(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    env.kube.merge_patch(
        RESOURCES["ResourceQuota"],
        "gangops-quota",
        {"metadata": {"annotations": {ANNOTATION_PRUNE: "disabled"}}},
        field_manager="test",
        namespace=n("a-dev"),
    )
    repo.remove("projects/b.yaml")
    repo.write("projects/a.yaml", project(n("a"), [n("a")]))
    repo.write("tiers.yaml", tier(n("high"), 5000))
    sha = repo.commit("drop b, a-dev and the low tier")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "prune"}}})
    obj = env.wait_condition(src, "Ready", revision_sha=sha)
    assert managed(env.kube, "PriorityClass", n("low")) is None
    assert managed(env.kube, "ResourceQuota", "gangops-quota", n("b")) is None
    # Namespaces are never pruned without spec.pruneNamespaces; opted-out objects stay.
    assert managed(env.kube, "Namespace", n("b")) is not None
    assert managed(env.kube, "ResourceQuota", "gangops-quota", n("a-dev")) is not None
    ids = {e["id"] for e in obj["status"]["inventory"]["entries"]}
    assert not any(n("b") in i or n("low") in i or n("a-dev") in i for i in ids)
    # With pruneNamespaces, a namespace the revision drops is deleted.
    env.patch_source(src, {"spec": {"pruneNamespaces": True}})
    repo.write("projects/a.yaml", project(n("a"), [n("a"), n("z")]))
    repo.commit("add z")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "z"}}})
    wait_for("namespace z", lambda: managed(env.kube, "Namespace", n("z")))
    repo.write("projects/a.yaml", project(n("a"), [n("a")]))
    sha = repo.commit("drop z")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "drop-z"}}})
    env.wait_condition(src, "Ready", revision_sha=sha)
    wait_for(
        "namespace z terminating or gone",
        lambda: (managed(env.kube, "Namespace", n("z")) or {"metadata": {"deletionTimestamp": 1}})[
            "metadata"
        ].get("deletionTimestamp"),
    )


def test_a_status_update_of_a_managed_object_does_not_reconcile(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    """A ResourceQuota's usage changes with every pod created or deleted in its
    namespace; that is not drift, so it must not make the controller reconcile."""
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    reconciler = env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    time.sleep(1)  # let the first sync's own echoes settle

    def reconciles() -> float:
        return sum(
            s.value
            for m in reconciler.metrics.reconciles.collect()
            for s in m.samples
            if s.name == "gangops_reconcile_total" and s.labels["source"] == src
        )

    before = reconciles()
    for used in ("1", "2", "3"):
        env.kube.merge_patch(
            RESOURCES["ResourceQuota"],
            "gangops-quota",
            {"status": {"hard": {"requests.nvidia.com/gpu": "8"},
                        "used": {"requests.nvidia.com/gpu": used}}},
            field_manager="resourcequota-controller",
            namespace=n("b"),
            subresource="status",
        )  # fmt: skip
    time.sleep(2)
    assert reconciles() == before


def test_drift_is_corrected_at_once(reconcile_env: ReconcileEnv, policy_repo: PolicyRepo) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    # A hand edit of a quota is put back.
    env.kube.merge_patch(
        RESOURCES["ResourceQuota"],
        "gangops-quota",
        {"spec": {"hard": {"requests.nvidia.com/gpu": "999"}}},
        field_manager="kubectl-edit",
        namespace=n("b"),
    )

    def restored() -> bool:
        q = managed(env.kube, "ResourceQuota", "gangops-quota", n("b"))
        return q is not None and q["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"

    wait_for("the quota edit to be reverted", restored, timeout=5)
    # A deleted PriorityClass comes back.
    env.kube.delete(RESOURCES["PriorityClass"], n("low"))
    wait_for(
        "the PriorityClass to be recreated",
        lambda: managed(env.kube, "PriorityClass", n("low")),
        timeout=5,
    )
    # A removed label (which takes the object out of the controller's watch) is restored.
    env.kube.merge_patch(
        RESOURCES["ConfigMap"],
        "gangops-scheduling-policy",
        {"metadata": {"labels": {"gangops.ai/policysource": None}}},
        field_manager="test",
        namespace=env.system_namespace,
    )
    wait_for(
        "the ConfigMap's label to be restored",
        lambda: (
            (
                managed(env.kube, "ConfigMap", "gangops-scheduling-policy", env.system_namespace)
                or {}
            )["metadata"]
            .get("labels", {})
            .get("gangops.ai/policysource")
        ),
        timeout=5,
    )


def test_a_reconcile_with_nothing_to_change_writes_nothing(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo = reconcile_env, policy_repo
    rec = env.start()
    src = env.create_source("main", repo.url)
    obj = env.wait_condition(src, "Ready", revision_sha=repo.head())
    time.sleep(0.5)  # let the watch events of the first sync settle
    kinds = ("PriorityClass", "Namespace", "ResourceQuota", "ConfigMap")

    def versions() -> dict[str, str]:
        out = {"source": str(env.source(src)["metadata"]["resourceVersion"])}
        for kind in kinds:
            items, _ = env.kube.list(
                RESOURCES[kind], label_selector=f"gangops.ai/policysource={src}"
            )
            out |= {
                f"{kind}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o[
                    "metadata"
                ]["resourceVersion"]
                for o in items
            }
        return out

    before = versions()
    events_before = len(env.events(src))
    # An empty commit: a new revision whose objects are all the same.
    repo.commit("empty")
    for _ in range(3):
        assert rec.reconcile(src, fetch=True) is not None
    after = versions()
    assert len(after) == 10
    changed = {k for k in after if after[k] != before.get(k)}
    # Only the source's status moved (to the new revision); no managed object did.
    assert changed == {"source"}, changed
    before = after
    for _ in range(3):
        rec.reconcile(src, fetch=True)
    assert versions() == before
    assert len(env.events(src)) == events_before
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


def test_priority_class_value_change_needs_allow_recreate(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    uid = (managed(env.kube, "PriorityClass", n("high")) or {})["metadata"]["uid"]
    before_b = _rv(env.kube, "ResourceQuota", "gangops-quota", n("b"))
    repo.write("tiers.yaml", tier(n("high"), 7000) + "---\n" + tier(n("low"), 100))
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=10))
    sha = repo.commit("raise high")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "1"}}})
    obj = env.wait_condition(src, "Stalled", reason="ImmutableFieldChange", revision_sha=sha)
    msg = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")["message"]
    assert f"PriorityClass {n('high')}" in msg and "5000" in msg and "7000" in msg, msg
    assert (managed(env.kube, "PriorityClass", n("high")) or {})["value"] == 5000
    assert _rv(env.kube, "ResourceQuota", "gangops-quota", n("b")) == before_b
    env.patch_source(src, {"spec": {"allowRecreate": True}})
    env.wait_condition(src, "Ready", revision_sha=sha)
    pc = managed(env.kube, "PriorityClass", n("high"))
    assert pc is not None and pc["value"] == 7000 and pc["metadata"]["uid"] != uid
    assert any(e["reason"] == "PriorityClassRecreated" for e in env.events(src))


def _default_tier(name: str, value: int, default: bool) -> str:
    return (
        f"apiVersion: policy.ai.operator/v1\nkind: PriorityTier\nmetadata: {{name: {name}}}\n"
        f"spec: {{value: {value}, globalDefault: {'true' if default else 'false'}}}\n"
    )


@pytest.fixture
def no_other_default(kube: Kube, prefix: str) -> Iterator[None]:
    """Kubernetes allows one globalDefault PriorityClass in the whole cluster: one left by
    another test of the session (the example policies' `normal`) is cleared for this
    test and given back afterwards."""
    items, _ = kube.list(RESOURCES["PriorityClass"])
    cleared = [
        o["metadata"]["name"]
        for o in items
        if o.get("globalDefault") and not o["metadata"]["name"].startswith(prefix)
    ]
    for name in cleared:
        kube.merge_patch(
            RESOURCES["PriorityClass"], name, {"globalDefault": False}, field_manager="test"
        )
    yield
    for name in cleared:
        # requested before `reconcile_env`, so the test's own classes are gone by now;
        # should another default exist since, this one is left cleared
        with contextlib.suppress(ApiError):
            kube.merge_patch(
                RESOURCES["PriorityClass"], name, {"globalDefault": True}, field_manager="test"
            )


def test_moving_the_global_default_to_another_tier_is_applied_in_one_commit(
    no_other_default: None, reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    """Found by a review (D1): the Priority admission plugin refuses a second default on
    create, update and dry-run, and every changed object was dry-run against the old
    state, so a commit moving the default stalled at DryRunFailed for good. The
    reconciler now clears (or prunes) the old default first, then sets the new one."""
    env, repo, n = reconcile_env, policy_repo, policy_repo.name

    def tiers(*specs: tuple[str, int, bool]) -> str:
        return "---\n".join(_default_tier(n(name), v, d) for name, v, d in specs)

    def defaults() -> list[str]:
        items, _ = env.kube.list(RESOURCES["PriorityClass"])
        return sorted(o["metadata"]["name"] for o in items if o.get("globalDefault"))

    repo.write("tiers.yaml", tiers(("high", 5000, True), ("low", 100, False)))
    sha = repo.commit("high is the default")
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=sha)
    assert defaults() == [n("high")]
    # the default moves to another tier
    repo.write("tiers.yaml", tiers(("high", 5000, False), ("low", 100, True)))
    sha = repo.commit("low is the default")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "move"}}})
    env.wait_condition(src, "Ready", revision_sha=sha)
    assert defaults() == [n("low")]
    # the default tier is renamed: the old class is pruned, the new one created
    repo.write("tiers.yaml", tiers(("high", 5000, False), ("standard", 100, True)))
    sha = repo.commit("low is renamed standard")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "rename"}}})
    obj = env.wait_condition(src, "Ready", revision_sha=sha)
    assert defaults() == [n("standard")]
    assert managed(env.kube, "PriorityClass", n("low")) is None
    ids = {e["id"] for e in obj["status"]["inventory"]["entries"]}
    assert f"_{n('standard')}_scheduling.k8s.io_PriorityClass" in ids
    assert not any(n("low") in i for i in ids)


def test_quota_lowered_below_usage_is_applied_and_new_work_waits(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    """Kubernetes allows a quota below current usage; the controller applies it. Running
    work keeps running, new work is refused by quota admission until usage falls; taking
    GPUs back is the scheduler's job, not the reconciler's."""
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    ns = n("b")
    wait_for(
        "the default ServiceAccount",
        lambda: env.kube.get(RESOURCES["ServiceAccount"], "default", ns),
    )
    env.kube.create(_in(pod("holds-4", gpus=4), ns), field_manager="test")

    def used() -> str | None:
        q = managed(env.kube, "ResourceQuota", "gangops-quota", ns) or {}
        return (q.get("status") or {}).get("used", {}).get("requests.nvidia.com/gpu")

    wait_for("quota usage of 4 GPUs", lambda: used() == "4")
    repo.write("projects/b.yaml", project(n("b"), [ns], gpu=2))
    sha = repo.commit("cut b below its usage")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "1"}}})
    env.wait_condition(src, "Ready", revision_sha=sha)
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", ns)
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
    assert env.kube.get(RESOURCES["Pod"], "holds-4", ns) is not None
    with pytest.raises(ApiError) as refused:
        env.kube.create(_in(pod("one-more", gpus=1), ns), field_manager="test")
    assert refused.value.status == 403 and "exceeded quota" in refused.value.message


def _in(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod in `namespace`, with the CPU and memory requests the quota demands."""
    obj["metadata"]["namespace"] = namespace
    resources = obj["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": "1", "memory": "1Gi", **resources["limits"]}
    return obj


def _metrics(env: ReconcileEnv) -> str:
    from prometheus_client import generate_latest

    assert env.reconciler is not None
    return generate_latest(env.reconciler.metrics.registry).decode()


def test_two_sources_claiming_one_object_the_second_is_refused(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo = reconcile_env, policy_repo
    env.start()
    first = env.create_source("first", repo.url)
    env.wait_condition(first, "Ready", revision_sha=repo.head())
    second = env.create_source("second", repo.url)
    obj = env.wait_condition(second, "Stalled", reason="OwnershipConflict")
    msg = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")["message"]
    assert f"belongs to PolicySource {first}" in msg
    assert obj["status"]["inventory"]["entries"] == []
    assert env.condition(first, "Ready")["status"] == "True"  # type: ignore[index]


def test_while_the_newest_commit_is_invalid_drift_is_corrected_from_the_last_good_one(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    env.start()
    src = env.create_source("main", repo.url)
    good = repo.head()
    env.wait_condition(src, "Ready", revision_sha=good)
    repo.write("projects/c.yaml", project(n("c"), [n("c")]).replace("namespaces:", "nmspcs:"))
    bad = repo.commit("break")
    env.patch_source(src, {"metadata": {"annotations": {ANNOTATION_REQUESTED: "bad"}}})
    env.wait_condition(src, "Stalled", reason="ValidationFailed", revision_sha=bad)
    env.kube.delete(RESOURCES["ResourceQuota"], "gangops-quota", namespace=n("b"))
    env.kube.delete(RESOURCES["PriorityClass"], n("low"))
    wait_for(
        "the quota and the PriorityClass to be recreated from the good revision",
        lambda: (
            managed(env.kube, "ResourceQuota", "gangops-quota", n("b"))
            and managed(env.kube, "PriorityClass", n("low"))
        ),
        timeout=10,
    )
    obj = env.source(src)
    assert obj["status"]["lastAppliedRevision"] == f"main@sha1:{good}"
    stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "ValidationFailed"
