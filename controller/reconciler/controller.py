"""The policy reconciler: keeps the cluster equal to each PolicySource's revision.

Events route, the reconcile decides (Kueue's split). Informers watch the
PolicySources and every object gangops manages; their handlers only put a
source's name in the work queue:

- a new or changed PolicySource, or a new `gangops.ai/reconcile-requested-at`
  annotation (what the push webhook sets), queues a reconcile that fetches;
- a managed object changed or deleted by anyone (drift) queues a reconcile
  that does not fetch: it re-applies the revision already in hand;
- every source is also polled every `spec.interval`, jittered by 10%.

A reconcile: resolve the ref (one `ls-remote`), read and validate the
revision's files, compile, `apply.sync` (dry-run all, staged apply, prune),
then write status only if it changed and record an Event only if something
happened. Compiled revisions are cached by commit, so drift correction and
polls of an unchanged branch cost no parsing. A revision that fails
validation or dry-run leaves the last good revision in place.

Which source wins: each managed object carries the `gangops.ai/policysource`
label of the source that applied it; a second source that compiles an object
the first one owns is refused (Stalled, OwnershipConflict), and so is a
PolicySource while policy custom resources exist (Stalled, MixedSources).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.kube.client import RESOURCES, ApiError, Kube, NotLeaderError
from controller.kube.clock import Clock, SystemClock
from controller.kube.events import EventRecorder
from controller.kube.informer import EventType, Informer
from controller.policy.compiler import APPLY_ORDER, compile_policy_set
from controller.policy.diagnostics import Diagnostic
from controller.policy.loader import Source
from controller.policy.validate import validate_sources
from controller.reconciler.apply import (
    FIELD_MANAGER,
    LABEL_SOURCE,
    Ref,
    SyncOptions,
    SyncResult,
    sync,
)
from controller.reconciler.git import GitAuth, GitCache, GitError, auth_from_secret
from controller.reconciler.metrics import ReconcilerMetrics
from controller.reconciler.spec import ANNOTATION_REQUESTED, PolicySourceSpec, revision_string
from controller.reconciler.status import conditions

__all__ = ["CR_SOURCE", "Reconciler", "ReconcilerSettings"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_SOURCE = RESOURCES["PolicySource"]
_POLICY_KINDS = ("ClusterPolicy", "PriorityTier", "Project")
CR_SOURCE = "gangops-policy-crs"
"""The source name (and `gangops.ai/policysource` label) of the policy custom resources;
no PolicySource may have this name."""
_STALLING = {
    "ValidationFailed",
    "DryRunFailed",
    "ImmutableFieldChange",
    "OwnershipConflict",
    "MixedSources",
    "InvalidSpec",
}
"""Reasons that need a change by a person (a new commit, a spec edit): Stalled."""


@dataclass(frozen=True)
class ReconcilerSettings:
    """How the reconciler runs."""

    cache_dir: Path
    """Where the Git caches (and SSH key files) live."""
    system_namespace: str = "gangops-system"
    """The controller's namespace: the scheduling-policy ConfigMap and Git Secrets."""
    parallelism: int = 16
    """API requests in flight at once during dry-run, apply and prune."""
    retry_base_s: float = 1.0
    """First retry after a transient failure; doubles per failure."""
    retry_max_s: float = 120.0
    """The longest wait between retries."""
    jitter: float = 0.1
    """Poll intervals are stretched by a random fraction up to this."""
    max_diagnostics: int = 5
    """How many diagnostics (file:line) a Stalled message quotes."""
    source_selector: str | None = None
    """Reconcile only the PolicySources this label selector matches (sharding; tests)."""


