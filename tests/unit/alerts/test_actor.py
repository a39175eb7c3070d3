"""The actor over the fake API server: what lands on the Node, the TrainingJob and in
Events after deliveries and ticks, with a fake clock."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from controller.alerts.actor import ActorSettings, AlertActor
from controller.alerts.alertmanager import AlertmanagerApi
from controller.alerts.machine import REASON_ANNOTATION, STATE_ANNOTATION, TAINT_KEY
from controller.alerts.metrics import AlertMetrics
from controller.alerts.payload import Alert
from controller.alerts.receiver import Inbox
from controller.jobs.pods import LABEL_JOB
from controller.kube.client import ApiError, NotLeaderError, Resource
from controller.kube.clock import FakeClock
from controller.nodehealth import (
    CHECKPOINT_ANNOTATION,
    QUARANTINE_ANNOTATION,
    RESTART_ANNOTATION,
    unhealthy_gpus,
)
from controller.scheduler.policy import POLICY_CONFIGMAP, policy_configmap
from tests.unit.alerts.builders import LEAK, XID, FakeAlertmanager, alert, held
from tests.unit.kube.fakes import FakeKube

NS = "gangops-system"
Obj = dict[str, Any]


class Kube(FakeKube):
    """FakeKube whose list reads what it stores, and counts the lists of each kind."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: dict[str, int] = {}

    def list(
        self, res: Resource, *, namespace: str | None = None, label_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        self.listed[res.kind] = self.listed.get(res.kind, 0) + 1
        return [o for (k, _, _), o in sorted(self.objects.items()) if k == res.kind], str(self.rv)


def policy_cm(rules: list[dict[str, Any]], resolve_timeout_s: int = 0, **breaker: int) -> Obj:
    doc = {
        "alertActions": {
            "rules": rules,
            "circuitBreaker": {"maxPercent": 10, "maxNodes": 5, "windowSeconds": 600, **breaker},
            "resolveTimeoutSeconds": resolve_timeout_s,
        }
    }
    return policy_configmap(doc, NS)


RULES = [
    {"alert": LEAK, "action": "quarantine-gpus", "mode": "enforce", "cooldownSeconds": 600,
     "restartJob": True, "gracePeriodSeconds": 120},
    {"alert": XID, "action": "cordon-node", "mode": "enforce", "cooldownSeconds": 300,
     "restartJob": False, "gracePeriodSeconds": 0},
]  # fmt: skip


def world(nodes: int = 10, rules: list[dict[str, Any]] = RULES) -> Kube:
    kube = Kube()
    for i in range(nodes):
        kube.objects[("Node", "", f"n{i}")] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}", "uid": f"u{i}", "resourceVersion": "1"},
            "spec": {},
        }
    kube.objects[("ConfigMap", NS, POLICY_CONFIGMAP)] = policy_cm(rules)
    kube.objects[("Pod", "team-a", "train-0")] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "team-a", "labels": {LABEL_JOB: "train"}},
    }
    kube.objects[("TrainingJob", "team-a", "train")] = {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "j", "resourceVersion": "1"},
    }
    return kube


def setup(
    kube: Kube, alertmanager: AlertmanagerApi | None = None
) -> tuple[AlertActor, Inbox, FakeClock, AlertMetrics]:
    clock = FakeClock(dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC))
    inbox, metrics = Inbox(), AlertMetrics()
    actor = AlertActor(
        kube, inbox=inbox, clock=clock, metrics=metrics, settings=ActorSettings(NS, tick_s=5),
        alertmanager=alertmanager,
    )  # fmt: skip
    actor.nodes.relist()  # what `start` has its watch do first
    return actor, inbox, clock, metrics


def deliver(actor: AlertActor, inbox: Inbox, clock: FakeClock, *alerts: Alert) -> None:
    inbox.put(list(alerts), clock.monotonic())
    actor.run_once()


