"""From raw objects to the cycle's inputs: nodes, foreign pods, running gangs, records."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from controller.gang import view
from controller.gang.controller import GangController
from controller.gang.lifecycle import Write, decide, plan
from controller.gang.record import Admission, format_time, parse_time
from controller.gang.view import (
    Memo,
    build_snapshot,
    container_defaults,
    job_views,
    namespace_quotas,
    node_of,
    pod_requests,
)
from controller.jobs.spec import ContainerDefaults, JobSpec
from controller.kube.clock import FakeClock
from controller.nodehealth import FAULT_TAINT
from controller.scheduler.cycle import schedule
from controller.scheduler.policy import policy_configmap
from controller.scheduler.telemetry import Telemetry, with_health
from controller.scheduler.types import (
    MILLI,
    Admit,
    JobId,
    NamespaceQuota,
    Pending,
    Placement,
    PodPlacement,
)
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import POLICY, admission, foreign, job, job_id, node, pod


def _cycle(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], pods: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    views = job_views(jobs, pods, POLICY)
    todo = plan(views, {n["metadata"]["name"]: n for n in nodes}, POLICY, now=1001.0)
    snap = build_snapshot(
        [node_of(n) for n in nodes], pods, todo.running, todo.owned,
        levels=POLICY.topology_levels, reserve_tiers=POLICY.reserve_tiers,
    )  # fmt: skip
    return snap, schedule(snap, todo.queue, POLICY, now=1001.0, nominated=todo.nominated)


def test_seed_scenario_gang_of_8_on_two_nodes_with_4_free_not_the_one_with_3() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [foreign("x", "a", 4), foreign("y", "b", 4), foreign("z", "c", 5)]
    _, result = _cycle(nodes, [job("seed", 8)], pods)
    (d,) = result.decisions
    assert isinstance(d, Admit) and d.placement.nodes() == {"a": 4, "b": 4}


def test_finished_foreign_pods_free_their_gpus_and_running_gangs_are_not_counted_twice() -> None:
    nodes = [node("a")]
    running = job("r", 4, adm=admission("a", "a", "a", "a"), phase="Running")
    pods = [pod("r", i, node="a") for i in range(4)] + [foreign("done", "a", 4, phase="Succeeded")]
    snap, result = _cycle(nodes, [running, job("next", 4)], pods)
    assert isinstance(result.decisions[0], Admit)
    assert snap.by_name["a"].whole == 0


def test_pods_of_an_old_attempt_still_hold_their_gpus_until_gone() -> None:
    nodes = [node("a")]
    old = [pod("r", i, node="a", attempt=1, deleting=True) for i in range(6)]
    _, result = _cycle(nodes, [job("r", 4)], old)
    (d,) = result.decisions
    assert isinstance(d, Pending) and d.code == "Capacity"


def test_nodes_not_ready_or_cordoned_are_not_schedulable_and_taints_are_read() -> None:
    assert not node_of(node("n", ready=False)).schedulable
    cordoned = node("n")
    cordoned["spec"] = {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    n = node_of(cordoned)
    assert not n.schedulable and n.taints[0].key == "k"
    ok = node_of(node("n", 4, **{"nvidia.com/gpu.product": "H100"}))
    assert (ok.gpus, ok.gpu_model, ok.cpu_milli, ok.schedulable) == (4, "H100", 96_000, True)


def test_gangops_fault_taint_takes_a_node_out_whatever_a_job_tolerates() -> None:
    # an operator uncordoned a node an alert action had tainted: a job tolerating
    # every taint (an empty key, operator Exists) was placed there
    tainted = node("n")
    tainted["spec"] = {"taints": [{"key": FAULT_TAINT, "value": "xid-79", "effect": "NoSchedule"}]}
    assert not node_of(tainted).schedulable
    other = node("m")
    other["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
    assert node_of(other).schedulable  # other taints are a job's to tolerate


def test_the_node_agents_unhealthy_gpus_are_read_and_a_malformed_entry_is_ignored() -> None:
    n = node("n")
    n["metadata"]["annotations"] = {"gangops.ai/unhealthy-gpus": "1, 3,x,,12"}
    got = node_of(n)
    assert got.unhealthy == frozenset({1, 3, 12}) and got.bad_gpus == 2  # 12: not on this node
    assert node_of(node("m")).unhealthy == frozenset()


def test_a_gpu_the_device_plugin_left_out_of_allocatable_is_not_taken_out_again() -> None:
    """The kubelet's allocatable already excludes a GPU the device plugin marks
    unhealthy; its capacity does not. The agent's report of the same GPU, by
    annotation or by telemetry, leaves the node offering its allocatable."""
    n = node("n", 7)
    n["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    for index in ("3", "7"):
        n["metadata"]["annotations"] = {"gangops.ai/unhealthy-gpus": index}
        snap = build_snapshot([node_of(n)], [], [], [], levels=(), reserve_tiers=frozenset())
        assert snap.capacity == 7 * MILLI, index
    n["metadata"]["annotations"] = {}
    (told,) = with_health([node_of(n)], Telemetry(unhealthy={"n": frozenset({3})}))
    snap = build_snapshot([told], [], [], [], levels=(), reserve_tiers=frozenset())
    assert snap.capacity == 7 * MILLI
    n["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # the plugin has not noticed
    n["metadata"]["annotations"] = {"gangops.ai/unhealthy-gpus": "3"}
    snap = build_snapshot([node_of(n)], [], [], [], levels=(), reserve_tiers=frozenset())
    assert snap.capacity == 7 * MILLI


def test_gpus_an_alert_action_quarantined_count_with_the_agents() -> None:
    n = node("n")
    n["metadata"]["annotations"] = {
        "gangops.ai/unhealthy-gpus": "1",
        "gangops.ai/quarantined-gpus": "1,5",
    }
    assert node_of(n).unhealthy == frozenset({1, 5})
    n["metadata"]["annotations"] = {"gangops.ai/quarantined-gpus": "2"}
    assert node_of(n).unhealthy == frozenset({2})


def test_a_gpu_index_written_other_than_in_a_few_ascii_digits_is_ignored_like_a_typo() -> None:
    """Found by a review: '²' and '①' are digits to str.isdigit but not to int(), so
    such an annotation raised in node_of, and every scheduling step with it. So
    would a run of digits longer than int() reads. Each is a typo, ignored."""
    n = node("n")
    n["metadata"]["annotations"] = {
        "gangops.ai/unhealthy-gpus": "1,\u00b2",
        "gangops.ai/quarantined-gpus": f"\u2460,3,{'9' * 5000}",
    }
    assert node_of(n).unhealthy == frozenset({1, 3})


def _controller() -> tuple[GangController, list[Write]]:
    """A controller over project `p`, and the writes its steps hand out."""
    c = GangController(FakeKube(), clock=FakeClock())
    writes: list[Write] = []
    c._submit = lambda w, *, assume=None: bool(writes.append(w) or True)  # type: ignore[method-assign]
    c.config.assume(
        policy_configmap(policy_doc(projects={"p": {}}), c.settings.system_namespace,
                         resourceVersion="1")
    )  # fmt: skip
    return c, writes


def test_a_defect_in_one_jobs_action_does_not_stop_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a review: an OverflowError in one job's rollback delay escaped the step,
    at every step, and no job of the cluster was admitted again."""
    import controller.gang.controller as gc

    c, writes = _controller()
    c.nodes.assume(node("a"))
    stuck = job("stuck", 1, adm=admission("a", at=0.0), phase="Admitted")  # long timed out
    c.jobs.assume(stuck)
    c.jobs.assume(job("other", 1))
    real = gc.action_write

    def action_write(action: Any, *args: Any, **kw: Any) -> Any:
        if action.job.id.endswith("/stuck"):
            raise OverflowError("int too large to convert to float")
        return real(action, *args, **kw)

    monkeypatch.setattr(gc, "action_write", action_write)
    c.step()
    assert [w.job.id for w in writes if w.phase == "Admitted"] == ["p/other"]


