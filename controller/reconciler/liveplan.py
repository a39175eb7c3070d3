"""`gangops plan --cluster`: the plan against a running cluster, not a Git ref.

For each object the working tree compiles to, the live object is read; one
that already matches (the same test the reconciler uses, so "no changes"
here means the reconciler would write nothing) is left out; every other is
server-side applied with `dryRun=All`, so admission, defaulting and
validation run exactly as they would for real and nothing is stored. The
plan compares the live object with the dry-run result on the fields the
policies set. Objects gangops manages in the cluster that the working tree
no longer compiles to are deletions. The rendering is `plan.make_plan`'s,
the same as for `--base`. A PriorityClass that takes `globalDefault` from one
the working tree clears or deletes is dry-run without it, as the reconciler
does (`apply.py`): Kubernetes allows one default at a time, and the reconciler
lets the old one go first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controller.kube.client import RESOURCES, ApiError, KubeApi, resource_for
from controller.policy.compiler import ANNOTATION_REVISION, APPLY_ORDER, LABEL_MANAGED_BY
from controller.policy.plan import Plan, make_plan, object_id
from controller.reconciler.apply import FIELD_MANAGER, LABEL_SOURCE, sets_default, up_to_date

__all__ = ["LivePlanError", "live_plan"]

Obj = dict[str, Any]
_IMMUTABLE = {"PriorityClass": ("value", "preemptionPolicy")}


class LivePlanError(Exception):
    """The API server refused the dry run of an object; the message says which and why."""


def _project(obj: Obj, shape: Any) -> Any:
    """`obj` cut down to the fields present in `shape` (the desired object)."""
    if isinstance(shape, dict) and isinstance(obj, dict):
        return {k: _project(obj[k], v) for k, v in shape.items() if k in obj}
    return obj


def _shape(desired: Obj) -> Obj:
    meta = {k: v for k, v in desired["metadata"].items()}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != ANNOTATION_REVISION
    }
    meta["annotations"] = annotations
    return {**desired, "metadata": meta}


def _managed(kube: KubeApi, kinds: Iterable[str], selector: str) -> list[Obj]:
    out: list[Obj] = []
    for kind in kinds:
        items, _ = kube.list(RESOURCES[kind], label_selector=selector)
        out += items
    return out


def _labelled(obj: Obj, source: str) -> Obj:
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "labels": {**meta.get("labels", {}), LABEL_SOURCE: source}}}


def _handoff(
    kube: KubeApi, desired: list[Obj], selector: tuple[str, str], *, prune: bool
) -> set[str]:
    """The PriorityClasses of `desired` that take `globalDefault` from classes the
    working tree clears or deletes (every class that holds it now; deleted only
    where the source prunes): the reconciler lets those go first. None when another
    class holds it (the API server refuses the revision then, and the dry run says
    so)."""
    wanted = {o["metadata"]["name"]: o for o in desired if o["kind"] == "PriorityClass"}
    takers = {name for name, o in wanted.items() if sets_default(o)}
    if not takers:
        return set()
    classes, _ = kube.list(RESOURCES["PriorityClass"])
    holders = [o for o in classes if sets_default(o) and o["metadata"]["name"] not in takers]

    def let_go(held: Obj) -> bool:
        name, labels = held["metadata"]["name"], held["metadata"].get("labels") or {}
        if name in wanted:
            return not sets_default(wanted[name])
        return prune and labels.get(selector[0]) == selector[1]  # deleted, as shown below

    return takers if holders and all(let_go(h) for h in holders) else set()


def live_plan(
    kube: KubeApi, desired: list[Obj], *, source: str | None = None, prune: bool = True
) -> Plan:
    """The plan that takes the live cluster to `desired`.

    With `source` (a PolicySource name) the objects are compared as that
    source's reconciler would apply them (labelled with it), and only objects
    of that source can be deletions; without it, every object gangops manages.
    `prune`: whether the source deletes what the tree no longer compiles to (its
    `spec.prune`), which decides whether a default it drops is handed over.
    """
    if source is not None:
        desired = [_labelled(o, source) for o in desired]
    label = (LABEL_SOURCE, source) if source else (LABEL_MANAGED_BY, "gangops")
    handoff = _handoff(kube, desired, label, prune=prune)
    base: list[Obj] = []
    head: list[Obj] = []
    for obj in desired:
        res = resource_for(obj)
        meta = obj["metadata"]
        live = kube.get(res, meta["name"], meta.get("namespace"))
        shape = _shape(obj)
        if live is not None and up_to_date(obj, live, manager=FIELD_MANAGER):
            base.append(_project(live, shape))
            head.append(_project(live, shape))
            continue
        if live is not None and any(
            live.get(f) != obj.get(f) for f in _IMMUTABLE.get(obj["kind"], ())
        ):
            # The API server refuses this change outright; the plan shows the
            # delete-and-recreate it takes (with allowRecreate).
            base.append(_project(live, shape))
            head.append(_project(obj, shape))
            continue
        taking = obj["kind"] == "PriorityClass" and obj["metadata"]["name"] in handoff
        try:
            if taking:  # the old default still holds it: checked without, shown with
                after = kube.apply({**obj, "globalDefault": False}, field_manager=FIELD_MANAGER,
                                   dry_run=True)  # fmt: skip
                after = {**after, "globalDefault": True}
            else:
                after = kube.apply(obj, field_manager=FIELD_MANAGER, dry_run=True)
        except ApiError as e:
            if e.status == 404 and live is None:
                after = obj  # its namespace does not exist yet: it is created first
            else:
                raise LivePlanError(f"{'/'.join(object_id(obj))}: {e.message}") from None
        if live is not None:
            base.append(_project(live, shape))
        head.append(_project(after, shape))
    wanted = {object_id(o) for o in desired}
    selector = f"{label[0]}={label[1]}"
    for live in _managed(kube, [k for k in APPLY_ORDER if k in RESOURCES], selector):
        if object_id(live) not in wanted:
            base.append(live)
    return make_plan(base, head)
