"""Plans: what applying one revision of the policies over another would change.

A plan compares two desired states (lists of compiled objects) and, where
they are known, the two policy sets, and says per object create, update
(with a field diff), recreate or delete. Steps that lose something are
marked destructive: a PriorityClass whose value or preemptionPolicy changes
must be deleted and recreated (both fields are immutable; the reconciler does
so only for a PolicySource with `allowRecreate: true`, and refuses the
revision otherwise), a deleted tier strands the jobs that use it, and a
project's guarantee cut (or its max cut below what it was guaranteed) makes
running work reclaimable. When `globalDefault` moves from one tier to another,
the old default's change (cleared, or deleted) comes first: Kubernetes allows
one default PriorityClass at a time, and the reconciler applies it in that
order. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

from controller.policy.compiler import ANNOTATION_REVISION, JOB_COUNT_KEY, object_key
from controller.policy.model import RESOURCE_NAMES, PolicySet, format_amount
from controller.quantity import QuantityError, parse_quantity

__all__ = ["Change", "FieldChange", "Plan", "make_plan", "object_id"]

Action = Literal["create", "update", "recreate", "delete"]
_IMMUTABLE = {"PriorityClass": ("value", "preemptionPolicy")}
_IGNORED = {("metadata", "annotations", ANNOTATION_REVISION)}
_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One leaf that differs; `None` old or new means absent."""

    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Change:
    """What happens to one object."""

    action: Action
    kind: str
    name: str
    namespace: str
    fields: tuple[FieldChange, ...] = ()
    notes: tuple[str, ...] = ()
    """Why this step is destructive or needs attention."""
    destructive: bool = False

    @property
    def id(self) -> str:
        """`Kind/name` or `Kind/namespace/name`."""
        return (
            f"{self.kind}/{self.namespace}/{self.name}"
            if self.namespace
            else f"{self.kind}/{self.name}"
        )


@dataclass(frozen=True)
class Plan:
    """Changes in apply order, plus set-level warnings."""

    changes: tuple[Change, ...]
    warnings: tuple[str, ...] = field(default=())
    """Destructive consequences not tied to one object (guarantee cuts)."""

    @property
    def destructive(self) -> bool:
        """True when any step loses something."""
        return bool(self.warnings) or any(c.destructive for c in self.changes)

    def counts(self) -> dict[str, int]:
        """Number of changes per action."""
        out = {"create": 0, "update": 0, "recreate": 0, "delete": 0}
        for c in self.changes:
            out[c.action] += 1
        return out


