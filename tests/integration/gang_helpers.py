"""What the gang scheduler's integration tests share: a test's corner of the cluster
(`GangEnv`), TrainingJob manifests and a compiled policy for them."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.gang.controller import GangController, GangSettings
from controller.kube.client import RESOURCES, Kube
from controller.policy.validate import check_scheduling_policy
from controller.scheduler.policy import policy_configmap

from .kube import GPU, wait_for

Obj = dict[str, Any]
HIGH, BATCH = "it-gang-high", "it-gang-batch"
"""PriorityClasses (and tiers) the tests' jobs use: a high tier that preempts, a
preemptible batch tier."""
TEST_LABEL = "gangops.ai/it-gang"
LEVELS = ["nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone"]


def policy_doc(
    projects: Mapping[str, Mapping[str, Any]],
    *,
    timeout_s: float = 300,
    backoff_limit: int = 3,
    min_runtime_s: float = 0,
) -> dict[str, Any]:
    """A compiled scheduling policy: `projects` maps a project name to
    `{"namespace": ..., "guaranteed": GPUs, "max": GPUs or None}`. Built by hand,
    so held to the compiled policy's schema."""
    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": {},
            "reserve": {"gpu": 0, "tiers": []},
            "gang": {"timeoutSeconds": timeout_s, "backoffLimit": backoff_limit},
            "preemption": {
                "enabled": True,
                "minRuntimeSeconds": min_runtime_s,
                "maxPerHour": 100,
            },
            "fairShare": {"enabled": True, "borrowing": True},
            "topology": {"levels": LEVELS},
        },
        "tiers": [
            {
                "name": HIGH,
                "value": 100_000,
                "preemptible": False,
                "preemptionPolicy": "PreemptLowerPriority",
                "globalDefault": False,
            },
            {
                "name": BATCH,
                "value": 1_000,
                "preemptible": True,
                "preemptionPolicy": "PreemptLowerPriority",
                "globalDefault": False,
            },
        ],
        "projects": [
            {
                "name": name,
                "namespaces": [p["namespace"]],
                "quota": {
                    "guaranteed": {"gpu": p.get("guaranteed", 0)},
                    "max": {"gpu": p["max"]} if p.get("max") is not None else {},
                },
                "users": {"default": {"guaranteed": {}, "max": {}}, "members": []},
                "jobs": {"maxGPU": None, "tiers": [HIGH, BATCH], "defaultTier": BATCH},
            }
            for name, p in projects.items()
        ],
    }
    check_scheduling_policy(doc)
    return doc


@dataclass
class GangEnv:
    """One test's corner of the cluster."""

    kube: Kube
    namespace: str
    system_namespace: str
    selector_value: str
    new_namespace: Callable[[], str]
    pool: list[str]
    nodes: list[str] = field(default_factory=list)
    controllers: list[GangController] = field(default_factory=list)

    @property
    def job_selector(self) -> str:
        return f"{TEST_LABEL}={self.selector_value}"

    @property
    def node_selector(self) -> str:
        return f"kubernetes.io/hostname in ({','.join(self.nodes)})"

    def claim(self, count: int) -> list[str]:
        """`count` empty 8-GPU nodes for this test (the scheduler places only there)."""
        assert count <= len(self.pool), f"the session's gang node pool has {len(self.pool)}"
        self.nodes = self.pool[:count]
        return list(self.nodes)

    def set_policy(self, doc: Mapping[str, Any]) -> None:
        self.kube.apply(
            policy_configmap(doc, self.system_namespace),
            field_manager="gangops-tests",
        )

    def settings(self, **kw: Any) -> GangSettings:
        return GangSettings(
            system_namespace=self.system_namespace,
            job_selector=self.job_selector,
            node_selector=self.node_selector,
            backoff_base_s=kw.pop("backoff_base_s", 1.0),
            **kw,
        )

    def start(self, *, telemetry: Any = None, **kw: Any) -> GangController:
        """A scheduler of this test's own, in this process (stopped after the test)."""
        c = GangController(self.kube, settings=self.settings(**kw), telemetry=telemetry)
        c.start()
        self.controllers.append(c)
        wait_for("the scheduler's informers", c.ready)
        return c

    def job(
        self,
        name: str,
        *,
        gang: int,
        per_worker: int = 1,
        tier: str = BATCH,
        user: str = "admin",
        namespace: str | None = None,
        annotations: Mapping[str, str] | None = None,
        backoff_limit: int | None = None,
    ) -> Obj:
        """A TrainingJob manifest this test's scheduler selects."""
        spec: Obj = {
            "gangSize": gang,
            "priority": tier,
            "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "pause:3.10",
                            "resources": {"limits": {GPU: per_worker}},
                        }
                    ],
                },
            },
        }
        if backoff_limit is not None:
            spec["backoffLimit"] = backoff_limit
        return {
            "apiVersion": "ai.operator/v1",
            "kind": "TrainingJob",
            "metadata": {
                "name": name,
                "namespace": namespace or self.namespace,
                "labels": {"ai.operator/user": user, TEST_LABEL: self.selector_value},
            },
            "spec": spec,
        }

    def create(self, manifest: Obj, *, as_: Kube | None = None) -> Obj:
        return (as_ or self.kube).create(manifest, field_manager="gangops-tests")

    def get(self, name: str, namespace: str | None = None) -> Obj:
        obj = self.kube.get(RESOURCES["TrainingJob"], name, namespace or self.namespace)
        assert obj is not None, f"TrainingJob {name} is gone"
        return obj

    def status(self, name: str, namespace: str | None = None) -> Obj:
        status: Obj = self.get(name, namespace).get("status") or {}
        return status

    def wait_phase(self, name: str, phase: str, *, timeout: float = 30.0) -> Obj:
        def probe() -> Obj | None:
            s = self.status(name)
            return s if s.get("phase") == phase else None

        return wait_for(f"TrainingJob {name} {phase}", probe, timeout=timeout)

    def pods(self, job: str, namespace: str | None = None) -> list[Obj]:
        items, _ = self.kube.list(
            RESOURCES["Pod"],
            namespace=namespace or self.namespace,
            label_selector=f"ai.operator/job-name={job}",
        )
        return items

    def occupy(self, node: str, gpus: int, *, namespace: str | None = None) -> Obj:
        """A pod of another scheduler holding `gpus` GPUs on `node`."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"other-{node}-{secrets.token_hex(2)}",
                "namespace": namespace or self.namespace,
            },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": "pause:3.10",
                        "resources": {"limits": {GPU: str(gpus)}},
                    }
                ],
            },
        }
        out = self.kube.create(pod, field_manager="gangops-tests")

        def running() -> bool:
            live = self.kube.get(
                RESOURCES["Pod"], out["metadata"]["name"], out["metadata"]["namespace"]
            )
            return (live or {}).get("status", {}).get("phase") == "Running"

        wait_for(f"pod {out['metadata']['name']} running", running)
        return out
