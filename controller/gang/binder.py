"""The binder: carries out one job's decided `Write` against the API server.

It decides nothing; `lifecycle` has said what to write. The order is the
crash story: the job's status, with its record, goes first (compare-and-swap
on resourceVersion where the decision was made on what the cache showed);
only then are pods created and bound (`launch`) or deleted (a release clears
the record first). After a crash at any point the records say what to finish
or roll back, and pods of an attempt no record names are deleted by a later
step. Binding a pod twice is impossible (the API server refuses, 409), and a
pod creation refused by the ResourceQuota is retried briefly. A launch the API
server refuses (a pod or its Service, after that retry) raises `LaunchRefused`
with the API server's words; what follows (`lifecycle.refused_write`) is not
the binder's to decide.

Every write is `assume`d into the informer that will see it, so the next
step reads it before its watch event arrives.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from controller.gang.lifecycle import Write
from controller.gang.metrics import GangMetrics
from controller.gang.record import Admission, format_time, status_number
from controller.gang.view import JobView
from controller.jobs.pods import headless_service, worker_pods
from controller.jobs.status import job_status
from controller.kube.client import RESOURCES, ApiError, KubeApi, retry_wait
from controller.kube.clock import Clock
from controller.kube.events import EventRecorder
from controller.kube.informer import Informer

__all__ = ["FIELD_MANAGER", "Binder", "LaunchRefused"]

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangops-scheduler"
_JOB = RESOURCES["TrainingJob"]
_POD = RESOURCES["Pod"]
_SERVICE = RESOURCES["Service"]
_PAST = {"admit": "admitted", "resize": "resized", "nominate": "nominated"}
"""How a write is named in the log (a release is logged by its kind)."""

Obj = dict[str, Any]


class LaunchRefused(Exception):
    """The API server refused to create or bind one of a launch's objects."""

    def __init__(self, obj: str, error: ApiError) -> None:
        super().__init__(f"{obj}: {error}")
        self.obj = obj
        """What was refused, in words (`pod nlp/j-1-0`, `service nlp/j`)."""
        self.status = error.status
        self.message = error.message
        """The API server's message."""


def _refusal(
    kind: str, meta: Mapping[str, Any], run: Callable[..., object], *args: Any
) -> LaunchRefused | None:
    """Run `run(*args)`; a refusal by the API server (what the callers do not
    handle or retry themselves) is returned, an unreachable API server (status 0)
    raised."""
    try:
        run(*args)
    except ApiError as e:
        if e.status == 0:
            raise
        return LaunchRefused(f"{kind} {meta.get('namespace')}/{meta['name']}", e)
    return None


def _passing(e: ApiError) -> bool:
    """Whether a pod create refused so may succeed in a moment: the namespace's
    ResourceQuota exceeded (its usage is released a little after pods go) or not yet
    computed ('status unknown for quota'), a conflict writing the quota's usage (409
    Conflict: the quota check gave up after its own retries while other writers
    changed it; not AlreadyExists), or the server busy (429) or failing (5xx, a
    quota evaluation timed out among them)."""
    if e.status == 403:
        return "exceeded quota" in e.message or "status unknown for quota" in e.message
    return e.transient and e.status != 0 and e.reason != "AlreadyExists"


def _left_by_namesake(owners: list[Mapping[str, Any]], name: str) -> bool:
    """Whether a Service with these owner references was left by an earlier
    TrainingJob named `name`: it has owners, and every one is such a job."""
    return bool(owners) and all(
        o.get("kind") == "TrainingJob"
        and str(o.get("apiVersion", "")).split("/")[0] == "ai.operator"
        and o.get("name") == name
        for o in owners
    )


def _owners(owners: list[Mapping[str, Any]]) -> str:
    """Who owns a Service, in words."""
    if not owners:
        return "it has no owner"
    return "owned by " + ", ".join(f"{o.get('kind')} {o.get('name')}" for o in owners)


