"""The workload one-pod gangs are placed for (`workload.Workload`): read from the most
recent jobs, kept while it stays the same, and used by the controller's step."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from controller.gang.controller import GangController, GangSettings
from controller.gang.metrics import GangMetrics
from controller.gang.view import job_views
from controller.gang.workload import Workload
from controller.kube.clock import FakeClock
from controller.scheduler.policy import policy_configmap
from controller.scheduler.types import Admit
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import POLICY, job, node

Obj = dict[str, Any]


def _job(name: str, gpus: int, workers: int = 1, *, minute: int = 0, **status: Any) -> Obj:
    """A job of `workers` pods of `gpus` GPUs each, created `minute` minutes past 10:00."""
    obj = job(name, workers * max(gpus, 1), **status)  # gangSize counts GPUs
    obj["metadata"]["creationTimestamp"] = f"2026-12-06T10:{minute:02d}:00Z"
    (c,) = obj["spec"]["template"]["spec"]["containers"]
    c["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return obj


def _shapes(w: Workload, jobs: list[Obj]) -> dict[int, float]:
    model = w.model(job_views(jobs, [], POLICY))
    assert model is not None
    return {t.gpus: round(t.weight, 3) for t in model.typical}


def test_the_typical_requests_are_the_most_recent_pods_each_worker_counted() -> None:
    old = _job("old", 8, 2, minute=1)
    new = _job("new", 1, 3, minute=2)
    assert _shapes(Workload(3), [old, new]) == {1: 1.0}, "the old job is outside 3 pods"
    assert _shapes(Workload(5), [new, old]) == {1: 0.6, 8: 0.4}, "a gang counts its workers"
    w = Workload(4)
    assert _shapes(w, [old, new]) == {1: 0.75, 8: 0.25}, "one pod of the old job"
    assert w.pods == 4
    model = w.model(job_views([old, new], [], POLICY))
    assert model is not None and model.blocks == pytest.approx(8 / 11), "whole nodes' GPU share"


def test_no_model_without_gpu_jobs_or_with_no_window() -> None:
    assert Workload().model([]) is None
    cpu = _job("cpu", 0)
    assert Workload().model(job_views([cpu], [], POLICY)) is None, "no GPU request: best-fit"
    assert Workload(0).model(job_views([_job("a", 1)], [], POLICY)) is None
    with pytest.raises(ValueError, match="0 or more"):
        Workload(-1)


def test_the_model_is_read_again_as_a_tenth_more_pods_arrive_and_kept_if_alike() -> None:
    """A new model starts its memo of scored node states afresh: jobs that arrive
    are read once they ask for a tenth of the pods the model was read from, and a
    mix that moved by less than a percent keeps the model it had."""
    w = Workload()
    jobs = [_job(f"j{i}", 1 + i % 3 // 2, minute=i % 60) for i in range(300)]  # 1-GPU: 2/3
    first = w.model(job_views(jobs, [], POLICY))
    assert first is not None and w.pods == 300
    jobs += [_job(f"k{i}", 1 + i % 3 // 2) for i in range(29)]
    assert w.model(job_views(jobs, [], POLICY)) is first and w.pods == 300, "29 new pods of 300"
    jobs.append(_job("k29", 1))
    assert w.model(job_views(jobs, [], POLICY)) is first and w.pods == 330, "read, mix alike"
    jobs += [_job(f"m{i}", 2) for i in range(33)]
    again = w.model(job_views(jobs, [], POLICY))
    assert again is not first and again is not None and w.pods == 363
    assert {t.gpus: round(t.weight, 3) for t in again.typical} == {1: 0.609, 2: 0.391}


def _placed(settings: GangSettings, metrics: GangMetrics | None = None) -> str:
    """Where a step puts a one-GPU job beside nodes a (3 GPUs) and b (2), after jobs
    of one pod of 2 GPUs each."""
    c = GangController(FakeKube(), clock=FakeClock(), settings=settings, metrics=metrics)
    c._submit = lambda w, assume=None: True  # type: ignore[method-assign]  # decide only
    c.config.assume(
        policy_configmap(policy_doc(projects={"p": {}}), c.settings.system_namespace,
                         resourceVersion="1")
    )  # fmt: skip
    c.nodes.assume(node("a", 3))
    c.nodes.assume(node("b", 2))
    for i in range(5):
        c.jobs.assume(_job(f"done{i}", 2, minute=i, phase="Succeeded"))
    c.jobs.assume(_job("one", 1, minute=9))
    result = c.step()
    assert result is not None
    (admit,) = [d for d in result.decisions if isinstance(d, Admit)]
    (where,) = admit.placement.pods
    return where.node


def test_the_controller_places_a_one_pod_job_for_the_typical_requests() -> None:
    """Best-fit takes b, the tightest node, and leaves it one GPU no typical
    (2-GPU) request can use; for the workload, a leaves two GPUs together."""
    assert _placed(GangSettings(fragmentation_window=0)) == "b"
    assert _placed(GangSettings()) == "a"


def test_the_typical_requests_are_a_metric() -> None:
    """What the placement takes the workload to be is on /metrics: the five 2-GPU jobs
    and the 1-GPU one, and the pods they were read from; nothing while best-fit."""
    metrics = GangMetrics()
    _placed(GangSettings(), metrics)
    text = generate_latest(metrics.registry).decode()
    assert 'gangops_placement_typical_requests{gpu_milli="1000",gpus="2"} 0.8333' in text
    assert 'gangops_placement_typical_requests{gpu_milli="1000",gpus="1"} 0.1666' in text
    assert "gangops_placement_window_pods 6.0" in text
    metrics = GangMetrics()
    _placed(GangSettings(fragmentation_window=0), metrics)
    text = generate_latest(metrics.registry).decode()
    assert "gangops_placement_typical_requests{" not in text
    assert "gangops_placement_window_pods 0.0" in text
