"""Elastic TrainingJobs on the local control plane: a job grows onto idle GPUs
up to its maxGPU, then gives back what it grew by to a job that needs them,
each resize a new attempt whose pods start only once the old ones are gone."""

from __future__ import annotations

from typing import Any

from controller.kube.client import RESOURCES

from .gang_helpers import BATCH, HIGH, GangEnv, policy_doc
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]


def _elastic(manifest: dict[str, Any], min_gpu: int, max_gpu: int) -> dict[str, Any]:
    manifest["spec"]["resourceProfile"] = {"minGPU": min_gpu, "maxGPU": max_gpu}
    return manifest


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _world_sizes(pods: list[dict[str, Any]]) -> set[str]:
    return {
        e["value"]
        for p in pods
        for e in p["spec"]["containers"][0]["env"]
        if e["name"] == "WORLD_SIZE"
    }


def test_elastic_job_grows_onto_idle_gpus_then_gives_back_what_it_grew_by(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    (a,) = env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    controller = env.start(grow_interval_s=0.0)
    env.create(_elastic(env.job("elastic", gang=4, tier=BATCH), 2, 8))

    def running_on(name: str, gpus: int) -> dict[str, Any] | None:
        s = env.status(name)
        return s if s.get("phase") == "Running" and s.get("allocation") == {a: gpus} else None

    status = wait_for("the elastic job to grow to 8 GPUs and run", lambda: running_on("elastic", 8))
    assert status["attempts"] == 2  # admitted at 4 (attempt 1), grown to 8 (attempt 2)
    assert status["gpus"] == 8  # what it holds now (kubectl get tj's GPUs column)
    pods = _live(env.pods("elastic"))
    assert len(pods) == 8
    assert {p["metadata"]["labels"]["ai.operator/attempt"] for p in pods} == {"2"}
    assert _world_sizes(pods) == {"8"}
    assert all(p["status"]["phase"] == "Running" for p in pods)

    env.create(env.job("urgent", gang=4, tier=HIGH))
    urgent = env.wait_phase("urgent", "Running")
    assert urgent["allocation"] == {a: 4}
    status = wait_for("the elastic job to run again at 4 GPUs", lambda: running_on("elastic", 4))
    # Shrunk, not preempted: it kept its submitted size and ran on.
    assert status["attempts"] == 3
    assert status["gpus"] == 4
    assert "preemptedBy" not in status
    pods = _live(env.pods("elastic"))
    assert {p["metadata"]["labels"]["ai.operator/attempt"] for p in pods} == {"3"}
    assert len(pods) == 4 and _world_sizes(pods) == {"4"}
    # No pod was ever started on a GPU still held by another (the fake kubelet
    # fails such a pod), and the node holds exactly its 8 GPUs' worth.
    every, _ = env.kube.list(RESOURCES["Pod"], namespace=env.namespace)
    assert [p["metadata"]["name"] for p in every if p["status"].get("phase") == "Failed"] == []
    assert controller.metrics.decisions.labels("resize")._value.get() == 2