class _Queue:
    """Source names, each due at a time; a name is never worked on twice at once, and
    adding a name that is already queued keeps the earlier time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._cv = threading.Condition()
        self._due: dict[str, float] = {}
        self._fetch: set[str] = set()
        self._active: set[str] = set()

    def add(self, name: str, *, after: float = 0.0, fetch: bool = False) -> None:
        with self._cv:
            at = self._clock.monotonic() + after
            if fetch:
                self._fetch.add(name)
            if name not in self._due or at < self._due[name]:
                self._due[name] = at
                self._cv.notify()

    def get(self, stop: threading.Event) -> tuple[str, bool] | None:
        """The next due name and whether a fetch was asked for; None once `stop` is set."""
        with self._cv:
            while not stop.is_set():
                now = self._clock.monotonic()
                waiting = {n: at for n, at in self._due.items() if n not in self._active}
                if waiting:
                    name = min(waiting, key=waiting.__getitem__)
                    if waiting[name] <= now:
                        del self._due[name]
                        self._active.add(name)
                        fetch = name in self._fetch
                        self._fetch.discard(name)
                        return name, fetch
                wait = min(waiting.values()) - now if waiting else 1.0
                self._cv.wait(min(max(wait, 0.005), 1.0))
            return None

    def done(self, name: str) -> None:
        with self._cv:
            self._active.discard(name)
            self._cv.notify()

    def wake(self) -> None:
        """Wake a waiting `get` (to see that it should stop)."""
        with self._cv:
            self._cv.notify_all()


@dataclass
class _State:
    """What the reconciler remembers about one source between reconciles."""

    sha: str | None = None
    generation: int | None = None
    fetch_at: float = 0.0
    """When the next poll is due (monotonic): a reconcile before then does not fetch."""
    compiled: tuple[tuple[str, str, str], list[Obj] | None, str] | None = None
    """((url, sha, path), objects or None when invalid, diagnostics message)."""
    failures: int = 0
    inventory: set[Ref] = field(default_factory=set)


class _Live:
    """The managed objects, as the informers see them (the `apply.LiveObjects` seam)."""

    def __init__(self, informers: dict[str, Informer]) -> None:
        self._by_kind = informers

    def get(self, ref: Ref) -> Obj | None:
        inf = self._by_kind.get(ref.kind)
        return inf.get(ref.name, ref.namespace) if inf else None

    def assume(self, obj: Obj) -> None:
        inf = self._by_kind.get(obj["kind"])
        if inf is not None:
            inf.assume(obj)

    def forget(self, ref: Ref) -> None:
        inf = self._by_kind.get(ref.kind)
        if inf is not None:
            inf.forget(ref.name, ref.namespace)


def _diagnostics_text(errors: list[Diagnostic], limit: int) -> str:
    """`N error(s): file:line:col: CODE: message; ...` for a condition message."""
    lines = [
        f"{d.file}:{d.line}:{d.column}: {d.code}: {d.message}"
        if d.line
        else f"{d.file}: {d.code}: {d.message}"
        for d in errors[:limit]
    ]
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return f"{len(errors)} error(s): " + "; ".join(lines) + more


def _cr_source(obj: Obj) -> Source:
    """A policy custom resource as a policy file (`<kind>/<name>.yaml`), holding what a
    policy file holds: apiVersion, kind, name, labels, annotations and spec."""
    meta = obj["metadata"]
    doc = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            "name": meta["name"],
            **{k: dict(meta[k]) for k in ("labels", "annotations") if meta.get(k)},
        },
        "spec": obj.get("spec", {}),
    }
    annotations = doc["metadata"].get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        doc["metadata"].pop("annotations", None)
    data = json.dumps(doc, indent=2).encode()
    path = f"{obj['kind'].lower()}/{meta['name']}.yaml"
    return Source(path=path, size=len(data), read=lambda: data)


_BOOKKEEPING = frozenset(("resourceVersion", "managedFields", "generation"))


def _drift_mark(obj: Obj) -> str:
    """What a hand edit of a managed object can change: everything but its status and
    the metadata the API server keeps for itself."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in _BOOKKEEPING}
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return json.dumps([meta, rest], sort_keys=True, default=str)


