"""The job controller and the scheduling loop: TrainingJobs in, whole gangs bound out.

Informers watch Nodes, all Pods (any scheduler's GPUs count), TrainingJobs,
ResourceQuotas (the API server refuses pods past them, so the scheduler admits
within them), LimitRanges (their defaults are part of what the pods will
request) and the compiled policy ConfigMap; their events only wake the
loop (a pod another scheduler placed only while a gang could use GPUs:
`_on_pod`). Each step, on an event or on the periodic tick:

1. `view` reads every job (spec, gang under the policy, recorded decision,
   pods); `lifecycle.plan` says what each recorded decision needs next
   (launch, restart, rollback, evict, ...) and which gangs hold GPUs and
   which wait;
2. the snapshot is built (again only where nodes, pods or running gangs
   changed since the last step: `view.SnapshotCache`), with the typical
   requests of the most recent jobs for placing one-pod gangs
   (`workload.Workload`), and `cycle.schedule` (the pure core) decides;
3. `lifecycle` turns the actions and the decisions into `Write`s, and each
   is handed to the `binder` on a pool of writers, one job at a time.

Assume, then write: a decision enters `_overrides` at once, so the next step
counts its GPUs even before the write lands; a failed write drops it and the
job is decided again. The binder writes the record before any pod is
created, bound or deleted (its docstring tells the crash story). The
controller decides nothing itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from typing import Any

from controller.gang.binder import FIELD_MANAGER, Binder, LaunchRefused
from controller.gang.lifecycle import (
    MESSAGE_REFRESH_S,
    Agenda,
    Write,
    action_write,
    cycle_writes,
    decide,
    refused_write,
    wants_capacity,
)
from controller.gang.metrics import GangMetrics
from controller.gang.record import Admission
from controller.gang.view import (
    JobView,
    Memo,
    PodIndex,
    SnapshotCache,
    container_defaults,
    job_views,
    namespace_quotas,
)
from controller.gang.workload import WINDOW_PODS, Workload
from controller.jobs.pods import LABEL_JOB
from controller.kube.client import RESOURCES, ApiError, KubeApi, NotLeaderError
from controller.kube.clock import Clock, SystemClock
from controller.kube.events import EventRecorder
from controller.kube.informer import EventType, Informer
from controller.policy.validate import check_scheduling_policy
from controller.scheduler.cycle import GROW_INTERVAL_S, CycleResult
from controller.scheduler.forecast import DemandHistory, Forecast, forecast
from controller.scheduler.policy import (
    DEFAULT_SYSTEM_NAMESPACE,
    POLICY_CONFIGMAP,
    SchedulingPolicy,
    UnreadablePolicy,
)
from controller.scheduler.telemetry import Telemetry, idle_gpus
from controller.scheduler.types import MILLI, Admit, Decision, Gang, JobId, Pending, Running

__all__ = ["FIELD_MANAGER", "GangController", "GangSettings", "held_back_by_own_limits"]

DEMAND_WINDOW_S = 3600.0
"""The demand forecast's sliding window."""
DEMAND_SAMPLE_S = 15.0
REPORT_HORIZON_S = 600.0
"""The horizon of the reported forecasts while lending by forecast is off."""

log = logging.getLogger(__name__)

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
    idle_cpu: float = 0.1
    """The most of a core that steps nothing prompted (the tick) may take: once a step
    takes more than about this share of `tick_s`, the tick stretches to keep to it (a
    step over 5,000 queued gangs at 5,000 nodes, about 0.3 s, comes every 3 s when
    nothing changes, not every second); an event still starts a step at once. 0: the
    tick never stretches."""
    batch_s: float = 0.05
    """Pause after a wake-up, so a burst of events makes one step; at least as long
    as the last step took, so under a stream of events the loop uses at most half
    of a core and leaves the rest to the writers (and, on a shared machine, to the
    API server)."""
    parallelism: int = 16
    """Jobs written at the same time (each job's record before its pods)."""
    pod_parallelism: int = 32
    """Pods created and bound at the same time, over all jobs."""
    forecast_horizon_s: float = 0.0
    """Lend by forecast: a gang may not borrow the idle guarantee another project is
    forecast (over a sliding hour of its demand) to ask for within this many seconds,
    since lending it costs a preemption soon after. 0: off (borrow whatever idles)."""
    grow_interval_s: float = GROW_INTERVAL_S
    """Least time between two growths of one elastic gang (each restarts it)."""
    backoff_base_s: float = 5.0
    """Requeue delay after the first gang timeout; doubled for each later one."""
    backoff_max_s: float = 300.0
    """The longest requeue delay after a gang timeout."""
    message_refresh_s: float = MESSAGE_REFRESH_S
    """Least time between two writes of a waiting job's message that differ only in
    its figures (GPUs free, left outside the reserve) or in the kind of telemetry
    failure noted: those move with every admission and release, or every turn of a
    failing Prometheus, and each rewrite is a status write per waiting job. A new phase,
    reason, wording or spec is written at once, and so are a `Quota` reason's
    figures (the quota loop's proposals read them)."""
    quota_retry_s: float = 10.0
    """How long a pod creation refused by the ResourceQuota is retried (the quota
    controller releases an evicted gang's usage a little after its pods go)."""
    fragmentation_window: int = WINDOW_PODS
    """One-pod gangs go where they fragment the GPUs least for the typical requests
    of the most recent this many pods' jobs (`workload.Workload`); 0: best-fit."""


