"""Applying one revision's objects: all or nothing, then prune.

The steps, for the objects a revision compiles to:

1. compare each with the live object in the cache: an object whose fields
   (all of them, and no more than gangops owns) already match needs nothing,
   so a reconcile with nothing to change sends no request at all;
2. refuse the revision, touching nothing, if an object belongs to another
   source, or a PriorityClass's immutable `value`/`preemptionPolicy` changed
   and recreating is not allowed;
3. server-side apply every remaining object with `dryRun=All`: admission and
   validation run, nothing is stored; any refusal refuses the revision;
4. apply for real, stage by stage in kind order (PriorityClasses, Namespaces,
   ResourceQuotas, ...), each stage in parallel; a PriorityClass to recreate
   is deleted and created again in its stage;
5. prune what the previous inventory holds and this revision does not, in
   reverse kind order: never a Namespace unless the source opts in, never an
   object annotated `gangops.ai/prune: disabled` or claimed by another source.

The `gangops.ai/revision` annotation records the revision that last changed
an object: an object whose only difference is that annotation is left alone,
so a commit that touches one project rewrites that project's objects only.
An object in a namespace this revision creates cannot be dry-run before the
namespace exists; the namespace's own dry-run stands for it, and the API
server validates it when it is applied.

Kubernetes' Priority admission refuses a PriorityClass with `globalDefault:
true` while another class has it, on create, update and dry-run alike. A
revision that moves the default from one of this source's classes to another
(or renames the default tier) is therefore ordered: the new default is dry-run
without `globalDefault` (everything else about it is checked), and in the
PriorityClass stage the old default is cleared (or, pruned, deleted) first,
then the new one is set. A default held by a class this source does not own
(or may not prune) is no handoff: the dry-run refuses the revision.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.kube.client import FIELD_MANAGER, RESOURCES, ApiError, KubeApi, resource_for
from controller.policy.compiler import ANNOTATION_REVISION, APPLY_ORDER, object_key

__all__ = [
    "ANNOTATION_PRUNE",
    "FIELD_MANAGER",
    "LABEL_SOURCE",
    "LiveObjects",
    "Ref",
    "SyncOptions",
    "SyncPlan",
    "SyncResult",
    "clear_default",
    "owned_paths",
    "plan_sync",
    "prunable",
    "sets_default",
    "sync",
    "up_to_date",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

LABEL_SOURCE = "gangops.ai/policysource"
"""Which PolicySource an object belongs to (routes drift events; guards against two
sources fighting over one object)."""
ANNOTATION_PRUNE = "gangops.ai/prune"
"""`disabled` on a live object keeps prune from deleting it."""

_IMMUTABLE = ("value", "preemptionPolicy")


@dataclass(frozen=True, order=True)
class Ref:
    """One object in an inventory."""

    kind: str
    namespace: str
    name: str
    api_version: str

    @property
    def id(self) -> str:
        """`<namespace>_<name>_<group>_<kind>`, Flux's inventory id."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.namespace}_{self.name}_{group}_{self.kind}"

    def entry(self) -> dict[str, str]:
        """The inventory entry written to status."""
        return {"id": self.id, "v": self.api_version.rpartition("/")[2]}

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @classmethod
    def of(cls, obj: Obj) -> Ref:
        meta = obj["metadata"]
        return cls(obj["kind"], meta.get("namespace", ""), meta["name"], obj["apiVersion"])

    @classmethod
    def from_entry(cls, entry: dict[str, str]) -> Ref:
        namespace, name, group, kind = entry["id"].split("_", 3)
        version = entry.get("v", "v1")
        return cls(kind, namespace, name, f"{group}/{version}" if group else version)

    def skeleton(self) -> Obj:
        meta = {"name": self.name, **({"namespace": self.namespace} if self.namespace else {})}
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta}

    def rank(self) -> tuple[int, str, str, str]:
        return object_key(self.skeleton())


class LiveObjects(Protocol):
    """The controller's cache of the objects it manages."""

    def get(self, ref: Ref) -> Obj | None: ...

    def assume(self, obj: Obj) -> None: ...

    def forget(self, ref: Ref) -> None: ...


