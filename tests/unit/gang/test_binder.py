"""The binder carries out a decided write; here, a launch whose pod creations the
ResourceQuota refuses for a while (an evicted gang's usage is released a little
after its pods go): retried, then created and bound; refused for longer, or
refused otherwise, the refusal is raised with the API server's words."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from controller.gang.binder import Binder, LaunchRefused
from controller.gang.lifecycle import Write
from controller.gang.metrics import GangMetrics
from controller.gang.view import job_views
from controller.kube.client import RESOURCES, ApiError
from controller.kube.clock import FakeClock
from controller.kube.events import EventRecorder
from controller.kube.informer import Informer
from tests.unit.kube.fakes import FakeKube

from .builders import POLICY, admission, job

QUOTA = ApiError(403, "Forbidden", 'pods "j-1-0" is forbidden: exceeded quota: gangops-quota')


def _placed(kube: FakeKube) -> dict[str, str]:
    """Each pod created, and the node it is bound to."""
    return {
        name: o["spec"].get("nodeName") or kube.bound[f"{ns}/{name}"]
        for (kind, ns, name), o in kube.objects.items()
        if kind == "Pod"
    }


def _launch(kube: FakeKube, clock: FakeClock, *, retry_s: float) -> None:
    (v,) = job_views([job("j", adm=admission("a", "b"))], [], POLICY)
    with ThreadPoolExecutor(4) as pool:
        binder = Binder(
            kube,
            jobs=Informer(kube, RESOURCES["TrainingJob"], clock=clock),
            pods=Informer(kube, RESOURCES["Pod"], clock=clock),
            pod_pool=pool,
            clock=clock,
            metrics=GangMetrics(),
            events=EventRecorder(kube, component="test", clock=clock),
            stop=threading.Event(),
            quota_retry_s=retry_s,
        )
        binder.execute(Write("launch", v, launch=True))


@pytest.mark.parametrize(
    "refusal",
    [
        QUOTA,
        # found by a review, the likeliest cause of a demo's LaunchRefused during a shrink:
        # the quota check gave up writing the quota's usage while other writers changed it
        ApiError(409, "Conflict", 'Operation cannot be fulfilled on resourcequotas '
                 '"gangops-quota": the object has been modified; please apply your changes '
                 "to the latest version and try again"),
        ApiError(403, "Forbidden", 'pods "j-1-0" is forbidden: status unknown for quota: q'),
        ApiError(500, "InternalError", "resource quota evaluates timeout"),
        ApiError(429, "TooManyRequests", "the server has received too many requests"),
    ],
    ids=["exceeded-quota", "quota-conflict", "quota-unknown", "quota-timeout", "throttled"],
)  # fmt: skip
def test_a_pod_refused_for_a_passing_reason_is_retried_then_created_and_bound(
    refusal: ApiError,
) -> None:
    kube, clock = FakeKube(), FakeClock()
    kube.refusals["j-1-0"] = [refusal, refusal]
    _launch(kube, clock, retry_s=10)
    assert kube.refusals["j-1-0"] == []  # both refusals were met, then it was created
    assert _placed(kube) == {"j-1-0": "a", "j-1-1": "b"}


def test_a_pod_refused_past_the_retry_window_raises_the_refusal_in_the_api_servers_words() -> None:
    kube, clock = FakeKube(), FakeClock()
    kube.refusals["j-1-0"] = [QUOTA] * 100
    with pytest.raises(LaunchRefused) as e:
        _launch(kube, clock, retry_s=2)
    assert (e.value.obj, e.value.status, e.value.message) == ("pod p/j-1-0", 403, QUOTA.message)
    assert _placed(kube) == {"j-1-1": "b"}  # the next step's cleanup deletes it


def test_a_busy_api_server_is_retried_after_the_wait_it_asks_for() -> None:
    """API Priority and Fairness' 429 says how long to wait (Retry-After): the binder
    waits that, not its own 0.5 s, and a wait that outlasts the window is not
    waited for: the refusal is raised at once, for a later step to retry."""
    kube, clock = FakeKube(), FakeClock()
    busy = ApiError(429, "TooManyRequests", "too many requests", retry_after=3.0)
    kube.refusals["j-1-0"] = [busy, busy]
    start = clock.monotonic()
    _launch(kube, clock, retry_s=10)
    assert kube.refusals["j-1-0"] == []
    assert clock.monotonic() - start == 6.0  # two asked-for waits, not 2 x 0.5 s
    assert _placed(kube) == {"j-1-0": "a", "j-1-1": "b"}

    kube, clock = FakeKube(), FakeClock()
    longer = ApiError(429, "TooManyRequests", "too many requests", retry_after=60.0)
    kube.refusals["j-1-0"] = [longer, longer]
    start = clock.monotonic()
    with pytest.raises(LaunchRefused, match="too many requests"):
        _launch(kube, clock, retry_s=10)
    assert len(kube.refusals["j-1-0"]) == 1 and clock.monotonic() == start


def test_any_other_refusal_is_not_retried() -> None:
    kube, clock = FakeKube(), FakeClock()
    cpu = ApiError(403, "Forbidden", "failed quota: q: must specify requests.cpu")
    kube.refusals["j-1-0"] = [cpu, cpu]
    with pytest.raises(LaunchRefused, match=r"must specify requests\.cpu"):
        _launch(kube, clock, retry_s=10)
    assert len(kube.refusals["j-1-0"]) == 1


def test_a_service_left_by_an_earlier_job_of_the_same_name_is_taken_over() -> None:
    """The job was deleted and created again under its name before the garbage
    collector took its Service (found by a review: the new job adopted it, and lost
    its workers' DNS names when the collector came)."""
    kube, clock = FakeKube(), FakeClock()
    kube.objects[("Service", "p", "j")] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "j", "namespace": "p", "resourceVersion": "7",
                     "ownerReferences": [{"apiVersion": "ai.operator/v1", "kind": "TrainingJob",
                                          "name": "j", "uid": "old"}]},
        "spec": {"clusterIP": "None"},
    }  # fmt: skip
    _launch(kube, clock, retry_s=10)
    owners = kube.objects[("Service", "p", "j")]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] != ["old"] and len(owners) == 1
    assert _placed(kube) == {"j-1-0": "a", "j-1-1": "b"}


