"""The watch loop, written once: list, then watch from the list's resourceVersion.

The official client's `SharedInformer` cannot list custom resources and has no
has-synced signal, so gangops keeps its own, shaped like kopf's loop: list
(and report what changed since the last list), watch from the list's
resourceVersion with bookmarks, keep the latest resourceVersion, watch again
from it when the server ends the stream or the stream breaks (a connection
reset must not cost a LIST of every object), relist on 410 Gone, back off on
errors.

The store is a local cache of raw JSON dicts. Writers may put the object a
write returned into it at once (`assume`), so a reconcile that runs before the
watch event arrives sees its own write and does not repeat it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from controller.kube.client import ApiError, KubeApi, Resource, retry_wait
from controller.kube.clock import Clock, SystemClock

__all__ = ["EventType", "Handler", "Informer", "StoreListener", "key_of"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_T = TypeVar("_T")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[EventType, Obj], None]
"""Called on the informer's thread for every change; it must return quickly (enqueue)."""
StoreListener = Callable[[tuple[str, str], Obj | None], None]
"""Called under the cache's lock on every change of the cache, whoever makes it (a
list, a watch event, `assume`, `forget`): the key and what the cache now holds
under it (None: nothing). Keeps an index that is always the cache's (`locked`
reads both at one instant); it must be quick and must not call the informer."""


def key_of(obj: Obj) -> tuple[str, str]:
    """(namespace, name) of an object; namespace is "" for cluster-scoped ones."""
    meta = obj["metadata"]
    return (meta.get("namespace", "") or "", meta["name"])


def _rv(obj: Obj) -> int | None:
    """The object's resourceVersion as etcd's increasing integer; None where it is
    not one (resourceVersions are opaque: such an object is taken as newer)."""
    rv = obj["metadata"].get("resourceVersion", "")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


def _newer(a: Obj, b: Obj, *, strictly: bool = False) -> bool:
    """Is `a` at least as new as `b` (`strictly`: newer)?"""
    ra, rb = _rv(a), _rv(b)
    if ra is None or rb is None:
        return True
    return ra > rb if strictly else ra >= rb


_TOMBSTONES = 4096
"""How many deleted keys the cache remembers (with the resourceVersion of their
deletion), so that a write's answer assumed after its object's DELETED event does
not bring the object back."""

_SHORT_WATCH_S = 1.0
"""A watch stream that ends sooner than this having delivered nothing is an error
(client-go's "very short watch"): reopened at once it would hammer the server."""