def test_a_node_with_a_unicode_digit_in_its_annotation_does_not_stop_admissions() -> None:
    """The review's reproduction end to end: the step is taken, the job admitted."""
    c, writes = _controller()
    typo = node("a")
    typo["metadata"]["annotations"] = {"gangops.ai/quarantined-gpus": "1,\u00b2"}
    c.nodes.assume(typo)
    c.jobs.assume(job("j", 2))
    c.step()
    assert [(w.kind, w.job.id) for w in writes if w.kind == "admit"] == [("admit", job_id("j"))]


def test_pod_requests_read_gpu_limits_when_requests_are_absent() -> None:
    p = foreign("x", "a", 3)
    p["spec"]["containers"].append({"name": "s", "resources": {"requests": {"cpu": "500m"}}})
    assert pod_requests(p) == (3, 500, 0)


def test_pods_of_another_job_with_the_same_name_label_are_not_its_own() -> None:
    stranger = pod("j", 0, node="a", owner=False)
    (v,) = job_views([job("j")], [stranger], POLICY)
    assert v.pods == []


def test_the_record_round_trips_and_malformed_ones_read_as_none() -> None:
    adm = Admission(
        "Nominated", 3, Placement((PodPlacement("a", (0, 1)),)), 1234.5, 2 * MILLI,
        ((JobId("p/x"), 2),),
    )  # fmt: skip
    assert Admission.from_status({"admission": adm.to_dict()}) == adm
    assert Admission.from_status({"admission": {"state": "Admitted"}}) is None
    assert Admission.from_status({"admission": {**adm.to_dict(), "state": "Maybe"}}) is None
    assert Admission.from_status({}) is None
    assert parse_time(format_time(1234.5)) == 1234.5
    assert parse_time("yesterday") is None


