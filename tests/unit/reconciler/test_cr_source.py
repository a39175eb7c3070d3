"""The policy custom resources as a source (Argo CD, Flux or kubectl sync them):
reconciled as one policy set, retried after a failure midway."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from controller.kube.client import RESOURCES, ApiError
from controller.kube.clock import FakeClock
from controller.policy.validate import schema_dir
from controller.reconciler.controller import (
    CR_SOURCE,
    DRIFT_QUIET_S,
    Reconciler,
    ReconcilerSettings,
)
from tests.unit.kube.fakes import FakeKube
from tests.unit.policy.builders import TIERS, cluster, project


class FlakyApply(FakeKube):
    """While `flaky`, every real (non dry-run) apply gets a transient 503."""

    flaky = 0

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False, **kw: Any) -> dict[str, Any]:
        if self.flaky and not dry_run and kw.get("subresource") is None:
            self.flaky -= 1
            raise ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")
        return super().apply(obj, dry_run=dry_run, **kw)


def test_policy_crs_transient_apply_failure_is_retried(tmp_path: Path) -> None:
    """Failure table: 'an apply or prune failed mid-way | ApplyFailed | backoff' (found
    by a review: the custom resources' source never retried; nothing else woke it)."""
    kube = FlakyApply()
    r = Reconciler(
        kube,
        settings=ReconcilerSettings(cache_dir=tmp_path),
        clock=FakeClock(),
        rng=random.Random(0),
    )
    v1 = "policy.ai.operator/v1"

    def put(d: dict[str, Any], gen: int) -> None:
        d = {**d, "apiVersion": v1, "metadata": {**d["metadata"], "generation": gen}}
        kube.objects.pop((d["kind"], "", d["metadata"]["name"]), None)
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))

    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build()]:
        put(d, 1)
    r._run(CR_SOURCE, True)
    assert (
        kube.objects[("ResourceQuota", "nlp", "gangops-quota")]["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "8"
    )
    put(project("nlp").max(gpu=16).build(), 2)  # a team edits its Project
    kube.flaky = 2  # the API server answers 503 to the next two writes (say 20 s)

    def crs_rv() -> list[str]:
        return [
            o["metadata"]["resourceVersion"]
            for k, o in kube.objects.items()
            if k[0] in ("ClusterPolicy", "PriorityTier", "Project")
        ]

    runs = 0
    r._queue.add(CR_SOURCE)  # the Project's MODIFIED event
    while CR_SOURCE in r._queue._due and runs < 10:  # the worker; informer echoes CR writes
        del r._queue._due[CR_SOURCE]
        r._clock.advance(60)  # past any backoff
        before = crs_rv()
        r._run(CR_SOURCE, False)
        runs += 1
        if crs_rv() != before:  # a CR status write comes back as a MODIFIED event
            r._on_policy_cr("MODIFIED", {})
    ready = [
        c
        for c in kube.objects[("Project", "", "nlp")]["status"]["conditions"]
        if c["type"] == "Ready"
    ]
    assert ready and ready[0]["status"] == "True", ready
    assert (
        kube.objects[("ResourceQuota", "nlp", "gangops-quota")]["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "16"
    ), "never retried after the 503s ended"
    r.stop()


def _reserved_source(kube: FakeKube, r: Reconciler) -> None:
    """A PolicySource named like the custom resources' source (the CRD refuses it; one
    created before that rule, or under a CRD gangops did not install, exists)."""
    src = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PolicySource",
        "metadata": {"name": CR_SOURCE, "generation": 1},
        "spec": {"url": "https://git.example/platform/policies.git", "interval": "1m"},
    }
    r.sources.assume(kube.create(src, field_manager="test"))


def _conditions(kube: FakeKube, kind: str, name: str) -> dict[str, dict[str, Any]]:
    obj = kube.objects[(kind, "", name)]
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def test_a_policysource_with_the_reserved_name_is_refused_visibly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/reconciler.md: no PolicySource may be named gangops-policy-crs. Its name
    routed it to the custom resources' source, so it was never fetched, applied nor
    given a status (`kubectl wait --for=condition=Ready` hung): now it is Stalled with
    InvalidSpec, a warning says why, and nothing is fetched or applied for it."""
    kube = FakeKube()
    r = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=FakeClock(),
        rng=random.Random(0),
    )  # fmt: skip
    _reserved_source(kube, r)
    with caplog.at_level(logging.WARNING, logger="controller.reconciler.controller"):
        r._run(CR_SOURCE, True)
        r._run(CR_SOURCE, False)  # again (its own status write's event): warned once
    conditions = _conditions(kube, "PolicySource", CR_SOURCE)
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Stalled"]["status"] == "True"
    assert conditions["Stalled"]["reason"] == "InvalidSpec"
    assert "reserved" in conditions["Stalled"]["message"]
    warned = [m for m in caplog.messages if "reserved" in m]
    assert len(warned) == 1, caplog.messages
    applied = {k for k, _, _ in kube.objects if k not in ("PolicySource", "Event")}
    assert not applied, applied


def test_the_reserved_policysource_does_not_stall_the_policy_custom_resources(
    tmp_path: Path,
) -> None:
    """The refused PolicySource applies nothing, so it mixes nothing: the custom
    resources are applied as ever (not Stalled with MixedSources)."""
    kube = FakeKube()
    r = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=FakeClock(),
        rng=random.Random(0),
    )  # fmt: skip
    _reserved_source(kube, r)
    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build()]:
        d = {**d, "apiVersion": "policy.ai.operator/v1"}
        d["metadata"] = {**d["metadata"], "generation": 1}
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))
    r._run(CR_SOURCE, True)
    quota = kube.objects[("ResourceQuota", "nlp", "gangops-quota")]
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert _conditions(kube, "Project", "nlp")["Ready"]["status"] == "True"
    assert _conditions(kube, "PolicySource", CR_SOURCE)["Stalled"]["reason"] == "InvalidSpec"


def test_the_policysource_schema_refuses_the_reserved_name() -> None:
    """The schema (and the CRD generated from it: a CEL rule at its root, checked by
    the API server at `kubectl apply`) refuses a PolicySource named like the custom
    resources' source; any other name passes."""
    schema = json.loads((schema_dir() / "policysource.schema.json").read_text())
    v = Draft202012Validator(schema)
    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PolicySource",
        "metadata": {"name": CR_SOURCE},
        "spec": {"url": "https://git.example/platform/policies.git"},
    }
    assert list(v.iter_errors(doc))
    assert not list(v.iter_errors({**doc, "metadata": {"name": "main"}}))
    (rule,) = schema["x-kubernetes-validations"]
    assert rule["rule"] == f"oldSelf.hasValue() || (self.metadata.name != '{CR_SOURCE}')"
    assert rule["optionalOldSelf"] is True  # at create only: one made before stays writable
    assert CR_SOURCE in rule["message"]


