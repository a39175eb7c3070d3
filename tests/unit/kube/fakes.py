"""The one fake of the unit tests: `FakeKube`, typed against the
`controller.kube.client.KubeApi` seam, so it is passed wherever the real
client is (no `type: ignore`).

It keeps objects in a dict with increasing resourceVersions and honours
the preconditions the API server does (409 Conflict): compare-and-swap on
replace (the Lease elector) and on a merge patch that names a
resourceVersion (the binder's record), a delete's uid, a bind of a pod
already bound. List and watch replay scripted pages and events for the
informer (an ApiError in a watch's script breaks the stream there, as a
reset connection does; `watched_from` notes where each watch began); merge
patches follow RFC 7386 (the status subresource takes only status); binds
are noted in `bound`. Finalizers hold a deleted object as the API
server holds it: the delete sets metadata.deletionTimestamp, the object stays
until a write empties its finalizers, and no finalizer can be added meanwhile
(422 Invalid).
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

from controller.kube.client import ApiError, KubeApi, Resource, WatchEvent

Obj = dict[str, Any]


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.rv = 100
        self.writes: list[tuple[str, str]] = []
        self.lists: list[tuple[list[Obj], str]] = []
        self.watches: list[list[WatchEvent | ApiError] | ApiError] = []
        """One script per watch: an ApiError refuses the watch; one in the list
        breaks the stream after the events before it."""
        self.watched_from: list[str] = []
        """The resourceVersion each watch began from."""
        self.down = False
        self.refuse: dict[str, ApiError] = {}
        """Objects (by name) every apply refuses."""
        self.refusals: dict[str, list[ApiError]] = {}
        """Objects (by name) the next creates refuse, one error each."""
        self.bound: dict[str, str] = {}
        self.dry_runs: list[str] = []

    def _key(self, kind: str, name: str, namespace: str | None) -> tuple[str, str, str]:
        return (kind, namespace or "", name)

    def _check(self) -> None:
        if self.down:
            raise ApiError(0, "Unreachable", "connection refused")

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        self._check()
        obj = self.objects.get(self._key(res.kind, name, namespace))
        return copy.deepcopy(obj) if obj else None

    def create(self, obj: Obj, *, field_manager: str) -> Obj:
        self._check()
        meta = obj["metadata"]
        key = self._key(obj["kind"], meta["name"], meta.get("namespace"))
        if self.refusals.get(meta["name"]):
            raise self.refusals[meta["name"]].pop(0)
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f"{meta['name']} exists")
        return self._store(key, obj, "create")

    def replace(self, obj: Obj, *, field_manager: str) -> Obj:
        self._check()
        meta = obj["metadata"]
        key = self._key(obj["kind"], meta["name"], meta.get("namespace"))
        have = self.objects.get(key)
        if have is None:
            raise ApiError(404, "NotFound", meta["name"])
        if meta.get("resourceVersion") != have["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._store(key, obj, "replace")

    def merge_patch(
        self,
        res: Resource,
        name: str,
        patch: Obj,
        *,
        field_manager: str,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        self._check()
        key = self._key(res.kind, name, namespace)
        have = self.objects.get(key)
        if have is None:
            raise ApiError(404, "NotFound", name)
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != have["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict", "the object has been modified")
        if subresource == "status":  # the status subresource takes status only
            patch = {"status": patch["status"]} if "status" in patch else {}
        return self._store(key, _merged(have, patch), "merge_patch")

    def _store(self, key: tuple[str, str, str], obj: Obj, verb: str) -> Obj:
        stored = copy.deepcopy(obj)
        old = (self.objects.get(key) or {"metadata": {}})["metadata"]
        going = old.get("deletionTimestamp")
        had, has = old.get("finalizers") or [], stored["metadata"].get("finalizers") or []
        if going and set(has) - set(had):
            raise ApiError(
                422,
                "Invalid",
                "metadata.finalizers: Forbidden: no new finalizers can be added "
                "if the object is being deleted",
            )
        self.rv += 1
        stored["metadata"]["resourceVersion"] = str(self.rv)
        if going:  # read-only once set
            stored["metadata"]["deletionTimestamp"] = going
        self.writes.append((verb, key[2]))
        if going and had and not has:  # its last finalizer removed: the deletion completes
            self.objects.pop(key)
        else:
            self.objects[key] = stored
        return copy.deepcopy(stored)

    def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        self._check()
        if self.lists:
            return self.lists.pop(0)
        # nothing queued: what it stores of that kind (no label selection)
        found = [
            copy.deepcopy(o)
            for (kind, ns, _), o in sorted(self.objects.items())
            if kind == res.kind and (namespace is None or ns == namespace)
        ]
        return found, str(self.rv)

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 300,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[WatchEvent]:
        self.watched_from.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, ApiError):
            raise script
        for event in script:
            if isinstance(event, ApiError):
                raise event
            yield event

    def apply(
        self,
        obj: Obj,
        *,
        field_manager: str,
        dry_run: bool = False,
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply; an object named in `refuse` is refused (as admission
        or validation would refuse it), dry run or not. Applying a subresource needs
        the object to exist (404 otherwise); status conditions merge by type, as the
        API server merges a list-map."""
        self._check()
        meta = obj["metadata"]
        key = self._key(obj["kind"], meta["name"], meta.get("namespace"))
        if subresource is not None:
            have = self.objects.get(key)
            if have is None:
                raise ApiError(404, "NotFound", meta["name"])
            merged = copy.deepcopy(have)
            status = merged.setdefault("status", {})
            for k, v in obj.get("status", {}).items():
                if k == "conditions":
                    by_type = {c["type"]: c for c in status.get("conditions", [])}
                    by_type.update({c["type"]: c for c in v})
                    status["conditions"] = list(by_type.values())
                else:
                    status[k] = v
            return self._store(key, merged, "apply_" + subresource)
        if dry_run:
            self.dry_runs.append(key[2])
        if meta["name"] in self.refuse:
            raise self.refuse[meta["name"]]
        if dry_run:
            return copy.deepcopy({**obj, "metadata": {**meta, "resourceVersion": "0"}})
        # who applied it, as the API server records it (fields left out)
        applied = {"manager": field_manager, "operation": "Apply"}
        return self._store(key, {**obj, "metadata": {**meta, "managedFields": [applied]}}, "apply")

    def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
    ) -> bool:
        """An object with finalizers is only marked (deletionTimestamp, once), as the
        API server marks it; `_store` removes it when its last finalizer goes."""
        self._check()
        key = self._key(res.kind, name, namespace)
        have = self.objects.get(key)
        have_uid = (have or {"metadata": {}})["metadata"].get("uid")
        if uid is not None and have_uid is not None and have_uid != uid:
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        if have is not None and have["metadata"].get("finalizers"):
            if not have["metadata"].get("deletionTimestamp"):
                self.rv += 1
                now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                meta = {**have["metadata"], "resourceVersion": str(self.rv)}
                self.objects[key] = {**have, "metadata": {**meta, "deletionTimestamp": now}}
            self.writes.append(("delete", name))
            return True
        gone = self.objects.pop(key, None)
        self.writes.append(("delete", name))
        return gone is not None

    def bind(self, namespace: str, pod: str, node: str, *, field_manager: str) -> None:
        self._check()
        if f"{namespace}/{pod}" in self.bound:
            raise ApiError(409, "Conflict", f"pod {pod} is already assigned to a node")
        self.bound[f"{namespace}/{pod}"] = node


def _merged(target: Obj, patch: Obj) -> Obj:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merged(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


_: type[KubeApi] = FakeKube
"""mypy holds the fake to the seam: a signature that drifts from `KubeApi` fails here."""
