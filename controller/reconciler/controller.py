"""The policy reconciler: keeps the cluster equal to each PolicySource's revision.

Events route, the reconcile decides (Kueue's split). Informers watch the
PolicySources and every object gangops manages; their handlers only put a
source's name in the work queue (`queue`):

- a new or changed PolicySource, or a new `gangops.ai/reconcile-requested-at`
  annotation (what the push webhook sets), queues a reconcile that fetches;
- a managed object changed or deleted by anyone (drift) queues a reconcile
  that does not fetch: it re-applies the revision already in hand;
- every source is also polled every `spec.interval`, jittered by 10%.

A reconcile: resolve the ref (one `ls-remote`), read, validate and compile
the revision's files (`fetch`, through `policy.build`), `apply.sync`
(dry-run all, staged apply, prune), then write status only if it changed
(`status` assembles it) and record an Event only if something happened.
Compiled revisions are cached by commit, so drift correction and polls of an
unchanged branch cost no parsing. A revision that fails validation or
dry-run leaves the last good revision in place. The policy custom resources
are one more source (`crs`) and take the same apply path.

Which source wins: each managed object carries the `gangops.ai/policysource`
label of the source that applied it; a second source that compiles an object
the first one owns is refused (Stalled, OwnershipConflict), and so is a
PolicySource while policy custom resources exist (Stalled, MixedSources).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from controller.backoff import doubled
from controller.kube.client import RESOURCES, KubeApi, NotLeaderError
from controller.kube.clock import Clock, SystemClock
from controller.kube.informer import EventType, Informer
from controller.policy.compiler import APPLY_ORDER
from controller.reconciler.apply import (
    LABEL_SOURCE,
    Ref,
    SyncOptions,
    SyncResult,
    sync,
)
from controller.reconciler.crs import CR_SOURCE, POLICY_KINDS, CrSource, mixed_sources
from controller.reconciler.fetch import GitRevisions, Revisions
from controller.reconciler.git import GitError
from controller.reconciler.metrics import ReconcilerMetrics
from controller.reconciler.queue import WorkQueue
from controller.reconciler.report import Reporter
from controller.reconciler.spec import ANNOTATION_REQUESTED, PolicySourceSpec, revision_string
from controller.reconciler.status import (
    STALLING,
    diagnostics_text,
)
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE

__all__ = ["CR_SOURCE", "Reconciler", "ReconcilerSettings"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_SOURCE = RESOURCES["PolicySource"]


@dataclass(frozen=True)
class ReconcilerSettings:
    """How the reconciler runs."""

    cache_dir: Path
    """Where the Git caches (and SSH key files) live."""
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE
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
    good: tuple[str, list[Obj]] | None = None
    """The last revision applied in full, and its objects: while newer revisions
    are refused, drift is corrected from it."""
    lost: str | None = None
    """The applied revision that could not be built again (after a restart, gone
    from the repository: force-pushed away), so not tried at each reconcile."""


@dataclass
class _Fight:
    """The reconciler's last write of one managed object, and the changes seen since."""

    written_at: float
    """When the reconciler last wrote it (monotonic)."""
    previous_at: float | None = None
    """When it wrote it before that."""
    delay: float = 0.0
    """How long the last write waited after the change it answered: 0 but in a fight."""
    fast: bool = False
    """Whether another writer changed it within `DRIFT_QUIET_S` of `written_at`."""
    corrects_fast: bool = False
    """Whether the last write answered such a change (`fast` when it was written)."""

    @property
    def next_delay(self) -> float:
        """The wait of a correction that follows a fast change: twice the last one,
        from 1 s to `DRIFT_MAX_WAIT_S`."""
        return min(max(2 * self.delay, 1.0), DRIFT_MAX_WAIT_S)