@dataclass(frozen=True)
class SyncOptions:
    """What a PolicySource allows."""

    source: str
    """The PolicySource's name, written into the LABEL_SOURCE label."""
    prune: bool = True
    prune_namespaces: bool = False
    allow_recreate: bool = False


@dataclass
class SyncResult:
    """What one sync did; `reason` is a kstatus condition reason."""

    ok: bool
    reason: str
    message: str
    inventory: list[Ref]
    created: list[str] = field(default_factory=list)
    configured: list[str] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    """Objects no longer wanted but kept (namespaces, opted-out objects)."""
    unchanged: int = 0

    @property
    def writes(self) -> int:
        """Objects written (created, configured, recreated or deleted)."""
        return len(self.created) + len(self.configured) + len(self.recreated) + len(self.deleted)

    def summary(self) -> str:
        parts = [
            f"{len(v)} {k}"
            for k, v in (
                ("created", self.created),
                ("configured", self.configured),
                ("recreated", self.recreated),
                ("deleted", self.deleted),
            )
            if v
        ]
        return ", ".join(parts) or "no changes"


# ----------------------------------------------------------------- comparing


def _without_revision(obj: Obj) -> Obj:
    annotations = obj.get("metadata", {}).get("annotations")
    if not annotations or ANNOTATION_REVISION not in annotations:
        return obj
    out = copy.copy(obj)
    out["metadata"] = {**obj["metadata"]}
    out["metadata"]["annotations"] = {
        k: v for k, v in annotations.items() if k != ANNOTATION_REVISION
    }
    return out


