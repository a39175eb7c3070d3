"""Acceptance of issue 3: the local control plane behaves like a real cluster.

Each test shows one behaviour gangops depends on and that no fake reproduces,
asserting the API server's own status codes and messages: ResourceQuota
admission and the quota controller, PriorityClass immutability, CRD schema
and CEL validation, binding through pods/binding to a fake GPU node, RBAC for
ordinary users, and 410 Gone after etcd compaction.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.devcluster import DevCluster

from .kube import FAKE_EXIT, GPU, pod, status_of, wait_for


def test_gpu_quota_rejects_over_quota_pod_with_real_403(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "gpu"}, "spec": {"hard": {f"requests.{GPU}": "4"}}}
    )

    def quota() -> Any:
        return core.read_namespaced_resource_quota("gpu", namespace).status

    # Admission enforces a quota only once the resourcequota controller has written status.hard.
    wait_for("status.hard from the resourcequota controller", lambda: quota().hard)

    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(namespace, pod("five", gpus=5))
    assert rejected.value.status == 403
    status = status_of(rejected.value)
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "five" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=5,'
        " used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4"
    )

    core.create_namespaced_pod(namespace, pod("four", gpus=4))
    wait_for("status.used to count the pod", lambda: quota().used == {f"requests.{GPU}": "4"})

    # Only the controller gives usage back (admission only adds): delete the pod.
    core.delete_namespaced_pod("four", namespace)
    wait_for(
        "the resourcequota controller to release the pod's GPUs",
        lambda: quota().used == {f"requests.{GPU}": "0"},
    )


def test_priority_class_value_is_immutable(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    name = "it-immutable-tier"
    scheduling.create_priority_class(
        {
            "metadata": {"name": name},
            "value": 1000,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "integration test",
        }
    )
    try:
        with pytest.raises(ApiException) as rejected:
            scheduling.patch_priority_class(name, {"value": 2000})
        assert rejected.value.status == 422
        status = status_of(rejected.value)
        assert status["reason"] == "Invalid"
        assert status["message"] == (
            f'PriorityClass.scheduling.k8s.io "{name}" is invalid:'
            " value: Forbidden: may not be changed in an update."
        )
        assert scheduling.read_priority_class(name).value == 1000
    finally:
        scheduling.delete_priority_class(name)


_GANG_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gangs.it.gangops.ai"},
    "spec": {
        "group": "it.gangops.ai",
        "scope": "Namespaced",
        "names": {"plural": "gangs", "singular": "gang", "kind": "Gang", "listKind": "GangList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["gangSize", "minGPU", "maxGPU"],
                                "properties": {
                                    "gangSize": {"type": "integer", "minimum": 1},
                                    "minGPU": {"type": "integer", "minimum": 1},
                                    "maxGPU": {"type": "integer", "minimum": 1},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.minGPU <= self.gangSize"
                                        " && self.gangSize <= self.maxGPU",
                                        "message": "minGPU <= gangSize <= maxGPU must hold",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _gang(name: str, gang_size: Any, min_gpu: int, max_gpu: int) -> dict[str, Any]:
    return {
        "apiVersion": "it.gangops.ai/v1",
        "kind": "Gang",
        "metadata": {"name": name},
        "spec": {"gangSize": gang_size, "minGPU": min_gpu, "maxGPU": max_gpu},
    }


def test_crd_schema_and_cel_rule_reject_invalid_objects(
    api: client.ApiClient, namespace: str
) -> None:
    extensions = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    extensions.create_custom_resource_definition(_GANG_CRD)
    try:

        def established() -> bool:
            crd = extensions.read_custom_resource_definition("gangs.it.gangops.ai")
            return any(
                c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
            )

        wait_for("the CRD to be Established", established)

        def create(body: dict[str, Any]) -> Any:
            return custom.create_namespaced_custom_object(
                "it.gangops.ai", "v1", namespace, "gangs", body
            )

        def served() -> bool:  # the new resource's handler appears shortly after Established
            try:
                create(_gang("ok", 8, 4, 16))
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            return True

        wait_for("the custom resource to be served", served)

        with pytest.raises(ApiException) as cel:
            create(_gang("too-small", 2, 4, 16))
        assert cel.value.status == 422
        status = status_of(cel.value)
        assert status["reason"] == "Invalid"
        assert status["message"] == (
            'Gang.it.gangops.ai "too-small" is invalid:'
            " spec: Invalid value: minGPU <= gangSize <= maxGPU must hold"
        )
        assert status["details"]["causes"] == [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: minGPU <= gangSize <= maxGPU must hold",
                "field": "spec",
            }
        ]

        with pytest.raises(ApiException) as schema:
            create(_gang("not-a-number", "eight", 4, 16))
        assert schema.value.status == 422
        causes = status_of(schema.value)["details"]["causes"]
        assert causes[0] == {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.gangSize in body must be of type integer:'
            ' "string"',
            "field": "spec.gangSize",
        }
    finally:
        extensions.delete_custom_resource_definition("gangs.it.gangops.ai")


def test_pod_bound_through_pods_binding_is_run_by_fake_kubelet(
    api: client.ApiClient, namespace: str, claim_node: Callable[..., str]
) -> None:
    core = client.CoreV1Api(api)
    node = claim_node(gpus=8)
    core.create_namespaced_pod(namespace, pod("worker-0", gpus=8, scheduler="gangops"))
    created = core.read_namespaced_pod("worker-0", namespace)
    assert created.spec.node_name is None  # no scheduler called "gangops" runs here
    assert created.status.phase == "Pending"

    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "worker-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    # The API answers a binding with a Status, which the client cannot decode as a Binding.
    resp = core.create_namespaced_pod_binding(
        "worker-0", namespace, binding, _preload_content=False
    )
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"

    def running() -> Any:
        p = core.read_namespaced_pod("worker-0", namespace)
        return p if p.status.phase == "Running" else None

    p = wait_for("the fake kubelet to run the pod", running)
    assert p.spec.node_name == node
    assert p.status.pod_ip and p.status.host_ip and p.status.start_time
    conditions = {c.type: c.status for c in p.status.conditions}
    assert conditions["Ready"] == "True" and conditions["PodScheduled"] == "True"
    assert p.status.container_statuses[0].state.running is not None

    # A pod is bound once: a second binding is a conflict.
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_binding("worker-0", namespace, binding, _preload_content=False)
    assert again.value.status == 409
    assert status_of(again.value)["message"] == (
        f'Operation cannot be fulfilled on pods/binding "worker-0":'
        f' pod worker-0 is already assigned to node "{node}"'
    )

    core.patch_namespaced_pod(
        "worker-0", namespace, {"metadata": {"annotations": {FAKE_EXIT: "Succeeded"}}}
    )
    wait_for(
        "the pod to succeed",
        lambda: core.read_namespaced_pod("worker-0", namespace).status.phase == "Succeeded",
    )


def test_rbac_denies_ordinary_user_until_a_role_binding_allows(
    api: client.ApiClient, user_api: Callable[[str], client.ApiClient], namespace: str
) -> None:
    alice = client.CoreV1Api(user_api("alice"))
    bob = client.CoreV1Api(user_api("bob"))

    with pytest.raises(ApiException) as denied:
        alice.list_namespaced_pod(namespace)
    assert denied.value.status == 403
    assert status_of(denied.value)["message"] == (
        f'pods is forbidden: User "alice" cannot list resource "pods" in API group ""'
        f' in the namespace "{namespace}"'
    )

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "alice-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
            ],
        },
    )

    def alice_can_list() -> bool:
        try:
            alice.list_namespaced_pod(namespace)
        except ApiException as e:
            if e.status == 403:  # the authorizer's informer has not seen the binding yet
                return False
            raise
        return True

    wait_for("the RoleBinding to take effect", alice_can_list, timeout=10)

    with pytest.raises(ApiException) as still_denied:
        alice.create_namespaced_pod(namespace, pod("nope"))
    assert still_denied.value.status == 403
    assert status_of(still_denied.value)["message"] == (
        f'pods is forbidden: User "alice" cannot create resource "pods" in API group ""'
        f' in the namespace "{namespace}"'
    )
    with pytest.raises(ApiException) as bob_denied:
        bob.list_namespaced_pod(namespace)
    assert bob_denied.value.status == 403


def _watch_first_event(core: client.CoreV1Api, namespace: str, rv: str) -> dict[str, Any]:
    resp = core.list_namespaced_pod_template(
        namespace, watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
    )
    try:
        event: dict[str, Any] = json.loads(resp.readline())
    finally:
        # Close before releasing: the rest of the stream is unread, so the connection
        # must not go back to the pool as if it were clean.
        resp.close()
        resp.release_conn()
    return event


def test_watch_from_compacted_resource_version_gets_410_gone(
    api: client.ApiClient, dev_cluster: DevCluster, namespace: str
) -> None:
    # PodTemplates are the resource whose watches the launcher serves straight from etcd
    # (not from the API server's watch cache), so etcd's compaction is what a watch sees.
    core = client.CoreV1Api(api)
    template = {
        "metadata": {"name": "t"},
        "template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}},
    }
    old_rv = core.create_namespaced_pod_template(namespace, template).metadata.resource_version
    latest_rv = old_rv
    for i in range(3):
        patch = {"metadata": {"labels": {"step": str(i)}}}
        latest_rv = core.patch_namespaced_pod_template(
            "t", namespace, patch
        ).metadata.resource_version

    before = _watch_first_event(core, namespace, old_rv)
    assert before["type"] == "MODIFIED"
    assert before["object"]["metadata"]["labels"] == {"step": "0"}

    request = urllib.request.Request(
        f"{dev_cluster.etcd_url}/v3/kv/compaction",
        data=json.dumps({"revision": latest_rv, "physical": True}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200

    gone = _watch_first_event(core, namespace, old_rv)
    assert gone["type"] == "ERROR"
    assert gone["object"]["kind"] == "Status"
    assert gone["object"]["code"] == 410
    assert gone["object"]["reason"] == "Expired"
    assert gone["object"]["message"] == "The resourceVersion for the provided watch is too old."

    # From the latest version the same watch is fine: it is the compaction that expired it.
    core.patch_namespaced_pod_template("t", namespace, {"metadata": {"labels": {"step": "x"}}})
    after = _watch_first_event(core, namespace, latest_rv)
    assert after["type"] == "MODIFIED"
    assert after["object"]["metadata"]["labels"] == {"step": "x"}