class _Fights:
    """Whether another writer is fighting over a managed object (an operator or a
    mutating webhook changing it back): the reconciler's writes of each object, by
    `str(Ref)`, and the changes others make between them (the echo of its own write is
    none: `_DriftMarks`). A write that answers a change made within `DRIFT_QUIET_S` of
    the write before waits twice as long as the last, from 1 s to `DRIFT_MAX_WAIT_S`,
    instead of a loop of writes at the API server's speed; every other change is
    corrected at once. Times are the writes' own, taken as each write is answered, so
    a change seen while the rest of a correction is applied is judged against it."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_obj: dict[str, _Fight] = {}
        self._pruned_at = clock.monotonic()

    def wrote(self, obj: str) -> None:
        """The reconciler wrote `obj` (applied, created, deleted): a change seen before
        is what this write answers; changes from now on are judged against it."""
        now = self._clock.monotonic()
        with self._lock:
            if now - self._pruned_at > DRIFT_QUIET_S + DRIFT_MAX_WAIT_S:
                self._prune(now)
            f = self._by_obj.get(obj)
            if f is None:
                self._by_obj[obj] = _Fight(now)
                return
            f.previous_at, f.written_at = f.written_at, now
            f.corrects_fast, f.fast = f.fast, False
            f.delay = f.next_delay if f.corrects_fast else 0.0

    def changed(self, obj: str) -> float:
        """Another writer changed `obj`: how long its correction waits."""
        now = self._clock.monotonic()
        with self._lock:
            f = self._by_obj.get(obj)
            if f is None:
                return 0.0
            f.fast = f.fast or now - f.written_at <= DRIFT_QUIET_S
            return f.next_delay if f.fast else 0.0

    def corrected(self, objs: Iterable[str]) -> list[tuple[str, float, float]]:
        """A correction (the revision in hand applied again) wrote `objs`: those whose
        write answered a fast change, a fight's, with the seconds between that write
        and the one before, and the wait of their next correction if it goes on."""
        fights = []
        with self._lock:
            for obj in objs:
                f = self._by_obj.get(obj)
                if f is not None and f.corrects_fast:
                    since = f.written_at - (f.previous_at or f.written_at)
                    fights.append((obj, since, f.next_delay))
        return fights

    def _prune(self, now: float) -> None:
        """Forget writes long past (objects pruned, renamed, or long left alone): such
        a write can start no fight, so a first write starts from nothing the same.
        Caller holds the lock."""
        self._pruned_at = now
        stale = now - 2 * (DRIFT_QUIET_S + DRIFT_MAX_WAIT_S)
        for obj in [o for o, f in self._by_obj.items() if f.written_at < stale]:
            del self._by_obj[obj]


DRIFT_QUIET_S = 10.0
"""A managed object changed this long after the reconciler last wrote it (or later)
is drift like any other, corrected at once; changed sooner, it is another writer
changing it back, and its correction waits (`_Fights`)."""
DRIFT_MAX_WAIT_S = 300.0
"""The longest an object's drift waits: what another writer fighting over it gets,
one correction every five minutes."""


def _requested(obj: Obj) -> str | None:
    """An unhandled `gangops.ai/reconcile-requested-at` annotation, or None."""
    requested = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUESTED)
    handled = (obj.get("status") or {}).get("lastHandledReconcileAt")
    return requested if requested and requested != handled else None


def _kept(message: str, status: Obj, state: _State) -> str:
    applied = status.get("lastAppliedRevision")
    if applied and state.lost == applied:
        return (
            f"{message}; {applied}, applied last, is no longer in the repository: "
            "what drifts from it is not put back"
        )
    return f"{message}; keeping {applied}" if applied else message


class _Live:
    """The managed objects, as the informers see them (the `apply.LiveObjects` seam)."""

    def __init__(
        self, informers: dict[str, Informer], wrote: Callable[[Ref, Obj | None], None]
    ) -> None:
        self._by_kind = informers
        self._wrote = wrote
        """Told of each object the reconciler wrote (None: deleted), as it is answered."""

    def get(self, ref: Ref) -> Obj | None:
        inf = self._by_kind.get(ref.kind)
        return inf.get(ref.name, ref.namespace) if inf else None

    def assume(self, obj: Obj) -> None:
        self._wrote(Ref.of(obj), obj)
        inf = self._by_kind.get(obj["kind"])
        if inf is not None:
            inf.assume(obj)

    def forget(self, ref: Ref) -> None:
        self._wrote(ref, None)
        inf = self._by_kind.get(ref.kind)
        if inf is not None:
            inf.forget(ref.name, ref.namespace)


_BOOKKEEPING = frozenset(("resourceVersion", "managedFields", "generation"))


def _drift_mark(obj: Obj) -> str:
    """What a hand edit of a managed object can change: everything but its status and
    the metadata the API server keeps for itself."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in _BOOKKEEPING}
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return json.dumps([meta, rest], sort_keys=True, default=str)