def _contains(want: Any, have: Any) -> bool:
    """Is every field of `want` in `have` with the same value? A zero value (false, 0,
    "") matches an absent field: the API server omits them (`omitempty`)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            _contains(v, have[k]) if k in have else _zero(v) for k, v in want.items()
        )
    return bool(want == have)


def _zero(value: Any) -> bool:
    return value is False or (type(value) in (int, str) and not value)


def _paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out = {prefix}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out |= _paths(v, (*prefix, k))
    return out


def owned_paths(live: Obj, manager: str) -> set[tuple[str, ...]] | None:
    """The field paths `manager` owns by apply in `live` (from managedFields), or None
    when they are not plain field names (list keys, set values)."""
    out: set[tuple[str, ...]] = set()

    def walk(fields: dict[str, Any], prefix: tuple[str, ...]) -> bool:
        for k, v in fields.items():
            if k == ".":
                out.add(prefix)
                continue
            if not k.startswith("f:"):
                return False
            path = (*prefix, k[2:])
            out.add(path)
            if not walk(v, path):
                return False
        return True

    for entry in live.get("metadata", {}).get("managedFields") or []:
        mine = entry.get("manager") == manager and entry.get("operation") == "Apply"
        if mine and not walk(entry.get("fieldsV1") or {}, ()):
            return None
    return out


def up_to_date(desired: Obj, live: Obj | None, *, manager: str = FIELD_MANAGER) -> bool:
    """Would applying `desired` change nothing? Every field of `desired` has its value in
    `live`, and `manager` owns no field that `desired` lacks (apply would remove it).
    The revision annotation is ignored."""
    if live is None:
        return False
    want = _without_revision(desired)
    if not _contains(want, live):
        return False
    owned = owned_paths(live, manager)
    if owned is None:
        return False
    wanted = _paths(desired)
    return owned <= wanted


def _same_stored(a: Obj, b: Obj) -> bool:
    """Would storing `a` leave `b` as it is (bookkeeping fields aside)?"""

    def strip(o: Obj) -> Obj:
        o = _without_revision(o)
        meta = {
            k: v
            for k, v in o["metadata"].items()
            if k not in ("resourceVersion", "managedFields", "generation")
        }
        return {**o, "metadata": meta}

    return strip(a) == strip(b)


# ----------------------------------------------------------------- syncing


def _label(obj: Obj, source: str) -> Obj:
    meta = obj["metadata"]
    labels = {**(meta.get("labels") or {}), LABEL_SOURCE: source}
    return {**obj, "metadata": {**meta, "labels": labels}}


def _owner(live: Obj | None) -> str:
    return str(((live or {}).get("metadata", {}).get("labels") or {}).get(LABEL_SOURCE, ""))


def _parallel(
    pool: Executor, fn: Callable[[Obj], Obj | None], objs: Iterable[Obj]
) -> list[tuple[Obj, Obj | None, ApiError | None]]:
    """Run `fn` on each object; (object, result, error) in input order."""
    items = list(objs)
    futures = [pool.submit(fn, o) for o in items]
    out: list[tuple[Obj, Obj | None, ApiError | None]] = []
    for obj, fut in zip(items, futures, strict=True):
        try:
            out.append((obj, fut.result(), None))
        except ApiError as e:
            out.append((obj, None, e))
    return out


def _immutable_changes(desired: Obj, live: Obj | None) -> list[str]:
    if live is None or desired["kind"] != "PriorityClass":
        return []
    return [
        f"{f} {live.get(f)!r} -> {desired.get(f)!r}"
        for f in _IMMUTABLE
        if f in desired and live.get(f) != desired.get(f)
    ]


def _first(messages: list[str], limit: int = 5) -> str:
    more = f" (and {len(messages) - limit} more)" if len(messages) > limit else ""
    return "; ".join(messages[:limit]) + more


@dataclass(frozen=True)
class SyncPlan:
    """What a sync will do, decided from the cache alone (steps 1-2, and what
    prune looks at). Pure: `plan_sync` makes it."""

    wanted: list[Obj]
    """The desired objects, labelled with the source, in apply order."""
    refusal: tuple[str, list[str]] | None = None
    """Why the revision is refused before any request (reason, messages)."""
    recreate: list[Obj] = field(default_factory=list)
    """PriorityClasses whose immutable fields change: deleted and created again."""
    dry_run: list[Obj] = field(default_factory=list)
    """Objects that would change, dry-run first."""
    unchecked: list[Obj] = field(default_factory=list)
    """Objects that would change in a namespace this revision creates: the
    namespace's dry-run stands for theirs."""
    unchanged: int = 0
    """Objects already as desired (no request at all)."""
    prune: list[Ref] = field(default_factory=list)
    """What the previous inventory holds and this revision does not, in reverse
    apply order (empty when the source does not prune)."""
    left: list[str] = field(default_factory=list)
    """No longer wanted but kept, because the source does not prune."""
    handoff: list[Obj] = field(default_factory=list)
    """PriorityClasses that take `globalDefault` from a class this revision clears or
    prunes: dry-run without it (the old default still holds it), always applied, and
    only after the old default is cleared (`clear_default`) or deleted
    (`prune_first`)."""
    prune_first: list[Ref] = field(default_factory=list)
    """A pruned PriorityClass that holds `globalDefault` while `handoff` sets it on
    another: deleted before the PriorityClass stage (and not again in prune)."""


def sets_default(obj: Obj | None) -> bool:
    """Does this PriorityClass set `globalDefault`?"""
    return bool((obj or {}).get("globalDefault"))


def clear_default(desired: Obj, have: Obj | None) -> bool:
    """Does applying `desired` take `globalDefault` away from the live `have`? Such a
    PriorityClass is applied before the rest of its stage."""
    return desired["kind"] == "PriorityClass" and sets_default(have) and not sets_default(desired)