def node(kube: Kube, name: str = "n1") -> Obj:
    return kube.objects[("Node", "", name)]


def events(kube: Kube, reason: str) -> list[Obj]:
    return [o for (k, _, _), o in kube.objects.items() if k == "Event" and o["reason"] == reason]


def job_annotations(kube: Kube) -> dict[str, str]:
    return kube.objects[("TrainingJob", "team-a", "train")]["metadata"].get("annotations") or {}


def test_a_leak_quarantines_the_gpu_checkpoints_restarts_and_returns_after_the_cool_down() -> None:
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    leak = alert(LEAK, node="n1", gpu=2, fp="L", pod=("team-a", "train-0"))
    deliver(actor, inbox, clock, leak)
    n = node(kube)
    assert unhealthy_gpus(n) == frozenset({2})
    assert n["metadata"]["annotations"][QUARANTINE_ANNOTATION] == "2"
    assert "GPU 2: GangopsGPUMemoryLeak since" in n["metadata"]["annotations"][REASON_ANNOTATION]
    assert not n["spec"].get("unschedulable")
    assert "[alert L@" in job_annotations(kube)[CHECKPOINT_ANNOTATION]
    assert RESTART_ANNOTATION not in job_annotations(kube)
    assert [e["involvedObject"]["kind"] for e in events(kube, "CheckpointRequested")] == [
        "TrainingJob"
    ]
    assert len(events(kube, "AlertAction")) == 1
    clock.advance(121)
    actor.run_once()  # the tick: the grace period is over
    assert "restart the gang elsewhere" in job_annotations(kube)[RESTART_ANNOTATION]
    assert len(events(kube, "RestartRequested")) == 1
    clock.advance(30)
    deliver(actor, inbox, clock, replace(leak, status="resolved"))
    assert unhealthy_gpus(node(kube)) == frozenset({2})  # the cool-down
    clock.advance(600)
    actor.run_once()
    n = node(kube)
    assert unhealthy_gpus(n) == frozenset()
    assert QUARANTINE_ANNOTATION not in n["metadata"]["annotations"]
    assert REASON_ANNOTATION not in n["metadata"]["annotations"]
    assert len(events(kube, "GPUReturned")) == 1
    assert metrics.actions.labels(LEAK, "undone")._value.get() == 1


def test_ten_thousand_replayed_deliveries_leave_one_effect_each() -> None:
    kube = world(nodes=50)  # the breaker allows 5
    actor, inbox, clock, _ = setup(kube)
    alerts = [alert(LEAK, node=f"n{i % 3}", gpu=i % 3, fp=f"f{i % 3}") for i in range(3)]
    deliver(actor, inbox, clock, *alerts)
    writes = len(kube.writes)
    for i in range(10_000):
        inbox.put([alerts[i % 3]], clock.monotonic())
    while actor.run_once():
        pass
    assert len(kube.writes) == writes  # nothing written again
    assert len(events(kube, "AlertAction")) == 3
    assert [unhealthy_gpus(node(kube, f"n{i}")) for i in range(3)] == [
        frozenset({0}), frozenset({1}), frozenset({2})
    ]  # fmt: skip


def test_an_operators_cordon_and_taint_stay_after_the_undo() -> None:
    kube = world()
    n = node(kube)
    n["spec"] = {"unschedulable": True, "taints": [{"key": TAINT_KEY, "effect": "NoSchedule"}]}
    actor, inbox, clock, _ = setup(kube)
    xid = alert(XID, node="n1", gpu=None, fp="X")
    deliver(actor, inbox, clock, xid)
    state = json.loads(node(kube)["metadata"]["annotations"][STATE_ANNOTATION])
    assert (state["cordoned"], state["tainted"]) == (False, False)
    deliver(actor, inbox, clock, replace(xid, status="resolved"))
    clock.advance(400)
    actor.run_once()
    assert node(kube)["spec"] == n["spec"]


