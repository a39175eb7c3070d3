"""A compiled policy the scheduler cannot use (one that fails its schema, or one
that breaks a scheduling step) is set aside: the scheduler goes on with the last
policy a step completed with, says why (log, a Warning Event on the policy
ConfigMap, `gangops_scheduling_policy_errors_total` and
`gangops_scheduling_policy_fallback`), and takes the next revision as soon as it
comes. Before this, the schema's bounds were checked only by `validate`, and a
policy that broke the step stopped every step until the commit was reverted."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import controller.gang.controller as gang_controller
from controller.gang.controller import GangController
from controller.kube.clock import FakeClock
from controller.scheduler.policy import policy_configmap
from controller.scheduler.types import Admit
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import job, node

Obj = dict[str, Any]
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _policy(rv: str, **preemption: Any) -> Obj:
    doc = policy_doc(projects={"p": {"guaranteed": 16, "max": 16}})
    doc["cluster"]["preemption"].update(preemption)
    return policy_configmap(doc, "gangops-system", resourceVersion=rv)


def _controller() -> tuple[FakeKube, GangController]:
    api = FakeKube()
    c = GangController(api, clock=FakeClock(T0))
    c.nodes.assume(node("a"))
    return api, c


def _admits(c: GangController, name: str) -> bool:
    c.jobs.assume(job(name, 2))
    result = c.step()
    assert result is not None
    return any(isinstance(d, Admit) and d.gang.id == f"p/{name}" for d in result.decisions)


def _events(api: FakeKube, reason: str) -> list[Obj]:
    return [o for k, o in api.objects.items() if k[0] == "Event" and o["reason"] == reason]


def _metric(c: GangController, name: str, **labels: str) -> float | None:
    return c.metrics.registry.get_sample_value(name, labels)


def test_a_policy_outside_its_schema_is_set_aside_and_the_last_good_one_kept() -> None:
    api, c = _controller()
    try:
        c.config.assume(_policy("1"))
        assert _admits(c, "first")
        # validates nowhere but here: a number past the schema's bound (the
        # OverflowError of reliability D7 came from one like it)
        c.config.assume(_policy("2", maxPerHour=10**400))
        assert _admits(c, "second"), "the scheduler stopped instead of keeping policy 1"
        (event,) = _events(api, "PolicyUnreadable")
        assert event["involvedObject"]["kind"] == "ConfigMap"
        assert "resourceVersion 2 is not used" in event["message"]
        assert "cluster/preemption/maxPerHour" in event["message"]
        assert "last good policy (resourceVersion 1)" in event["message"]
        assert c.policy_problem == event["message"]
        assert _metric(c, "gangops_scheduling_policy_fallback") == 1
        assert _metric(c, "gangops_scheduling_policy_errors_total", reason="PolicyUnreadable") == 1
        c.step()  # said once per revision, not once per step
        assert len(_events(api, "PolicyUnreadable")) == 1
        c.config.assume(_policy("3", maxPerHour=7))
        assert _admits(c, "third")
        assert c.policy() is not None and c.policy().max_preemptions_per_hour == 7  # type: ignore[union-attr]
        assert (c.policy_problem, _metric(c, "gangops_scheduling_policy_fallback")) == ("", 0)
    finally:
        c.stop()


def test_without_a_good_policy_an_unusable_one_schedules_nothing_and_says_so() -> None:
    api, c = _controller()
    try:
        c.config.assume(_policy("1", minRuntimeSeconds=10**400))
        c.jobs.assume(job("j", 2))
        assert c.step() is None
        (event,) = _events(api, "PolicyUnreadable")
        assert "nothing is scheduled until a usable policy is applied" in event["message"]
        assert _metric(c, "gangops_scheduling_policy_fallback") == 0
    finally:
        c.stop()


def test_a_policy_that_breaks_the_step_is_set_aside_and_not_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schema cannot foresee every value the core fails on: a step that fails
    with a new policy, and succeeds with the last good one, blames the policy."""
    real = gang_controller.decide
    tried: list[int] = []

    def decide(views: Any, nodes: Any, pods: Any, policy: Any, **kw: Any) -> Any:
        tried.append(policy.max_preemptions_per_hour)
        if policy.max_preemptions_per_hour == 13:
            raise OverflowError("cannot convert float infinity to integer")
        return real(views, nodes, pods, policy, **kw)

    monkeypatch.setattr(gang_controller, "decide", decide)
    api, c = _controller()
    try:
        c.config.assume(_policy("1", maxPerHour=12))
        assert _admits(c, "first")
        c.config.assume(_policy("2", maxPerHour=13))
        assert _admits(c, "second")
        assert tried == [12, 13, 12]
        (event,) = _events(api, "PolicyBreaksScheduling")
        assert (
            "resourceVersion 2 is not used: a step with it failed: OverflowError"
            in (event["message"])
        )
        c.step()
        assert tried == [12, 13, 12, 12], "the broken policy was tried again"
        c.config.assume(_policy("3", maxPerHour=14))  # the next revision is tried afresh
        assert _admits(c, "third") and tried[-1] == 14
        assert _metric(c, "gangops_scheduling_policy_fallback") == 0
    finally:
        c.stop()


def test_a_failure_the_last_good_policy_shares_is_not_blamed_on_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = gang_controller.decide
    broken = [False]

    def decide(*args: Any, **kw: Any) -> Any:
        if broken[0]:
            raise RuntimeError("the API is down")
        return real(*args, **kw)

    monkeypatch.setattr(gang_controller, "decide", decide)
    api, c = _controller()
    try:
        c.config.assume(_policy("1"))
        assert _admits(c, "first")
        c.config.assume(_policy("2", maxPerHour=13))
        broken[0] = True
        with pytest.raises(RuntimeError, match="the API is down"):
            c.step()
        assert not _events(api, "PolicyBreaksScheduling")
        broken[0] = False
        c.step()
        assert c.policy() is not None and c.policy().max_preemptions_per_hour == 13  # type: ignore[union-attr]
    finally:
        c.stop()