def plan_sync(
    desired: list[Obj],
    current: Mapping[Ref, Obj | None],
    *,
    inventory: list[Ref],
    options: SyncOptions,
    other_sources: Collection[str],
) -> SyncPlan:
    """Decide steps 1-2 of a sync from the live objects in `current` (by the ref
    of each desired object, and of each PriorityClass of `inventory`): what needs
    nothing, what is refused (an object of a source in `other_sources`, which
    still exist; an immutable change not allowed), what is recreated, what is
    dry-run; and what prune looks at. A `globalDefault` that moves from one of
    the source's classes to another is a handoff (see the module's docstring)."""
    wanted = [_label(o, options.source) for o in desired]
    conflicts, immutable, recreate, changing = [], [], [], []
    for obj in wanted:
        ref = Ref.of(obj)
        have = current.get(ref)
        owner = _owner(have)
        if owner not in ("", options.source) and owner in other_sources:
            conflicts.append(f"{ref} belongs to PolicySource {owner}")
        elif changes := _immutable_changes(obj, have):
            immutable.append(f"PriorityClass {ref.name}: {', '.join(changes)}")
            recreate.append(obj)
        elif not up_to_date(obj, have):
            changing.append(obj)
    if conflicts:
        return SyncPlan(wanted, refusal=("OwnershipConflict", conflicts))
    if immutable and not options.allow_recreate:
        msgs = [
            f"{m} (immutable; set spec.allowRecreate to delete and recreate)" for m in immutable
        ]
        return SyncPlan(wanted, refusal=("ImmutableFieldChange", msgs))
    new_namespaces = {
        o["metadata"]["name"]
        for o in changing
        if o["kind"] == "Namespace" and current.get(Ref.of(o)) is None
    }
    refs = {Ref.of(o) for o in wanted}
    gone = sorted(set(inventory) - refs, key=Ref.rank, reverse=True)
    handoff, prune_first = _handoff(wanted, [*changing, *recreate], current, gone, options)
    return SyncPlan(
        wanted,
        recreate=recreate,
        dry_run=[o for o in changing if o["metadata"].get("namespace") not in new_namespaces],
        unchecked=[o for o in changing if o["metadata"].get("namespace") in new_namespaces],
        unchanged=len(wanted) - len(changing) - len(recreate),
        prune=[r for r in gone if r not in prune_first] if options.prune else [],
        left=[] if options.prune else [str(r) for r in gone],
        handoff=handoff,
        prune_first=prune_first,
    )


def _handoff(
    wanted: list[Obj],
    changes: list[Obj],
    current: Mapping[Ref, Obj | None],
    gone: list[Ref],
    options: SyncOptions,
) -> tuple[list[Obj], list[Ref]]:
    """The PriorityClasses that take `globalDefault` from an old default this
    revision clears or prunes, and the pruned old defaults to delete first."""
    new = [
        o
        for o in changes
        if o["kind"] == "PriorityClass"
        and sets_default(o)
        and not sets_default(current.get(Ref.of(o)))
    ]
    if not new:
        return [], []
    cleared = any(clear_default(o, current.get(Ref.of(o))) for o in wanted)
    pruned = [
        r
        for r in gone
        if r.kind == "PriorityClass"
        and options.prune
        and (have := current.get(r)) is not None
        and sets_default(have)
        and prunable(r, have, options)
    ]
    if not cleared and not pruned:
        return [], []
    return new, pruned


def prunable(ref: Ref, have: Obj, options: SyncOptions) -> bool:
    """May prune delete `have`? Only an object labelled with this source (an
    unlabelled one of the same name is somebody else's: made by hand after ours
    went); never a Namespace unless the source opts in, never an object annotated
    `gangops.ai/prune: disabled`."""
    annotations = have["metadata"].get("annotations") or {}
    return not (
        (ref.kind == "Namespace" and not options.prune_namespaces)
        or annotations.get(ANNOTATION_PRUNE) == "disabled"
        or _owner(have) != options.source
    )