IDLE_TICKS_MAX = 10
"""The longest a stretched tick (`GangSettings.idle_cpu`) may be, in ticks."""


def held_back_by_own_limits(decisions: Iterable[Decision]) -> set[JobId]:
    """The gangs a step left waiting on their own limits (their project's or user's
    max, their namespace's quota) or refused outright. They are not demand: a
    guarantee kept idle for them could not admit them, and lending by forecast would
    keep it from every borrower. A gang held back only because the guarantee it
    would borrow is forecast to be wanted back (`Pending.held`, limit "lending") still
    is."""
    return {
        d.gang.id
        for d in decisions
        if isinstance(d, Pending)
        and (d.code == "Refused" or (d.held is not None and d.held.limit != "lending"))
    }


def _telemetry_note(t: Telemetry | None, now: float) -> str:
    """What a waiting job's status says while telemetry is configured and unusable:
    the kind of failure in a word, not the error's text, which names Prometheus's
    address and changes with every failure's wording (logs, metrics and `explain`
    carry it). Stable while the cause lasts, so it is written once; a change of kind
    alone waits for the message refresh (`lifecycle.message_due`)."""
    if t is None or t.fresh(t.usage, now):
        return ""
    why = f": {t.usage.reason}" if t.usage.reason else ""
    return f"telemetry unavailable{why}; scheduling by requests alone"