class Informer:
    """A cache of one resource (optionally one namespace and label selector)."""

    def __init__(
        self,
        kube: KubeApi,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        handler: Handler | None = None,
        clock: Clock | None = None,
        watch_timeout_s: int = 300,
        on_store: StoreListener | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        """`transform` is applied to every object before it is cached or handed to
        `handler` (listed, watched or assumed): a cache that needs a few fields of
        a large object keeps only those (client-go's `SetTransform`)."""
        self.resource = resource
        self._on_store = on_store
        self._transform = transform
        self._kube = kube
        self._namespace = namespace
        self._selector = label_selector
        self._handler = handler
        self._clock = clock or SystemClock()
        self._watch_timeout = watch_timeout_s
        self._store: dict[tuple[str, str], Obj] = {}
        self._deleted: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.relists = 0
        """How many times the loop listed (1 after the first sync)."""
        self.events = 0
        """How many events the watches delivered, bookmarks included."""

    # -- the cache

    def get(self, name: str, namespace: str = "") -> Obj | None:
        """The cached object, or None."""
        with self._lock:
            return self._store.get((namespace, name))

    def __len__(self) -> int:
        """How many objects are cached."""
        with self._lock:
            return len(self._store)

    def items(self) -> list[Obj]:
        """Every cached object."""
        with self._lock:
            return list(self._store.values())

    def assume(self, obj: Obj) -> None:
        """Put the result of a write into the cache, unless the cache already holds newer."""
        if self._transform is not None:
            obj = self._transform(obj)
        key = key_of(obj)
        rv = _rv(obj)
        with self._lock:
            gone = self._deleted.get(key)
            if gone is not None and rv is not None and rv <= gone:
                return  # its DELETED event came first
            old = self._store.get(key)
            if old is None or _newer(obj, old):
                self._store[key] = obj
                self._stored(key, obj)

    def forget(self, name: str, namespace: str = "") -> None:
        """Drop a deleted object from the cache."""
        with self._lock:
            if self._store.pop((namespace, name), None) is not None:
                self._stored((namespace, name), None)

    def locked(self, read: Callable[[], _T]) -> _T:
        """`read()` while the cache cannot change (with `on_store`: the index and the
        cache at one instant)."""
        with self._lock:
            return read()

    def _stored(self, key: tuple[str, str], obj: Obj | None) -> None:
        if self._on_store is not None:
            self._on_store(key, obj)

    def _tombstone(self, key: tuple[str, str], rv: int | None) -> None:
        """Remember a deletion seen at `rv` (under the lock); the oldest go first."""
        if rv is None:
            return
        self._deleted.pop(key, None)
        self._deleted[key] = rv
        while len(self._deleted) > _TOMBSTONES:
            del self._deleted[next(iter(self._deleted))]

    @property
    def synced(self) -> bool:
        """True once the first list has filled the cache."""
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until the first list is in the cache; False on timeout."""
        return self._synced.wait(timeout_s)

    # -- the loop

    def start(self) -> Informer:
        """Run the loop on a daemon thread."""
        self._thread = threading.Thread(
            target=self.run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the loop (closing an open watch) and wait for it."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # a response already closed, or an older urllib3
                log.debug("informer could not shut down its watch resource=%s", self.resource)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)

    def run(self) -> None:
        """List, then watch from the latest resourceVersion until stopped.

        A stream the server ends (its timeout) is watched again at once. A watch
        that fails transiently (the stream broke: an API server restart, a load
        balancer's or a NAT's reset; refused or ended with 409, 429 or 5xx, as an
        HTTP status or an ERROR event) is watched again from the resourceVersion
        kept, after the backoff, without a list. It lists again at once on 410
        Gone, and after the backoff when the list fails, when the watch fails in
        any other way (a refusal such as 403; a defect in `transform` or
        `on_store`, whose event the cache missed though the resourceVersion
        passed it), and when a stream ends at once, empty.

        The backoff (0.5 s doubling to 30 s; longer where the server asks for a
        longer wait, `ApiError.retry_after`) starts again once a watch has worked
        (delivered an event, or lasted `_SHORT_WATCH_S`), whether it then ended or
        failed: a list that works before a watch that is refused (no `watch` right,
        429, a proxy) does not reset it, and neither does a stream that ends at
        once, empty."""
        backoff = 0.5
        relist = True
        while not self._stop.is_set():
            opened: float | None = None  # when the watch began (None: the list failed)
            before = self.events
            again = True
            error: Exception | None = None
            try:
                if relist:
                    self._list()
                    relist = False
                opened = self._clock.monotonic()
                again = self._watch()
            except Exception as e:
                # ApiError: the server; anything else: a defect in `transform` or
                # `on_store`, which must not end the loop while `synced` says the
                # cache is live.
                if self._stop.is_set():
                    return
                if not isinstance(e, ApiError):
                    log.exception("informer failed resource=%s", self.resource.plural)
                error = e
            if self._stop.is_set():
                return
            worked = opened is not None and (
                self.events > before or self._clock.monotonic() - opened >= _SHORT_WATCH_S
            )
            if worked:
                backoff = 0.5
            if error is None:
                if not again:
                    relist = True  # 410 Gone: relist at once
                    continue
                if worked:
                    continue  # the server ended the stream: watch again at once
                error = ApiError(0, "ShortWatch", "the watch stream ended at once, empty")
                relist = True
            elif opened is None or not (isinstance(error, ApiError) and error.transient):
                relist = True
            # A server that says how long to wait (429 from API Priority and
            # Fairness, 503) is waited for, at least.
            wait = retry_wait(error, backoff)
            log.warning(
                "informer error resource=%s error=%r retry_in_s=%.1f then=%s",
                self.resource.plural,
                str(error),
                wait,
                "list" if relist else "watch",
            )
            self._clock.wait(self._stop, wait)
            backoff = min(backoff * 2, 30.0)

    def relist(self) -> None:
        """List now, on the caller's thread, as the loop does before it watches: fills
        (or refreshes) a cache that is not started, and marks it synced. Not for a
        started informer (its loop keeps the resourceVersion this sets)."""
        assert self._thread is None, "relist() on a started informer"
        self._list()

    def _list(self) -> None:
        items, rv = self._kube.list(
            self.resource, namespace=self._namespace, label_selector=self._selector
        )
        if self._transform is not None:
            items = [self._transform(o) for o in items]
        listed = {key_of(o): o for o in items}
        at = int(rv) if rv.isdigit() else None
        with self._lock:
            old = self._store
            fresh = dict(listed)
            # What this process wrote while the list was served, assumed here, is
            # newer than the list's snapshot: keep it (the watch from the list's
            # resourceVersion delivers those writes, and any delete after them).
            for key, mine in old.items():
                listed_obj = listed.get(key)
                if listed_obj is not None:
                    # as new and richer, too (see `_watch`): a bound pod at its create's
                    if None not in (_rv(mine), _rv(listed_obj)) and _newer(mine, listed_obj):
                        fresh[key] = mine
                elif at is not None and (_rv(mine) or 0) > at:
                    fresh[key] = mine
            self._store = fresh
            self.resource_version = rv
            for key in old.keys() - fresh.keys():
                self._tombstone(key, at)
            if self._on_store is not None:
                for key, obj in fresh.items():
                    if old.get(key) is not obj:
                        self._on_store(key, obj)
                for key in old.keys() - fresh.keys():
                    self._on_store(key, None)
        self.relists += 1
        self._synced.set()
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._emit("ADDED", obj)
            elif prev is not obj and prev["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._emit("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)

    def _watch(self) -> bool:
        """One watch stream; True to watch again from the latest resourceVersion,
        False to relist (410 Gone). Counts what it delivers in `events`."""

        def opened(resp: Any) -> None:
            self._resp = resp
            # `stop` may have run while this watch was opening and seen no stream to
            # close: close it here, or the read blocks until the server ends the watch.
            if self._stop.is_set():
                resp.shutdown()

        try:
            for event in self._kube.watch(
                self.resource,
                resource_version=self.resource_version,
                namespace=self._namespace,
                label_selector=self._selector,
                timeout_s=self._watch_timeout,
                on_open=opened,
            ):
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("watch expired; relisting resource=%s", self.resource.plural)
                        return False
                    raise ApiError(int(obj.get("code", 0)), str(obj.get("reason")), str(obj))
                self.events += 1
                self.resource_version = obj["metadata"].get(
                    "resourceVersion", self.resource_version
                )
                if kind == "BOOKMARK":
                    continue
                if self._transform is not None:
                    obj = self._transform(obj)
                key = key_of(obj)
                with self._lock:
                    # A watch a little behind this process's own writes delivers the
                    # object as it was before them: what `assume` put here is newer,
                    # or as new and richer (a bound pod assumed at its create's
                    # resourceVersion, since a binding's answer carries no object).
                    old = self._store.get(key)
                    if kind != "DELETED" and (old is None or _newer(obj, old, strictly=True)):
                        self._store[key] = obj
                        self._stored(key, obj)
                    elif kind == "DELETED":
                        self._tombstone(key, _rv(obj))
                        if old is not None and _newer(obj, old):
                            del self._store[key]
                            self._stored(key, None)
                self._emit(kind, obj)
        except ApiError as e:
            if e.status == 410:
                return False
            raise
        finally:
            self._resp = None
        return True

    def _emit(self, kind: EventType, obj: Obj) -> None:
        if self._handler is None:
            return
        try:
            self._handler(kind, obj)
        except Exception:
            log.exception("informer handler failed resource=%s", self.resource.plural)
