"""The job controller and the scheduling loop: TrainingJobs in, whole gangs bound out.

Informers watch Nodes, all Pods (any scheduler's GPUs count), TrainingJobs
and the compiled policy ConfigMap; their events only wake the loop. Each
step, on an event or on the periodic tick:

1. `view` reads every job (spec, gang under the policy, recorded decision,
   pods); `lifecycle.plan` says what each recorded decision needs next
   (launch, restart, rollback, evict, ...) and which gangs hold GPUs and
   which wait;
2. the snapshot is built and `cycle.schedule` (the pure core) decides;
3. the decisions and the lifecycle actions are handed to a pool of writers,
   one job at a time.

Assume, then write: a decision enters `_overrides` at once, so the next step
counts its GPUs even before the write lands; a failed write drops it and the
job is decided again. The record goes to the TrainingJob's status before any
pod is created, bound or deleted, and it moves first on the way back too
(cleared, then the pods deleted), so after a crash at any point the records
say what to finish or roll back; pods of an attempt no record names are
deleted. Binding a pod twice is impossible (the API server refuses, 409),
and a pod creation refused by the ResourceQuota is retried briefly, then
left to the gang timeout.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from controller.gang.lifecycle import Action, Plan, cycle
from controller.gang.metrics import GangMetrics
from controller.gang.record import Admission, format_time, status_number
from controller.gang.view import JobView, Memo, job_views, pod_terminal
from controller.jobs.pods import headless_service, worker_pods
from controller.jobs.spec import JobSpec
from controller.jobs.status import Phase, job_status
from controller.kube.client import RESOURCES, ApiError, Kube, NotLeaderError
from controller.kube.clock import Clock, SystemClock
from controller.kube.events import EventRecorder
from controller.kube.informer import EventType, Informer
from controller.policy.compiler import DEFAULT_SYSTEM_NAMESPACE, POLICY_CONFIGMAP, POLICY_KEY
from controller.scheduler.cycle import GROW_INTERVAL_S, CycleResult
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI, Admit, JobId, Pending, Placement, Preempt

__all__ = ["FIELD_MANAGER", "GangController", "GangSettings"]

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangops-scheduler"
_JOB = RESOURCES["TrainingJob"]
_POD = RESOURCES["Pod"]
_SERVICE = RESOURCES["Service"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class GangSettings:
    """How the job controller and scheduler run."""

    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE
    """Where the compiled policy ConfigMap lives."""
    job_selector: str | None = None
    """Schedule only TrainingJobs matching this label selector (sharding, tests)."""
    node_selector: str | None = None
    """Place only on nodes matching this label selector."""
    tick_s: float = 1.0
    """Longest time between two steps when nothing happens (timeouts, backoffs)."""
    batch_s: float = 0.05
    """Pause after a wake-up, so a burst of events makes one step; at least as long
    as the last step took, so under a stream of events the loop uses at most half
    of a core and leaves the rest to the writers (and, on a shared machine, to the
    API server)."""
    parallelism: int = 16
    """Jobs written at the same time (each job's record before its pods)."""
    pod_parallelism: int = 32
    """Pods created and bound at the same time, over all jobs."""
    grow_interval_s: float = GROW_INTERVAL_S
    """Least time between two growths of one elastic gang (each restarts it)."""
    backoff_base_s: float = 5.0
    """Requeue delay after the first gang timeout; doubled for each later one."""
    backoff_max_s: float = 300.0
    quota_retry_s: float = 10.0
    """How long a pod creation refused by the ResourceQuota is retried (the quota
    controller releases an evicted gang's usage a little after its pods go)."""


def _gpus(milli: int) -> str:
    return f"{milli / MILLI:g}"


class GangController:
    """Runs TrainingJobs: `start`, then `stop`. `step` is one pass (for tests)."""

    def __init__(
        self,
        kube: Kube,
        *,
        settings: GangSettings | None = None,
        clock: Clock | None = None,
        metrics: GangMetrics | None = None,
    ) -> None:
        self._kube = kube
        self.settings = settings or GangSettings()
        self._clock = clock or SystemClock()
        self.metrics = metrics or GangMetrics()
        self._events = EventRecorder(kube, component="gangops-scheduler", clock=self._clock)
        """Each decision about a job, for `kubectl describe tj` and `kubectl events`."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._busy: set[JobId] = set()
        self._overrides: dict[JobId, Admission | None] = {}
        self._pool = ThreadPoolExecutor(self.settings.parallelism, thread_name_prefix="gang")
        self._pod_pool = ThreadPoolExecutor(self.settings.pod_parallelism, thread_name_prefix="pod")
        self._services: set[str] = set()
        """UIDs of the jobs whose headless Service this process created (or found)."""
        self._policy_cache: tuple[str, SchedulingPolicy | None] = ("", None)
        self._memo = Memo()
        self._worker: threading.Thread | None = None
        self.last_result: CycleResult | None = None
        s = self.settings

        def informer(kind: str, **kw: Any) -> Informer:
            return Informer(kube, RESOURCES[kind], handler=self._on_event, clock=self._clock, **kw)

        self.nodes = informer("Node", label_selector=s.node_selector)
        self.pods = informer("Pod")
        self.jobs = informer("TrainingJob", label_selector=s.job_selector)
        self.config = informer("ConfigMap", namespace=s.system_namespace)

    # -- lifecycle

    def _informers(self) -> list[Informer]:
        return [self.nodes, self.pods, self.jobs, self.config]

    def start(self) -> None:
        """Start the informers and the loop; returns at once."""
        for inf in self._informers():
            inf.start()
        self._worker = threading.Thread(target=self._work, name="gang-scheduler", daemon=True)
        self._worker.start()

    def ready(self) -> bool:
        """True once every informer has listed."""
        return all(inf.synced for inf in self._informers())

    def stop(self) -> None:
        """Stop the loop, the writers and the informers."""
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join(30)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pod_pool.shutdown(wait=True, cancel_futures=True)
        for inf in self._informers():
            inf.stop()

    def _on_event(self, kind: EventType, obj: Obj) -> None:
        self._wake.set()

    def _work(self) -> None:
        while not self._stop.is_set() and not all(
            inf.wait_synced(0.5) for inf in self._informers()
        ):
            pass
        while not self._stop.is_set():
            started = self._clock.monotonic()
            try:
                self.step()
            except NotLeaderError as e:
                log.warning("scheduling step stopped: not the leader error=%r", str(e))
            except Exception:
                log.exception("scheduling step crashed")
            took = self._clock.monotonic() - started
            self._clock.wait(self._wake, self.settings.tick_s)
            self._wake.clear()
            pause = max(self.settings.batch_s, took) if self.settings.batch_s else 0.0
            if pause:
                self._clock.wait(self._stop, pause)

    # -- one step

    def policy(self) -> SchedulingPolicy | None:
        """The compiled scheduling policy, or None while there is none (or it is unreadable)."""
        cm = self.config.get(POLICY_CONFIGMAP, self.settings.system_namespace)
        rv = "" if cm is None else str(cm["metadata"].get("resourceVersion", ""))
        if rv == self._policy_cache[0] and cm is not None:
            return self._policy_cache[1]
        parsed: SchedulingPolicy | None = None
        if cm is None:
            log.warning(
                "no scheduling policy configmap=%s/%s; nothing is scheduled",
                self.settings.system_namespace,
                POLICY_CONFIGMAP,
            )
        else:
            try:
                parsed = SchedulingPolicy.from_dict(json.loads(cm["data"][POLICY_KEY]))
            except (KeyError, TypeError, ValueError) as e:
                log.error("unreadable scheduling policy rv=%s error=%r", rv, str(e))
        self._policy_cache = (rv, parsed)
        return parsed

    def step(self) -> CycleResult | None:
        """Read the caches, plan the jobs, run one cycle, hand out the writes."""
        policy = self.policy()
        if policy is None:
            return None
        t0 = self._clock.monotonic()
        now = self._clock.now().timestamp()
        with self._lock:
            busy = frozenset(self._busy)
            overrides = dict(self._overrides)
        memo = self._memo
        memo.cycle()
        pods = self.pods.items()
        views = job_views(self.jobs.items(), pods, policy, overrides=overrides, memo=memo)
        node_objs = {o["metadata"]["name"]: o for o in self.nodes.items()}
        todo, _, result = cycle(
            views,
            node_objs,
            pods,
            policy,
            now=now,
            busy=busy,
            memo=memo,
            timer=self._clock.monotonic,
            grow_interval=self.settings.grow_interval_s,
        )
        self.metrics.cycle.observe(self._clock.monotonic() - t0)
        self.last_result = result
        by_id = {v.id: v for v in views}
        for action in todo.actions:
            self._submit(action.job.id, self._act, action, policy)
        for d in result.decisions:
            v = by_id[d.gang.id]
            if isinstance(d, Admit):
                adm = Admission("Admitted", _attempts(v) + 1, d.placement, now, d.borrowed_milli)
                self._submit(v.id, self._admit, v, adm, assume=adm)
            elif isinstance(d, Preempt):
                victims = tuple(
                    (j, by_id[j].admission.attempt)  # type: ignore[union-attr]
                    for j in d.victims
                )
                shrinks = tuple(
                    (j, by_id[j].admission.attempt, keep)  # type: ignore[union-attr]
                    for j, keep in d.shrinks
                )
                adm = Admission("Nominated", _attempts(v), d.placement, now, 0, victims, shrinks)
                self._submit(v.id, self._nominate, v, adm, d.reason, assume=adm)
            else:
                self._submit(v.id, self._pending, v, d)
        for rz in result.resizes:
            v = by_id[rz.gang.id]
            adm = Admission("Admitted", _attempts(v) + 1, rz.placement, now, rz.borrowed_milli)
            self._submit(v.id, self._resize, v, adm, "Growing", rz.reason, assume=adm)
        self._record_metrics(todo, views, result)
        return result

    def _record_metrics(self, todo: Plan, views: list[JobView], result: CycleResult) -> None:
        """Queue depth and GPUs allocated as this step leaves them (its admissions
        and growths counted, not one step late)."""
        admitted = {d.gang.id: d for d in result.decisions if isinstance(d, Admit)}
        depth: dict[tuple[str, str], int] = {}
        for g in todo.queue:
            if g.id not in admitted:
                depth[(g.project, g.tier)] = depth.get((g.project, g.tier), 0) + 1
        self.metrics.set_queue(depth)
        borrowed = {v.id: v.admission.borrowed_milli for v in views if v.admission is not None}
        holding = {r.gang.id: r.gang for r in todo.running}
        for d in admitted.values():
            holding[d.gang.id] = d.gang
            borrowed[d.gang.id] = d.borrowed_milli
        for rz in result.resizes:
            holding[rz.gang.id] = rz.gang
            borrowed[rz.gang.id] = rz.borrowed_milli
        gpus: dict[tuple[str, str, str], float] = {}
        for g in holding.values():
            lent = min(borrowed.get(g.id, 0), g.gpu_total)
            for kind, milli in (("guaranteed", g.gpu_total - lent), ("borrowed", lent)):
                key = (g.project, g.user, kind)
                gpus[key] = gpus.get(key, 0.0) + milli / MILLI
        self.metrics.set_allocated(gpus)

    # -- writers (one job at a time)

    def _submit(
        self,
        job: JobId,
        fn: Callable[..., None],
        *args: Any,
        assume: Admission | None = None,
    ) -> bool:
        """Run `fn(*args)` on the writers unless the job already has a write in
        flight; `assume` is the decision the next steps count until it lands."""
        with self._lock:
            if job in self._busy:
                return False
            self._busy.add(job)
            if assume is not None:
                self._overrides[job] = assume

        def run() -> None:
            try:
                fn(*args)
            except NotLeaderError as e:
                log.warning("write stopped: not the leader job=%s error=%r", job, str(e))
            except ApiError as e:
                log.warning("write failed job=%s error=%r", job, str(e))
            except Exception:
                log.exception("write crashed job=%s", job)
            finally:
                with self._lock:
                    self._busy.discard(job)
                    self._overrides.pop(job, None)
                self._wake.set()

        self._pool.submit(run)
        return True

    def _write(
        self,
        v: JobView,
        *,
        phase: Phase,
        reason: str,
        message: str,
        conditional: bool,
        stalled: bool = False,
        **extra: Any,
    ) -> Obj:
        """Merge-patch the job's status (compare-and-swap on resourceVersion when
        `conditional`); keys of `extra` set to None are removed."""
        meta = v.obj["metadata"]
        status = v.status
        adm = extra.get("admission", status.get("admission"))
        allocation: dict[str, int] = {}
        if isinstance(adm, Mapping):
            for p in adm.get("pods", ()):
                allocation[p["node"]] = allocation.get(p["node"], 0) + len(p["devices"])
        body = job_status(
            generation=int(meta.get("generation", 0)),
            phase=phase,
            reason=reason,
            message=message,
            now=format_time(self._clock.now().timestamp()),
            previous=status.get("conditions") or (),
            stalled=stalled,
            allocation=allocation or None,
            restarts=int(extra.pop("restarts", status_number(status, "restarts"))),
            tier=v.gang.tier if v.gang is not None else None,
            # what the job holds (an elastic job's current size), else what it asks for
            gpus=sum(allocation.values()) or (v.spec.gang_size if v.spec is not None else None),
        )
        if not allocation and status.get("allocation"):
            body["allocation"] = None
        body.update(extra)
        patch: Obj = {"status": body}
        if conditional:
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        out = self._kube.merge_patch(
            _JOB,
            meta["name"],
            patch,
            field_manager=FIELD_MANAGER,
            namespace=meta.get("namespace"),
            subresource="status",
        )
        self.jobs.assume(out)
        return out

    def _admit(self, v: JobView, adm: Admission) -> None:
        nodes = ", ".join(f"{n} x{c}" for n, c in sorted(adm.placement.nodes().items()))
        borrowed = f"; {_gpus(adm.borrowed_milli)} GPUs borrowed" if adm.borrowed_milli else ""
        obj = self._write(
            v,
            phase="Admitted",
            reason="Admitted",
            message=f"placed on {nodes}{borrowed}; starting attempt {adm.attempt}",
            conditional=True,
            admission=adm.to_dict(),
            attempts=adm.attempt,
            notBefore=None,
        )
        log.info("admitted job=%s attempt=%d nodes=%s", v.id, adm.attempt, nodes)
        self._events.record(obj, type="Normal", reason="Admitted", message=obj["status"]["message"])
        self.metrics.decisions.labels("admit").inc()
        self._launch(JobView(obj, v.id, v.spec, v.gang, v.error, adm, []), adm)

    def _launch(self, v: JobView, adm: Admission) -> None:
        """Create the attempt's missing pods and bind each unbound one to its node
        (the pods of one gang in parallel)."""
        assert v.spec is not None and v.gang is not None
        service = None
        if v.spec.uid not in self._services:
            service = self._pod_pool.submit(self._create_service, v.spec)
        template = v.obj["spec"]["template"]
        manifests = worker_pods(
            v.spec, template, adm.placement, tier=v.gang.tier, attempt=adm.attempt
        )
        nodes = [where.node for where in adm.placement.pods]
        results = list(self._pod_pool.map(self._place_pod, manifests, nodes))
        if service is not None:
            service.result()
        if not all(results):
            return  # refused by quota for too long: the gang timeout rolls it back
        if not v.status.get("startedAt"):  # first time bound (not a restart or resize)
            self.metrics.gang_bound.labels(v.gang.tier).observe(
                max(0.0, self._clock.now().timestamp() - v.spec.created)
            )
        log.info("gang bound job=%s attempt=%d pods=%d", v.id, adm.attempt, len(manifests))

    def _create_service(self, spec: JobSpec) -> None:
        """The job's headless Service (it only names the workers, so it is created
        beside them, not before them)."""
        try:
            self._kube.create(headless_service(spec), field_manager=FIELD_MANAGER)
        except ApiError as e:
            if e.status != 409:
                raise
        self._services.add(spec.uid)

    def _place_pod(self, manifest: Obj, node: str) -> bool:
        """Create one worker, bound to its node (unless it exists); bind a worker
        found unbound (one created by an earlier version of gangops)."""
        meta = manifest["metadata"]
        live = self.pods.get(meta["name"], meta["namespace"]) or self._create(manifest)
        if live is None:
            return False
        if live["metadata"].get("deletionTimestamp") or live["spec"].get("nodeName"):
            return True
        try:
            self._kube.bind(meta["namespace"], meta["name"], node, field_manager=FIELD_MANAGER)
        except ApiError as e:
            if e.status != 409:  # already bound: a binding happens once
                raise
        self.pods.assume({**live, "spec": {**live["spec"], "nodeName": node}})
        return True

    def _create(self, manifest: Obj) -> Obj | None:
        meta = manifest["metadata"]
        deadline = self._clock.monotonic() + self.settings.quota_retry_s
        while True:
            try:
                out = self._kube.create(manifest, field_manager=FIELD_MANAGER)
                self.pods.assume(out)
                return out
            except ApiError as e:
                if e.status == 409:
                    return self._kube.get(_POD, meta["name"], meta["namespace"])
                quota = e.status == 403 and "exceeded quota" in e.message
                if not quota or self._clock.monotonic() > deadline or self._stop.is_set():
                    if quota:
                        log.warning("pod refused by quota pod=%s error=%r", meta["name"], e.message)
                        return None
                    raise
            self._clock.wait(self._stop, 0.5)

    def _delete_pods(self, pods: list[Obj] | tuple[Obj, ...]) -> None:
        for p in pods:
            meta = p["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            self._kube.delete(
                _POD, meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid")
            )

    def _resize(self, v: JobView, adm: Admission, reason: str, message: str, **extra: Any) -> None:
        """Record an elastic gang's new size as its next attempt. The old attempt's
        pods are deleted and the new ones created by the next steps (lifecycle
        `cleanup`, then `launch` once the old pods are gone), as after a crash."""
        obj = self._write(
            v,
            phase="Admitted",
            reason=reason,
            message=message,
            conditional=True,
            admission=adm.to_dict(),
            attempts=adm.attempt,
            **extra,
        )
        self._events.record(obj, type="Normal", reason=reason, message=message)
        old = len(v.admission.placement.pods) if v.admission is not None else 0
        log.info(
            "resized job=%s attempt=%d workers=%d->%d",
            v.id,
            adm.attempt,
            old,
            len(adm.placement.pods),
        )
        self.metrics.decisions.labels("resize").inc()

    def _nominate(self, v: JobView, adm: Admission, reason: str) -> None:
        obj = self._write(
            v,
            phase=_waiting_phase(v),
            reason="Preempting",
            message=f"{reason}; it starts once they have released their GPUs",
            conditional=True,
            admission=adm.to_dict(),
        )
        log.info("nominated job=%s victims=%s", v.id, ",".join(j for j, _ in adm.victims))
        self._events.record(
            obj, type="Normal", reason="Preempting", message=obj["status"]["message"]
        )
        # The victims are evicted by the next steps (lifecycle `evict`), exactly as
        # after a crash here.

    def _pending(self, v: JobView, d: Pending) -> None:
        status = v.status
        phase = _waiting_phase(v)
        message = d.reason
        if phase == "Preempted" and status.get("preemptedBy"):
            message = f"preempted by {status['preemptedBy']}; requeued: {d.reason}"
        if (status.get("phase"), status.get("reason"), status.get("message")) == (
            phase,
            d.code,
            message,
        ) and status.get("observedGeneration") == v.obj["metadata"].get("generation"):
            return
        self._write(
            v,
            phase=phase,
            reason=d.code,
            message=message,
            conditional=False,
            stalled=d.code == "Refused",
        )

    def _act(self, a: Action, policy: SchedulingPolicy) -> None:
        v = a.job
        adm = v.admission
        now = self._clock.now().timestamp()
        if a.kind == "launch" and adm is not None:
            self._launch(v, adm)
        elif a.kind == "running":
            self._write(
                v,
                phase="Running",
                reason="Running",
                message=a.message,
                conditional=True,
                startedAt=format_time(now),
            )
        elif a.kind == "succeeded":
            self._write(
                v, phase="Succeeded", reason="Succeeded", message=a.message, conditional=True,
                admission=None,
            )  # fmt: skip
        elif a.kind == "restart":
            self._restart(v, a.message, policy)
        elif a.kind == "rollback":
            rollbacks = status_number(v.status, "rollbacks") + 1
            delay = min(
                self.settings.backoff_base_s * 2 ** (rollbacks - 1), self.settings.backoff_max_s
            )
            self._release(
                v, "rollback", "Queued", "GangTimeout",
                f"{a.message}; rolled back and requeued, retrying in {delay:g}s",
                v.attempt_pods(), rollbacks=rollbacks, notBefore=format_time(now + delay),
            )  # fmt: skip
        elif a.kind == "evict" and a.by is not None:
            assert v.gang is not None
            self.metrics.preemptions.labels(v.gang.project, v.gang.tier).inc()
            self._release(
                v, "preempt", "Preempted", "Preempted", f"preempted by {a.by}; requeued",
                v.attempt_pods(), preemptedAt=format_time(now), preemptedBy=a.by,
            )  # fmt: skip
        elif a.kind == "shrink" and adm is not None and v.gang is not None:
            old, per = len(adm.placement.pods), v.gang.pod.gpu_total
            smaller = Admission(
                "Admitted",
                _attempts(v) + 1,
                Placement(adm.placement.pods[: a.workers]),
                now,
                max(0, adm.borrowed_milli - (old - a.workers) * per),  # borrowed goes first
            )
            # Below its gangSize a shrink counts against maxPerHour, like an eviction.
            below = {"shrunkAt": format_time(now)} if a.workers < v.gang.workers else {}
            self._resize(
                v,
                smaller,
                "Shrinking",
                f"shrunk from {_gpus(old * per)} to {_gpus(a.workers * per)} GPUs for {a.by} "
                "(elastic); the gang restarts at the new size",
                **below,
            )
        elif a.kind == "expire":
            self._write(
                v, phase=_waiting_phase(v), reason="NominationExpired", message=a.message,
                conditional=True, admission=None,
            )  # fmt: skip
        elif a.kind == "invalid":
            self._write(
                v, phase="Queued", reason="InvalidSpec", message=a.message, conditional=False,
                stalled=True,
            )  # fmt: skip
        elif a.kind == "cleanup":
            self._delete_pods(a.pods)

    def _restart(self, v: JobView, why: str, policy: SchedulingPolicy) -> None:
        restarts = status_number(v.status, "restarts") + 1
        limit = policy.backoff_limit
        if v.spec is not None and v.spec.backoff_limit is not None:
            limit = v.spec.backoff_limit
        # The failed worker is kept for its logs; its siblings go with the gang.
        live = [p for p in v.attempt_pods() if not pod_terminal(p)]
        if restarts > limit:
            self._release(
                v, "failed", "Failed", "BackoffLimitExceeded",
                f"{why}; the gang was restarted {limit} times (backoffLimit {limit})", live,
            )  # fmt: skip
        else:
            self._release(
                v, "restart", "Queued", "Restarting",
                f"{why}; restarting the whole gang (restart {restarts} of {limit})", live,
                restarts=restarts,
            )  # fmt: skip

    def _release(
        self,
        v: JobView,
        decision: str,
        phase: Phase,
        reason: str,
        message: str,
        pods: list[Obj],
        **extra: Any,
    ) -> None:
        """Clear the job's record (compare-and-swap) with its new status, count the
        decision, then delete `pods`: the record moves first, so a crash in between
        leaves pods no record names, which the next step cleans up."""
        obj = self._write(
            v, phase=phase, reason=reason, message=message, conditional=True, admission=None,
            **extra,
        )  # fmt: skip
        self.metrics.decisions.labels(decision).inc()
        log.info("%s job=%s reason=%r", decision, v.id, message)
        self._events.record(obj, type="Warning", reason=reason, message=message)
        self._delete_pods(pods)


def _attempts(v: JobView) -> int:
    return max(status_number(v.status, "attempts"), v.admission.attempt if v.admission else 0)


def _waiting_phase(v: JobView) -> Phase:
    return "Preempted" if v.status.get("phase") == "Preempted" else "Queued"