def sync(
    kube: KubeApi,
    live: LiveObjects,
    pool: Executor,
    desired: list[Obj],
    *,
    inventory: list[Ref],
    options: SyncOptions,
    source_exists: Callable[[str], bool],
) -> SyncResult:
    """Make the cluster hold `desired` (in apply order) and prune what `inventory` held.

    An object labelled with another source is refused while `source_exists(that
    source)`; the objects of a deleted source are adopted."""
    refs = [Ref.of(o) for o in desired]
    result = SyncResult(ok=True, reason="ReconciliationSucceeded", message="", inventory=refs)
    current = {ref: live.get(ref) for ref in refs}
    for ref, have in current.items():
        if have is None and ref.kind == "Namespace":
            # the cache holds only labelled objects: a namespace made by hand exists
            # all the same, and what goes into it can be dry-run
            current[ref] = kube.get(resource_for(ref.skeleton()), ref.name)
    owners = {_owner(have) for have in current.values()} - {"", options.source}
    # a PriorityClass the revision drops may hold the globalDefault a desired one takes
    for ref in inventory:
        if ref.kind == "PriorityClass" and ref not in current:
            current[ref] = live.get(ref)

    # 1-2. what must change, and what may not
    plan = plan_sync(
        desired,
        current,
        inventory=inventory,
        options=options,
        other_sources={o for o in sorted(owners) if source_exists(o)},
    )
    if plan.refusal is not None:
        return _refused(result, *plan.refusal, inventory)

    # 3. dry-run everything that would change
    to_apply, errors = _dry_run(kube, pool, plan, current, result)
    if errors:
        return _refused(result, "DryRunFailed", errors, inventory)
    result.unchanged += plan.unchanged

    # 4. staged apply, after deleting a pruned class that holds the globalDefault
    # this revision gives another (Kubernetes allows one default at a time)
    failed = _prune(kube, live, plan.prune_first, options, result)
    if failed:
        return _refused(result, "ApplyFailed", failed, inventory)
    gone = {str(r) for r in plan.prune_first} & set(result.deleted)
    inventory = [r for r in inventory if str(r) not in gone]
    failed = _apply_stages(kube, live, pool, plan.recreate, to_apply, current, inventory, result)
    if failed:
        reason = "RecreateRefused" if result.reason == "RecreateRefused" else "ApplyFailed"
        return _refused(result, reason, failed, result.inventory)

    # 5. prune
    result.left += plan.left
    failed = _prune(kube, live, plan.prune, options, result)
    if failed:
        result.inventory = refs + [r for r in plan.prune if str(r) not in result.deleted]
        return _refused(result, "PruneFailed", failed, result.inventory)
    result.message = f"applied: {result.summary()}"
    return result


def _dry_run(
    kube: KubeApi,
    pool: Executor,
    plan: SyncPlan,
    current: Mapping[Ref, Obj | None],
    result: SyncResult,
) -> tuple[list[Obj], list[str]]:
    """Server-side apply with dryRun=All: the objects to apply, and the refusals.
    An object the API server would store as it is counts as unchanged. A class
    that takes `globalDefault` in a handoff is dry-run without it (the old default
    holds it until the apply clears it) and always applied."""
    handoff = {Ref.of(o) for o in plan.handoff}

    def dry_run(obj: Obj) -> Obj:
        if Ref.of(obj) in handoff:
            obj = {**obj, "globalDefault": False}
        return kube.apply(obj, field_manager=FIELD_MANAGER, dry_run=True)

    to_apply = list(plan.unchecked)
    errors: list[str] = []
    for obj, out, err in _parallel(pool, dry_run, plan.dry_run):
        ref = Ref.of(obj)
        if err is not None:
            errors.append(f"{ref}: {err.message}")
        elif ref in handoff:
            to_apply.append(obj)
        elif out is not None and (have := current[ref]) is not None and _same_stored(out, have):
            result.unchanged += 1
        else:
            to_apply.append(obj)
    return to_apply, errors