def test_gangops_removes_its_own_cordon_and_taint_only() -> None:
    kube = world()
    node(kube)["spec"] = {"taints": [{"key": "other", "effect": "NoExecute"}]}
    actor, inbox, clock, _ = setup(kube)
    xid = alert(XID, node="n1", gpu=None, fp="X")
    deliver(actor, inbox, clock, xid)
    spec = node(kube)["spec"]
    assert spec["unschedulable"] is True
    assert [t["key"] for t in spec["taints"]] == ["other", TAINT_KEY]
    deliver(actor, inbox, clock, replace(xid, status="resolved"))
    clock.advance(301)
    actor.run_once()
    assert node(kube)["spec"] == {"taints": [{"key": "other", "effect": "NoExecute"}]}
    assert len(events(kube, "NodeReturned")) == 1


def test_a_storm_trips_the_breaker_after_one_node_in_ten() -> None:
    kube = world(nodes=10)  # min(10 % of 10, 5) = 1 node per window
    actor, inbox, clock, metrics = setup(kube)
    storm = [alert(XID, node=f"n{i}", gpu=None, fp=f"x{i}") for i in range(10)]
    deliver(actor, inbox, clock, *storm)
    cordoned = [i for i in range(10) if node(kube, f"n{i}")["spec"].get("unschedulable")]
    assert len(cordoned) == 1
    assert len(events(kube, "CircuitOpen")) == 9
    assert metrics.circuit_open._value.get() == 9
    # a restarted controller counts the episode from the Node and keeps the breaker open
    actor2, inbox2, clock2, _ = setup(kube)
    deliver(actor2, inbox2, clock2, alert(LEAK, node="n9", gpu=0, fp="late"))
    assert unhealthy_gpus(node(kube, "n9")) == frozenset()


def test_a_conflict_reads_the_node_again() -> None:
    kube = world()
    actor, inbox, clock, _ = setup(kube)
    real_replace = kube.replace
    calls = []

    def racing(obj: Obj, *, field_manager: str) -> Obj:
        if not calls:
            calls.append(1)  # someone else writes the node first
            kube.merge_patch(kube_node, "n1", {"metadata": {"labels": {"x": "y"}}},
                             field_manager="other")  # fmt: skip
        return real_replace(obj, field_manager=field_manager)

    from controller.kube.client import RESOURCES

    kube_node = RESOURCES["Node"]
    kube.replace = racing  # type: ignore[method-assign]
    deliver(actor, inbox, clock, alert(LEAK, node="n1", gpu=1, fp="L"))
    n = node(kube)
    assert n["metadata"]["labels"] == {"x": "y"}
    assert unhealthy_gpus(n) == frozenset({1})
    assert len(events(kube, "AlertAction")) == 1


def test_shadow_mode_writes_nothing_on_the_node_but_its_record() -> None:
    kube = world(rules=[{**RULES[0], "mode": "shadow"}])
    actor, inbox, clock, metrics = setup(kube)
    deliver(actor, inbox, clock, alert(LEAK, node="n1", gpu=1, fp="L", pod=("team-a", "train-0")))
    n = node(kube)
    assert unhealthy_gpus(n) == frozenset()
    assert STATE_ANNOTATION in n["metadata"]["annotations"]
    assert job_annotations(kube) == {}
    assert len(events(kube, "ShadowAction")) == 1
    assert metrics.actions.labels(LEAK, "shadow")._value.get() == 1


def test_an_alert_without_a_node_or_for_an_unknown_node_is_counted_and_dropped() -> None:
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    nameless = Alert("GangopsControllerDown", "firing", "c", "2027-01-15T08:00:00Z", None,
                     {"alertname": "GangopsControllerDown"})  # fmt: skip
    deliver(actor, inbox, clock, nameless, alert(LEAK, node="gone", fp="g"))
    assert metrics.actions.labels("GangopsControllerDown", "no_node")._value.get() == 1
    assert metrics.actions.labels(LEAK, "no_node")._value.get() == 1


