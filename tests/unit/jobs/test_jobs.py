"""TrainingJob parsing, worker pods and status: the pure half of the job controller."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.jobs.pods import SCHEDULER_NAME, headless_service, worker_pods
from controller.jobs.spec import ContainerDefaults, SpecError, parse_job, to_gang
from controller.jobs.status import job_status
from controller.scheduler.types import Placement, PodPlacement, Taint, Toleration
from tests.unit.scheduler.builders import policy

JOB: dict[str, Any] = {
    "apiVersion": "ai.operator/v1",
    "kind": "TrainingJob",
    "metadata": {
        "name": "bert",
        "namespace": "p",
        "uid": "u-1",
        "generation": 3,
        "creationTimestamp": "2026-12-02T10:00:00Z",
        "labels": {"ai.operator/user": "alice"},
    },
    "spec": {
        "gangSize": 8,
        "priority": "high",
        "tolerations": ["nvidia.com/gpu"],
        "resourceProfile": {"minGPU": 4, "maxGPU": 16},
        "template": {
            "metadata": {"labels": {"app": "bert"}},
            "spec": {
                "nodeSelector": {"topology.kubernetes.io/zone": "z1"},
                "containers": [
                    {
                        "name": "trainer",
                        "image": "trainer:1",
                        "env": [{"name": "RANK", "value": "stale"}],
                        "resources": {
                            "limits": {"nvidia.com/gpu": 4},
                            "requests": {"cpu": "8", "memory": "64Gi"},
                        },
                    }
                ],
            },
        },
    },
}


def _job(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(JOB)
    obj["spec"].update(spec)
    return obj


def test_parse_reads_gang_workers_and_constraints() -> None:
    job = parse_job(JOB)
    assert (job.gang_size, job.gpus_per_worker, job.workers) == (8, 4, 2)
    assert (job.min_gpu, job.max_gpu, job.user, job.tier) == (4, 16, "alice", "high")
    assert job.pod.cpu_milli == 8000 and job.pod.memory == 64 * 2**30
    assert job.pod.node_selector == (("topology.kubernetes.io/zone", "z1"),)
    short = job.pod.tolerations[0]
    assert short == Toleration(key="nvidia.com/gpu", operator="Exists")
    assert short.tolerates(Taint("nvidia.com/gpu", "NoSchedule", "present"))
    assert job.created == 1796205600.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gangSize": 6}, "not a multiple of the 4 GPUs"),
        ({"gangSize": 0}, "positive integer"),
        ({"resourceProfile": {"minGPU": 12}}, "minGPU <= gangSize <= maxGPU"),
        ({"resourceProfile": {"maxGPU": 4}}, "minGPU <= gangSize <= maxGPU"),
        ({"template": {"spec": {"containers": [{"name": "c"}]}}}, "asks for no GPUs"),
        ({"template": {"spec": {}}}, "at least one container"),
        ({"tolerations": [7]}, "tolerations[0]"),
    ],
)
def test_malformed_jobs_get_a_sentence(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_job(_job(**change))


def test_missing_user_label_is_refused() -> None:
    obj = copy.deepcopy(JOB)
    obj["metadata"]["labels"] = {}
    with pytest.raises(SpecError, match=r"ai\.operator/user"):
        parse_job(obj)


def test_to_gang_resolves_project_and_tier() -> None:
    gang = to_gang(parse_job(JOB), policy())
    assert (gang.project, gang.tier, gang.priority, gang.workers) == ("p", "high", 100_000, 2)
    assert gang.min_workers == 1
    no_tier = _job()
    del no_tier["spec"]["priority"]
    assert to_gang(parse_job(no_tier), policy()).tier == "normal"  # the project's default
    elsewhere = copy.deepcopy(JOB)
    elsewhere["metadata"]["namespace"] = "nobody"
    with pytest.raises(SpecError, match="belongs to no project"):
        to_gang(parse_job(elsewhere), policy())
    with pytest.raises(SpecError, match="tier 'gold' does not exist"):
        to_gang(parse_job(_job(priority="gold")), policy())


def test_worker_pods_carry_rendezvous_and_ownership() -> None:
    job = parse_job(JOB)
    placement = Placement((PodPlacement("n1", (0, 1, 2, 3)), PodPlacement("n2", (0, 1, 2, 3))))
    pods = worker_pods(job, JOB["spec"]["template"], placement, tier="high", attempt=2)
    assert [p["metadata"]["name"] for p in pods] == ["bert-2-0", "bert-2-1"]
    assert [p["metadata"]["annotations"]["gangops.ai/assigned-node"] for p in pods] == [
        "n1",
        "n2",
    ]
    # created bound: one request per worker, no separate pods/binding
    assert [p["spec"]["nodeName"] for p in pods] == ["n1", "n2"]
    env = {e["name"]: e["value"] for e in pods[1]["spec"]["containers"][0]["env"]}
    assert env == {
        "WORLD_SIZE": "2",
        "RANK": "1",
        "MASTER_ADDR": "bert-2-0.bert.p.svc",
        "MASTER_PORT": "29500",
    }
    spec = pods[0]["spec"]
    assert spec["schedulerName"] == SCHEDULER_NAME and spec["priorityClassName"] == "high"
    assert (spec["hostname"], spec["subdomain"]) == ("bert-2-0", "bert")
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pods[0]["metadata"]["labels"]["app"] == "bert"
    svc = headless_service(job)
    assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["name"] == "bert"


def test_status_is_kstatus_and_stable() -> None:
    queued = job_status(
        generation=3, phase="Queued", reason="Capacity", message="needs 8 GPUs", now="t1"
    )
    conds = {c["type"]: c["status"] for c in queued["conditions"]}
    assert conds["Reconciling"] == "True" and conds["Ready"] == "False"
    assert conds["Stalled"] == "False" and queued["observedGeneration"] == 3
    again = job_status(
        generation=3,
        phase="Queued",
        reason="Capacity",
        message="needs 8 GPUs",
        now="t2",
        previous=queued["conditions"],
    )
    assert again == queued  # unchanged status keeps its transition times
    running = job_status(
        generation=3,
        phase="Running",
        reason="Running",
        message="",
        now="t3",
        previous=queued["conditions"],
        allocation={"n2": 4, "n1": 4},
    )
    conds = {c["type"]: c for c in running["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["lastTransitionTime"] == "t3"
    assert conds["Stalled"]["lastTransitionTime"] == "t1"
    assert list(running["allocation"]) == ["n1", "n2"]
    failed = job_status(generation=3, phase="Failed", reason="BackoffLimit", message="", now="t")
    assert {c["type"]: c["status"] for c in failed["conditions"]}["Stalled"] == "True"


def test_worker_pods_take_only_labels_and_annotations_from_the_template_metadata() -> None:
    template = copy.deepcopy(JOB["spec"]["template"])
    template["metadata"] = {
        "labels": {"app": "bert"},
        "annotations": {"note": "kept"},
        "finalizers": ["example.com/never"],
        "ownerReferences": [{"uid": "someone-else"}],
        "name": "chosen",
        "namespace": "elsewhere",
        "generateName": "x-",
    }
    placement = Placement((PodPlacement("n1", (0, 1, 2, 3)),))
    (p,) = worker_pods(parse_job(JOB), template, placement, tier="high", attempt=1)
    meta = p["metadata"]
    assert set(meta) == {"name", "namespace", "labels", "annotations", "ownerReferences"}
    assert (meta["name"], meta["namespace"]) == ("bert-1-0", "p")
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert meta["labels"]["app"] == "bert" and meta["annotations"]["note"] == "kept"


def test_worker_pods_carry_their_jobs_user_whatever_the_template_says() -> None:
    # found by a review: the template's `ai.operator/user: bob` went onto alice's
    # workers, and what bills by pod labels would bill bob
    template = copy.deepcopy(JOB["spec"]["template"])
    template["metadata"] = {
        "labels": {"ai.operator/user": "bob", "ai.operator/anything": "x", "team": "nlp"},
        "annotations": {"gangops.ai/assigned-node": "elsewhere", "gangops.ai/x": "y", "a": "b"},
    }
    placement = Placement((PodPlacement("n1", (0, 1, 2, 3)),))
    job = parse_job(JOB)
    (p,) = worker_pods(job, template, placement, tier="high", attempt=1)
    labels, notes = p["metadata"]["labels"], p["metadata"]["annotations"]
    assert labels["ai.operator/user"] == job.user != "bob" and labels["team"] == "nlp"
    assert "ai.operator/anything" not in labels
    # annotations are the workload's (the fake kubelet's own among them), but ours
    assert notes == {"gangops.ai/assigned-node": "n1", "gangops.ai/x": "y", "a": "b"}


def _with_init(*init: dict[str, Any], app_gpus: int = 4) -> dict[str, Any]:
    obj = _job(gangSize=8, resourceProfile={"minGPU": 8, "maxGPU": 8})
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = app_gpus
    spec["initContainers"] = list(init)
    return obj


def _init(gpus: int, *, cpu: str = "1", sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": f"i{gpus}",
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"cpu": cpu}},
    }
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


@pytest.mark.parametrize(
    ("init", "app_gpus", "gpus", "cpu_milli"),
    [
        # an init container asking as many GPUs as the app containers (a check
        # before training): the worker's GPUs; its CPU, more than theirs, counts
        ((_init(4, cpu="20"),), 4, 4, 20000),
        # one asking less changes nothing
        ((_init(2, cpu="2"),), 4, 4, 8000),
        # a sidecar (restartPolicy Always) runs beside the app containers: added
        ((_init(4, cpu="1", sidecar=True),), 4, 8, 9000),
        # a plain init container after a sidecar runs beside it
        ((_init(2, cpu="1", sidecar=True), _init(2, cpu="1")), 2, 4, 9000),
    ],
)
def test_init_containers_count_as_kubernetes_counts_them(
    init: tuple[dict[str, Any], ...], app_gpus: int, gpus: int, cpu_milli: int
) -> None:
    obj = _with_init(*init, app_gpus=app_gpus)
    obj["spec"].update(gangSize=gpus, resourceProfile={"minGPU": gpus, "maxGPU": gpus})
    job = parse_job(obj)
    assert (job.gpus_per_worker, job.pod.cpu_milli) == (gpus, cpu_milli)


@pytest.mark.parametrize(
    ("init", "app_gpus"),
    [
        ((_init(8),), 4),
        # after a sidecar it would run beside it: 2 + 6, behind the CRD's back
        ((_init(2, sidecar=True), _init(6)), 2),
    ],
)
def test_an_init_container_may_not_ask_for_more_gpus_than_the_containers(
    init: tuple[dict[str, Any], ...], app_gpus: int
) -> None:
    """Found by a review: the CRD's rule counted the containers' GPUs only, so a
    worker Kubernetes counts as more (an init container asking more, a sidecar) was
    accepted by the API server and refused here, or the other way round. Both now
    count containers and sidecars, and refuse an init container that would add."""
    with pytest.raises(SpecError, match=r"init container i\d asks for \d GPUs, more than"):
        parse_job(_with_init(*init, app_gpus=app_gpus))


def _containers(*resources: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(JOB)
    obj["spec"]["template"]["spec"]["containers"] = [
        {"name": f"c{i}", "image": "i", "resources": r} for i, r in enumerate(resources)
    ]
    return obj


DEFAULTS = ContainerDefaults(cpu_milli=1000, memory=2**30)

# (case, the containers' resources, the namespace's LimitRange defaults, (cpu milli, memory))
POD_REQUEST_CASES = [
    ("requests as written",
     [{"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "2", "memory": "1Gi"}}],
     DEFAULTS, (2000, 2**30)),
    ("a limit without a request is the request (the API server defaults it)",
     [{"limits": {"nvidia.com/gpu": 4, "cpu": "3", "memory": "2Gi"}}], None, (3000, 2 * 2**30)),
    ("neither: the LimitRange's default, per container",
     [{"limits": {"nvidia.com/gpu": 4}}, {}], DEFAULTS, (2000, 2 * 2**30)),
    ("neither and no LimitRange: nothing", [{"limits": {"nvidia.com/gpu": 4}}], None, (0, 0)),
    ("a default only for what is missing",
     [{"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "500m"}}], DEFAULTS, (500, 2**30)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("resources", "defaults", "want"),
    [c[1:] for c in POD_REQUEST_CASES],
    ids=[c[0] for c in POD_REQUEST_CASES],
)
def test_a_workers_cpu_and_memory_are_what_the_api_server_will_make_them(
    resources: list[dict[str, Any]], defaults: ContainerDefaults | None, want: tuple[int, int]
) -> None:
    pod = parse_job(_containers(*resources), defaults).pod
    assert (pod.cpu_milli, pod.memory) == want
