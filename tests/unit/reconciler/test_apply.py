"""What counts as "nothing to change": the comparison that lets a no-op reconcile send
no request at all, and the inventory ids."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from controller.kube.client import ApiError
from controller.reconciler.apply import (
    ANNOTATION_PRUNE,
    LABEL_SOURCE,
    Ref,
    SyncOptions,
    owned_paths,
    plan_sync,
    prunable,
    sync,
    up_to_date,
)
from controller.reconciler.liveplan import LivePlanError, live_plan
from controller.reconciler.status import kstatus
from tests.unit.kube.fakes import FakeKube


def quota(gpu: str, *, revision: str = "r1", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "gangops-quota",
            "namespace": "nlp",
            "labels": {"app.kubernetes.io/managed-by": "gangops"},
            "annotations": {"gangops.ai/revision": revision},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": gpu, **(extra or {})}},
    }


def live(desired: dict[str, Any], fields: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`desired` as the API server returns it: defaults, status, managedFields."""
    obj = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "9", "uid": "u"}}
    obj["status"] = {"used": {"requests.nvidia.com/gpu": "0"}}
    obj["metadata"]["managedFields"] = [
        {"manager": "gangops", "operation": "Apply", "fieldsV1": fields},
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "fieldsV1": {"f:status": {"f:used": {}}},
        },
    ]
    obj.update(changes)
    return obj


OWNED = {
    "f:metadata": {
        "f:labels": {"f:app.kubernetes.io/managed-by": {}},
        "f:annotations": {"f:gangops.ai/revision": {}},
    },
    "f:spec": {"f:hard": {"f:requests.nvidia.com/gpu": {}}},
}


def test_same_object_is_up_to_date_even_with_a_new_revision_annotation() -> None:
    assert up_to_date(quota("8"), live(quota("8"), OWNED))
    assert up_to_date(quota("8", revision="r2"), live(quota("8"), OWNED))


@pytest.mark.parametrize(
    ("desired", "have", "why"),
    [
        (quota("8"), None, "absent"),
        (quota("16"), live(quota("8"), OWNED), "a value differs (a hand edit)"),
        (quota("8", extra={"requests.cpu": "4"}), live(quota("8"), OWNED), "a field is missing"),
        (
            quota("8"),
            live(
                quota("8", extra={"requests.cpu": "4"}),
                {
                    **OWNED,
                    "f:spec": {"f:hard": {"f:requests.nvidia.com/gpu": {}, "f:requests.cpu": {}}},
                },
            ),
            "gangops owns a field the revision dropped: apply must remove it",
        ),
        (
            quota("8"),
            live(quota("8"), {"f:spec": {"f:hard": {'k:{"x":1}': {}}}}),
            "owned fields use list keys: only the server can tell",
        ),
    ],
)
def test_needs_apply(desired: dict[str, Any], have: dict[str, Any] | None, why: str) -> None:
    assert not up_to_date(desired, have), why


def test_zero_values_match_fields_the_server_omits() -> None:
    desired = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "batch"},
        "value": 1,
        "globalDefault": False,
    }
    have = {**desired, "metadata": {"name": "batch", "managedFields": []}}
    del have["globalDefault"]  # omitempty: false is not returned
    assert up_to_date(desired, have)
    assert not up_to_date({**desired, "globalDefault": True}, have)


def test_a_field_another_manager_added_does_not_count() -> None:
    have = live(quota("8", extra={"requests.cpu": "4"}), OWNED)  # cpu set by someone else
    assert up_to_date(quota("8"), have)


def test_owned_paths() -> None:
    have = live(quota("8"), OWNED)
    paths = owned_paths(have, "gangops")
    assert paths is not None
    assert ("spec", "hard", "requests.nvidia.com/gpu") in paths
    assert ("status", "used") not in paths
    assert owned_paths(have, "nobody") == set()


def test_inventory_ids_round_trip_and_order() -> None:
    pc = Ref("PriorityClass", "", "high", "scheduling.k8s.io/v1")
    rq = Ref("ResourceQuota", "nlp", "gangops-quota", "v1")
    ns = Ref("Namespace", "", "nlp", "v1")
    assert pc.id == "_high_scheduling.k8s.io_PriorityClass"
    assert rq.entry() == {"id": "nlp_gangops-quota__ResourceQuota", "v": "v1"}
    for ref in (pc, rq, ns):
        assert Ref.from_entry(ref.entry()) == ref
    assert sorted([rq, ns, pc], key=Ref.rank) == [pc, ns, rq]


# ----------------------------------------------------------------- the sync plan


def _obj(kind: str, name: str, namespace: str = "", **spec: Any) -> dict[str, Any]:
    version = "scheduling.k8s.io/v1" if kind == "PriorityClass" else "v1"
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": version, "kind": kind, "metadata": meta, **spec}