class GangController:
    """Runs TrainingJobs: `start`, then `stop`. `step` is one pass (for tests)."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        settings: GangSettings | None = None,
        clock: Clock | None = None,
        metrics: GangMetrics | None = None,
        telemetry: Callable[[], Telemetry] | None = None,
    ) -> None:
        self._kube = kube
        self._telemetry = telemetry
        """The latest telemetry (`telemetry.PrometheusTelemetry.current`); None: requests
        only, plus the node agents' annotations, which the nodes carry anyway."""
        self._demand = DemandHistory(window_s=DEMAND_WINDOW_S)
        self._demand_at = -1e18
        self.last_telemetry: Telemetry | None = None
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
        self._policy_cache: tuple[str, SchedulingPolicy | None] = ("", None)
        self._good_policy: tuple[str, SchedulingPolicy] | None = None
        """The last policy (resourceVersion, value) a whole step ran with: kept, and
        used, while a newer one cannot be read or breaks the step."""
        self._bad_policy: str = ""
        """The resourceVersion of a policy that broke a step (not tried again)."""
        self.policy_problem: str = ""
        """Why the scheduler is not using the newest policy ('' while it is)."""
        self._memo = Memo()
        self._pod_index = PodIndex()
        """Every pod, with per-node and per-namespace totals kept as the pod cache
        changes (`on_store`, on the informer's thread: each pod is read once per
        change, so it needs no `Memo`), so a step does not walk every pod."""
        self._snapshots = SnapshotCache()
        """The nodes as the last step's snapshot had them, so a step builds again only
        those whose node, pods or running gangs changed."""
        self._workload = Workload(self.settings.fragmentation_window)
        """The typical requests one-pod gangs are placed for, kept across steps."""
        self._worker: threading.Thread | None = None
        self.last_result: CycleResult | None = None
        s = self.settings

        self._capacity_wanted = True
        """Whether the last step had a gang that could use GPUs (`wants_capacity`):
        until it has, another scheduler's pods may change a decision (`_on_pod`)."""
        self._unseen = False
        """A pod another scheduler placed changed without waking the loop since the
        current step read the pods: if that step finds a gang that could use GPUs,
        it wakes the loop for another."""

        def informer(kind: str, **kw: Any) -> Informer:
            kw.setdefault("handler", self._on_event)
            return Informer(kube, RESOURCES[kind], clock=self._clock, **kw)

        self.nodes = informer("Node", label_selector=s.node_selector)
        self.pods = informer("Pod", on_store=self._pod_index.update, handler=self._on_pod)
        self.jobs = informer("TrainingJob", label_selector=s.job_selector)
        self.config = informer("ConfigMap", namespace=s.system_namespace)
        self.quotas = informer("ResourceQuota")
        """The API server refuses pods past these; the scheduler admits within them."""
        self.limits = informer("LimitRange")
        """Their defaults are the requests a job's pods get when created (and counted
        against the ResourceQuotas and the nodes with)."""
        self.metrics.typical.source = self._workload.shares
        self.metrics.window_pods.set_function(lambda: self._workload.pods)
        self.metrics.cached.source = lambda: [
            ((inf.resource.plural,), len(inf)) for inf in self._informers()
        ]
        self._binder = Binder(
            kube,
            jobs=self.jobs,
            pods=self.pods,
            pod_pool=self._pod_pool,
            clock=self._clock,
            metrics=self.metrics,
            events=self._events,
            stop=self._stop,
            quota_retry_s=s.quota_retry_s,
        )

    # -- lifecycle

    def _informers(self) -> list[Informer]:
        return [self.nodes, self.pods, self.jobs, self.config, self.quotas, self.limits]

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

    def _on_pod(self, kind: EventType, obj: Obj) -> None:
        """A pod of a job wakes the loop; a pod another scheduler placed only while
        the last step had a gang that could use GPUs (`wants_capacity`): otherwise no
        step could decide anything else for it, and the next one (an event of a job,
        a node or a pod of a job, or the tick) reads it from the cache. Beside
        kube-scheduler binding a thousand pods, each of their events woke a step
        that decided nothing, about a quarter of a core (docs/performance.md)."""
        if self._capacity_wanted or LABEL_JOB in (obj["metadata"].get("labels") or {}):
            self._wake.set()
        else:
            self._unseen = True

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
            self._clock.wait(self._wake, self._tick(took))
            self._wake.clear()
            pause = max(self.settings.batch_s, took) if self.settings.batch_s else 0.0
            if pause:
                self._clock.wait(self._stop, pause)

    def _tick(self, took: float) -> float:
        """How long to wait for an event after a step that took `took` seconds: the
        tick, stretched for a slow step, at most `IDLE_TICKS_MAX` ticks (the step's
        wall time may be a slow API call or a busy machine, and what only time brings,
        a backoff's end or a refresh, must not wait for long)."""
        share = self.settings.idle_cpu
        tick = self.settings.tick_s
        if share <= 0:
            return tick
        return max(tick, min(took * (1 / share - 1), IDLE_TICKS_MAX * tick))

    # -- one step

    def policy(self) -> SchedulingPolicy | None:
        """The policy to schedule with: the compiled one, or, while that one cannot be
        read or broke a step, the last good one (None while there has never been one)."""
        cm = self.config.get(POLICY_CONFIGMAP, self.settings.system_namespace)
        rv = "" if cm is None else str(cm["metadata"].get("resourceVersion", ""))
        if rv != self._policy_cache[0] or cm is None:
            self._policy_cache = (rv, self._read_policy(cm, rv))
        parsed = self._policy_cache[1]
        good = self._good_policy
        if parsed is not None and rv != self._bad_policy:
            return parsed
        return good[1] if good is not None and cm is not None else None

    def _read_policy(self, cm: Obj | None, rv: str) -> SchedulingPolicy | None:
        if cm is None:
            log.warning(
                "no scheduling policy configmap=%s/%s; nothing is scheduled",
                self.settings.system_namespace,
                POLICY_CONFIGMAP,
            )
            return None
        try:
            policy = SchedulingPolicy.from_configmap(cm, check=check_scheduling_policy)
        except UnreadablePolicy as e:
            self._refuse_policy(cm, rv, "PolicyUnreadable", f"it cannot be read: {e}")
            return None
        if rv != self._bad_policy:
            self.policy_problem = ""
            self.metrics.policy_fallback.set(0)
        return policy

    def _refuse_policy(self, cm: Obj, rv: str, reason: str, why: str) -> None:
        """Say, where an operator looks (log, an Event on the ConfigMap, metrics), that
        the policy at `rv` is not used, and which one is."""
        good = self._good_policy
        using = (
            f"scheduling with the last good policy (resourceVersion {good[0]})"
            if good is not None
            else "nothing is scheduled until a usable policy is applied"
        )
        self.policy_problem = f"scheduling policy resourceVersion {rv} is not used: {why}; {using}"
        log.error("%s", self.policy_problem)
        self.metrics.policy_errors.labels(reason).inc()
        self.metrics.policy_fallback.set(1 if good is not None else 0)
        self._events.record(
            {"apiVersion": "v1", "kind": "ConfigMap", **{"metadata": cm["metadata"]}},
            type="Warning",
            reason=reason,
            message=self.policy_problem,
        )

    def step(self) -> CycleResult | None:
        """Read the caches, plan the jobs, run one cycle, hand out the writes.

        A policy that passed validation can still break a step (a value the core
        cannot use): that policy is set aside, said so, and the step runs again with
        the last policy a step completed with; a newer revision is tried afresh."""
        policy = self.policy()
        if policy is None:
            return None
        rv = self._policy_cache[0]
        newest = policy is self._policy_cache[1]
        try:
            result = self._step(policy)
        except NotLeaderError:
            raise
        except Exception as e:
            good = self._good_policy
            cm = self.config.get(POLICY_CONFIGMAP, self.settings.system_namespace)
            if not newest or good is None or good[0] == rv or cm is None:
                raise
            log.exception("scheduling step crashed with policy resourceVersion=%s", rv)
            try:
                fallback = self._step(good[1])
            except Exception:
                raise e from None  # the last good policy fails too: not this policy's fault
            self._bad_policy = rv
            self._refuse_policy(cm, rv, "PolicyBreaksScheduling", f"a step with it failed: {e!r}")
            return fallback
        if newest:
            self._good_policy = (rv, policy)
        return result

    def _step(self, policy: SchedulingPolicy) -> CycleResult:
        t0 = self._clock.monotonic()
        now = self._clock.now().timestamp()
        with self._lock:
            busy = frozenset(self._busy)
            overrides = dict(self._overrides)
        memo = self._memo
        memo.next_step()
        self._unseen = False
        pods = self.pods.locked(self._pod_index.freeze)
        views = job_views(
            self.jobs.items(), pods, policy, overrides=overrides, memo=memo,
            defaults=container_defaults(self.limits.items()),
        )  # fmt: skip
        node_objs = {o["metadata"]["name"]: o for o in self.nodes.items()}
        telemetry = self._telemetry() if self._telemetry is not None else None
        self.last_telemetry = telemetry
        todo, _, result = decide(
            views,
            node_objs,
            pods,
            policy,
            now=now,
            busy=busy,
            memo=memo,
            timer=self._clock.monotonic,
            grow_interval=self.settings.grow_interval_s,
            telemetry=telemetry,
            forecasts=self._forecasts() if self.settings.forecast_horizon_s > 0 else None,
            quotas=namespace_quotas(self.quotas.items()),
            snapshots=self._snapshots,
            skip_idle=True,
            workload=self._workload,
        )
        self._capacity_wanted = wants_capacity(todo)
        if self._capacity_wanted and self._unseen:
            self._wake.set()  # a pod changed after the read, unwoken: it may free GPUs
        held_back = held_back_by_own_limits(result.decisions)
        queued = [g for g in (*todo.queue, *todo.in_flight) if g.id not in held_back]
        self._record_demand(now, todo.running, queued)
        t_write = self._clock.monotonic()
        self.metrics.cycle.observe(t_write - t0)
        self.last_result = result
        s = self.settings
        for action in todo.actions:
            try:
                w = action_write(
                    action, policy, now=now, backoff_base_s=s.backoff_base_s,
                    backoff_max_s=s.backoff_max_s,
                )  # fmt: skip
            except Exception:  # a defect in one job's action must not stop the others'
                log.exception("a job's action crashed; the step goes on job=%s kind=%s",
                              action.job.id, action.kind)  # fmt: skip
                continue
            if w is not None:
                self._submit(w)
        for w in cycle_writes(
            result, views, now=now, note=_telemetry_note(telemetry, now),
            refresh_s=s.message_refresh_s,
        ):  # fmt: skip
            self._submit(w, assume=w.record)
        self._observe_phases(result, self._clock.monotonic() - t_write)
        self._record_metrics(todo, views, result)
        return result

    def _forecasts(self) -> dict[str, Forecast]:
        """Each project's demand forecast over the horizon, from the sliding window."""
        return {
            p: forecast(self._demand.series(p), horizon_s=self.settings.forecast_horizon_s)
            for p in self._demand.names()
            if "/" not in p
        }

    def _record_demand(self, now: float, running: Sequence[Running], queue: Sequence[Gang]) -> None:
        """A project's demand, and each of its users': the GPUs its running gangs
        hold plus those its queued gangs ask for, as the step's plan read them
        (sampled at most every `DEMAND_SAMPLE_S`, keyed `project` and
        `project/user`); the forecasts over the horizon (or `REPORT_HORIZON_S`)
        become `gangops_demand_forecast_gpus`. Not the cycle's snapshot: it also
        counts what the cycle admitted and what waiting nominees claim, gangs
        that are in the queue too."""
        if now - self._demand_at < DEMAND_SAMPLE_S:
            return
        self._demand_at = now
        demand: dict[str, int] = {}
        for g in chain((r.gang for r in running), queue):
            for key in (g.project, f"{g.project}/{g.user}"):
                demand[key] = demand.get(key, 0) + g.gpu_total
        for key in self._demand.names():
            demand.setdefault(key, 0)  # a project or user no longer asking asks for 0
        for key, milli in demand.items():
            self._demand.add(key, now, float(milli))
        self._demand.drop_quiet()
        horizon = self.settings.forecast_horizon_s or REPORT_HORIZON_S
        samples: dict[tuple[str, str, str], float] = {}
        for key in self._demand.names():
            f = forecast(self._demand.series(key), horizon_s=horizon)
            project, _, user = key.partition("/")
            samples[(project, user, "point")] = f.point / MILLI
            samples[(project, user, "p90")] = f.high / MILLI
        self.metrics.forecast.set(samples.items())

    def _observe_phases(self, result: CycleResult, write_s: float) -> None:
        """Each phase's time, as a histogram and a debug line (the writes themselves
        run on the binder's pool; `write` is handing them out)."""
        phases = {**result.phase_seconds, "write": write_s}
        for phase, seconds in phases.items():
            self.metrics.phase.labels(phase).observe(seconds)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "scheduling step %s decisions=%d resizes=%d",
                " ".join(f"{p}_s={v:.4f}" for p, v in phases.items()),
                len(result.decisions),
                len(result.resizes),
            )

    def _record_metrics(self, todo: Agenda, views: list[JobView], result: CycleResult) -> None:
        """Queue depth and GPUs allocated as this step leaves them (its admissions
        and growths counted, not one step late)."""
        admitted = {d.gang.id: d for d in result.decisions if isinstance(d, Admit)}
        why = {
            d.gang.id: d.code if isinstance(d, Pending) else "Preempting"
            for d in result.decisions
            if not isinstance(d, Admit)
        }
        depth: dict[tuple[str, str], int] = {}
        waiting: dict[tuple[str, str, str], int] = {}
        for g in todo.queue:
            if g.id not in admitted:
                depth[(g.project, g.tier)] = depth.get((g.project, g.tier), 0) + 1
                key = (g.project, g.tier, why.get(g.id, "NotDecided"))
                waiting[key] = waiting.get(key, 0) + 1
        gangs = {v.id: v.gang for v in views}
        for job in todo.backing_off:
            backing = gangs.get(job)
            if backing is not None:
                key = (backing.project, backing.tier, "Backoff")
                waiting[key] = waiting.get(key, 0) + 1
        self.metrics.set_queue(depth)
        self.metrics.waiting.set(waiting.items())
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
        idle: dict[tuple[str, str], float] = {}
        for job, milli in idle_gpus(
            result.hints.utilisation, {j: g.gpu_total for j, g in holding.items()}
        ).items():
            g = holding[job]
            idle[(g.project, g.user)] = idle.get((g.project, g.user), 0.0) + milli / MILLI
        self.metrics.set_idle(idle)

    # -- writes (one job at a time)

    def _refused(self, write: Write, e: LaunchRefused) -> Write:
        """The write that answers a refused launch (`lifecycle.refused_write`)."""
        s = self.settings
        return refused_write(
            write.job, obj=e.obj, status=e.status, message=e.message,
            now=self._clock.now().timestamp(), backoff_base_s=s.backoff_base_s,
            backoff_max_s=s.backoff_max_s,
        )  # fmt: skip

    def _submit(self, write: Write, *, assume: Admission | None = None) -> bool:
        """Hand `write` to the binder unless its job already has a write in flight;
        `assume` is the decision the next steps count until it lands."""
        if write.empty:
            return False
        job = write.job.id
        with self._lock:
            if job in self._busy:
                return False
            self._busy.add(job)
            if assume is not None:
                self._overrides[job] = assume

        def run() -> None:
            try:
                try:
                    self._binder.execute(write)
                except LaunchRefused as e:
                    self._binder.execute(self._refused(write, e))
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
