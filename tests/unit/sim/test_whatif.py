"""The quota what-if: the same workload replayed with and without the change."""

from __future__ import annotations

import datetime as dt

from controller.scheduler.types import PodShape
from controller.sim.traces import TraceJob
from controller.sim.whatif import quota_what_if
from tests.unit.scheduler.builders import node, policy_doc


def _job(name: str, project: str, submit: float, gpus: int = 8) -> TraceJob:
    return TraceJob(
        id=f"{project}/{name}",
        submit=submit,
        duration=600.0,
        workers=gpus,
        pod=PodShape(gpus=1),
        tier="normal",
        project=project,
    )


def test_raising_a_max_lets_the_projects_second_job_start_at_once() -> None:
    doc = policy_doc({"a": {"guaranteed": 8, "max": 8}, "b": {"guaranteed": 8, "max": 16}})
    jobs = [_job("one", "a", 0.0), _job("two", "a", 10.0), _job("other", "b", 20.0)]
    nodes = [node("n1"), node("n2"), node("n3")]
    text = quota_what_if(jobs, nodes, doc, project="a", delta_gpus=8)
    assert "| now | 3 of 3 |" in text and "| with the change | 3 of 3 |" in text
    assert "Would wait less: `a/two` (590 s less)" in text
    assert "Might be preempted: nobody who is not already." in text


def test_no_change_no_difference() -> None:
    doc = policy_doc({"a": {"guaranteed": 8, "max": 16}})
    jobs = [_job("one", "a", 0.0)]
    text = quota_what_if(jobs, [node("n1"), node("n2")], doc, project="a", delta_gpus=8)
    assert "Would wait less: nobody." in text
    assert quota_what_if([], [node("n1")], doc, project="a", delta_gpus=8) == (
        "No recent workload to replay."
    )


def test_the_clusters_training_jobs_become_the_recent_workload() -> None:
    from controller.sim.whatif import recent_workload

    def tj(name: str, created: str, status: dict[str, object]) -> dict[str, object]:
        return {
            "metadata": {
                "name": name,
                "namespace": "a",
                "uid": name,
                "creationTimestamp": created,
                "labels": {"ai.operator/user": "u"},
            },
            "spec": {
                "gangSize": 4,
                "template": {
                    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}
                },
            },
            "status": status,
        }

    doc = policy_doc({"a": {"guaranteed": 8, "max": 8}})
    jobs = [
        tj("queued", "2026-12-03T10:05:00Z", {"phase": "Queued"}),
        tj(
            "ran", "2026-12-03T10:00:00Z", {"phase": "Running", "startedAt": "2026-12-03T10:01:00Z"}
        ),
    ]
    now = dt.datetime(2026, 12, 3, 11, 0, tzinfo=dt.UTC).timestamp()
    trace = recent_workload(jobs, doc, now=now)
    assert [(j.id, j.workers, j.project) for j in trace] == [
        ("a/ran", 4, "a"),
        ("a/queued", 4, "a"),
    ]
    assert trace[0].duration == 3540.0 and trace[1].duration == 3600.0