def test_a_fight_over_an_object_of_the_policy_crs_is_slowed_too(tmp_path: Path) -> None:
    """Found by a review: a drift fight was slowed for PolicySources only; an operator
    deleting the ResourceQuota the custom resources made, again and again, met a
    correction each time at the API server's speed."""
    kube, clock = FakeKube(), FakeClock()
    r = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=clock, rng=random.Random(0)
    )
    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build()]:
        d = {**d, "apiVersion": "policy.ai.operator/v1",
             "metadata": {**d["metadata"], "generation": 1}}  # fmt: skip
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))
    r.reconcile(CR_SOURCE)
    clock.advance(DRIFT_QUIET_S + 1)  # nobody changed anything back at once
    key = ("ResourceQuota", "nlp", "gangops-quota")
    waits: list[float] = []
    for _ in range(6):
        quota: Any = kube.objects.pop(key)  # the other writer deletes it
        r.managed["ResourceQuota"].forget("gangops-quota", "nlp")
        r._on_managed("DELETED", quota)
        waits.append(r._queue._due.pop(CR_SOURCE) - clock.monotonic())
        clock.advance(waits[-1])
        r.reconcile(CR_SOURCE)
        assert key in kube.objects  # corrected
        clock.advance(0.5)
    assert waits == [0, 1, 2, 4, 8, 16]


def test_only_what_the_policy_crs_applied_is_pruned_not_a_copy_of_their_label(
    tmp_path: Path,
) -> None:
    """Found by a review: the CR source, which records no inventory, pruned every
    object of a managed kind carrying its label, though gangops never applied it (a
    tenant's LimitRange copied from `kubectl get -o yaml`, a chart's PriorityClass).
    What it did apply still goes when its Project goes."""
    kube = FakeKube()
    r = Reconciler(kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=FakeClock(),
                   rng=random.Random(0))  # fmt: skip
    crs = [cluster(), *TIERS, project("nlp").max(gpu=8).build(), project("cv").build()]
    for d in crs:
        d = {**d, "apiVersion": "policy.ai.operator/v1",
             "metadata": {**d["metadata"], "generation": 1}}  # fmt: skip
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))
    r._run(CR_SOURCE, False)
    ours = {k for k in kube.objects if k[0] == "ResourceQuota" and k[1] == "cv"}
    assert ours  # cv's quota, applied by the source
    labels = {"gangops.ai/policysource": CR_SOURCE}
    copies = [
        {"apiVersion": "v1", "kind": "LimitRange", "spec": {"limits": []},
         "metadata": {"name": "own-defaults", "namespace": "nlp", "labels": labels}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 900000,
         "metadata": {"name": "ingress-critical", "labels": labels}},
    ]  # fmt: skip
    for obj in copies:
        r.managed[obj["kind"]].assume(kube.create(obj, field_manager="kubectl"))
    kube.delete(RESOURCES["Project"], "cv")
    r.policy_crs["Project"].forget("cv")
    r._run(CR_SOURCE, False)
    assert not ours & set(kube.objects)  # cv's objects pruned
    assert ("LimitRange", "nlp", "own-defaults") in kube.objects
    assert ("PriorityClass", "", "ingress-critical") in kube.objects