def _apply_stages(
    kube: KubeApi,
    live: LiveObjects,
    pool: Executor,
    recreate: list[Obj],
    to_apply: list[Obj],
    current: Mapping[Ref, Obj | None],
    inventory: list[Ref],
    result: SyncResult,
) -> list[str]:
    """Apply stage by stage in kind order, each stage in parallel; a PriorityClass
    to recreate is deleted and created again in its stage, and one that gives up
    `globalDefault` goes before the rest of its stage (the class that takes it
    would be refused while it holds it). Returns the failures of the first stage
    that failed (the inventory then keeps what the previous one held besides what
    was applied)."""
    applied: set[Ref] = set()
    to_recreate = {Ref.of(o) for o in recreate}

    def apply_one(obj: Obj) -> Obj:
        ref = Ref.of(obj)
        if ref not in to_recreate:
            return kube.apply(obj, field_manager=FIELD_MANAGER)
        have = current[ref] or {}
        uid = have.get("metadata", {}).get("uid")
        kube.delete(resource_for(obj), ref.name, uid=uid)
        live.forget(ref)
        try:
            return kube.apply(obj, field_manager=FIELD_MANAGER)
        except ApiError as e:
            if not have:
                raise
            _restore(kube, live, have)  # never left without the class pods name
            if e.transient:
                raise
            raise RecreateRefused(e.status, e.reason, e.message) from None

    steps = []
    for rank in range(len(APPLY_ORDER) + 1):
        stage = [o for o in [*recreate, *to_apply] if object_key(o)[0] == rank]
        first = [o for o in stage if clear_default(o, current[Ref.of(o)])]
        steps += [first, [o for o in stage if o not in first]] if first else [stage]
    for step in steps:
        failed = []
        for obj, out, err in _parallel(pool, apply_one, step):
            ref = Ref.of(obj)
            if err is not None:
                failed.append(f"{ref}: {err.message}")
                if isinstance(err, RecreateRefused):
                    result.reason = "RecreateRefused"
                continue
            assert out is not None
            live.assume(out)
            applied.add(ref)
            bucket = (
                result.recreated
                if ref in to_recreate
                else result.configured
                if current[ref] is not None
                else result.created
            )
            bucket.append(str(ref))
        if failed:
            kept = [r for r in inventory if r not in applied]
            result.inventory = sorted(applied, key=Ref.rank) + kept
            return failed
    return []


def _holds_pods(kube: KubeApi, namespace: str) -> bool:
    """Whether `namespace` has pods: deleting it would delete them (workloads gangops
    did not place there, in a namespace it may only have adopted)."""
    pods, _ = kube.list(RESOURCES["Pod"], namespace=namespace)
    return bool(pods)


class RecreateRefused(ApiError):
    """The API server refused the recreated object as written; the old one is back."""


def _restore(kube: KubeApi, live: LiveObjects, have: Obj) -> None:
    """Create `have` (a PriorityClass deleted to be recreated) again as it was."""
    meta = {k: v for k, v in have["metadata"].items() if k in ("name", "labels", "annotations")}
    try:
        live.assume(kube.create({**have, "metadata": meta}, field_manager=FIELD_MANAGER))
        log.warning("recreate refused; the old object is back object=%s", Ref.of(have))
    except ApiError as e:
        log.error("recreate refused and the old object could not be restored object=%s "
                  "error=%r", Ref.of(have), str(e))  # fmt: skip


def _prune(
    kube: KubeApi, live: LiveObjects, gone: list[Ref], options: SyncOptions, result: SyncResult
) -> list[str]:
    """Delete what `prunable` allows of `gone` (by uid, so never a newer object of
    the same name); returns the failures."""
    failed = []
    for ref in gone:
        have = live.get(ref) or kube.get(resource_for(ref.skeleton()), ref.name, ref.namespace)
        if have is None:
            continue
        if not prunable(ref, have, options):
            result.left.append(str(ref))
            continue
        if ref.kind == "Namespace" and _holds_pods(kube, ref.name):
            log.warning("prune keeps a namespace that holds pods namespace=%s", ref.name)
            result.left.append(f"{ref} (holds pods)")
            continue
        try:
            kube.delete(
                resource_for(have),
                ref.name,
                namespace=ref.namespace or None,
                uid=have["metadata"].get("uid"),
            )
        except ApiError as e:
            if e.status != 409:  # 409: the uid precondition failed, it is another object now
                failed.append(f"{ref}: {e.message}")
                continue
        live.forget(ref)
        result.deleted.append(str(ref))
    return failed


def _refused(
    result: SyncResult, reason: str, messages: list[str], inventory: list[Ref]
) -> SyncResult:
    result.ok = False
    result.reason = reason
    result.message = _first(messages)
    result.inventory = list(inventory)
    log.warning("sync refused reason=%s detail=%r", reason, result.message)
    return result