def _live(obj: dict[str, Any], source: str = "src", **changes: Any) -> dict[str, Any]:
    """`obj` as applied by `source` and stored."""
    meta = {**obj["metadata"], "labels": {LABEL_SOURCE: source}, "uid": "u"}
    return {**obj, "metadata": meta, **changes}


NS_A = _obj("Namespace", "a")
QUOTA_A = _obj("ResourceQuota", "q", "a", spec={"hard": {"requests.nvidia.com/gpu": "8"}})
PC = _obj("PriorityClass", "high", value=1000)


def _names(objs: list[dict[str, Any]]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objs]


PLAN_CASES = [
    # (case, desired, live, inventory, options, other live sources, the plan's parts)
    (
        "everything as desired: nothing to dry-run, no request at all",
        [NS_A, QUOTA_A], [_live(NS_A), _live(QUOTA_A)], [], {}, set(),
        {"refusal": None, "dry_run": [], "unchecked": [], "unchanged": 2},
    ),
    (
        "a changed object is dry-run",
        [NS_A, QUOTA_A], [_live(NS_A), _live(QUOTA_A, spec={"hard": {}})], [], {}, set(),
        {"dry_run": ["ResourceQuota/q"], "unchanged": 1},
    ),
    (
        "an object in a namespace the revision creates waits for the namespace's dry-run",
        [NS_A, QUOTA_A], [], [], {}, set(),
        {"dry_run": ["Namespace/a"], "unchecked": ["ResourceQuota/q"], "unchanged": 0},
    ),
    (
        "an object of another source that still exists refuses the revision",
        [PC], [_live(PC, source="other")], [], {}, {"other"},
        {"refusal": ("OwnershipConflict", ["PriorityClass high belongs to PolicySource other"])},
    ),
    (
        "an object of a deleted source is adopted",
        [PC], [_live(PC, source="other")], [], {}, set(),
        {"refusal": None, "dry_run": ["PriorityClass/high"]},
    ),
    (
        "a PriorityClass's value cannot change in place",
        [PC], [_live(PC, value=10)], [], {}, set(),
        {"refusal": ("ImmutableFieldChange", [
            "PriorityClass high: value 10 -> 1000 (immutable; set spec.allowRecreate to "
            "delete and recreate)"])},
    ),
    (
        "... unless the source allows recreating it",
        [PC], [_live(PC, value=10)], [], {"allow_recreate": True}, set(),
        {"refusal": None, "recreate": ["PriorityClass/high"], "dry_run": []},
    ),
    (
        "what the inventory held and the revision lacks is pruned in reverse apply order",
        [], [], [Ref.of(NS_A), Ref.of(PC), Ref.of(QUOTA_A)], {}, set(),
        {"prune": ["ResourceQuota a/q", "Namespace a", "PriorityClass high"], "left": []},
    ),
    (
        "a source that does not prune leaves them",
        [], [], [Ref.of(NS_A)], {"prune": False}, set(),
        {"prune": [], "left": ["Namespace a"]},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("desired", "live_objs", "inventory", "options", "others", "parts"),
    [c[1:] for c in PLAN_CASES],
    ids=[c[0] for c in PLAN_CASES],
)
def test_plan_sync(
    desired: list[dict[str, Any]],
    live_objs: list[dict[str, Any]],
    inventory: list[Ref],
    options: dict[str, Any],
    others: set[str],
    parts: dict[str, Any],
) -> None:
    current = {Ref.of(o): o for o in live_objs}
    plan = plan_sync(
        desired,
        current,
        inventory=inventory,
        options=SyncOptions(source="src", **options),
        other_sources=others,
    )
    got = {
        "refusal": plan.refusal,
        "dry_run": _names(plan.dry_run),
        "unchecked": _names(plan.unchecked),
        "recreate": _names(plan.recreate),
        "unchanged": plan.unchanged,
        "prune": [str(r) for r in plan.prune],
        "left": plan.left,
    }
    assert {k: got[k] for k in parts} == parts


@pytest.mark.parametrize(
    ("ref", "live_obj", "options", "expected"),
    [
        (Ref.of(QUOTA_A), _live(QUOTA_A), {}, True),
        (Ref.of(NS_A), _live(NS_A), {}, False),
        (Ref.of(NS_A), _live(NS_A), {"prune_namespaces": True}, True),
        (Ref.of(PC), _live(PC, source="other"), {}, False),
        # made by hand under the name after ours went (found by a review: pruned)
        (
            Ref.of(QUOTA_A),
            {**QUOTA_A, "metadata": {**QUOTA_A["metadata"], "labels": {}}},
            {},
            False,
        ),
        (
            Ref.of(PC),
            {
                **_live(PC),
                "metadata": {
                    **_live(PC)["metadata"],
                    "annotations": {ANNOTATION_PRUNE: "disabled"},
                },
            },
            {},
            False,
        ),
    ],
    ids=[
        "an object of this source is pruned",
        "a namespace is kept",
        "... unless the source prunes namespaces",
        "an object claimed by another source is kept",
        "an unlabelled object of the same name is kept",
        "an object with prune disabled is kept",
    ],
)
def test_prunable(
    ref: Ref, live_obj: dict[str, Any], options: dict[str, Any], expected: bool
) -> None:
    assert prunable(ref, live_obj, SyncOptions(source="src", **options)) is expected


class _Cache:
    """The controller's cache of managed objects (the `LiveObjects` seam), empty."""

    def get(self, ref: Ref) -> dict[str, Any] | None:
        return None

    def assume(self, obj: dict[str, Any]) -> None:
        pass

    def forget(self, ref: Ref) -> None:
        pass


def test_a_revision_refused_at_the_dry_run_applies_nothing_and_stalls() -> None:
    kube = FakeKube()
    kube.refuse["high"] = ApiError(422, "Invalid", "value: must be no more than 1000000000")
    with ThreadPoolExecutor(2) as pool:
        result = sync(
            kube,
            _Cache(),
            pool,
            [PC, _obj("Namespace", "b"), _obj("PriorityClass", "low", value=1)],
            inventory=[],
            options=SyncOptions(source="src"),
            source_exists=lambda _: False,
        )
    assert sorted(kube.dry_runs) == ["b", "high", "low"]
    assert kube.writes == []  # nothing applied, not even the objects the server accepted
    assert (result.ok, result.reason) == (False, "DryRunFailed")
    assert result.message == "PriorityClass high: value: must be no more than 1000000000"
    status = kstatus(
        _obj("PolicySource", "src") | {"metadata": {"name": "src", "generation": 2}},
        ok=result.ok,
        reason=result.reason,
        message=result.message,
        now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    stalled = [c for c in status["conditions"] if c["type"] == "Stalled"]
    assert [(c["status"], c["reason"], c["message"]) for c in stalled] == [
        ("True", "DryRunFailed", result.message)
    ]


# ----------------------------------------------------------------- moving globalDefault


class _PriorityAdmission(FakeKube):
    """The fake, with Kubernetes' Priority admission: a PriorityClass that sets
    globalDefault is refused (403, dry run or not) while another class has it."""

    def _refuse_second_default(self, obj: dict[str, Any]) -> None:
        if obj["kind"] != "PriorityClass" or not obj.get("globalDefault"):
            return
        for (kind, _, name), have in self.objects.items():
            if (
                kind == "PriorityClass"
                and name != obj["metadata"]["name"]
                and have.get("globalDefault")
            ):
                raise ApiError(
                    403,
                    "Forbidden",
                    f"PriorityClass {name} is already marked as default. "
                    "Only one default can exist",
                )

    def apply(self, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._refuse_second_default(obj)
        return super().apply(obj, **kwargs)

    def create(self, obj: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
        self._refuse_second_default(obj)
        return super().create(obj, field_manager=field_manager)


class _StoredCache:
    """The controller's cache as the informers fill it: what the fake stores."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def get(self, ref: Ref) -> dict[str, Any] | None:
        obj = self.kube.objects.get((ref.kind, ref.namespace, ref.name))
        return dict(obj) if obj else None

    def assume(self, obj: dict[str, Any]) -> None:
        pass

    def forget(self, ref: Ref) -> None:
        pass


def _tier(name: str, value: int, default: bool) -> dict[str, Any]:
    return _obj("PriorityClass", name, value=value, preemptionPolicy="Never", globalDefault=default)


def _sync(kube: FakeKube, desired: list[dict[str, Any]], inventory: list[Ref], **opts: Any) -> Any:
    with ThreadPoolExecutor(4) as pool:
        return sync(
            kube,
            _StoredCache(kube),
            pool,
            desired,
            inventory=inventory,
            options=SyncOptions(source="src", **opts),
            source_exists=lambda _: False,
        )


def _defaults(kube: FakeKube) -> list[str]:
    return sorted(
        name
        for (kind, _, name), o in kube.objects.items()
        if kind == "PriorityClass" and o.get("globalDefault")
    )


@pytest.mark.parametrize(
    ("head", "writes", "deleted"),
    [
        (
            [_tier("alpha", 100, True), _tier("zulu", 1000, False)],
            [("apply", "zulu"), ("apply", "alpha")],
            [],
        ),
        (
            [_tier("alpha", 100, True)],
            [("delete", "zulu"), ("apply", "alpha")],
            ["PriorityClass zulu"],
        ),
        (
            [_tier("alpha", 100, False), _tier("standard", 1000, True)],
            [("delete", "zulu"), ("apply", "standard")],
            ["PriorityClass zulu"],
        ),
    ],
    ids=[
        "the default moves to another tier: cleared first, then set",
        "the default tier is pruned and another takes it: deleted first, then set",
        "the default tier is renamed: the old one deleted first, the new one created",
    ],
)
def test_global_default_handoff_is_applied_in_one_revision(
    head: list[dict[str, Any]], writes: list[tuple[str, str]], deleted: list[str]
) -> None:
    """Found by a review (D1): the new default's dry-run ran against the old state, which
    the Priority admission plugin refuses, so the revision could never be applied."""
    kube = _PriorityAdmission()
    base = [_tier("alpha", 100, False), _tier("zulu", 1000, True)]
    seeded = _sync(kube, base, [])
    assert seeded.ok, seeded.message
    kube.writes.clear()
    result = _sync(kube, head, [Ref.of(o) for o in base])
    assert (result.ok, result.reason) == (True, "ReconciliationSucceeded"), result.message
    assert [w for w in kube.writes if w in writes] == writes  # in this order
    assert result.deleted == deleted
    assert _defaults(kube) == [next(o["metadata"]["name"] for o in head if o["globalDefault"])]
    assert {str(r) for r in result.inventory} == {f"PriorityClass {n}" for n in _names_of(head)}


def _names_of(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_a_default_held_by_a_class_of_no_source_still_refuses_the_revision() -> None:
    """Only a default this source clears or prunes is handed off: another's is refused
    at the dry-run, with the API server's reason, and nothing is applied."""
    kube = _PriorityAdmission()
    kube.create(_tier("theirs", 5, True), field_manager="kubectl")
    kube.writes.clear()
    result = _sync(kube, [_tier("alpha", 100, True)], [])
    assert (result.ok, result.reason) == (False, "DryRunFailed")
    assert "theirs is already marked as default" in result.message
    assert kube.writes == []


def test_plan_sync_hands_the_default_over() -> None:
    old = _live(_tier("zulu", 1000, True))
    plan = plan_sync(
        [_tier("alpha", 100, True)],
        {Ref.of(old): old},
        inventory=[Ref.of(old)],
        options=SyncOptions(source="src"),
        other_sources=set(),
    )
    assert _names(plan.handoff) == ["PriorityClass/alpha"]
    assert [str(r) for r in plan.prune_first] == ["PriorityClass zulu"]
    assert plan.prune == []  # deleted before the apply, not again after it
    kept = plan_sync(
        [_tier("alpha", 100, True)],
        {Ref.of(old): old},
        inventory=[Ref.of(old)],
        options=SyncOptions(source="src", prune=False),
        other_sources=set(),
    )
    assert (kept.handoff, kept.prune_first, kept.left) == ([], [], ["PriorityClass zulu"])


@pytest.mark.parametrize(
    "head",
    [
        [_tier("alpha", 100, True), _tier("zulu", 1000, False)],
        [_tier("alpha", 100, True)],
    ],
    ids=["moved", "the old default deleted"],
)
def test_plan_against_the_cluster_shows_a_handoff_the_reconciler_applies(
    head: list[dict[str, Any]],
) -> None:
    """`plan --cluster` dry-ran the new default against the old one, and exited 2 with
    the API server's refusal for a commit the reconciler applies in one revision."""
    kube = _PriorityAdmission()
    assert _sync(kube, [_tier("alpha", 100, False), _tier("zulu", 1000, True)], []).ok
    plan = live_plan(kube, head, source="src")
    changed = {(c.id, f.path, f.new) for c in plan.changes for f in c.fields}
    assert ("PriorityClass/alpha", "globalDefault", True) in changed
    assert _defaults(kube) == ["zulu"]  # a dry run: nothing stored
    # a default no source of gangops holds is no handoff: the API server's refusal
    kube.create(_tier("theirs", 5, False), field_manager="kubectl")
    kube.objects[("PriorityClass", "", "zulu")]["globalDefault"] = False
    kube.objects[("PriorityClass", "", "theirs")]["globalDefault"] = True
    with pytest.raises(LivePlanError, match="theirs is already marked as default"):
        live_plan(kube, head, source="src")


def test_plan_against_the_cluster_hands_no_default_over_from_a_class_kept_unpruned() -> None:
    """Found by a review of the day: a source that does not prune keeps the old default,
    and the reconciler refuses the revision; the plan showed a clean handoff."""
    kube = _PriorityAdmission()
    assert _sync(kube, [_tier("alpha", 100, False), _tier("zulu", 1000, True)], []).ok
    head = [_tier("alpha", 100, True)]
    assert live_plan(kube, head, source="src", prune=True).changes
    with pytest.raises(LivePlanError, match="zulu is already marked as default"):
        live_plan(kube, head, source="src", prune=False)