def test_while_the_policy_crs_are_refused_drift_is_put_back_from_the_last_set_applied(
    tmp_path: Path,
) -> None:
    """Noticed in stop 41: a PolicySource whose newest revision is refused keeps the
    cluster equal to its last good one, but the custom resources, refused as a set,
    put nothing back: a ResourceQuota deleted or raised by hand stayed so."""
    kube, clock = FakeKube(), FakeClock()
    r = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=clock, rng=random.Random(0)
    )

    def put(d: dict[str, Any], gen: int) -> None:
        d = {**d, "apiVersion": "policy.ai.operator/v1",
             "metadata": {**d["metadata"], "generation": gen}}  # fmt: skip
        kube.objects.pop((d["kind"], "", d["metadata"]["name"]), None)
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))

    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build(), project("cv").build()]:
        put(d, 1)
    r.reconcile(CR_SOURCE)
    key = ("ResourceQuota", "nlp", "gangops-quota")
    assert kube.objects[key]["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    # A team's edit that does not validate: guaranteed above its max (GP3xx).
    put(project("nlp").guaranteed(gpu=16).max(gpu=8).build(), 2)
    assert r.reconcile(CR_SOURCE) is None  # needs a person
    assert _conditions(kube, "Project", "nlp")["Ready"]["reason"] == "ValidationFailed"
    clock.advance(DRIFT_QUIET_S + 1)
    raised: Any = kube.objects.pop(key)  # someone raises the quota by hand
    raised["spec"]["hard"]["requests.nvidia.com/gpu"] = "64"
    r.managed["ResourceQuota"].assume(kube.create(raised, field_manager="kubectl"))
    r._on_managed("MODIFIED", raised)
    r.reconcile(CR_SOURCE)
    assert kube.objects[key]["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    cv = ("ResourceQuota", "cv", "gangops-quota")
    quota: Any = kube.objects.pop(cv)  # and another deletes cv's
    r.managed["ResourceQuota"].forget("gangops-quota", "cv")
    r._on_managed("DELETED", quota)
    r.reconcile(CR_SOURCE)
    assert cv in kube.objects
    assert _conditions(kube, "Project", "nlp")["Ready"]["reason"] == "ValidationFailed"
    r.stop()


def test_while_refused_what_a_deleted_custom_resource_made_is_not_made_again(
    tmp_path: Path,
) -> None:
    """Found by a review of the change above: an administrator deleted Project cv (and
    its quota by hand) while another team's edit kept the set refused, and cv's quota
    came back from the last set applied, with no Project left to say why."""
    kube, clock = FakeKube(), FakeClock()
    r = Reconciler(
        kube, settings=ReconcilerSettings(cache_dir=tmp_path), clock=clock, rng=random.Random(0)
    )
    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build(), project("cv").build()]:
        d = {**d, "apiVersion": "policy.ai.operator/v1",
             "metadata": {**d["metadata"], "generation": 1}}  # fmt: skip
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))
    r.reconcile(CR_SOURCE)
    bad = project("nlp").guaranteed(gpu=16).max(gpu=8).build()
    bad = {**bad, "apiVersion": "policy.ai.operator/v1",
           "metadata": {**bad["metadata"], "generation": 2}}  # fmt: skip
    kube.objects.pop(("Project", "", "nlp"))
    r.policy_crs["Project"].assume(kube.create(bad, field_manager="test"))
    r.reconcile(CR_SOURCE)  # refused: ValidationFailed
    kube.delete(RESOURCES["Project"], "cv")
    r.policy_crs["Project"].forget("cv")
    clock.advance(DRIFT_QUIET_S + 1)
    for key in [
        ("ResourceQuota", "cv", "gangops-quota"),
        ("ResourceQuota", "nlp", "gangops-quota"),
    ]:
        quota: Any = kube.objects.pop(key)
        r.managed["ResourceQuota"].forget(key[2], key[1])
        r._on_managed("DELETED", quota)
    r.reconcile(CR_SOURCE)
    assert ("ResourceQuota", "cv", "gangops-quota") not in kube.objects  # cv is gone
    assert ("ResourceQuota", "nlp", "gangops-quota") in kube.objects  # nlp's is put back
    r.stop()
