"""The alert actions' writer: drains the receiver's inbox, acts on each node, and keeps
time (grace periods, cool-downs).

One worker thread, in the leader only. For each batch of alerts it reads the policy
(the compiled `alertActions`), groups the alerts by node and, per node: reads the
Node, runs the pure `machine.step`, writes the TrainingJob requests it asks for
(each carries its alert instance, so a retry writes nothing twice), then the Node
with its new state, quarantine, cordon and taint in one `replace` on the Node's
resourceVersion (a conflict reads and decides again), then the Events and the
metrics. Every `tick_s` it reads the Nodes: the breaker counts the episodes they
record, and a node with something due (a restart after its grace, an undo after
its cool-down) is stepped with no alerts. It reads them from a cache that a watch
keeps (`nodes`, holding only the fields the tick reads), not from a list per tick:
at 5,000 nodes listing every 5 s was 62 % of an idle `gangops run`'s CPU, and as
much decoding again in the API server, for nodes that had not changed.

Before an entry lapses (the policy's resolve timeout) the actor asks Alertmanager,
where it was given one (`alertmanager`), which alerts it still holds: at most once
per tick, and only when an entry is due. One it holds (silenced, inhibited, or
firing and not yet sent again; or fired again since) is heard now instead, and so
is every entry due while Alertmanager has only just started; where Alertmanager
cannot be asked, the entries due lapse as without it, with a warning and a
metric, so an Alertmanager outage does not hold the actions for ever.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.alerts.alertmanager import AlertmanagerApi, AlertmanagerError, Holdings
from controller.alerts.machine import (
    REASON_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_KEY,
    Incoming,
    JobRequest,
    NodeFacts,
    NodeState,
    Result,
    describe,
    step,
)
from controller.alerts.metrics import AlertMetrics
from controller.alerts.policy import AlertPolicy
from controller.alerts.receiver import Inbox, Received
from controller.jobs.pods import LABEL_JOB
from controller.kube.client import RESOURCES, ApiError, KubeApi, NotLeaderError, retry_wait
from controller.kube.clock import Clock
from controller.kube.events import EventRecorder
from controller.kube.informer import Informer
from controller.nodehealth import (
    CHECKPOINT_ANNOTATION,
    QUARANTINE_ANNOTATION,
    RESTART_ANNOTATION,
    format_indices,
)
from controller.scheduler.policy import POLICY_CONFIGMAP, POLICY_KEY

__all__ = ["FIELD_MANAGER", "ActorSettings", "AlertActor"]

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangops-alerts"
_NODE = RESOURCES["Node"]
_POD = RESOURCES["Pod"]
_JOB = RESOURCES["TrainingJob"]
_CONFIGMAP = RESOURCES["ConfigMap"]
Obj = dict[str, Any]


@dataclass(frozen=True)
class ActorSettings:
    """How the actor works."""

    system_namespace: str
    """Where the compiled policy's ConfigMap lives."""
    tick_s: float = 5.0
    """How often due work is looked for (restarts after their grace, undo after the
    cool-down) and the Nodes are read (from the node cache) for the breaker's count."""


def _summary(node: Obj) -> Obj:
    """What the tick reads of a Node (its name, its episode state, its cordon and
    taints): the node cache keeps this, not the Node's whole status."""
    meta = node.get("metadata") or {}
    state = (meta.get("annotations") or {}).get(STATE_ANNOTATION)
    spec = node.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
            "annotations": {} if state is None else {STATE_ANNOTATION: state},
        },
        "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
    }


def _label_value(text: str) -> str:
    """`text` as a label value (what a taint's value must be): up to 63 of letters,
    digits, '-', '_' and '.', beginning and ending with a letter or digit; alert
    names may hold ':' and begin with '_'."""
    return re.sub(r"[^-A-Za-z0-9_.]", "_", text)[:63].strip("-_.")


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _node_after(node: Obj, r: Result, now: float) -> Obj:
    """The Node as `r` leaves it: state, quarantine and reason annotations, cordon,
    taint. Everything else is the Node as read."""
    new: Obj = {**node, "metadata": dict(node["metadata"]), "spec": dict(node.get("spec") or {})}
    annotations = dict(new["metadata"].get("annotations") or {})
    for key, value in (
        (STATE_ANNOTATION, r.state.to_json() if r.state.entries else ""),
        (QUARANTINE_ANNOTATION, format_indices(r.state.quarantined)),
        (REASON_ANNOTATION, describe(r.state, now=now)),
    ):
        if value:
            annotations[key] = value
        else:
            annotations.pop(key, None)
    new["metadata"]["annotations"] = annotations
    spec = new["spec"]
    if r.cordon is True:
        spec["unschedulable"] = True
    elif r.cordon is False:
        spec.pop("unschedulable", None)
    if r.taint is not None:
        taints = [t for t in spec.get("taints") or () if t.get("key") != TAINT_KEY]
        if r.taint:
            names = sorted({e.alert for e in r.state.entries.values() if e.acting(now)})
            taints.append(
                {"key": TAINT_KEY, "value": _label_value("-".join(names)), "effect": "NoSchedule"}
            )
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
    return new