def _service(*owners: dict[str, str]) -> dict[str, object]:
    meta: dict[str, object] = {"name": "j", "namespace": "p", "resourceVersion": "7"}
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "selector": {"app": "db"},
                     "ports": [{"name": "pg", "port": 5432}]}}  # fmt: skip


def _job_owner(name: str, uid: str = "old") -> dict[str, str]:
    return {"apiVersion": "ai.operator/v1", "kind": "TrainingJob", "name": name, "uid": uid}


@pytest.mark.parametrize(
    ("service", "owned_by"),
    [
        (_service(), "it has no owner"),
        (_service({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s"}),
         "owned by StatefulSet db"),
        (_service(_job_owner("other")), "owned by TrainingJob other"),
        (_service(_job_owner("j"), {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                    "name": "db", "uid": "s"}),
         "owned by TrainingJob j, StatefulSet db"),
        (_service({"apiVersion": "example.com/v1", "kind": "TrainingJob", "name": "j",
                   "uid": "x"}), "owned by TrainingJob j"),
    ],
    ids=["no-owner", "statefulset", "another-job", "shared-owner", "another-group"],
)  # fmt: skip
def test_a_service_of_the_jobs_name_that_is_someone_elses_is_left_alone_and_the_launch_refused(
    service: dict[str, object], owned_by: str
) -> None:
    """Found by a review: the binder replaced any Service named like the job (an
    admin's headless Service for a database, say: its selector, ports and owner
    became the job's, and deleting the job deleted it), doing for a tenant what
    tenants may not (no Service rights, docs/security.md). Only one left by an
    earlier TrainingJob of the same name is replaced."""
    kube, clock = FakeKube(), FakeClock()
    kube.objects[("Service", "p", "j")] = copy.deepcopy(service)
    with pytest.raises(LaunchRefused) as e:
        _launch(kube, clock, retry_s=10)
    assert (e.value.obj, e.value.status) == ("service p/j", 409)
    assert f"Service p/j is not this job's ({owned_by}), so gangops leaves it" in e.value.message
    assert kube.objects[("Service", "p", "j")] == service


def test_a_template_no_pod_can_be_built_from_is_a_refused_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A template the parser let through that `worker_pods` cannot build from was a
    write that crashed, at each admission, until its gang timed out (found by a
    review): it is refused as the API server would refuse the pod, with why."""
    import controller.gang.binder as binder

    def unbuildable(*args: object, **kw: object) -> list[object]:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(binder, "worker_pods", unbuildable)
    kube, clock = FakeKube(), FakeClock()
    with pytest.raises(LaunchRefused, match="no worker pod can be built from it") as e:
        _launch(kube, clock, retry_s=2)
    assert e.value.obj == "template of p/j" and e.value.status == 422
    assert _placed(kube) == {}