_DELETED_HERE = ""
"""The mark of an object the reconciler deleted: its DELETED event is no drift."""


class _DriftMarks:
    """Each managed object's `_drift_mark`, as last seen or written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[Ref, str] = {}

    def moved(self, kind: EventType, ref: Ref, obj: Obj) -> bool:
        """Can this event be drift? A change only to status or bookkeeping (a
        ResourceQuota's usage moves with every pod) cannot, nor the echo of the
        reconciler's own write (`wrote`): only a change to what was applied, an
        addition or a deletion by someone else can."""
        mark = _drift_mark(obj)
        with self._lock:
            if kind == "DELETED":
                return self._marks.pop(ref, None) != _DELETED_HERE
            if self._marks.get(ref) == mark:
                return False
            self._marks[ref] = mark
        return True

    def wrote(self, ref: Ref, obj: Obj | None) -> None:
        """The reconciler wrote `obj` (None: deleted it): its own event is no drift."""
        with self._lock:
            self._marks[ref] = _DELETED_HERE if obj is None else _drift_mark(obj)


class Reconciler:
    """Reconciles every PolicySource in the cluster. `start`, then `stop`."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        settings: ReconcilerSettings,
        clock: Clock | None = None,
        metrics: ReconcilerMetrics | None = None,
        revisions: Revisions | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._kube = kube
        self.settings = settings
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self.metrics = metrics or ReconcilerMetrics()
        self._revisions = revisions or GitRevisions(
            kube, cache_dir=settings.cache_dir, system_namespace=settings.system_namespace
        )
        self._pool = ThreadPoolExecutor(settings.parallelism, thread_name_prefix="apply")
        self._queue = WorkQueue(self._clock)
        self._stop = threading.Event()
        self._states: dict[str, _State] = {}
        self._owners: dict[Ref, str] = {}
        self._marks = _DriftMarks()
        self._lock = threading.Lock()

        def informer(kind: str, handler: Any, **kw: Any) -> Informer:
            return Informer(kube, RESOURCES[kind], handler=handler, clock=self._clock, **kw)

        self.sources = informer(
            "PolicySource", self._on_source, label_selector=settings.source_selector
        )
        # The one ConfigMap the compiler writes is in the system namespace: watch it
        # there, so the controller needs no read access to other namespaces' ConfigMaps.
        self.managed = {
            kind: informer(
                kind,
                self._on_managed,
                label_selector=LABEL_SOURCE,
                **({"namespace": settings.system_namespace} if kind == "ConfigMap" else {}),
            )
            for kind in APPLY_ORDER
        }
        self.policy_crs = {kind: informer(kind, self._on_policy_cr) for kind in POLICY_KINDS}
        self._fights = _Fights(self._clock)
        self._live = _Live(self.managed, self._wrote)
        self._report = Reporter(
            kube,
            sources=self.sources,
            policy_crs=self.policy_crs,
            metrics=self.metrics,
            clock=self._clock,
        )
        self._crs = CrSource(
            self,
            apply=self._apply_revision,
            report=self._report,
            max_diagnostics=settings.max_diagnostics,
            corrected=lambda result: self._corrected(CR_SOURCE, result),
        )
        self._worker: threading.Thread | None = None
        self._running: set[threading.Thread] = set()
        """The reconciles in flight, one thread per source."""
        self._reserved_seen: tuple[Any, Any] | None = None
        """(uid, generation) of the PolicySource named `CR_SOURCE` last warned about."""

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
        deadline = self._clock.monotonic() + 10
        with self._lock:
            running = list(self._running)
        for t in running:  # one stuck on a silent remote is left to its timeout
            t.join(max(0.0, deadline - self._clock.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)

    def request(self, name: str) -> None:
        """Reconcile `name` now, fetching its repository."""
        self._queue.add(name, fetch=True)

    # -- routing

    def _on_source(self, kind: EventType, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            with self._lock:
                if name != CR_SOURCE:  # that name's state is the custom resources' source's
                    self._states.pop(name, None)
            self._queue.add(CR_SOURCE)  # a mix of sources may have ended
            return
        if kind == "ADDED":
            self._queue.add(CR_SOURCE)  # a mix of sources may have begun
        state = self._states.get(name)
        if (
            state is None
            or obj["metadata"].get("generation") != state.generation
            or _requested(obj)
        ):
            self._queue.add(name, fetch=True)

    def _on_managed(self, kind: EventType, obj: Obj) -> None:
        ref = Ref.of(obj)
        if not self._marks.moved(kind, ref, obj):
            return
        labels = obj["metadata"].get("labels") or {}
        owner = labels.get(LABEL_SOURCE) or self._owners.get(ref)
        if owner:
            self._queue.add(owner, after=self._fights.changed(str(ref)))

    def _state(self, name: str) -> _State:
        with self._lock:
            return self._states.setdefault(name, _State())

    def _wrote(self, ref: Ref, obj: Obj | None) -> None:
        self._marks.wrote(ref, obj)
        self._fights.wrote(str(ref))

    def _corrected(self, name: str, result: SyncResult) -> None:
        """Drift of `name`'s objects was corrected (the revision already applied was
        applied again and wrote something): a fight over any of them (`_Fights`) is
        said in the log while it lasts."""
        written = chain(result.created, result.configured, result.recreated, result.deleted)
        fights = self._fights.corrected(sorted(set(written)))
        if fights:
            log.warning(
                "drift corrected again soon after the correction before: another writer"
                " may be changing them back source=%s objects=%s changes=%r"
                " next_correction_after_s=%.0f (if changed back within %.0f s)",
                name,
                ", ".join(f"{obj} ({since:.0f} s after its last)" for obj, since, _ in fights),
                result.summary(),
                max(wait for _, _, wait in fights),
                DRIFT_QUIET_S,
            )

    def _on_policy_cr(self, kind: EventType, obj: Obj) -> None:
        for name in list(self._states):
            self._queue.add(name)
        self._queue.add(CR_SOURCE)

    # -- the worker

    def _work(self) -> None:
        """Hand each due source to a thread of its own: a source whose remote hangs
        (up to its `timeout`) never delays another's reconcile or drift
        correction. The queue never hands out a name that is being worked on, so
        one source is never reconciled twice at once; the API requests of all of
        them share the apply pool."""
        while not self._stop.is_set() and not all(
            inf.wait_synced(0.5) for inf in self._informers()
        ):
            pass
        while not self._stop.is_set():
            item = self._queue.get(self._stop)
            if item is None:
                return
            name, fetch = item
            t = threading.Thread(
                target=self._run, args=(name, fetch), name=f"reconcile-{name}", daemon=True
            )
            with self._lock:
                self._running.add(t)
            t.start()

    def _run(self, name: str, fetch: bool) -> None:
        """One reconcile of `name`, then its next one queued; a crash is reported on
        the source and retried like a transient failure."""
        try:
            after = self.reconcile(name, fetch=fetch)
        except NotLeaderError as e:
            log.warning("reconcile stopped: not the leader source=%s error=%r", name, str(e))
            after = None
        except Exception as e:
            log.exception("reconcile crashed source=%s", name)
            after = self._crashed(name, e)
        finally:
            self._queue.done(name)
            with self._lock:
                self._running.discard(threading.current_thread())
        if after is not None and not self._stop.is_set():
            self._queue.add(name, after=after)

    def _crashed(self, name: str, error: Exception) -> float:
        """Say on the source that its reconcile failed (it is no longer Ready on an
        old revision as if nothing happened); retry with backoff."""
        with self._lock:
            state = self._states.setdefault(name, _State())
        state.failures += 1
        state.fetch_at = 0.0
        obj = self.sources.get(name)
        if obj is not None:
            status = obj.get("status") or {}
            message = _kept(f"reconcile failed: {type(error).__name__}: {error}", status, state)
            try:
                self._refuse(obj, state, "ReconcileFailed", message)
            except Exception:
                log.exception("could not report the crash source=%s", name)
        return self._backoff(state)

    # -- one reconcile

    def reconcile(self, name: str, *, fetch: bool = True) -> float | None:
        """Reconcile one source; returns when to poll it next (None: only on events)."""
        if name == CR_SOURCE:
            self._refuse_reserved()
            outcome = self._crs.reconcile()
            state = self._state(name)
            if outcome is None or outcome[0] or outcome[1] in STALLING:
                state.failures = 0
                return None  # done, or needs a person: the next event says when
            state.failures += 1  # an apply or prune failed midway: tried again
            return self._backoff(state)
        cached = self.sources.get(name)
        if cached is None:
            return None
        obj = dict(cached)
        t0 = self._clock.monotonic()
        with self._lock:
            state = self._states.setdefault(name, _State())
        generation = int(obj["metadata"].get("generation", 0))
        fetch = fetch or generation != state.generation or bool(_requested(obj))
        spec, after = self._admit(obj, state)
        if spec is None:
            return after
        status = obj.get("status") or {}
        fetch = fetch or state.sha is None or self._clock.monotonic() >= state.fetch_at
        if not state.inventory:  # a restart: the inventory the status holds
            entries = (status.get("inventory") or {}).get("entries", [])
            self._own(name, {Ref.from_entry(e) for e in entries}, state)
        t_fetch = self._clock.monotonic()
        try:
            revision, t_compile, objects, diagnostics = self._revision(spec, state, fetch=fetch)
        except GitError as e:
            state.failures += 1
            state.fetch_at = 0.0
            self._keep_good(name, spec, state, status)
            self._refuse(obj, state, e.reason, _kept(e.message, status, state))
            return self._backoff(state)
        if objects is None:
            self._keep_good(name, spec, state, status)
            if state.lost is not None and state.lost == status.get("lastAppliedRevision"):
                diagnostics = _kept(diagnostics, status, state)
            self._refuse(obj, state, "ValidationFailed", diagnostics, revision=revision)
            return self._poll(spec)
        if revision != status.get("lastAppliedRevision") or generation != status.get(
            "observedGeneration"
        ):
            self._report.progressing(obj, revision)
        t_sync = self._clock.monotonic()
        options = SyncOptions(
            source=name,
            prune=spec.prune,
            prune_namespaces=spec.prune_namespaces,
            allow_recreate=spec.allow_recreate,
        )
        result = self._apply_revision(objects, state.inventory, options)
        log.debug(
            "reconcile phases source=%s fetch_s=%.3f compile_s=%.3f sync_s=%.3f",
            name,
            t_compile - t_fetch,
            t_sync - t_compile,
            self._clock.monotonic() - t_sync,
        )
        self._own(name, set(result.inventory), state)
        if result.writes and state.good is not None and state.good[0] == revision:
            self._corrected(name, result)
        # Observed before the status write, so whoever sees the new status also
        # sees the duration of the reconcile that wrote it.
        self.metrics.duration.labels(name).observe(self._clock.monotonic() - t0)
        self._report.finish(
            obj, inventory=state.inventory, revision=revision, reason=result.reason,
            message=result.message, result=result,
        )  # fmt: skip
        if result.ok:
            state.failures = 0
            state.good, state.lost = (revision, objects), None
        elif result.reason in STALLING:  # refused as a whole: nothing of it applied
            self._keep_good(name, spec, state, status)
        if result.ok or result.reason in STALLING:  # needs nothing, or needs a person
            return self._poll(spec)
        state.failures += 1
        return self._backoff(state)

    def _keep_good(self, name: str, spec: PolicySourceSpec, state: _State, status: Obj) -> None:
        """While the newest revision is refused (invalid, or out of reach), keep the
        cluster equal to the last one applied: what drifted (a ResourceQuota or a
        PriorityClass deleted by hand) is applied again from it. After a restart
        that revision is built again from `status.lastAppliedRevision`."""
        applied = status.get("lastAppliedRevision")
        if state.good is None or state.good[0] != applied:
            sha = str(applied or "").rpartition("sha1:")[2]
            if not sha or state.lost == applied:
                return
            try:
                _, built = self._revisions.build(spec, sha)
            except GitError as e:
                if e.reason == "ReferenceNotFound":  # gone from the repository for good
                    state.lost = str(applied)
                log.warning("cannot rebuild the applied revision source=%s error=%r", name, str(e))
                return
            if built.objects is None:
                return
            state.good, state.lost = (str(applied), built.objects), None
        options = SyncOptions(
            source=name,
            prune=False,  # never delete on the strength of an old revision
            prune_namespaces=False,
            allow_recreate=spec.allow_recreate,
        )
        result = self._apply_revision(state.good[1], state.inventory, options)
        if result.writes:
            log.info(
                "drift corrected from the applied revision source=%s revision=%s changes=%r",
                name,
                state.good[0],
                result.summary(),
            )
            self._corrected(name, result)

    def _refuse_reserved(self) -> None:
        """A PolicySource named `CR_SOURCE` (the policy custom resources' source name,
        refused by the CRD's CEL rule; one created before that rule, or with the CRD
        not installed by gangops, gets here) is never fetched nor applied: it is
        refused, Stalled with InvalidSpec, and a warning logged once per generation."""
        cached = self.sources.get(CR_SOURCE)
        if cached is None:
            return
        obj = dict(cached)
        meta = obj["metadata"]
        seen = (meta.get("uid"), meta.get("generation"))
        if seen != self._reserved_seen:
            self._reserved_seen = seen
            log.warning(
                "PolicySource ignored: its name is reserved for the policy custom"
                " resources' source; create it under another name source=%s",
                CR_SOURCE,
            )
        message = (
            f"invalid spec: the name {CR_SOURCE} is reserved for the policy custom"
            " resources' source; this PolicySource is never reconciled: create it under"
            " another name and delete this one"
        )
        self._refuse(obj, _State(), "InvalidSpec", message)

    def _admit(self, obj: Obj, state: _State) -> tuple[PolicySourceSpec | None, float | None]:
        """The source's spec if it is to be reconciled now; else None and when to
        look again (an invalid spec or a suspended source: on events only; a mix
        of sources: at the next poll). Records the generation seen."""
        state.generation = int(obj["metadata"].get("generation", 0))
        try:
            spec = PolicySourceSpec.parse(obj.get("spec") or {})
        except (ValueError, KeyError) as e:
            self._refuse(obj, state, "InvalidSpec", f"invalid spec: {e}")
            return None, None
        if spec.suspend:
            log.info("source suspended source=%s", obj["metadata"]["name"])
            return None, None
        crs = [
            f"{k}/{o['metadata']['name']}" for k, i in self.policy_crs.items() for o in i.items()
        ]
        if crs:
            message = mixed_sources("policy custom resources", crs, besides="PolicySources")
            self._refuse(obj, state, "MixedSources", message)
            return None, self._poll(spec)
        return spec, None

    def _refuse(
        self, obj: Obj, state: _State, reason: str, message: str, *, revision: str | None = None
    ) -> None:
        """Report a reconcile that applied nothing."""
        self._report.finish(
            obj, inventory=state.inventory, revision=revision, reason=reason, message=message
        )

    def _apply_revision(
        self, objects: list[Obj], inventory: Iterable[Ref], options: SyncOptions
    ) -> SyncResult:
        """The one apply path of both kinds of source."""
        return sync(
            self._kube,
            self._live,
            self._pool,
            objects,
            inventory=sorted(inventory, key=Ref.rank),
            options=options,
            source_exists=lambda other: self._kube.get(_SOURCE, other) is not None,
        )

    def _own(self, name: str, refs: set[Ref], state: _State) -> None:
        """`refs` are `name`'s inventory now (drift events on them route to it)."""
        state.inventory = refs
        with self._lock:
            for ref in refs:
                self._owners[ref] = name

    def _poll(self, spec: PolicySourceSpec) -> float:
        return spec.interval_s * (1 + self._rng.uniform(0, self.settings.jitter))

    def _backoff(self, state: _State) -> float:
        s = self.settings
        return doubled(s.retry_base_s, state.failures, s.retry_max_s)

    def _revision(
        self, spec: PolicySourceSpec, state: _State, *, fetch: bool
    ) -> tuple[str, float, list[Obj] | None, str]:
        """The revision to apply (the ref resolved again if `fetch`), when its build
        began, and its objects (None when invalid, with the diagnostics quoted):
        built once per (url, commit, path). Raises `GitError`."""
        if fetch:
            state.sha = self._revisions.resolve(spec)
            state.fetch_at = self._clock.monotonic() + spec.interval_s
        assert state.sha is not None
        revision = revision_string(spec.ref, state.sha)
        t_compile = self._clock.monotonic()
        key = (spec.url, state.sha, spec.path)
        if state.compiled is None or state.compiled[0] != key:
            state.sha, built = self._revisions.build(spec, state.sha)
            state.compiled = (
                key,
                built.objects,
                diagnostics_text(built.errors, self.settings.max_diagnostics),
            )
        return revision, t_compile, state.compiled[1], state.compiled[2]