class Reconciler:
    """Reconciles every PolicySource in the cluster. `start`, then `stop`."""

    def __init__(
        self,
        kube: Kube,
        *,
        settings: ReconcilerSettings,
        clock: Clock | None = None,
        metrics: ReconcilerMetrics | None = None,
    ) -> None:
        self._kube = kube
        self.settings = settings
        self._clock = clock or SystemClock()
        self.metrics = metrics or ReconcilerMetrics()
        self._events = EventRecorder(kube, component="gangops", clock=self._clock)
        self._git = GitCache(settings.cache_dir / "git")
        self._pool = ThreadPoolExecutor(settings.parallelism, thread_name_prefix="apply")
        self._queue = _Queue(self._clock)
        self._stop = threading.Event()
        self._states: dict[str, _State] = {}
        self._owners: dict[Ref, str] = {}
        self._marks: dict[Ref, str] = {}
        """Each managed object's content apart from status and bookkeeping, as last seen."""
        self._lock = threading.Lock()
        self.sources = Informer(
            kube,
            _SOURCE,
            label_selector=settings.source_selector,
            handler=self._on_source,
            clock=self._clock,
        )
        self.managed = {
            kind: Informer(
                kube,
                RESOURCES[kind],
                label_selector=LABEL_SOURCE,
                handler=self._on_managed,
                clock=self._clock,
            )
            for kind in APPLY_ORDER
        }
        self.policy_crs = {
            kind: Informer(kube, RESOURCES[kind], handler=self._on_policy_cr, clock=self._clock)
            for kind in _POLICY_KINDS
        }
        self._live = _Live(self.managed)
        self._worker: threading.Thread | None = None

    # -- lifecycle

    def _informers(self) -> list[Informer]:
        return [self.sources, *self.managed.values(), *self.policy_crs.values()]

    def start(self) -> None:
        """Start the informers and the worker; returns at once."""
        for inf in self._informers():
            inf.start()
        self._worker = threading.Thread(target=self._work, name="reconciler", daemon=True)
        self._worker.start()

    def ready(self) -> bool:
        """True once every informer has listed (the worker waits for that)."""
        return all(inf.synced for inf in self._informers())

    def stop(self) -> None:
        """Stop the worker and the informers."""
        self._stop.set()
        self._queue.wake()
        for inf in self._informers():
            inf.stop()
        if self._worker is not None:
            self._worker.join(30)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def request(self, name: str) -> None:
        """Reconcile `name` now, fetching its repository."""
        self._queue.add(name, fetch=True)

    # -- routing

    def _on_source(self, kind: EventType, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            with self._lock:
                self._states.pop(name, None)
            self._queue.add(CR_SOURCE)  # a mix of sources may have ended
            return
        if kind == "ADDED":
            self._queue.add(CR_SOURCE)  # a mix of sources may have begun
        status = obj.get("status") or {}
        requested = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUESTED)
        state = self._states.get(name)
        if (
            state is None
            or obj["metadata"].get("generation") != state.generation
            or (requested and requested != status.get("lastHandledReconcileAt"))
        ):
            self._queue.add(name, fetch=True)

    def _on_managed(self, kind: EventType, obj: Obj) -> None:
        ref = Ref.of(obj)
        mark = _drift_mark(obj)
        with self._lock:
            # A change only to status or bookkeeping (a ResourceQuota's usage moves with
            # every pod) cannot be drift: reconcile on what was applied changing only.
            if kind == "DELETED":
                self._marks.pop(ref, None)
            elif self._marks.get(ref) == mark and kind == "MODIFIED":
                return
            else:
                self._marks[ref] = mark
        labels = obj["metadata"].get("labels") or {}
        owner = labels.get(LABEL_SOURCE) or self._owners.get(ref)
        if owner:
            self._queue.add(owner)

    def _on_policy_cr(self, kind: EventType, obj: Obj) -> None:
        for name in list(self._states):
            self._queue.add(name)
        self._queue.add(CR_SOURCE)

    # -- the worker

    def _work(self) -> None:
        while not self._stop.is_set():
            if not all(inf.wait_synced(0.5) for inf in self._informers()):
                continue
            break
        while not self._stop.is_set():
            item = self._queue.get(self._stop)
            if item is None:
                return
            name, fetch = item
            try:
                after = self.reconcile(name, fetch=fetch)
            except NotLeaderError as e:
                log.warning("reconcile stopped: not the leader source=%s error=%r", name, str(e))
                after = None
            except Exception:
                log.exception("reconcile crashed source=%s", name)
                after = self.settings.retry_max_s
            finally:
                self._queue.done(name)
            if after is not None:
                self._queue.add(name, after=after)

    # -- one reconcile

    def reconcile(self, name: str, *, fetch: bool = True) -> float | None:
        """Reconcile one source; returns when to poll it next (None: only on events)."""
        if name == CR_SOURCE:
            self._reconcile_crs()
            return None
        cached = self.sources.get(name)
        if cached is None:
            return None
        obj = dict(cached)
        t0 = time.monotonic()
        with self._lock:
            state = self._states.setdefault(name, _State())
        generation = int(obj["metadata"].get("generation", 0))
        try:
            spec = PolicySourceSpec.parse(obj.get("spec") or {})
        except (ValueError, KeyError) as e:
            state.generation = generation
            self._finish(obj, state, None, "InvalidSpec", f"invalid spec: {e}", None)
            return None
        if spec.suspend:
            state.generation = generation
            log.info("source suspended source=%s", name)
            return None
        mixed = self._mixed_sources()
        if mixed:
            state.generation = generation
            self._finish(obj, state, None, "MixedSources", mixed, None)
            return self._poll(spec)
        status = obj.get("status") or {}
        requested = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUESTED)
        fetch = (
            fetch
            or state.sha is None
            or self._clock.monotonic() >= state.fetch_at
            or generation != state.generation
            or bool(requested and requested != status.get("lastHandledReconcileAt"))
        )
        state.generation = generation
        if not state.inventory:
            state.inventory = {
                Ref.from_entry(e) for e in (status.get("inventory") or {}).get("entries", [])
            }
            self._own(name, state.inventory)
        t_fetch = time.monotonic()
        try:
            if fetch:
                state.sha = self._resolve(spec)
                state.fetch_at = self._clock.monotonic() + spec.interval_s
            assert state.sha is not None
            revision = revision_string(spec.ref, state.sha)
            t_compile = time.monotonic()
            objects, diagnostics = self._compile(spec, state)
        except GitError as e:
            state.failures += 1
            state.fetch_at = 0.0
            self._finish(obj, state, None, e.reason, self._kept(e.message, status), None)
            return self._backoff(state)
        if objects is None:
            self._finish(obj, state, revision, "ValidationFailed", diagnostics, None)
            return self._poll(spec)
        if revision != status.get("lastAppliedRevision") or generation != status.get(
            "observedGeneration"
        ):
            self._progressing(obj, revision)
        t_sync = time.monotonic()
        result = sync(
            self._kube,
            self._live,
            self._pool,
            objects,
            inventory=sorted(state.inventory, key=Ref.rank),
            options=SyncOptions(
                source=name,
                prune=spec.prune,
                prune_namespaces=spec.prune_namespaces,
                allow_recreate=spec.allow_recreate,
            ),
            source_exists=lambda other: self._kube.get(_SOURCE, other) is not None,
        )
        log.debug(
            "reconcile phases source=%s fetch_s=%.3f compile_s=%.3f sync_s=%.3f",
            name,
            t_compile - t_fetch,
            t_sync - t_compile,
            time.monotonic() - t_sync,
        )
        state.inventory = set(result.inventory)
        self._own(name, state.inventory)
        # Observed before the status write, so whoever sees the new status also
        # sees the duration of the reconcile that wrote it.
        self.metrics.duration.labels(name).observe(time.monotonic() - t0)
        self._finish(obj, state, revision, result.reason, result.message, result)
        if result.ok:
            state.failures = 0
            return self._poll(spec)
        if result.reason in _STALLING:
            return self._poll(spec)
        state.failures += 1
        return self._backoff(state)

    def _own(self, name: str, refs: set[Ref]) -> None:
        with self._lock:
            for ref in refs:
                self._owners[ref] = name

    def _poll(self, spec: PolicySourceSpec) -> float:
        return spec.interval_s * (1 + random.uniform(0, self.settings.jitter))

    def _backoff(self, state: _State) -> float:
        s = self.settings
        return float(min(s.retry_base_s * 2 ** (state.failures - 1), s.retry_max_s))

    @staticmethod
    def _kept(message: str, status: Obj) -> str:
        applied = status.get("lastAppliedRevision")
        return f"{message}; keeping {applied}" if applied else message

    def _resolve(self, spec: PolicySourceSpec) -> str:
        auth = GitAuth()
        if spec.secret_name:
            secret = self._kube.get(
                RESOURCES["Secret"], spec.secret_name, self.settings.system_namespace
            )
            if secret is None:
                raise GitError(
                    "SecretNotFound",
                    f"secret {self.settings.system_namespace}/{spec.secret_name} not found",
                )
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
            auth = auth_from_secret(data, key_dir=self.settings.cache_dir / "keys")
        with self._git.lock(spec.url):
            return self._git.resolve(spec.url, spec.ref, auth=auth, timeout_s=spec.timeout_s)

    def _compile(self, spec: PolicySourceSpec, state: _State) -> tuple[list[Obj] | None, str]:
        assert state.sha is not None
        key = (spec.url, state.sha, spec.path)
        if state.compiled is not None and state.compiled[0] == key:
            return state.compiled[1], state.compiled[2]
        with self._git.lock(spec.url):
            try:
                sources, resolve = self._git.read(spec.url, state.sha, spec.path)
            except GitError as e:
                if e.reason != "ArtifactFailed":
                    raise
                self._git.forget(spec.url)
                state.sha = None
        if state.sha is None:  # the cache was damaged: clone again, read again
            state.sha = self._resolve(spec)
            with self._git.lock(spec.url):
                sources, resolve = self._git.read(spec.url, state.sha, spec.path)
        result = validate_sources(sources, root=spec.path, resolve=resolve)
        if result.policy_set is None:
            errors = [d for d in result.diagnostics if d.is_error]
            message = _diagnostics_text(errors, self.settings.max_diagnostics)
            state.compiled = (key, None, message)
        else:
            objects = compile_policy_set(
                result.policy_set,
                revision=revision_string(spec.ref, state.sha),
                source_root=spec.path,
                system_namespace=self.settings.system_namespace,
            )
            state.compiled = (key, objects, "")
        return state.compiled[1], state.compiled[2]

    def _mixed_sources(self) -> str:
        crs = [
            f"{kind}/{o['metadata']['name']}"
            for kind, inf in self.policy_crs.items()
            for o in inf.items()
        ]
        if not crs:
            return ""
        shown = ", ".join(sorted(crs)[:5]) + (f" (and {len(crs) - 5} more)" if len(crs) > 5 else "")
        return (
            f"policy custom resources exist ({shown}) as well as PolicySources: use one "
            "kind of source; delete the custom resources or the PolicySources"
        )

    # -- the custom-resource source

    def _reconcile_crs(self) -> None:
        """Reconcile the policy custom resources as one policy set; each CR's status says
        how its set fared. Nothing happens while there are none."""
        crs = [o for inf in self.policy_crs.values() for o in inf.items()]
        if not crs:
            return
        crs.sort(key=lambda o: (_POLICY_KINDS.index(o["kind"]), o["metadata"]["name"]))
        sources = [_cr_source(o) for o in crs]
        digest = hashlib.sha1(
            "".join(
                f"{s.path}@{o['metadata'].get('generation')};"
                for s, o in zip(sources, crs, strict=True)
            ).encode()
        ).hexdigest()
        revision = f"crs@sha1:{digest}"
        by_name = {o["metadata"]["name"] for o in self.sources.items()}
        inventory = sorted(
            {
                Ref.of(o)
                for inf in self.managed.values()
                for o in inf.items()
                if (o["metadata"].get("labels") or {}).get(LABEL_SOURCE) == CR_SOURCE
            },
            key=Ref.rank,
        )
        if by_name:
            shown = ", ".join(sorted(by_name)[:5])
            reason, message = (
                "MixedSources",
                (
                    f"PolicySources exist ({shown}) as well as policy custom resources: use one "
                    "kind of source; delete the custom resources or the PolicySources"
                ),
            )
            ok = False
        else:
            result = validate_sources(sources, root="custom resources", resolve=lambda _: None)
            if result.policy_set is None:
                errors = [d for d in result.diagnostics if d.is_error]
                reason, ok = "ValidationFailed", False
                message = _diagnostics_text(errors, self.settings.max_diagnostics)
            else:
                objects = compile_policy_set(
                    result.policy_set,
                    revision=revision,
                    source_root="custom resources",
                    system_namespace=self.settings.system_namespace,
                )
                synced = sync(
                    self._kube,
                    self._live,
                    self._pool,
                    objects,
                    inventory=inventory,
                    options=SyncOptions(source=CR_SOURCE),
                    source_exists=lambda other: self._kube.get(_SOURCE, other) is not None,
                )
                ok, reason = synced.ok, synced.reason
                message = f"Applied revision: {revision}" if ok else synced.message
                self.metrics.reconciles.labels(
                    CR_SOURCE, "applied" if synced.writes else ("unchanged" if ok else "stalled")
                ).inc()
                log.info(
                    "reconciled source=%s result=%s reason=%s changes=%r",
                    CR_SOURCE,
                    "ok" if ok else "refused",
                    reason,
                    synced.summary(),
                )
        for obj in crs:
            self._write_cr_status(obj, ok=ok, reason=reason, message=message)

    def _write_cr_status(self, obj: Obj, *, ok: bool, reason: str, message: str) -> None:
        old = obj.get("status") or {}
        status = self._kstatus(obj, ok=ok, reason=reason, message=message)
        if status == old:
            return
        res = RESOURCES[obj["kind"]]
        try:
            out = self._kube.merge_patch(
                res,
                obj["metadata"]["name"],
                {"status": status},
                field_manager=FIELD_MANAGER,
                subresource="status",
            )
        except ApiError as e:
            log.warning(
                "status write failed object=%s/%s error=%r",
                obj["kind"],
                obj["metadata"]["name"],
                str(e),
            )
            return
        self.policy_crs[obj["kind"]].assume(out)

    # -- status

    def _kstatus(self, obj: Obj, *, ok: bool, reason: str, message: str) -> Obj:
        """`observedGeneration` and the kstatus conditions for the outcome of a
        reconcile: Ready when it applied, Stalled when the reason needs a change
        from the user, Reconciling otherwise."""
        generation = int(obj["metadata"].get("generation", 0))
        stalled = not ok and reason in _STALLING
        return {
            "observedGeneration": generation,
            "conditions": conditions(
                (obj.get("status") or {}).get("conditions") or [],
                ready=ok,
                reason=reason,
                message=message,
                generation=generation,
                now=self._clock.now(),
                reconciling=not ok and not stalled,
                stalled=stalled,
            ),
        }

    def _progressing(self, obj: Obj, revision: str) -> None:
        status = dict(obj.get("status") or {})
        old = status.get("conditions") or []
        status["conditions"] = conditions(
            old,
            ready=False,
            reason="Progressing",
            message=f"applying revision {revision}",
            generation=int(obj["metadata"].get("generation", 0)),
            now=self._clock.now(),
            reconciling=True,
        )
        status["lastAttemptedRevision"] = revision
        self._write_status(obj, status)

    def _finish(
        self,
        obj: Obj,
        state: _State,
        revision: str | None,
        reason: str,
        message: str,
        result: SyncResult | None,
    ) -> None:
        name = obj["metadata"]["name"]
        old = dict(obj.get("status") or {})
        ok = result is not None and result.ok
        stalled = reason in _STALLING
        if ok:
            message = f"Applied revision: {revision}"
        status = self._kstatus(obj, ok=ok, reason=reason, message=message)
        for key in ("lastAppliedRevision", "lastAttemptedRevision", "lastHandledReconcileAt"):
            if key in old:
                status[key] = old[key]
        if revision is not None:
            status["lastAttemptedRevision"] = revision
        if ok:
            status["lastAppliedRevision"] = revision
        requested = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUESTED)
        if requested:
            status["lastHandledReconcileAt"] = requested
        status["inventory"] = {
            "entries": [r.entry() for r in sorted(state.inventory, key=Ref.rank)]
        }
        changed = self._write_status(obj, status)

        outcome = (
            "applied"
            if ok and result and result.writes
            else "unchanged"
            if ok
            else ("stalled" if stalled else "failed")
        )
        self.metrics.reconciles.labels(name, outcome).inc()
        self.metrics.stalled.labels(name).set(1 if stalled else 0)
        self.metrics.objects.labels(name).set(len(state.inventory))
        if ok:
            assert revision is not None
            self.metrics.set_revision(name, revision)
            self.metrics.last_success.labels(name).set(self._clock.now().timestamp())
        log.info(
            "reconciled source=%s result=%s reason=%s revision=%s %s",
            name,
            outcome,
            reason,
            revision or "-",
            f"changes={result.summary()!r}" if result else f"message={message!r}",
        )
        if result is not None and result.writes:
            for ref in result.recreated:
                message = f"{ref} deleted and recreated (value or preemptionPolicy changed)"
                self._event(obj, "Warning", "PriorityClassRecreated", message)
            verb = "ReconciliationSucceeded" if ok else reason
            self._event(obj, "Normal" if ok else "Warning", verb, f"{revision}: {result.summary()}")
        elif not ok and changed:
            self._event(obj, "Warning", reason, message)

    def _write_status(self, obj: Obj, status: Obj) -> bool:
        """Patch status if it differs; True if it was written."""
        if status == (obj.get("status") or {}):
            return False
        name = obj["metadata"]["name"]
        try:
            out = self._kube.merge_patch(
                _SOURCE,
                name,
                {"status": status},
                field_manager=FIELD_MANAGER,
                subresource="status",
            )
        except ApiError as e:
            log.warning("status write failed source=%s error=%r", name, str(e))
            return False
        self.sources.assume(out)
        obj["status"] = out.get("status", status)
        return True

    def _event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self._events.record(
            obj,
            type="Normal" if type_ == "Normal" else "Warning",
            reason=reason,
            message=message,
        )