class AlertActor:
    """Acts on the alerts the receiver queued."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        inbox: Inbox,
        clock: Clock,
        metrics: AlertMetrics,
        settings: ActorSettings,
        alertmanager: AlertmanagerApi | None = None,
    ) -> None:
        self._kube = kube
        self._alertmanager = alertmanager
        self._inbox = inbox
        self._clock = clock
        self._metrics = metrics
        self._settings = settings
        self._events = EventRecorder(kube, component="gangops-alerts", clock=clock)
        self.nodes = Informer(kube, _NODE, clock=clock, transform=_summary)
        """The Nodes as the tick reads them, kept by a watch once `start`ed (or filled
        by `nodes.relist()`); the actor puts its own writes in at once."""
        self._acted: dict[str, float | None] = {}
        """Every Node's episode start, from the last tick and the actor's own writes."""
        self._listed = False
        self._next_tick = 0.0
        self._asked_in: float | None = None
        """The tick (its `_next_tick`) in which Alertmanager was last asked."""
        self._holdings: Holdings | None = None
        """Its answer then; None where it could not be asked."""
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        self.nodes.start()
        self._worker = threading.Thread(target=self._work, name="alert-actions", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self._inbox.wake()
        self.nodes.stop()
        if self._worker is not None:
            self._worker.join(30)

    def ready(self) -> bool:
        return self._listed

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once(timeout_s=min(self._settings.tick_s, 1.0))
            except (ApiError, NotLeaderError, OSError) as e:
                self._metrics.errors.inc()
                wait = retry_wait(e, 1.0)  # longer where the API server asks for it
                log.warning("alert actions failed; retrying error=%r retry_in_s=%.1f",
                            str(e), wait)  # fmt: skip
                self._clock.wait(self._stop, wait)
            except Exception:  # a defect: logged, and the protective actions go on
                self._metrics.errors.inc()
                log.exception("alert actions crashed; retrying")
                self._clock.wait(self._stop, 1.0)

    def run_once(self, *, timeout_s: float = 0.0) -> int:
        """One pass: the tick if it is due, then the alerts waiting (up to
        `timeout_s` for the first). Returns how many alerts were acted on. Until the
        node cache has listed the Nodes (the breaker counts their episodes), alerts
        wait in the inbox."""
        if not self.nodes.synced and not self.nodes.wait_synced(timeout_s):
            self._metrics.queued.set(len(self._inbox))
            return 0
        if self._clock.monotonic() >= self._next_tick:
            self.tick()
        batch = self._inbox.take(timeout_s)
        if batch:
            self.act(batch)
        self._metrics.queued.set(len(self._inbox))
        return len(batch)

    def _policy(self) -> AlertPolicy:
        cm = self._kube.get(_CONFIGMAP, POLICY_CONFIGMAP, self._settings.system_namespace)
        if cm is None:
            return AlertPolicy()
        try:
            return AlertPolicy.from_configmap(cm, POLICY_KEY)
        except ValueError as e:
            log.warning("alert actions off: unreadable policy error=%r", str(e))
            return AlertPolicy()

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def tick(self) -> None:
        """Read the Nodes (the cache) for the breaker and step those with something due.

        The breaker's count is taken from every Node before any is written: a write
        that fails part-way must not leave the count short (it let an alert storm
        past the breaker), nor one node's refusal keep the others' cool-downs from
        ending; that node is tried again next tick."""
        self._next_tick = self._clock.monotonic() + self._settings.tick_s
        now = self._now()
        states = [
            (n, NodeState.from_json((n["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)))
            for n in self.nodes.items()
        ]
        self._acted = {n["metadata"]["name"]: state.acted_at for n, state in states}
        self._metrics.out_of_service.set(sum(state.in_episode(now) for _, state in states))
        self._listed = True
        due = [(n, state) for n, state in states if state.entries]
        if not due:
            return
        policy = self._policy()
        for n, state in due:
            name = n["metadata"]["name"]
            try:
                trial = step(state, [], policy, self._facts(n, now, policy), node=name, now=now)
                if trial.state != state or trial.jobs:
                    self._act(name, [], policy, now)
            except NotLeaderError:
                raise
            except Exception as e:
                self._metrics.errors.inc()
                log.warning("alert actions on a node failed; tried again next tick "
                            "node=%s error=%r", name, str(e))  # fmt: skip

    def act(self, batch: Sequence[Received]) -> None:
        """Act on `batch`, node by node."""
        try:
            policy = self._policy()
        except BaseException:
            # Taken from the inbox already, and a `resolved` is sent once: kept.
            self._inbox.put_back(list(batch))
            raise
        now = self._now()
        by_node: dict[str, list[Received]] = defaultdict(list)
        for item in batch:
            node = item.alert.node
            if node is None:
                self._metrics.actions.labels(item.alert.name, "no_node").inc()
                continue
            by_node[node].append(item)
        jobs: dict[tuple[str, str], str] = {}
        again: list[Received] = []
        error: Exception | None = None
        nodes = list(by_node.items())
        for k, (node, items) in enumerate(nodes):
            try:
                incoming = [Incoming(i.alert, self._job_of(i.alert.pod, jobs)) for i in items]
                acted = self._act(node, incoming, policy, now)
            except NotLeaderError:
                # not this replica's to act on now: kept, in order, should it lead again
                self._inbox.put_back(again + [i for _, rest in nodes[k:] for i in rest])
                raise
            except Exception as e:
                if not isinstance(e, (ApiError, OSError)):  # a defect: not this batch's others
                    self._metrics.errors.inc()
                    log.exception("alert actions crashed on a node; its alerts are dropped "
                                  "node=%s", node)  # fmt: skip
                    continue
                if isinstance(e, ApiError) and not e.transient:
                    self._metrics.errors.inc()
                    log.warning(
                        "alert actions refused; these alerts are dropped node=%s alerts=%s "
                        "error=%r", node, ",".join(i.alert.name for i in items), str(e),
                    )  # fmt: skip
                    continue
                again += items
                error = e
                continue
            if not acted:
                again += items
                error = ApiError(409, "Conflict", f"Node {node} kept changing under the writes")
                continue
            done = self._clock.monotonic()
            for i in items:
                self._metrics.latency.observe(max(0.0, done - i.at))
        if again:
            # Acknowledged to Alertmanager already, and a `resolved` is sent once: kept
            # in order for the next pass rather than lost.
            self._inbox.put_back(again)
        if error is not None:
            raise error

    def _job_of(self, pod: tuple[str, str] | None, cache: dict[tuple[str, str], str]) -> str:
        """`namespace/name` of the TrainingJob whose pod `pod` is, or empty."""
        if pod is None:
            return ""
        if pod not in cache:
            obj = self._kube.get(_POD, pod[1], pod[0])
            name = ((obj or {}).get("metadata", {}).get("labels") or {}).get(LABEL_JOB)
            cache[pod] = f"{pod[0]}/{name}" if name else ""
        return cache[pod]

    def _facts(self, node: Obj, now: float, policy: AlertPolicy) -> NodeFacts:
        name = node["metadata"]["name"]
        since = now - policy.breaker.window_s
        recent = sum(
            1 for n, at in self._acted.items() if n != name and at is not None and at >= since
        )
        spec = node.get("spec") or {}
        return NodeFacts(
            unschedulable=bool(spec.get("unschedulable")),
            tainted=any(t.get("key") == TAINT_KEY for t in spec.get("taints") or ()),
            nodes=max(1, len(self._acted)),
            recent=recent,
        )

    def _act(self, name: str, incoming: list[Incoming], policy: AlertPolicy, now: float) -> bool:
        """Step node `name`'s state with `incoming` and write what changed; False when
        the Node kept changing under the writes (nothing done, to retry)."""
        for _ in range(5):
            node = self._kube.get(_NODE, name)
            if node is None:
                for i in incoming:
                    self._metrics.actions.labels(i.alert.name, "no_node").inc()
                return True
            annotations = node["metadata"].get("annotations") or {}
            state = NodeState.from_json(annotations.get(STATE_ANNOTATION))
            held = self._held(name, state, policy, now)
            facts = self._facts(node, now, policy)
            r = step(state, incoming, policy, facts, node=name, now=now, held=held)
            for req in r.jobs:
                try:
                    self._request(req, now)
                except ApiError as e:
                    if e.transient:
                        raise  # the node's alerts are tried again, the request with them
                    # the job is gone or refuses the request: the node's own action stands
                    self._metrics.errors.inc()
                    log.warning("alert actions: job request refused job=%s kind=%s error=%r",
                                req.job, req.kind, str(e))  # fmt: skip
            new = _node_after(node, r, now)
            if new != node:
                try:
                    node = self._kube.replace(new, field_manager=FIELD_MANAGER)
                    self.nodes.assume(node)
                except ApiError as e:
                    if e.status == 409:
                        continue
                    raise
            break
        else:
            self._metrics.errors.inc()
            log.warning("alert actions: node kept changing; retrying node=%s", name)
            return False
        self._acted[name] = r.state.acted_at
        for alert, outcome in r.outcomes:
            self._metrics.actions.labels(alert, outcome).inc()
        if r.circuit_open:
            self._metrics.circuit_open.inc()
        for note in r.notes:
            target = node if not note.job else self._job(note.job)
            if target is not None:
                self._events.record(
                    target, type=note.type, reason=note.reason, message=note.message
                )
        if r.notes:
            log.info(
                "alert actions node=%s quarantined=%s cordoned=%s notes=%s",
                name,
                format_indices(r.state.quarantined) or "-",
                r.state.cordoned,
                ",".join(n.reason for n in r.notes),
            )
        return True

    def _held(self, name: str, state: NodeState, policy: AlertPolicy, now: float) -> frozenset[str]:
        """Of node `name`'s entries due to lapse, those Alertmanager still holds. Only
        entries whose alert a rule of the policy still names are asked about (the
        question is filtered to those names); the others lapse."""
        due = [
            k
            for k in state.lapsing(policy.resolve_timeout_s, now)
            if state.entries[k].alert in policy.rules
        ]
        if not due or self._alertmanager is None:
            return frozenset()
        holdings = self._holdings_now(self._alertmanager, policy)
        if holdings is None:
            return frozenset()
        if not holdings.settled(now):
            # just started: it holds its silences but not yet the alerts Prometheus
            # sends again, so what it does not list may still be firing
            log.info(
                "alerts not lapsed: Alertmanager started %.0f s ago, before it holds every"
                " alert again node=%s alerts=%s",
                now - holdings.started_at, name, ",".join(state.entries[k].alert for k in due),
            )  # fmt: skip
            return frozenset(due)
        held = set()
        for key in due:
            a = holdings.get(key)
            if a is None:
                continue
            held.add(key)
            log.info(
                "alert not lapsed: Alertmanager still holds it node=%s alert=%s instance=%s"
                " state=%s silenced_by=%s inhibited_by=%s",
                name, state.entries[key].alert, key, a.state,
                ",".join(a.silenced_by) or "-", ",".join(a.inhibited_by) or "-",
            )  # fmt: skip
        return frozenset(held)

    def _holdings_now(self, am: AlertmanagerApi, policy: AlertPolicy) -> Holdings | None:
        """What Alertmanager holds of the policy's alerts, asked at most once a tick
        (the answer serves every node until the next); None where it cannot be asked."""
        if self._asked_in == self._next_tick:
            return self._holdings
        self._asked_in = self._next_tick
        try:
            self._holdings = am.holdings(policy.rules)
        except AlertmanagerError as e:
            self._holdings = None
            self._metrics.alertmanager_queries.labels("failed").inc()
            log.warning(
                "Alertmanager not asked which alerts it holds; the alerts due lapse as"
                " without --alertmanager-url url=%s error=%r", am.url, str(e),
            )  # fmt: skip
            return None
        self._metrics.alertmanager_queries.labels("ok").inc()
        return self._holdings

    def _job(self, job: str) -> Obj | None:
        ns, _, name = job.partition("/")
        return self._kube.get(_JOB, name, ns)

    def _request(self, req: JobRequest, now: float) -> None:
        """Write `req` on its TrainingJob unless it is there already."""
        annotation = CHECKPOINT_ANNOTATION if req.kind == "checkpoint" else RESTART_ANNOTATION
        obj = self._job(req.job)
        if obj is None:
            return
        mark = f"[alert {req.key}]"
        have: Mapping[str, str] = obj["metadata"].get("annotations") or {}
        if mark in have.get(annotation, ""):
            return
        ns, _, name = req.job.partition("/")
        value = f"{_stamp(now)} {req.message} {mark}"
        self._kube.merge_patch(
            _JOB,
            name,
            {"metadata": {"annotations": {annotation: value}}},
            field_manager=FIELD_MANAGER,
            namespace=ns,
        )