class Binder:
    """Writes decided steps: `execute(write)`, one job at a time per caller."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        jobs: Informer,
        pods: Informer,
        pod_pool: Executor,
        clock: Clock,
        metrics: GangMetrics,
        events: EventRecorder,
        stop: threading.Event,
        quota_retry_s: float,
    ) -> None:
        self._kube = kube
        self._jobs = jobs
        self._pods = pods
        self._pod_pool = pod_pool
        self._clock = clock
        self._metrics = metrics
        self._events = events
        self._stop = stop
        self._quota_retry_s = quota_retry_s
        self._services: set[str] = set()
        """UIDs of the jobs whose headless Service this process created (or found)."""

    def execute(self, w: Write) -> None:
        """The status (with the record, or the record cleared), then the pods."""
        v = w.job
        if w.preemption and v.gang is not None:
            self._metrics.preemptions.labels(v.gang.project, v.gang.tier).inc()
        if w.phase is not None:
            obj = self._write_status(w)
            if w.counted:
                self._metrics.decisions.labels(w.kind).inc()
            self._log(w)
            if w.event is not None:
                self._events.record(obj, type=w.event, reason=w.reason, message=w.message)
            if w.record is not None:
                v = JobView(obj, v.id, v.spec, v.gang, v.error, w.record, [])
        if w.launch and v.admission is not None:
            self._launch(v, v.admission)
        self._delete_pods(w.delete)

    def _log(self, w: Write) -> None:
        v, adm = w.job, w.record
        if w.kind == "admit" and adm is not None:
            nodes = ", ".join(f"{n} x{c}" for n, c in sorted(adm.placement.nodes().items()))
            log.info("admitted job=%s attempt=%d nodes=%s", v.id, adm.attempt, nodes)
        elif w.kind == "resize" and adm is not None:
            old = len(v.admission.placement.pods) if v.admission is not None else 0
            log.info(
                "resized job=%s attempt=%d workers=%d->%d",
                v.id,
                adm.attempt,
                old,
                len(adm.placement.pods),
            )
        elif w.kind == "nominate" and adm is not None:
            log.info("nominated job=%s victims=%s", v.id, ",".join(j for j, _ in adm.victims))
        elif w.counted:
            log.info("%s job=%s reason=%r", _PAST.get(w.kind, w.kind), v.id, w.message)

    def _write_status(self, w: Write) -> Obj:
        """Merge-patch the job's status (compare-and-swap on resourceVersion when
        `w.conditional`); fields set to None are removed."""
        assert w.phase is not None
        v = w.job
        meta = v.obj["metadata"]
        status = v.status
        extra = dict(w.fields)
        if w.record is not None:
            extra["admission"] = w.record.to_dict()
        elif w.clear:
            extra["admission"] = None
        adm = extra.get("admission", status.get("admission"))
        allocation: dict[str, int] = {}
        if isinstance(adm, Mapping):
            for p in adm.get("pods", ()):
                allocation[p["node"]] = allocation.get(p["node"], 0) + len(p["devices"])
        body = job_status(
            generation=int(meta.get("generation", 0)),
            phase=w.phase,
            reason=w.reason,
            message=w.message,
            now=format_time(self._clock.now().timestamp()),
            previous=status.get("conditions") or (),
            stalled=w.stalled,
            allocation=allocation or None,
            restarts=int(extra.pop("restarts", status_number(status, "restarts"))),
            tier=v.gang.tier if v.gang is not None else None,
            # what the job holds (an elastic job's current size), else what it asks for
            gpus=sum(allocation.values()) or (v.spec.gang_size if v.spec is not None else None),
        )
        # Cleared too when the record is: a refused launch's view is the one from
        # before its admission, whose status had no allocation to clear yet.
        if not allocation and (status.get("allocation") or w.clear):
            body["allocation"] = None
        body.update(extra)
        patch: Obj = {"status": body}
        if w.conditional:
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        out = self._kube.merge_patch(
            _JOB,
            meta["name"],
            patch,
            field_manager=FIELD_MANAGER,
            namespace=meta.get("namespace"),
            subresource="status",
        )
        self._jobs.assume(out)
        return out

    def _launch(self, v: JobView, adm: Admission) -> None:
        """Create the attempt's missing pods and bind each unbound one to its node
        (the pods of one gang in parallel)."""
        assert v.spec is not None and v.gang is not None
        service = None
        if v.spec.uid not in self._services:
            svc = headless_service(v.spec)
            service = self._pod_pool.submit(
                _refusal, "service", svc["metadata"], self._create_service, svc
            )
        template = v.obj["spec"]["template"]
        try:
            manifests = worker_pods(
                v.spec, template, adm.placement, tier=v.gang.tier, attempt=adm.attempt
            )
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            # A template the parser let through that no pod can be built from: refused
            # as the API server would refuse the pod (the GPUs go back, the status says
            # why), not a write that crashes at each admission until its gang timeout.
            why = ApiError(422, "Invalid", f"no worker pod can be built from it: {e!r}")
            raise LaunchRefused(f"template of {v.id}", why) from e
        nodes = [where.node for where in adm.placement.pods]
        results = list(
            self._pod_pool.map(
                lambda m, n: _refusal("pod", m["metadata"], self._place_pod, m, n),
                manifests,
                nodes,
            )
        )
        if service is not None:
            results.append(service.result())
        refused = [r for r in results if r is not None]
        if refused:
            log.warning(
                "launch refused job=%s attempt=%d refused=%d error=%r",
                v.id,
                adm.attempt,
                len(refused),
                str(refused[0]),
            )
            raise refused[0]
        if not v.status.get("startedAt"):  # first time bound (not a restart or resize)
            self._metrics.gang_bound.labels(v.gang.tier).observe(
                max(0.0, self._clock.now().timestamp() - v.spec.created)
            )
        log.info("gang bound job=%s attempt=%d pods=%d", v.id, adm.attempt, len(manifests))

    def _create_service(self, svc: Obj) -> None:
        """The job's headless Service (it only names the workers, so it is created
        beside them, not before them). One of the same name left by an earlier job
        of that name (deleted, recreated under its name before the garbage collector
        took the Service: owned by TrainingJobs of this name alone) is replaced by
        this job's: kept, it would vanish with its owner. Any other Service of that
        name is someone else's (an admin's, a StatefulSet's): it is left alone and
        the launch refused, naming it; tenants may not write Services, so taking it
        over would do for them what they may not (docs/security.md)."""
        meta = svc["metadata"]
        uid = meta["ownerReferences"][0]["uid"]
        try:
            self._kube.create(svc, field_manager=FIELD_MANAGER)
        except ApiError as e:
            if e.status != 409:
                raise
            live = self._kube.get(_SERVICE, meta["name"], meta["namespace"])
            owners = (live or {}).get("metadata", {}).get("ownerReferences") or []
            if live is not None and not any(o.get("uid") == uid for o in owners):
                if not _left_by_namesake(owners, meta["name"]):
                    raise ApiError(
                        e.status,
                        e.reason,
                        f"{e.message}; Service {meta['namespace']}/{meta['name']} is not "
                        f"this job's ({_owners(owners)}), so gangops leaves it: rename the "
                        "TrainingJob, or have the Service's owner remove it",
                    ) from None
                rv = live["metadata"].get("resourceVersion")
                self._kube.replace(
                    {**svc, "metadata": {**meta, "resourceVersion": rv}},
                    field_manager=FIELD_MANAGER,
                )
        self._services.add(uid)

    def _place_pod(self, manifest: Obj, node: str) -> None:
        """Create one worker, bound to its node (unless it exists); bind a worker
        found unbound (one created by an earlier version of gangops)."""
        meta = manifest["metadata"]
        live = self._pods.get(meta["name"], meta["namespace"]) or self._create(manifest)
        if live["metadata"].get("deletionTimestamp") or live["spec"].get("nodeName"):
            return
        try:
            self._kube.bind(meta["namespace"], meta["name"], node, field_manager=FIELD_MANAGER)
        except ApiError as e:
            if e.status != 409:  # already bound: a binding happens once
                raise
        self._pods.assume({**live, "spec": {**live["spec"], "nodeName": node}})

    def _create(self, manifest: Obj) -> Obj:
        """Create a pod; one refused for a reason that passes (`_passing`: the
        ResourceQuota exceeded or its usage not yet computed, a conflict writing
        that usage, the server busy or failing) is retried for `quota_retry_s` (the
        quota controller releases an evicted gang's usage a little after its pods
        go), every 0.5 s or after the wait the server asks for (`Retry-After`), then
        the refusal raised (at once when that wait outlasts the window)."""
        meta = manifest["metadata"]
        deadline = self._clock.monotonic() + self._quota_retry_s
        while True:
            try:
                out = self._kube.create(manifest, field_manager=FIELD_MANAGER)
                self._pods.assume(out)
                return out
            except ApiError as e:
                if e.status == 409 and e.reason == "AlreadyExists":
                    live = self._kube.get(_POD, meta["name"], meta["namespace"])
                    if live is None:  # deleted meanwhile: created again by a later step
                        raise
                    return live
                # the window is over, or the wait the server asks for outlasts it
                pause = retry_wait(e, 0.5)
                late = self._clock.monotonic() + pause > deadline + 0.5
                if not _passing(e) or late or self._stop.is_set():
                    raise
                log.info("pod create refused; retrying pod=%s/%s error=%r retry_in_s=%.1f",
                         meta["namespace"], meta["name"], str(e), pause)  # fmt: skip
            self._clock.wait(self._stop, pause)

    def _delete_pods(self, pods: tuple[Obj, ...]) -> None:
        for p in pods:
            meta = p["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            self._kube.delete(
                _POD, meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid")
            )