def object_id(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a Kubernetes object."""
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def make_plan(
    base: list[dict[str, Any]],
    head: list[dict[str, Any]],
    *,
    base_set: PolicySet | None = None,
    head_set: PolicySet | None = None,
) -> Plan:
    """The plan that takes a cluster from `base` to `head`."""
    old = {object_id(o): o for o in base}
    new = {object_id(o): o for o in head}
    changes: list[tuple[tuple[int, str, str, str], Change]] = []
    for key, obj in new.items():
        kind, ns, name = key
        if key not in old:
            changes.append((object_key(obj), Change("create", kind, name, ns)))
            continue
        fields = tuple(_diff(old[key], obj))
        if not fields:
            continue
        immutable = [f for f in fields if f.path in _IMMUTABLE.get(kind, ())]
        if immutable:
            notes = tuple(
                f"{f.path} is immutable: {f.old} -> {f.new}; the {kind} must be deleted and "
                "recreated, which the reconciler does only for a PolicySource with "
                "spec.allowRecreate: true (the default, false, refuses the whole revision: "
                "ImmutableFieldChange); running pods keep the old priority until they restart"
                for f in immutable
            )
            changes.append(
                (object_key(obj), Change("recreate", kind, name, ns, fields, notes, True))
            )
        else:
            notes = tuple(_update_notes(kind, fields))
            changes.append((object_key(obj), Change("update", kind, name, ns, fields, notes)))
    for key, obj in old.items():
        if key not in new:
            kind, ns, name = key
            notes, destructive = _delete_notes(kind, name)
            changes.append(
                (object_key(obj), Change("delete", kind, name, ns, (), notes, destructive))
            )
    ordered = [c for _, c in sorted(changes, key=lambda kc: kc[0])]
    # Deletions run after everything else, in reverse apply order.
    applied = [c for c in ordered if c.action != "delete"]
    deleted = [c for c in reversed(ordered) if c.action == "delete"]
    warnings = tuple(_guarantee_cuts(base_set, head_set)) if base_set and head_set else ()
    return Plan(changes=_handoff(applied + deleted, old, new), warnings=warnings)


def _defaults(objs: dict[tuple[str, str, str], dict[str, Any]]) -> list[str]:
    return sorted(
        name
        for (kind, _, name), o in objs.items()
        if kind == "PriorityClass" and o.get("globalDefault")
    )


def _handoff(
    changes: list[Change],
    old: dict[tuple[str, str, str], dict[str, Any]],
    new: dict[tuple[str, str, str], dict[str, Any]],
) -> tuple[Change, ...]:
    """`changes`, with a `globalDefault` that moves from one PriorityClass to another
    put in the order the reconciler applies it: Kubernetes' Priority admission refuses
    a second default (on create, update and dry-run), so the old default is cleared
    (or deleted) first, before anything else, and only then the new one set."""
    was, now = _defaults(old), _defaults(new)
    if len(was) != 1 or len(now) != 1 or was == now:
        return tuple(changes)
    giver, taker = was[0], now[0]
    first = next((c for c in changes if c.kind == "PriorityClass" and c.name == giver), None)
    if first is None:
        return tuple(changes)
    if first.action == "delete":
        how = "deleted"
        note = (
            f"deleted first, before {taker!r} takes globalDefault: Kubernetes allows one "
            "default PriorityClass at a time (a PolicySource with spec.prune: false keeps "
            f"it, and the API server then refuses {taker!r})"
        )
    else:
        how = "cleared"
        note = (
            f"globalDefault passes to {taker!r}: applied first, before {taker!r} is set, "
            "as Kubernetes allows one default PriorityClass at a time"
        )
    then = (
        f"takes globalDefault from {giver!r}, once {giver!r} is {how}; pods created in "
        "between that name no PriorityClass get priority 0"
    )
    out = [replace(first, notes=(*first.notes, note))]
    for c in changes:
        if c is first:
            continue
        if c.kind == "PriorityClass" and c.name == taker:
            c = replace(c, notes=(*c.notes, then))
        out.append(c)
    return tuple(out)


def _update_notes(kind: str, fields: tuple[FieldChange, ...]) -> Iterator[str]:
    if kind != "ResourceQuota":
        return
    for f in fields:
        if not f.path.startswith("spec.hard.") or f.old is None or f.new is None:
            continue
        try:
            lowered = parse_quantity(f.new) < parse_quantity(f.old)
        except QuantityError:
            continue
        if not lowered:
            continue
        if f.path == f"spec.hard.{JOB_COUNT_KEY}":
            # An object count holds no pods: what it stops is the TrainingJob create itself.
            kept = "existing TrainingJobs are kept, creating one is refused until fewer than"
            kept += " that are left"
        else:
            kept = "running pods keep running, new pods wait until usage falls under it"
        yield (
            f"{f.path} lowered {f.old} -> {f.new}: Kubernetes accepts a quota below current "
            f"usage; {kept}"
        )


def _delete_notes(kind: str, name: str) -> tuple[tuple[str, ...], bool]:
    if kind == "PriorityClass":
        return (
            (
                f"tier {name!r} disappears: pods and TrainingJobs that name it can no longer "
                "be created",
            ),
            True,
        )
    if kind == "Namespace":
        return (
            (
                "namespaces are never pruned unless pruning of namespaces is enabled; "
                "if it is, everything in the namespace is deleted",
            ),
            True,
        )
    if kind == "ResourceQuota":
        return (("the namespace loses its quota backstop",), True)
    return ((), False)


def _guarantee_cuts(base: PolicySet, head: PolicySet) -> Iterator[str]:
    before = {p.name: p for p in base.projects}
    for p in head.projects:
        old = before.get(p.name)
        if old is None:
            continue
        for r in RESOURCE_NAMES:
            og, ng, nm = old.quota.guaranteed.get(r), p.quota.guaranteed.get(r), p.quota.max.get(r)
            if og is not None and nm is not None and nm < og:
                yield (
                    f"project {p.name!r}: max {r} cut to {format_amount(r, nm)}, below the "
                    f"{format_amount(r, og)} it was guaranteed; running work above the new max "
                    "is reclaimed"
                )
            elif og is not None and (ng or 0) < og:
                yield (
                    f"project {p.name!r}: guaranteed {r} cut {format_amount(r, og)} -> "
                    f"{format_amount(r, ng or Fraction(0))}; its running work above the new "
                    "guarantee becomes borrowed and may be preempted"
                )


def _diff(old: dict[str, Any], new: dict[str, Any]) -> Iterator[FieldChange]:
    a, b = dict(_leaves(old, ())), dict(_leaves(new, ()))
    # A named list entry (a project, a tier) that exists on one side only is
    # one change, not one per field inside it.
    items_a, items_b = _items(a), _items(b)
    whole = {p: "added" for p in items_b - items_a} | {p: "removed" for p in items_a - items_b}
    # A named list that is empty on one side is a leaf there, and its items on the
    # other: its entries added or removed say it all (no "(absent) -> []").
    lists = {p[:-1] for p in items_a | items_b}
    reported: set[tuple[str, ...]] = set()
    for path in sorted(set(a) | set(b)):
        if path in _IGNORED or (path in lists and [] in (a.get(path), b.get(path))):
            continue
        item = next((path[:i] for i in range(1, len(path) + 1) if path[:i] in whole), None)
        if item is not None:
            if item not in reported:
                reported.add(item)
                entry = _rebuild(b if whole[item] == "added" else a, item)
                added = whole[item] == "added"
                yield FieldChange(_dotted(item), None if added else entry, entry if added else None)
            continue
        va, vb = a.get(path, _MISSING), b.get(path, _MISSING)
        if va != vb:
            yield FieldChange(
                _dotted(path),
                None if va is _MISSING else va,
                None if vb is _MISSING else vb,
            )


def _rebuild(leaves: dict[tuple[str, ...], Any], prefix: tuple[str, ...]) -> dict[str, Any]:
    """The entry at `prefix`, put back together from its leaves."""
    out: dict[str, Any] = {}
    for path, value in leaves.items():
        if path[: len(prefix)] != prefix or len(path) == len(prefix):
            continue
        node = out
        for part in path[len(prefix) : -1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _items(leaves: dict[tuple[str, ...], Any]) -> set[tuple[str, ...]]:
    return {path[: i + 1] for path in leaves for i, part in enumerate(path) if part.startswith("[")}


def _leaves(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and k.endswith(".json") and path and path[-1] == "data":
                try:
                    yield from _leaves(json.loads(v), (*path, k))
                    continue
                except ValueError:
                    pass
            yield from _leaves(v, (*path, str(k)))
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "name" in v for v in value)
    ):
        for v in value:
            yield from _leaves(v, (*path, f"[{v['name']}]"))
    else:
        yield path, value


def _dotted(path: tuple[str, ...]) -> str:
    out = ""
    for p in path:
        out += p if p.startswith("[") else (f".{p}" if out else p)
    return out
