"""`gangops explain` names the GPUs out of service on the nodes the scheduler sees."""

from __future__ import annotations

from controller.gang.cli import explain_job
from controller.kube.clock import FakeClock
from controller.scheduler.policy import policy_configmap
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

from .builders import job, node


def test_explain_names_a_bad_gpu_the_device_plugin_already_left_out_of_allocatable() -> None:
    """No allocatable GPU is held back for it (the plugin took it out), yet it is out of
    service, and an operator reading `explain` is told so."""
    kube = FakeKube()
    kube.create(policy_configmap(policy_doc(projects={"p": {}})), field_manager="test")
    n = node("n", 7)
    n["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    n["metadata"]["annotations"] = {"gangops.ai/unhealthy-gpus": "3"}
    kube.create(n, field_manager="test")
    kube.create(job("j", 16), field_manager="test")
    text = explain_job(kube, "p/j", clock=FakeClock())
    assert (
        "GPUs out of service (never offered until the node agent says they are healthy): n: GPU 3."
        in text
    )
