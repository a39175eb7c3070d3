"""A launch the API server refuses (the README's example in a namespace whose
ResourceQuota tracks `requests.cpu`: `must specify requests.cpu`) reaches the
job's status and Events in the API server's words, gives the GPUs back, and is
retried with a delay that doubles: never a create per step."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from controller.gang.controller import GangController
from controller.gang.lifecycle import refused_write
from controller.gang.record import format_time
from controller.gang.view import job_views
from controller.kube.client import ApiError
from controller.kube.clock import FakeClock
from controller.scheduler.policy import policy_configmap
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import POLICY, admission, job, node

Obj = dict[str, Any]
ADM = admission("a", "b")
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
CPU = "failed quota: gangops-quota: must specify requests.cpu for: t; requests.memory for: t"
REFUSED = ApiError(403, "Forbidden", f'pods "j-1-0" is forbidden: {CPU}')

REFUSAL_CASES = [
    # (case, refusals so far, the write's parts that matter)
    (
        "the first refusal requeues after backoffBase, in the API server's words",
        0,
        {"kind": "refused", "phase": "Queued", "reason": "LaunchRefused", "clear": True,
         "conditional": False, "event": "Warning", "counted": True, "status.refusals": 1,
         "status.notBefore": format_time(1000 + 5),
         "message": f'the API server refused pod p/j-1-0 (403): pods "j-1-0" is forbidden: '
                    f"{CPU}; the gang gave its GPUs back and retries in 5s (refusal 1 in a row)"},
    ),
    ("each later refusal doubles the delay", 2,
     {"status.refusals": 3, "status.notBefore": format_time(1000 + 20)}),
    ("the delay stops at backoffMax", 9,
     {"status.refusals": 10, "status.notBefore": format_time(1000 + 300)}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "parts"), [c[1:] for c in REFUSAL_CASES], ids=[c[0] for c in REFUSAL_CASES]
)
def test_refused_write(before: int, parts: dict[str, Any]) -> None:
    (v,) = job_views([job("j", adm=ADM, refusals=before or None)], [], POLICY)
    w = refused_write(
        v, obj="pod p/j-1-0", status=403, message=REFUSED.message, now=1000.0,
        backoff_base_s=5.0, backoff_max_s=300.0,
    )  # fmt: skip
    got = {
        "kind": w.kind, "phase": w.phase, "reason": w.reason, "message": w.message,
        "clear": w.clear, "conditional": w.conditional, "event": w.event, "counted": w.counted,
        **{f"status.{k}": x for k, x in w.fields.items()},
    }  # fmt: skip
    assert {k: got.get(k) for k in parts} == parts


def _controller(api: FakeKube, clock: FakeClock) -> GangController:
    c = GangController(api, clock=clock)
    c.config.assume(
        policy_configmap(
            policy_doc(projects={"p": {}}), c.settings.system_namespace, resourceVersion="1"
        )
    )
    c.nodes.assume(node("a"))
    j = job("j", 1)
    c.jobs.assume(j)
    api.objects[("TrainingJob", "p", "j")] = j
    return c


def _settle(api: FakeKube, refusals: int) -> Obj:
    """The job once its `refusals`-th refusal is written."""
    deadline = time.monotonic() + 10
    while True:
        status = api.objects[("TrainingJob", "p", "j")].get("status") or {}
        if status.get("refusals") == refusals:
            return status
        assert time.monotonic() < deadline, f"refusal {refusals} was not written in 10 s"
        time.sleep(0.01)


def test_a_refused_launch_is_reported_and_retried_with_a_doubling_delay_not_per_step() -> None:
    api, clock = FakeKube(), FakeClock(T0)
    for attempt in range(1, 4):  # each attempt has its own pod names
        api.refusals[f"j-{attempt}-0"] = [REFUSED] * 100
    c = _controller(api, clock)
    tries = lambda: sum(100 - len(x) for x in api.refusals.values())  # noqa: E731
    try:
        c.step()
        status = _settle(api, 1)
        assert (status["phase"], status["reason"]) == ("Queued", "LaunchRefused")
        assert CPU in status["message"] and "retries in 5s" in status["message"]
        assert "admission" not in status  # the GPUs were given back
        assert "allocation" not in status  # and said so (found by a review: kept)
        reconciling = {x["type"]: x for x in status["conditions"]}["Reconciling"]
        assert reconciling["reason"] == "LaunchRefused" and CPU in reconciling["message"]
        events = [o for k, o in api.objects.items() if k[0] == "Event"]
        assert any(e["reason"] == "LaunchRefused" and CPU in e["message"] for e in events)
        assert tries() == 1
        # the loop steps on every event; within the delay nothing is created again
        for _ in range(50):
            c.step()
        clock.advance(4)
        c.step()
        time.sleep(0.1)
        assert tries() == 1
        clock.advance(2)  # past the first delay: one more try, then 10 s
        c.step()
        assert "retries in 10s" in _settle(api, 2)["message"]
        assert tries() == 2
    finally:
        c.stop()


def test_a_waiting_job_whose_status_already_says_why_does_not_wake_the_loop() -> None:
    """Each finished write wakes the loop for another step. A pending reason already
    written is no write at all: handed to the binder anyway, it woke the loop after
    every step, so a cluster with queued jobs and nothing changing stepped about 16
    times a second (tests/perf/scale.py, 200 queued jobs) instead of once a tick."""
    api = FakeKube()
    c = GangController(api, clock=FakeClock(T0))
    doc = policy_doc(projects={"p": {}})
    c.config.assume(policy_configmap(doc, c.settings.system_namespace, resourceVersion="1"))
    c.nodes.assume(node("a"))
    big = job("big", 16)  # node "a" has 8 GPUs: it waits
    c.jobs.assume(big)
    api.objects[("TrainingJob", "p", "big")] = big
    try:
        c.step()
        deadline = time.monotonic() + 10
        while not (api.objects[("TrainingJob", "p", "big")].get("status") or {}).get("phase"):
            assert time.monotonic() < deadline, "the pending reason was not written in 10 s"
            time.sleep(0.01)
        c.jobs.assume(api.objects[("TrainingJob", "p", "big")])
        c._pool.shutdown(wait=True)  # every write of the first step done
        c._wake.clear()
        c.step()
        assert not c._busy, "a write was handed to the binder for a reason already written"
        assert not c._wake.is_set()
    finally:
        c.stop()