def test_the_ticks_read_the_node_cache_not_a_list_each() -> None:
    """At 5,000 nodes a list of every Node each tick (5 s) was 62 % of an idle
    `gangops run`'s CPU (docs/performance.md). The ticks read the cache a watch
    keeps, which holds the fields they read and the actor's own writes."""
    kube = world()
    actor, inbox, clock, _ = setup(kube)
    assert kube.listed == {"Node": 1}
    deliver(actor, inbox, clock, alert(XID, node="n1", gpu=None, fp="X"))
    cached = actor.nodes.get("n1")
    assert cached is not None and STATE_ANNOTATION in cached["metadata"]["annotations"]
    assert cached["spec"]["unschedulable"] is True  # its own write, in the cache at once
    assert set(cached) == {"metadata", "spec"}  # not the Node's status
    for _ in range(20):
        clock.advance(5)
        actor.run_once()
    assert kube.listed == {"Node": 1}
    deliver(
        actor, inbox, clock, replace(alert(XID, node="n1", gpu=None, fp="X"), status="resolved")
    )
    clock.advance(301)
    actor.run_once()  # the undo after the cool-down: found by a tick over the cache
    assert not node(kube)["spec"].get("unschedulable")
    assert kube.listed == {"Node": 1}


def test_alerts_wait_in_the_inbox_until_the_nodes_are_known() -> None:
    """The breaker counts the episodes the Nodes record: before the cache has
    listed them an alert is not acted on (it would count against one node)."""
    kube = world()
    clock = FakeClock(dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC))
    inbox, metrics = Inbox(), AlertMetrics()
    actor = AlertActor(
        kube, inbox=inbox, clock=clock, metrics=metrics, settings=ActorSettings(NS, tick_s=5)
    )
    inbox.put([alert(XID, node="n1", gpu=None, fp="X")], clock.monotonic())
    assert actor.run_once() == 0 and not actor.ready()
    assert not node(kube)["spec"].get("unschedulable")
    actor.nodes.relist()
    assert actor.run_once() == 1 and actor.ready()
    assert node(kube)["spec"]["unschedulable"] is True


def test_a_gpu_label_of_other_digits_names_no_gpu_and_the_actor_goes_on() -> None:
    """'²' is a digit to str.isdigit and not to int(): the alert names no GPU (found
    by a review: int() raised, and the actor's thread ended for good)."""
    kube = world(nodes=50)
    actor, inbox, clock, _ = setup(kube)
    odd = Alert(LEAK, "firing", "odd", "2027-01-15T07:59:30Z", None,
                {"alertname": LEAK, "Hostname": "n1", "gpu": "\u00b2"})  # fmt: skip
    huge = replace(odd, fingerprint="huge", labels={**odd.labels, "gpu": "9" * 5000})
    assert odd.gpu is None and huge.gpu is None
    deliver(actor, inbox, clock, odd, huge, alert(XID, node="n2", gpu=None, fp="good"))
    assert node(kube, "n2")["spec"].get("unschedulable") is True


def test_the_worker_survives_a_failed_policy_read_and_keeps_the_alerts_it_had_taken() -> None:
    """Found by a review: the batch was taken from the inbox before the policy was
    read, and a failed read (here a defect; an API server timeout alike) lost it, a
    `resolved` with it, which Alertmanager sends once."""
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    real_get, broken = kube.get, [True]

    def get(res: Any, name: str, namespace: str | None = None) -> Any:
        if broken and res.kind == "ConfigMap":
            broken.clear()
            raise KeyError("a defect")
        return real_get(res, name, namespace)

    kube.get = get  # type: ignore[method-assign]
    worker = threading.Thread(target=actor._work, daemon=True)  # what `start` runs
    worker.start()
    try:
        inbox.put([alert(XID, node="n1", gpu=None, fp="x")], clock.monotonic())
        deadline = time.monotonic() + 10
        while not metrics.errors._value.get():  # the batch met the defect
            assert time.monotonic() < deadline, "no error counted"
            time.sleep(0.01)
        while node(kube, "n1")["spec"].get("unschedulable") is not True:
            assert worker.is_alive() and time.monotonic() < deadline, "the alert was lost"
            time.sleep(0.01)
    finally:
        actor.stop()


