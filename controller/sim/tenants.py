"""Policies for a simulation, and the seeded mapping of trace jobs onto tenants.

Public traces carry no projects. `assign_tenants` gives each job a project,
user and tier from the policy set, reproducibly (seeded):

1. jobs are cut, in submission order, into *sessions* of consecutive jobs
   (lengths drawn from a geometric distribution, mean `session_mean` jobs,
   default `SESSION_MEAN`): a team submits work in bursts, not one job at a
   time;
2. each session goes to a project drawn with probability proportional to its
   guaranteed GPUs, among the projects whose job limit and tiers admit the
   job (a job too large for the session's project is drawn again among those
   that can run it);
3. the user is drawn among the project's named members and four default
   users (`<project>-user-0..3`) whose own max admits the job (a job above
   every user's max goes to any of them); the tier is the project's default
   tier.

Over a long trace each project's demand matches its guarantee; over hours it
does not, which is exactly what static islands cannot absorb. How long it
does not is the session length: the more jobs run at once, the more
sessions overlap and the closer each project's momentary demand stays to its
guarantee (on openb at offered load 1 several thousand pods run at once, so
sessions of 20 jobs average out; see docs/simulator.md).

A policy set written for a small cluster is scaled to the simulated one:
every project's and user's guaranteed and max GPUs, and the reserve, are
multiplied by (simulated GPUs / the policy set's capacity); per-job limits
are sizes of jobs and are kept.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.scheduler.policy import SchedulingPolicy
from controller.sim.traces import TraceJob

__all__ = [
    "SESSION_MEAN",
    "PolicyError",
    "assign_tenants",
    "load_policy_doc",
    "open_policy_doc",
    "scale_policy_doc",
]

SESSION_MEAN = 20
"""Mean number of consecutive trace jobs submitted by one project."""
OPEN_PROJECT = "trace"


class PolicyError(ValueError):
    """Policies that cannot be loaded; the message carries the diagnostics."""


def open_policy_doc(capacity_gpus: int) -> dict[str, Any]:
    """A policy for traces without tenants: one project owning the cluster,
    one tier, no preemption (what the fragmentation experiment needs). Built by
    hand, so held to the compiled policy's schema."""
    from controller.policy.validate import check_scheduling_policy

    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": {"gpu": capacity_gpus},
            "reserve": {"gpu": 0, "tiers": []},
            "gang": {"timeoutSeconds": 300, "backoffLimit": 3},
            "preemption": {"enabled": False, "minRuntimeSeconds": 0, "maxPerHour": 0},
            "fairShare": {"enabled": False, "borrowing": True},
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
                "name": "normal",
                "value": 10000,
                "preemptible": False,
                "preemptionPolicy": "Never",
                "globalDefault": False,
            }
        ],
        "projects": [
            {
                "name": OPEN_PROJECT,
                "namespaces": [OPEN_PROJECT],
                "quota": {"guaranteed": {"gpu": capacity_gpus}, "max": {}},
                "users": {"default": {"guaranteed": {}, "max": {}}, "members": []},
                "jobs": {"maxGPU": None, "tiers": ["normal"], "defaultTier": "normal"},
            }
        ],
    }
    check_scheduling_policy(doc)
    return doc


def load_policy_doc(root: Path) -> dict[str, Any]:
    """Validate and compile the policy set at `root` into the scheduler's JSON."""
    from controller.policy.build import build
    from controller.policy.compiler import scheduling_policy
    from controller.policy.report import format_diagnostics
    from controller.policy.sources import working_tree

    if not root.exists():
        raise PolicyError(f"{root}: no such file or directory")
    sources, resolve = working_tree(root)
    built = build(sources, root=str(root), resolve=resolve, revision="simulation")
    result = built.validation
    if result.policy_set is None:
        raise PolicyError(format_diagnostics(built.errors, fmt="text", files=result.files).rstrip())
    return scheduling_policy(result.policy_set)


def _scaled(pair: Mapping[str, Any], factor: float) -> dict[str, Any]:
    out = dict(pair)
    if out.get("gpu") is not None:
        out["gpu"] = max(0, round(int(out["gpu"]) * factor))
    return out


def scale_policy_doc(doc: Mapping[str, Any], capacity_gpus: int) -> dict[str, Any]:
    """`doc` with its GPU quotas scaled from its own capacity to `capacity_gpus`."""
    out = copy.deepcopy(dict(doc))
    own = int((out["cluster"].get("capacity") or {}).get("gpu") or 0)
    if own <= 0 or own == capacity_gpus:
        return out
    factor = capacity_gpus / own
    out["cluster"]["capacity"] = {**out["cluster"]["capacity"], "gpu": capacity_gpus}
    out["cluster"]["reserve"]["gpu"] = round(int(out["cluster"]["reserve"]["gpu"]) * factor)
    for p in out["projects"]:
        p["quota"] = {k: _scaled(v, factor) for k, v in p["quota"].items()}
        users = p["users"]
        users["default"] = {k: _scaled(v, factor) for k, v in users["default"].items()}
        users["members"] = [
            {k: (v if k == "name" else _scaled(v, factor)) for k, v in m.items()}
            for m in users["members"]
        ]
    return out


def _admits(limit: int | None, milli: int) -> bool:
    return limit is None or milli <= limit


def assign_tenants(
    jobs: Sequence[TraceJob],
    policy: SchedulingPolicy,
    *,
    seed: int,
    session_mean: float = SESSION_MEAN,
) -> list[TraceJob]:
    """Jobs with project, user and tier filled in (those given are kept)."""
    rng = random.Random(seed)
    projects = sorted(policy.projects.values(), key=lambda p: p.name)
    weights = [max(p.guaranteed, 1) for p in projects]
    out: list[TraceJob] = []
    session_left = 0
    current = projects[0]
    for job in jobs:
        if session_left <= 0:
            current = rng.choices(projects, weights)[0]
            session_left = 1 + int(rng.expovariate(1 / session_mean))
        session_left -= 1
        if job.project is not None:
            # its own project; an empty tier or user is still filled in (a job naming
            # its project but no tier was refused for tier ''); an unknown project is
            # left for the core to refuse, saying so
            named = policy.projects.get(job.project)
            if named is None or (job.tier and job.user):
                out.append(job)
                continue
            project = named
        else:
            project = current
            fits = [
                (p, w)
                for p, w in zip(projects, weights, strict=True)
                if (p.job_max is None or job.gpu_milli <= p.job_max)
                and (p.max is None or job.gpu_milli <= p.max)
            ]
            if fits and project not in [p for p, _ in fits]:
                project = rng.choices([p for p, _ in fits], [w for _, w in fits])[0]
        users = [*sorted(project.members), *(f"{project.name}-user-{i}" for i in range(4))]
        users = [u for u in users if _admits(project.user(u).max, job.gpu_milli)] or users
        tier = job.tier or project.default_tier or min(project.tiers, default="normal")
        out.append(
            replace(job, project=project.name, user=job.user or rng.choice(users), tier=tier)
        )
    return out
