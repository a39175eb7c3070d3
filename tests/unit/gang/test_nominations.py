"""Nominations carried from one step to the next by the gang controller (the fake API
server behind the real binder; lifecycle.plan and decide on raw objects): a nominee
waits for its victims, and the hour's preemption budget counts what is decided as
well as what has landed. Found by a review's two-cycle property."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Any

from controller.gang.controller import GangController
from controller.gang.lifecycle import decide, plan
from controller.gang.record import Admission
from controller.gang.view import job_views
from controller.kube.clock import FakeClock
from controller.scheduler.policy import SchedulingPolicy, policy_configmap
from controller.scheduler.types import Placement, PodPlacement, Preempt
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import job, node, pod

Obj = dict[str, Any]
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _in(obj: Obj, namespace: str, user: str = "alice") -> Obj:
    obj["metadata"]["namespace"] = namespace
    if obj["kind"] == "TrainingJob":
        obj["metadata"]["labels"]["ai.operator/user"] = user
    return obj


def _placement(*where: tuple[str, int]) -> Placement:
    return Placement(tuple(PodPlacement(n, (d,)) for n, d in where))


def _wait(c: GangController) -> None:
    deadline = time.monotonic() + 10
    while c._busy:
        assert time.monotonic() < deadline, "writes did not land"
        time.sleep(0.01)


def _record(api: FakeKube, ns: str, name: str) -> Admission | None:
    return Admission.from_status(api.objects[("TrainingJob", ns, name)].get("status") or {})


def test_a_nominee_waits_until_its_victim_is_evicted_though_the_eviction_waits_a_step() -> None:
    """Three 4-GPU nodes, reserve 4 (critical). a/r0, a/r1 (critical) hold 1 GPU each
    on n0; b/big (high, 8 one-GPU workers, borrowed: b has no guarantee) holds n1 and
    n2, its pods starting. c/w (high, 1 GPU, within c's guarantee of 1) is queued.

    Step 1: w reclaims: preempts big (for the reserve), nominated on n0.
    Step 2: big's workers are all Running now, so plan gives big two actions, `running`
    and `evict`; `_submit` hands out one write per job, the first (`running`), and the
    eviction waits for the next step. The same step the core admits w on n0 (it counts
    big as released: `test_core_defects` B) and w's Admitted record replaces the
    nomination.
    Step 3 and after: no record names big as a victim; it is never evicted, and 9 GPUs
    run outside the reserve's 8 for good."""
    doc = policy_doc({"a": {}, "b": {}, "c": {"guaranteed": 1}}, reserve=4)
    api, clock = FakeKube(), FakeClock(T0)
    c = GangController(api, clock=clock)
    c.config.assume(policy_configmap(doc, c.settings.system_namespace, resourceVersion="1"))
    for n in ("n0", "n1", "n2"):
        c.nodes.assume(node(n, 4))
    at = T0.timestamp() - 600
    objs: list[Obj] = []
    for name, d in (("r0", 0), ("r1", 1)):
        adm = Admission("Admitted", 1, _placement(("n0", d)), at)
        objs += [_in(job(name, 1, tier="critical", adm=adm, phase="Running"), "a"),
                 _in(pod(name, 0, node="n0"), "a")]  # fmt: skip
    big_adm = Admission(
        "Admitted", 1, _placement(*[(n, d) for n in ("n1", "n2") for d in range(4)]), at + 590
    )
    objs.append(_in(job("big", 8, tier="high", adm=big_adm, phase="Admitted"), "b"))
    big_pods = [
        _in(pod("big", i, node=("n1", "n2")[i // 4], phase="Pending"), "b") for i in range(8)
    ]
    objs += big_pods
    objs.append(_in(job("w", 1, tier="high"), "c"))
    for o in objs:
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
        api.objects[(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])] = o
    try:
        res = c.step()
        _wait(c)
        (d1,) = [d for d in res.decisions if d.gang.id == "c/w"]
        assert isinstance(d1, Preempt) and d1.victims == ("b/big",), d1
        assert _record(api, "c", "w").state == "Nominated"

        for p in big_pods:  # big's workers start
            c.pods.assume({**p, "status": {"phase": "Running"}})
        clock.advance(1)
        c.step()
        _wait(c)
        for _ in range(3):
            clock.advance(1)
            c.step()
            _wait(c)
        w, big = _record(api, "c", "w"), _record(api, "b", "big")
        assert w is not None and w.state == "Admitted"
        assert big is None, (
            "big was never evicted: r0 + r1 (critical) + big 8 + w 1 outside the reserve "
            "= 9 of the 8 GPUs outside it, for good"
        )
    finally:
        c.stop()


def test_an_eviction_decided_but_not_yet_written_counts_against_the_hours_budget() -> None:
    """maxPerHour 1. Step k nominated hi1, evicting v1: the hour's one preemption. In
    the next step (v1's eviction is written by this very step, after the cycle), plan
    counts the hour's preemptions from the victims' `preemptedAt` only: 0. The cycle
    gets the whole budget again and hi2 preempts v2: two evictions in the hour.
    README: `maxPerHour`: "At most this many preemptions cluster-wide in any hour"."""
    pol = replace(
        SchedulingPolicy.from_dict(policy_doc({"p": {}}, max_per_hour=1)),
        gang_timeout_seconds=300.0,
    )
    now = 10_000.0
    nodes = {n["metadata"]["name"]: n for n in (node("a"), node("b"))}
    on_a = _placement(*[("a", d) for d in range(8)])
    v1 = job("v1", 8, tier="batch", adm=Admission("Admitted", 1, on_a, 1000.0), phase="Running")
    on_b = _placement(*[("b", d) for d in range(8)])
    v2 = job("v2", 8, tier="batch", adm=Admission("Admitted", 1, on_b, 1000.0), phase="Running")
    nomination = Admission(
        "Nominated", 0, _placement(*[("a", d) for d in range(8)]), now - 1, 0, (("p/v1", 1),)
    )
    hi1 = job("hi1", 8, tier="high", adm=nomination)
    hi2 = job("hi2", 8, tier="high")
    pods = [pod("v1", i, node="a") for i in range(8)] + [pod("v2", i, node="b") for i in range(8)]
    views = job_views([v1, v2, hi1, hi2], pods, pol)
    todo = plan(views, nodes, pol, now=now)
    assert [a.kind for a in todo.actions] == ["evict"]  # v1's eviction: written this step
    _, _, result = decide(views, nodes, pods, pol, now=now)
    by = {d.gang.id: d for d in result.decisions}
    assert not isinstance(by["p/hi2"], Preempt), (
        f"hi2 preempts {by['p/hi2'].victims} while hi1's eviction of v1 is the hour's one; "
        f"plan counted {todo.preemptions_last_hour} preemptions in the last hour"
    )