def _failing_once(kube: Kube, error: ApiError) -> list[str]:
    real_replace, failed = kube.replace, []

    def replace_once(obj: Obj, *, field_manager: str) -> Obj:
        if not failed:
            failed.append(obj["metadata"]["name"])
            raise error
        return real_replace(obj, field_manager=field_manager)

    kube.replace = replace_once  # type: ignore[method-assign]
    return failed


def test_an_api_error_keeps_the_alerts_for_the_next_pass() -> None:
    """A `resolved` is sent once, and Alertmanager had its 200: the batch that met
    an error is acted on at the next pass (found by a review: it was dropped, and
    the node stayed cordoned for good)."""
    kube = world(nodes=50)
    actor, inbox, clock, _ = setup(kube)
    xid = alert(XID, node="n1", gpu=None, fp="x")
    deliver(actor, inbox, clock, xid)
    assert node(kube)["spec"].get("unschedulable") is True
    failed = _failing_once(kube, ApiError(500, "InternalError", "etcdserver: request timed out"))
    inbox.put([replace(xid, status="resolved")], clock.monotonic())
    with pytest.raises(ApiError):  # `_work` logs it and waits a second
        actor.run_once()
    assert failed == ["n1"] and len(inbox) == 1
    actor.run_once()
    assert len(inbox) == 0
    clock.advance(400)  # past the cool-down after the resolve
    actor.run_once()
    assert node(kube)["spec"].get("unschedulable") is None


def _refusing(kube: Kube, name: str) -> None:
    """Every write of Node `name` refused, as an admission webhook would."""
    real_replace = kube.replace

    def replace(obj: Obj, *, field_manager: str) -> Obj:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == name:
            raise ApiError(422, "Invalid", "admission webhook denied the request")
        return real_replace(obj, field_manager=field_manager)

    kube.replace = replace  # type: ignore[method-assign]


def test_a_node_whose_writes_are_refused_keeps_neither_the_others_undo_nor_the_breaker() -> None:
    """Found by a review: a tick that met one refused node stopped there. The nodes
    after it kept their quarantines past the cool-down, and the breaker, whose count
    the tick had begun again, knew of only the nodes before it: an XID storm then
    cordoned a node a tick instead of 5 of 100."""
    kube = world(nodes=100)
    actor, inbox, clock, metrics = setup(kube)
    for n in ("n0", "n1"):
        deliver(actor, inbox, clock, alert(LEAK, node=n, gpu=0, fp=f"q{n}"))
        deliver(actor, inbox, clock, alert(LEAK, node=n, gpu=0, fp=f"q{n}", status="resolved"))
    _refusing(kube, "n0")
    clock.advance(700)  # both past their cool-down
    actor.run_once()
    assert unhealthy_gpus(node(kube, "n1")) == frozenset()  # after n0, and undone
    assert unhealthy_gpus(node(kube, "n0")) == frozenset({0}) and metrics.errors._value.get() >= 1
    for i in range(2, 62):  # one XID a node, 5 s apart, within the breaker's window
        clock.advance(5)
        deliver(actor, inbox, clock, alert(XID, node=f"n{i}", gpu=None, fp=f"x{i}"))
    cordoned = [i for i in range(100) if node(kube, f"n{i}")["spec"].get("unschedulable")]
    assert len(cordoned) == 5  # min(10 % of 100, 5); n0's and n1's episodes began before