def test_an_override_replaces_the_record_until_the_write_lands() -> None:
    adm = admission("a")
    (v,) = job_views([job("j", 1)], [], POLICY, overrides={job_id("j"): adm})
    assert v.admission == adm


def test_the_memo_parses_an_object_again_only_when_its_resource_version_changes() -> None:
    memo = Memo()
    n = node("a")
    n["metadata"].update(uid="u-a", resourceVersion="1")
    first = memo.node(n)
    assert memo.node(n) is first
    n2 = {
        **n,
        "metadata": {**n["metadata"], "resourceVersion": "2"},
        "spec": {"unschedulable": True},
    }
    assert not memo.node(n2).schedulable
    bare = node("b")  # no uid or resourceVersion: parsed every time
    assert memo.node(bare) == memo.node(bare) and memo.node(bare) is not memo.node(bare)


def test_the_memo_reparses_a_job_under_a_new_policy_and_forgets_what_a_cycle_did_not_use() -> None:
    memo = Memo()
    j = job("j", 2)
    spec, gang, _, _ = memo.job(j, POLICY)
    assert memo.job(j, POLICY)[1] is gang
    other = replace(POLICY, gang_timeout_seconds=1.0)
    assert memo.job(j, other)[1] is not gang
    memo.next_step()
    memo.next_step()  # nothing used it during a whole cycle
    assert memo.job(j, other)[0] is not spec


def test_a_step_that_read_no_node_carries_their_parses_to_the_next() -> None:
    """A step with nothing to decide reads no node (`decide(skip_idle=True)`): it
    carries the memo's entries, so the next full step does not parse every node."""
    memo = Memo()
    n = node("a")
    n["metadata"].update(uid="u-a", resourceVersion="1")
    parsed = memo.node(n)
    for _ in range(3):
        memo.next_step()
        memo.carry()
    memo.next_step()
    assert memo.node(n) is parsed
    memo.next_step()
    memo.next_step()  # two steps that neither read it nor carried it
    assert memo.node(n) is not parsed


def test_a_step_that_read_no_node_drops_the_entries_of_jobs_it_did_not_read() -> None:
    """A job deleted during a stretch of steps with nothing to decide, or a record
    before its change, is forgotten as after any step (found by a review: every
    entry was carried, and they piled up for as long as the cluster stayed idle)."""
    memo = Memo()
    j = job("j", 2, adm=admission("a", "b"), phase="Running")
    j["metadata"].update(uid="u-j", resourceVersion="1")
    parsed = memo.job(j, POLICY)
    memo.next_step()
    memo.carry()  # an idle step in which the job is gone (or changed)
    memo.next_step()
    memo.carry()
    assert memo.job(j, POLICY) is not parsed


