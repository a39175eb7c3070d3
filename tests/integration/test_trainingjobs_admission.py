"""TrainingJobs against what the API server will enforce, on the local control plane:
the namespace's ResourceQuota (the scheduler admits within it, never above it),
a launch the API server refuses anyway (reported in its words, retried with a
delay that doubles, never in a loop), and worker pods that carry nothing of
the template's metadata but labels and annotations."""

from __future__ import annotations

import time
from typing import Any

from controller.kube.client import RESOURCES

from .gang_helpers import GangEnv, policy_doc
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

Obj = dict[str, Any]


def _quota(env: GangEnv, hard: dict[str, str]) -> None:
    env.kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gangops-quota", "namespace": env.namespace},
            "spec": {"hard": hard},
        },
        field_manager="gangops-tests",
    )

    def counted() -> bool:  # the quota controller has filled in what is used
        q = env.kube.get(RESOURCES["ResourceQuota"], "gangops-quota", env.namespace)
        return bool(q and (q.get("status") or {}).get("used") is not None)

    wait_for("the ResourceQuota's usage", counted)


def _reason(env: GangEnv, name: str, reason: str, *, timeout: float = 30.0) -> Obj:
    def probe() -> Obj | None:
        s = env.status(name)
        return s if s.get("reason") == reason else None

    return wait_for(f"TrainingJob {name} {reason}", probe, timeout=timeout)


def test_a_gang_above_its_namespaces_resource_quota_is_refused_not_admitted(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    env.claim(1)
    # The project's max (the policy) allows 8; the namespace's share of it is 2.
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8, "max": 8}}))
    _quota(env, {"requests.nvidia.com/gpu": "2"})
    env.start()
    env.create(env.job("big", gang=4))
    status = _reason(env, "big", "Refused")
    assert "more than namespace" in status["message"] and "allows (2)" in status["message"]
    assert "admission" not in status
    time.sleep(1)
    assert env.pods("big") == []  # nothing was created for the API server to refuse


def test_a_gang_waits_while_its_namespace_is_full_and_starts_once_it_frees(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    (a,) = env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8, "max": 8}}))
    _quota(env, {"requests.nvidia.com/gpu": "4"})
    other = env.occupy(a, 2)  # a pod gangops does not schedule, in the same namespace
    env.start()
    env.create(env.job("next", gang=4))
    status = _reason(env, "next", "Quota")
    assert f"namespace {env.namespace} at its ResourceQuota: 2 of 4 GPUs" in status["message"]
    assert env.pods("next") == []
    env.kube.delete(RESOURCES["Pod"], other["metadata"]["name"], namespace=env.namespace)
    env.wait_phase("next", "Running")


def test_a_refused_launch_says_why_and_backs_off_instead_of_looping(gang_env: GangEnv) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    # The quota tracks CPU and memory; the job (as the README's example) sets only
    # its GPUs, so the API server refuses its pods: "must specify requests.cpu".
    _quota(env, {"requests.nvidia.com/gpu": "8", "requests.cpu": "8", "requests.memory": "8Gi"})
    env.start()  # backoff_base_s=1: 1, 2, 4, 8 s
    env.create(env.job("bare", gang=2))
    status = _reason(env, "bare", "LaunchRefused")
    assert "must specify requests.cpu" in status["message"], status["message"]
    assert "admission" not in status  # the GPUs were given back
    conditions = {c["type"]: c for c in status["conditions"]}
    assert "must specify requests.cpu" in conditions["Reconciling"]["message"]
    time.sleep(12)
    status = env.status("bare")
    # 12 s at 1, 2, 4, 8 s apart: at most 5 tries (it was one per step, ~15 a second)
    assert 2 <= status["refusals"] <= 5, status
    events, _ = env.kube.list(RESOURCES["Event"], namespace=env.namespace)
    refused = [
        e
        for e in events
        if e["involvedObject"]["name"] == "bare" and e["reason"] == "LaunchRefused"
    ]
    assert refused and all("must specify requests.cpu" in e["message"] for e in refused)
    assert len(refused) == status["refusals"]


def test_worker_pods_take_no_finalizers_from_the_template(gang_env: GangEnv) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.start()
    job = env.job("fin", gang=1)
    job["spec"]["template"]["metadata"]["finalizers"] = ["example.com/never"]
    env.create(job)
    env.wait_phase("fin", "Running")
    (pod,) = env.pods("fin")
    assert not pod["metadata"].get("finalizers")
    env.kube.delete(RESOURCES["TrainingJob"], "fin", namespace=env.namespace)
    wait_for("the worker to go with its job", lambda: env.pods("fin") == [])


def test_a_gang_is_admitted_within_the_quota_its_limit_range_defaults_use_up(
    gang_env: GangEnv,
) -> None:
    """The job's template sets only GPUs; the namespace's LimitRange gives every pod
    1 CPU and its ResourceQuota allows 3: a gang of 4 workers would be refused at
    its fourth pod, so it is refused whole, before any pod; a gang of 3 runs with
    the defaults the API server filled in."""
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.kube.create(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "gangops-defaults", "namespace": env.namespace},
            "spec": {
                "limits": [{"type": "Container", "defaultRequest": {"cpu": "1", "memory": "1Gi"}}]
            },
        },
        field_manager="gangops-tests",
    )
    _quota(env, {"requests.nvidia.com/gpu": "8", "requests.cpu": "3", "requests.memory": "8Gi"})
    env.start()
    env.create(env.job("four", gang=4))
    status = _reason(env, "four", "Refused")
    assert "more than namespace" in status["message"] and "CPU" in status["message"], status
    env.create(env.job("three", gang=3))
    env.wait_phase("three", "Running")
    pods = env.pods("three")
    assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in pods} == {"1"}
    assert env.pods("four") == []