def test_a_busy_api_server_is_tried_again_after_the_wait_it_asks_for() -> None:
    """API Priority and Fairness' 429 says how long to wait (Retry-After): the
    worker waits that long, not its own second, then acts on the alerts it kept."""
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    _failing_once(kube, ApiError(429, "TooManyRequests", "too many", retry_after=20.0))
    start = clock.monotonic()
    worker = threading.Thread(target=actor._work, daemon=True)  # what `start` runs
    worker.start()
    try:
        inbox.put([alert(XID, node="n1", gpu=None, fp="x")], clock.monotonic())
        deadline = time.monotonic() + 10
        while node(kube)["spec"].get("unschedulable") is not True:
            assert worker.is_alive() and time.monotonic() < deadline, "never acted"
            time.sleep(0.01)
    finally:
        actor.stop()
    assert metrics.errors._value.get() == 1
    assert clock.monotonic() - start == 20.0  # the fake clock moves only in that wait


def test_a_request_the_api_server_refuses_as_written_is_not_retried() -> None:
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    _failing_once(kube, ApiError(422, "Invalid", "metadata.annotations: Too long"))
    deliver(actor, inbox, clock, alert(XID, node="n1", gpu=None, fp="x"))
    assert len(inbox) == 0 and metrics.errors._value.get() == 1


@pytest.mark.parametrize("names", [["gpu:xid_fatal"], ["_GPUFault"], ["A" * 62, "B"]])
def test_the_taint_value_is_a_label_value(names: list[str]) -> None:
    """Alert names may hold ':', begin with '_' and run to 200 characters; a taint's
    value may not (found by a review: the API server refused such a cordon)."""
    kube = world(rules=[{**RULES[1], "alert": n} for n in names])
    actor, inbox, clock, _ = setup(kube)
    deliver(actor, inbox, clock, *[alert(n, node="n1", gpu=None, fp=n) for n in names])
    (taint,) = [t for t in node(kube)["spec"]["taints"] if t["key"] == TAINT_KEY]
    assert re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", taint["value"])
    assert taint["value"].startswith(names[0].strip("_").replace(":", "_")[:10])


def test_a_job_request_refused_leaves_the_nodes_own_action_standing() -> None:
    """The job was deleted between its read and the checkpoint request (found by a
    review: the 404 dropped the node's quarantine with it)."""
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    real = kube.merge_patch

    def merge_patch(res: Resource, name: str, patch: Obj, **kw: Any) -> Obj:
        if res.kind == "TrainingJob":
            raise ApiError(404, "NotFound", 'trainingjobs.ai.operator "train" not found')
        return real(res, name, patch, **kw)

    kube.merge_patch = merge_patch  # type: ignore[method-assign]
    deliver(actor, inbox, clock, alert(LEAK, node="n1", gpu=2, fp="L", pod=("team-a", "train-0")))
    assert unhealthy_gpus(node(kube)) == frozenset({2}) and len(inbox) == 0
    assert metrics.errors._value.get() == 1


