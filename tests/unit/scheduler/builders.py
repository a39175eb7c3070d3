"""Fluent builders for scheduler tests: `job("a").gang(8).tier("high").build()`.

Test tables read as the scenario they describe; every default is the
smallest thing that works (one project `p` owning everything, tiers `high`,
`normal`, `batch`), and each builder method changes one thing.
"""

from __future__ import annotations

from typing import Any

from controller.policy.validate import check_scheduling_policy
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import (
    Gang,
    JobId,
    Node,
    Placement,
    PodPlacement,
    PodShape,
    Running,
    Taint,
)

TIERS = {"critical": 1_000_000, "high": 100_000, "normal": 10_000, "batch": 1_000}
PREEMPTIBLE = {"batch"}


class JobBuilder:
    """Builds a `Gang`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._project = "p"
        self._user = "u"
        self._tier = "normal"
        self._created = 0.0
        self._workers = 1
        self._gpus = 1
        self._milli = 1000
        self._cpu = 0
        self._memory = 0
        self._selector: tuple[tuple[str, str], ...] = ()
        self._duration: float | None = None
        self._elastic: tuple[int | None, int | None] = (None, None)

    def project(self, name: str) -> JobBuilder:
        self._project = name
        return self

    def user(self, name: str) -> JobBuilder:
        self._user = name
        return self

    def tier(self, name: str) -> JobBuilder:
        self._tier = name
        return self

    def at(self, created: float) -> JobBuilder:
        self._created = created
        return self

    def gang(self, gpus: int, *, per_worker: int = 1) -> JobBuilder:
        """`gpus` GPUs in all, `per_worker` GPUs per worker pod."""
        assert gpus % per_worker == 0
        self._workers = gpus // per_worker
        self._gpus = per_worker
        return self

    def share(self, milli: int) -> JobBuilder:
        """One pod using `milli` thousandths of one GPU."""
        self._workers, self._gpus, self._milli = 1, 1, milli
        return self

    def no_gpus(self, workers: int, *, cpu: int, memory_gib: int = 0) -> JobBuilder:
        """`workers` pods of no GPUs, `cpu` cores and `memory_gib` GiB each."""
        self._workers, self._gpus = workers, 0
        self._cpu, self._memory = cpu * 1000, memory_gib << 30
        return self

    def on(self, key: str, value: str) -> JobBuilder:
        self._selector += ((key, value),)
        return self

    def elastic(self, min_gpus: int, max_gpus: int) -> JobBuilder:
        """`resourceProfile.minGPU` / `maxGPU` (in GPUs; whole workers)."""
        self._elastic = (min_gpus // self._gpus, max_gpus // self._gpus)
        return self

    def lasts(self, seconds: float) -> JobBuilder:
        self._duration = seconds
        return self

    def build(self) -> Gang:
        return Gang(
            id=JobId(self._name),
            project=self._project,
            user=self._user,
            tier=self._tier,
            priority=TIERS[self._tier],
            created=self._created,
            workers=self._workers,
            pod=PodShape(
                gpus=self._gpus,
                gpu_milli=self._milli,
                cpu_milli=self._cpu,
                memory=self._memory,
                node_selector=self._selector,
            ),
            preemptible=self._tier in PREEMPTIBLE,
            may_preempt=self._tier != "batch",
            expected_duration=self._duration,
            min_workers=self._elastic[0],
            max_workers=self._elastic[1],
        )


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


def node(
    name: str,
    gpus: int = 8,
    *,
    clique: str | None = None,
    rack: str | None = None,
    zone: str = "z",
    taints: tuple[Taint, ...] = (),
    model: str = "A100",
    cpu: int = 0,
    memory_gib: int = 0,
) -> Node:
    """A node; `cpu` (cores) and `memory_gib` 0: not tracked."""
    labels = {"topology.kubernetes.io/zone": zone}
    if clique:
        labels["nvidia.com/gpu.clique"] = clique
    if rack:
        labels["topology.kubernetes.io/rack"] = rack
    return Node(
        name=name, gpus=gpus, gpu_model=model, labels=labels, taints=taints,
        cpu_milli=cpu * 1000, memory=memory_gib << 30,
    )  # fmt: skip


def running(g: Gang, placement: dict[str, int], *, started: float = -10_000.0) -> Running:
    """`g` running with `placement[node]` workers per node (devices from 0)."""
    pods = []
    for n, count in placement.items():
        for i in range(count):
            devices = tuple(range(i * g.pod.gpus, (i + 1) * g.pod.gpus))
            pods.append(PodPlacement(n, devices))
    return Running(g, Placement(tuple(pods)), started)


def policy(projects: dict[str, dict[str, Any]] | None = None, **kw: Any) -> SchedulingPolicy:
    """A policy; each project is {guaranteed, max, users: {name: (g, max)}, tiers, job_max};
    the keywords are `policy_doc`'s."""
    return SchedulingPolicy.from_dict(policy_doc(projects, **kw))


def policy_doc(
    projects: dict[str, dict[str, Any]] | None = None,
    *,
    reserve: int = 0,
    reserve_tiers: tuple[str, ...] = ("critical",),
    borrowing: bool = True,
    preemption: bool = True,
    min_runtime: int = 0,
    max_per_hour: int = 100,
) -> dict[str, Any]:
    """`policy` as the compiled JSON; built by hand, so held to its schema."""
    projects = projects or {"p": {}}
    compiled_projects = []
    for name, spec in projects.items():
        members = [
            {"name": u, "guaranteed": {"gpu": g}, "max": {} if m is None else {"gpu": m}}
            for u, (g, m) in spec.get("users", {}).items()
        ]
        compiled_projects.append(
            {
                "name": name,
                "namespaces": [name],
                "quota": {
                    "guaranteed": {"gpu": spec.get("guaranteed", 0)},
                    "max": {} if spec.get("max") is None else {"gpu": spec["max"]},
                },
                "users": {"default": {"guaranteed": {}, "max": {}}, "members": members},
                "jobs": {
                    "maxGPU": spec.get("job_max"),
                    "tiers": list(spec.get("tiers", TIERS)),
                    "defaultTier": "normal",
                },
            }
        )
    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": {},
            "reserve": {"gpu": reserve, "tiers": list(reserve_tiers)},
            "gang": {"timeoutSeconds": 300, "backoffLimit": 3},
            "preemption": {
                "enabled": preemption,
                "minRuntimeSeconds": min_runtime,
                "maxPerHour": max_per_hour,
            },
            "fairShare": {"enabled": True, "borrowing": borrowing},
            "topology": {
                "levels": [
                    "nvidia.com/gpu.clique",
                    "topology.kubernetes.io/rack",
                    "topology.kubernetes.io/zone",
                ]
            },
        },
        "tiers": [
            {
                "name": t,
                "value": v,
                "preemptible": t in PREEMPTIBLE,
                "preemptionPolicy": "Never" if t == "batch" else "PreemptLowerPriority",
                "globalDefault": False,
            }
            for t, v in TIERS.items()
        ],
        "projects": compiled_projects,
    }
    check_scheduling_policy(doc)
    return doc