def test_views_and_snapshot_are_the_same_with_and_without_the_memo() -> None:
    nodes = [node("a"), node("b")]
    for n in nodes:
        n["metadata"].update(uid=f"u-{n['metadata']['name']}", resourceVersion="1")
    running = job("r", 4, adm=admission("a", "a", "a", "a"), phase="Running")
    pods = [pod("r", i, node="a") for i in range(4)] + [foreign("x", "b", 3)]
    for p in pods:
        p["metadata"]["resourceVersion"] = "1"
    memo = Memo()
    for _ in range(2):
        memo.next_step()
        plain = job_views([running, job("q", 2)], pods, POLICY)
        memoised = job_views([running, job("q", 2)], pods, POLICY, memo=memo)
        assert [(v.id, v.spec, v.gang, v.admission, v.pods) for v in memoised] == [
            (v.id, v.spec, v.gang, v.admission, v.pods) for v in plain
        ]
        todo = plan(memoised, {n["metadata"]["name"]: n for n in nodes}, POLICY, now=1001.0)
        snaps = [
            build_snapshot(
                [memo.node(n) for n in nodes],
                pods,
                todo.running,
                todo.owned,
                levels=POLICY.topology_levels,
                reserve_tiers=POLICY.reserve_tiers,
                memo=m,
            )
            for m in (None, memo)
        ]
        assert [(s.by_name["b"].whole, s.by_name["a"].whole) for s in snaps] == [(5, 4), (5, 4)]