def test_a_defect_on_one_node_does_not_cost_the_other_nodes_of_the_batch() -> None:
    kube = world()
    actor, inbox, clock, metrics = setup(kube)
    real = kube.get

    def get(res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        if res.kind == "Node" and name == "n1":
            raise KeyError("a defect")
        return real(res, name, namespace)

    kube.get = get  # type: ignore[method-assign]
    deliver(actor, inbox, clock, alert(XID, node="n1", gpu=None, fp="a"),
            alert(XID, node="n2", gpu=None, fp="b"))  # fmt: skip
    assert node(kube, "n2")["spec"].get("unschedulable") is True
    assert metrics.errors._value.get() == 1 and len(inbox) == 0


def test_alerts_the_fence_refuses_are_kept_for_when_it_lifts() -> None:
    """Found by a review: NotLeaderError dropped the batch Alertmanager had its 200 for."""
    kube = world(nodes=50)  # the breaker lets 5 nodes go at once
    actor, inbox, clock, _ = setup(kube)
    real = kube.replace
    fenced = [True]

    def replace(obj: Obj, *, field_manager: str) -> Obj:
        if fenced[0]:
            raise NotLeaderError("refusing PUT: this replica is not the leader")
        return real(obj, field_manager=field_manager)

    kube.replace = replace  # type: ignore[method-assign]
    inbox.put([alert(XID, node="n1", gpu=None, fp="a"), alert(XID, node="n2", gpu=None, fp="b")],
              clock.monotonic())  # fmt: skip
    with pytest.raises(NotLeaderError):
        actor.run_once()
    assert len(inbox) == 2
    fenced[0] = False
    actor.run_once()
    assert all(node(kube, n)["spec"].get("unschedulable") for n in ("n1", "n2"))


TIMEOUT = 1800


def lapsing(fake: FakeAlertmanager) -> tuple[Kube, AlertActor, Inbox, FakeClock, AlertMetrics]:
    """A world whose alerts lapse after `TIMEOUT`, and an actor asking `fake` first."""
    kube = world()
    kube.objects[("ConfigMap", NS, POLICY_CONFIGMAP)] = policy_cm(RULES, TIMEOUT, maxPercent=100)
    return kube, *setup(kube, AlertmanagerApi("http://am:9093", fetch=fake))


def test_an_alert_alertmanager_still_holds_silenced_does_not_lapse() -> None:
    """Found by a review: Alertmanager sends nothing for a silenced alert, so it lapsed,
    and a faulty GPU went back into service while the fault persisted."""
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, metrics = lapsing(fake)
    leaks = [alert(LEAK, node=n, gpu=2, fp=f"L{n}") for n in ("n1", "n2")]
    deliver(actor, inbox, clock, *leaks)
    fake.holds = [held(a, silenced_by=("s-1",)) for a in leaks]
    clock.advance(TIMEOUT - 1)
    actor.run_once()
    assert fake.asked == []  # nothing due yet: not asked
    for _ in range(3):  # each timeout: asked once for both nodes, kept
        clock.advance(TIMEOUT)
        actor.run_once()
        clock.advance(5)
        actor.run_once()  # the next tick: nothing due, not asked
    assert len(fake.asked) == 3 and f"filter=alertname%3D~%22{XID}%7C{LEAK}%22" in fake.asked[0]
    assert [unhealthy_gpus(node(kube, n)) for n in ("n1", "n2")] == [frozenset({2})] * 2
    assert not events(kube, "AlertLapsed")
    assert metrics.actions.labels(LEAK, "kept")._value.get() == 6
    assert metrics.alertmanager_queries.labels("ok")._value.get() == 3
    fake.holds = []  # the silence is gone and the alert resolved; its resolve was lost
    clock.advance(TIMEOUT)
    actor.run_once()
    assert len(events(kube, "AlertLapsed")) == 2
    clock.advance(600)  # the cool-down
    actor.run_once()
    assert [unhealthy_gpus(node(kube, n)) for n in ("n1", "n2")] == [frozenset()] * 2


def test_a_delivery_to_a_node_with_an_alert_due_to_lapse_asks_too() -> None:
    """The step of a delivery lapses what is due on its node as a tick's does."""
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, _ = lapsing(fake)
    leak = alert(LEAK, node="n1", gpu=2, fp="L")
    deliver(actor, inbox, clock, leak)
    fake.holds = [held(leak, silenced_by=("s-1",))]
    clock.advance(TIMEOUT)
    inbox.put([alert(LEAK, node="n1", gpu=5, fp="M")], clock.monotonic())
    actor.act(inbox.take(0))  # before the tick
    assert len(fake.asked) == 1 and not events(kube, "AlertLapsed")
    assert unhealthy_gpus(node(kube)) == frozenset({2, 5})


def test_an_alert_alertmanager_no_longer_holds_lapses() -> None:
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, metrics = lapsing(fake)
    leak = alert(LEAK, node="n1", gpu=2, fp="L")
    deliver(actor, inbox, clock, leak)
    # it holds others: another node's, and one that fired before this one
    earlier = replace(leak, starts_at="2027-01-15T06:20:00.000Z")
    fake.holds = [held(earlier), held(alert(LEAK, node="n3", fp="other"))]
    clock.advance(TIMEOUT)
    actor.run_once()
    assert len(fake.asked) == 1 and metrics.alertmanager_queries.labels("ok")._value.get() == 1
    [lapsed] = events(kube, "AlertLapsed")
    assert "undone after the 600s cool-down" in lapsed["message"]
    assert metrics.actions.labels(LEAK, "lapsed")._value.get() == 1
    clock.advance(600)
    actor.run_once()
    assert unhealthy_gpus(node(kube)) == frozenset()


def test_while_alertmanager_has_only_just_started_nothing_lapses() -> None:
    """Found by a review: a restarted Alertmanager holds its silences but no alerts
    until Prometheus sends them again, and its empty answer undid a silenced action."""
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, metrics = lapsing(fake)
    leak = alert(LEAK, node="n1", gpu=2, fp="L")
    deliver(actor, inbox, clock, leak)
    clock.advance(TIMEOUT)
    restarted = clock.now() - dt.timedelta(seconds=60)  # a minute ago
    fake.uptime = restarted.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    actor.run_once()
    assert not events(kube, "AlertLapsed") and unhealthy_gpus(node(kube)) == frozenset({2})
    assert metrics.actions.labels(LEAK, "kept")._value.get() == 1
    clock.advance(TIMEOUT)  # settled now, and the alert is not held: it lapses
    actor.run_once()
    assert len(events(kube, "AlertLapsed")) == 1


@pytest.mark.parametrize("settled", [True, False], ids=["settled", "just-started"])
def test_an_entry_whose_rule_left_the_policy_lapses_whatever_alertmanager_holds(
    settled: bool,
) -> None:
    """Found checking the docs: the question is filtered to the rules' names, but an
    entry of an alert no rule names any more was kept while Alertmanager settled, and
    kept for ever where the policy kept no rule at all (the question then unfiltered)."""
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, _ = lapsing(fake)
    leak = alert(LEAK, node="n1", gpu=2, fp="L")
    deliver(actor, inbox, clock, leak)
    fake.holds = [held(leak, silenced_by=("s-1",))]
    kube.objects[("ConfigMap", NS, POLICY_CONFIGMAP)] = policy_cm([], TIMEOUT, maxPercent=100)
    clock.advance(TIMEOUT)
    if not settled:
        fake.uptime = (clock.now() - dt.timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    actor.run_once()
    assert len(events(kube, "AlertLapsed")) == 1


@pytest.mark.parametrize(
    "error", [OSError("connection refused"), None], ids=["unreachable", "not-api-v2"]
)
def test_an_alertmanager_that_cannot_be_asked_lets_the_alert_lapse_and_says_so(
    error: Exception | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Its outage must not hold the actions for ever: they lapse as without it."""
    fake = FakeAlertmanager()
    kube, actor, inbox, clock, metrics = lapsing(fake)
    leak = alert(LEAK, node="n1", gpu=2, fp="L")
    deliver(actor, inbox, clock, leak)
    fake.holds = [held(leak, silenced_by=("s-1",))]
    fake.error, fake.answer = error, (None if error else (200, b"<html>maintenance</html>"))
    clock.advance(TIMEOUT)
    actor.run_once()
    assert len(fake.asked) == 1
    assert len(events(kube, "AlertLapsed")) == 1
    assert metrics.alertmanager_queries.labels("failed")._value.get() == 1
    [warning] = [r for r in caplog.records if "Alertmanager not asked" in r.getMessage()]
    assert warning.levelname == "WARNING" and "url=http://am:9093" in warning.getMessage()
    clock.advance(600)
    actor.run_once()
    assert unhealthy_gpus(node(kube)) == frozenset() and len(fake.asked) == 1
