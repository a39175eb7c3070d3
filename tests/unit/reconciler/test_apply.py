"""What counts as "nothing to change": the comparison that lets a no-op reconcile send
no request at all, and the inventory ids."""

from __future__ import annotations

from typing import Any

import pytest

from controller.reconciler.apply import Ref, owned_paths, up_to_date


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