def test_pod_requests_count_init_containers_as_kubernetes_does() -> None:
    p = foreign("x", "a", 1)
    p["spec"]["initContainers"] = [
        {"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "2"}}}
    ]
    assert pod_requests(p) == (8, 2000, 0)


def _quota(ns: str, name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": hard, **spec},
    }


def test_a_namespaces_quota_is_the_tightest_of_its_resource_quotas() -> None:
    quotas = [
        _quota("p", "gangops-quota", {"requests.nvidia.com/gpu": "30", "requests.cpu": "64",
                                      "requests.memory": "256Gi"}),
        _quota("p", "team", {"requests.nvidia.com/gpu": "12", "cpu": "100", "count/pods": "50"}),
        # a scoped quota holds only some pods; an amount that does not parse says nothing
        _quota("p", "scoped", {"requests.nvidia.com/gpu": "1"}, scopes=["BestEffort"]),
        _quota("q", "odd", {"requests.nvidia.com/gpu": "lots", "services": "3"}),
    ]  # fmt: skip
    assert namespace_quotas(quotas) == {
        "p": NamespaceQuota(gpu_milli=12_000, cpu_milli=64_000, memory=256 << 30, pods=50)
    }


def test_every_live_pod_of_a_quota_namespace_but_the_gangs_own_counts_against_it() -> None:
    nodes = [node("a")]
    mine = job("j", 2, adm=admission("a", "a"), phase="Running")
    pods = [pod("j", 0, node="a"), pod("j", 1, node="a"), pod("old", 0, attempt=1)]
    pending = {**foreign("x", "a", 2), "metadata": {"name": "x", "namespace": "p", "uid": "x"}}
    pending["spec"] = {k: v for k, v in pending["spec"].items() if k != "nodeName"}
    done = {**foreign("y", "a", 3, phase="Succeeded"), "metadata": {"name": "y", "namespace": "p"}}
    views = job_views([mine], [*pods, pending, done], POLICY)
    todo = plan(views, {"a": nodes[0]}, POLICY, now=1001.0)
    snap = build_snapshot(
        [node_of(n) for n in nodes], [*pods, pending, done], todo.running, todo.owned,
        levels=(), reserve_tiers=frozenset(), quotas={"p": NamespaceQuota(gpu_milli=8_000)},
    )  # fmt: skip
    # the unbound pod (2 GPUs), the stray pod (1), the running gang (2); not the finished one
    assert snap.namespace_usage["p"] == (5_000, 0, 0, 4)


def _limit_range(ns: str, name: str, *limits: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns}
    return {"kind": "LimitRange", "metadata": meta, "spec": {"limits": list(limits)}}


def test_a_namespaces_container_defaults_are_its_limit_ranges_default_requests() -> None:
    def container(**request: str) -> dict[str, Any]:
        return {"type": "Container", "defaultRequest": request}

    ranges = [
        _limit_range("p", "b-later", container(cpu="4", memory="8Gi")),
        _limit_range("p", "a-first", {"type": "Pod", "max": {"cpu": "64"}}, container(cpu="500m")),
        # an amount that does not parse says nothing
        _limit_range("q", "odd", container(cpu="lots", memory="1Gi")),
    ]
    # the first by name that sets a resource gives it; the next fills in the rest
    assert container_defaults(ranges) == {
        "p": ContainerDefaults(cpu_milli=500, memory=8 << 30),
        "q": ContainerDefaults(memory=1 << 30),
    }


def test_a_gang_is_admitted_within_the_quota_its_pods_defaults_use_up() -> None:
    """The README's case: the template sets only GPUs, the namespace's LimitRange
    gives each pod 1 CPU, and its ResourceQuota allows 3 CPUs: 4 workers would be
    refused pod by pod, so the gang is not admitted (reliability D7/D8)."""
    j = job("j", 4)
    for c in j["spec"]["template"]["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    quotas = {"p": NamespaceQuota(cpu_milli=3_000)}
    one_cpu = {"type": "Container", "defaultRequest": {"cpu": "1"}}
    ranges = [_limit_range("p", "gangops-defaults", one_cpu)]
    nodes = {"a": node("a")}
    for defaults, admitted in ((None, True), (container_defaults(ranges), False)):
        views = job_views([j], [], POLICY, defaults=defaults)
        _, _, result = decide(views, nodes, [], POLICY, now=1001.0, quotas=quotas)
        (d,) = result.decisions
        assert isinstance(d, Admit) is admitted, d
    assert "CPU" in d.reason or "cpu" in d.reason, d.reason


def test_the_memo_parses_a_job_again_when_its_namespaces_defaults_change() -> None:
    memo, j = Memo(), job("j", 2)
    for c in j["spec"]["template"]["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    one, two = ContainerDefaults(cpu_milli=1000), ContainerDefaults(cpu_milli=2000)
    (a,) = job_views([j], [], POLICY, memo=memo, defaults={"p": one})
    memo.next_step()
    (b,) = job_views([j], [], POLICY, memo=memo, defaults={"p": ContainerDefaults(cpu_milli=1000)})
    assert b.gang is a.gang  # equal defaults: the parsed job is reused
    memo.next_step()
    (c,) = job_views([j], [], POLICY, memo=memo, defaults={"p": two})
    assert (a.gang and a.gang.pod.cpu_milli, c.gang and c.gang.pod.cpu_milli) == (1000, 2000)


def test_a_job_that_breaks_its_parse_is_that_jobs_error_not_every_jobs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a review: any exception but SpecError from one job's parse (a
    template shape parse_job did not expect) escaped the view and crashed every
    scheduling step of the cluster, forever. Whatever parse_job raises, the job gets
    it as its error (InvalidSpec) and the others are read; the traceback is logged."""
    real = view.parse_job

    def parse(obj: dict[str, Any], defaults: ContainerDefaults | None = None) -> JobSpec:
        if obj["metadata"]["name"] == "bad":
            raise AttributeError("'list' object has no attribute 'items'")
        return real(obj, defaults)

    monkeypatch.setattr(view, "parse_job", parse)
    for memo in (None, Memo()):
        with caplog.at_level(logging.ERROR, logger="controller.gang.view"):
            bad, good = job_views([job("bad"), job("good")], [], POLICY, memo=memo)
        assert bad.spec is None and bad.gang is None and bad.error is not None
        assert "could not read this job (AttributeError: 'list' object" in bad.error
        assert good.gang is not None and good.error is None
        assert "could not read job=p/bad" in caplog.text and "Traceback" in caplog.text
        todo = plan([bad, good], {}, POLICY, now=1001.0)
        assert [g.id for g in todo.queue] == [job_id("good")]
        assert [(a.kind, a.job.id) for a in todo.actions] == [("invalid", job_id("bad"))]


def test_a_malformed_template_does_not_stop_another_jobs_admission() -> None:
    """The review's reproduction end to end: a tenant's `nodeSelector: [..]` made
    every step crash; now that job waits as InvalidSpec and the other is admitted."""
    c, writes = _controller()
    c.nodes.assume(node("a"))
    bad = job("bad", 2)
    bad["spec"]["template"]["spec"]["nodeSelector"] = ["zone=a"]
    c.jobs.assume(job("good", 2))
    c.jobs.assume(bad)
    c.step()
    kinds = {(w.kind, w.job.id) for w in writes}
    assert ("admit", job_id("good")) in kinds and ("invalid", job_id("bad")) in kinds
    (invalid,) = [w for w in writes if w.kind == "invalid"]
    assert "nodeSelector must be an object, found a list" in invalid.message
