"""The compiled scheduling policy and its schema (schemas/schedulingpolicy.schema.json):
whatever the compiler writes, the schema accepts; what the schema refuses, it
says where; and the ConfigMap the compiler writes is what the scheduler's one
reader (`SchedulingPolicy.from_configmap`) reads."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controller.policy.compiler import compile_policy_set, scheduling_policy
from controller.policy.sources import working_tree
from controller.policy.validate import check_scheduling_policy, validate_sources
from controller.scheduler.policy import (
    POLICY_CONFIGMAP,
    POLICY_KEY,
    SchedulingPolicy,
    UnreadablePolicy,
)
from tests.unit.policy.builders import REPO, cluster, policy_files, project, tier, valid_set


def _example() -> dict[str, Any]:
    sources, resolve = working_tree(REPO / "policies")
    result = validate_sources(sources, root="policies", resolve=resolve)
    assert result.policy_set is not None
    return scheduling_policy(result.policy_set)


SETS = {
    "defaults": policy_files(project("p").max(gpu=8).build()),
    "users, cpu and memory": policy_files(
        project("p")
        .guaranteed(gpu=4, cpu="8", memory="16Gi")
        .max(gpu=8, cpu="16", memory="32Gi")
        .user_default(1, 2)
        .user("ann", 2, 8)
        .build(),
        cluster_doc=cluster(gpu=16, reserve={"gpu": 2, "tiers": ["critical"]}),
    ),
    "no tiers allowed, no max": policy_files(project("p").jobs(tiers=[]).build()),
    "one tier, two projects": policy_files(
        project("a").build(),
        project("b").build(),
        cluster_doc=cluster(reserve={"gpu": 0, "tiers": ["only"]}),
        tiers=(tier("only", 5),),
    ),
}


def test_the_example_repositorys_compiled_policy_matches_the_schema() -> None:
    check_scheduling_policy(_example())


@pytest.mark.parametrize("files", SETS.values(), ids=SETS.keys())
def test_compiler_output_matches_the_schema(files: dict[str, str]) -> None:
    check_scheduling_policy(scheduling_policy(valid_set(files)))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["cluster"].pop("gang"), "at cluster: 'gang' is a required property"),
        (lambda d: d["tiers"][0].update(value="high"), "at tiers/0/value: 'high' is not"),
        (lambda d: d["projects"][0]["quota"].update(min={}), "at projects/0/quota: Additional"),
    ],
    ids=["missing", "wrong type", "unknown key"],
)
def test_a_copy_the_schema_refuses_is_refused_with_its_place(change: Any, where: str) -> None:
    doc = copy.deepcopy(_example())
    change(doc)
    with pytest.raises(ValueError, match=f"^not a compiled scheduling policy: {where}"):
        check_scheduling_policy(doc)


def test_the_compiled_configmap_is_what_the_scheduler_reads() -> None:
    files = SETS["users, cpu and memory"]
    objects = compile_policy_set(valid_set(files), revision="r", source_root=".")
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"] == POLICY_CONFIGMAP
    policy = SchedulingPolicy.from_configmap(cm)
    assert policy == SchedulingPolicy.from_dict(scheduling_policy(valid_set(files)))
    assert policy.projects["p"].user("ann").max == 8000


@pytest.mark.parametrize(
    "data",
    [{}, {POLICY_KEY: "{not json"}, {POLICY_KEY: json.dumps({"cluster": {}})}],
    ids=["no key", "not JSON", "not a policy"],
)
def test_an_unreadable_configmap_is_refused(data: dict[str, str]) -> None:
    with pytest.raises(UnreadablePolicy):
        SchedulingPolicy.from_configmap({"metadata": {"name": POLICY_CONFIGMAP}, "data": data})
