"""The compiler: a valid policy set in, the desired Kubernetes objects out.

The golden file is what `gangops render policies --revision golden` prints
for the example repository. After an intended change to the compiler or to
policies/, regenerate it and review the diff:

    GANGOPS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/policy/test_compiler.py
"""

from __future__ import annotations

import json
import os
import random
from fractions import Fraction
from typing import Any

import pytest

from controller.cli import main
from controller.policy.compiler import (
    ANNOTATION_REVISION,
    ANNOTATION_SOURCE,
    DEFAULT_REQUESTS,
    LABEL_MANAGED_BY,
    LABEL_POD_SECURITY,
    LABEL_PROJECT,
    LIMIT_RANGE_NAME,
    QUOTA_NAME,
    compile_policy_set,
    split_evenly,
)
from controller.policy.loader import Source
from controller.policy.sources import working_tree
from controller.policy.validate import validate_sources
from controller.quantity import parse_quantity
from controller.scheduler.policy import POLICY_CONFIGMAP, POLICY_KEY
from tests.unit.policy.builders import (
    REPO,
    TIERS,
    cluster,
    compiled,
    dump,
    policy_files,
    project,
    sources,
    tier,
    valid_set,
)

GOLDEN = REPO / "tests" / "unit" / "policy" / "golden" / "policies.yaml"


def test_render_of_the_example_policies_matches_the_golden_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    assert main(["render", "policies", "--revision", "golden"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    if os.environ.get("GANGOPS_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(out, encoding="utf-8")
    assert out == GOLDEN.read_text(encoding="utf-8"), (
        "render output changed; if intended, regenerate with GANGOPS_UPDATE_GOLDEN=1"
    )


def _example_sources(rng: random.Random | None) -> list[Source]:
    """The example policies, one document per source, optionally shuffled."""
    on_disk, _ = working_tree(REPO / "policies")
    out = []
    for src in on_disk:
        for i, text in enumerate(src.read().decode().split("\n---\n")):
            out.append(Source(f"{src.path}#{i}", len(text), text.encode))
    if rng is not None:
        rng.shuffle(out)
    return out


def _compile_example(rng: random.Random | None) -> list[dict[str, Any]]:
    def resolve(ref: str) -> Source | None:
        path = REPO / "policies" / ref
        return Source(ref, path.stat().st_size, path.read_bytes)

    result = validate_sources(_example_sources(rng), root="policies", resolve=resolve)
    assert result.policy_set is not None, result.diagnostics
    return compile_policy_set(result.policy_set, revision="r", source_root="policies")


def test_output_does_not_depend_on_input_order() -> None:
    expected = json.dumps(_compile_example(None))
    for seed in range(10):
        assert json.dumps(_compile_example(random.Random(seed))) == expected


def test_objects_come_in_apply_order() -> None:
    objects = compiled(
        policy_files(project("b").namespaces("b2", "b1").build(), project("a").build())
    )
    assert [
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects
    ] == [
        ("PriorityClass", None, "batch"),
        ("PriorityClass", None, "critical"),
        ("PriorityClass", None, "normal"),
        ("Namespace", None, "a"),
        ("Namespace", None, "b1"),
        ("Namespace", None, "b2"),
        ("ResourceQuota", "a", QUOTA_NAME),
        ("ResourceQuota", "b1", QUOTA_NAME),
        ("ResourceQuota", "b2", QUOTA_NAME),
        ("ConfigMap", "gangops-system", POLICY_CONFIGMAP),
    ]


def test_every_object_is_labelled_and_annotated() -> None:
    files = policy_files(project("a").namespaces("a", "a-dev").build())
    objects = compile_policy_set(valid_set(files), revision="abc123", source_root="pol")
    sources_by_kind = {
        "PriorityClass": "tiers.yaml",
        "Namespace": "projects/a.yaml",
        "ResourceQuota": "projects/a.yaml",
        "LimitRange": "projects/a.yaml",
        "ConfigMap": "pol",
    }
    for obj in objects:
        meta = obj["metadata"]
        assert meta["labels"][LABEL_MANAGED_BY] == "gangops"
        assert meta["annotations"] == {
            ANNOTATION_SOURCE: sources_by_kind[obj["kind"]],
            ANNOTATION_REVISION: "abc123",
        }
        if obj["kind"] in ("Namespace", "ResourceQuota", "LimitRange"):
            assert meta["labels"][LABEL_PROJECT] == "a"


def test_priority_classes() -> None:
    tiers = (
        tier("high", 100, description="Production"),
        tier("batch", -5, preemptible=True, preemptionPolicy="Never", globalDefault=True),
    )
    cluster_doc = cluster(reserve={"gpu": 0})
    by_name = {
        o["metadata"]["name"]: o
        for o in compiled(policy_files(cluster_doc=cluster_doc, tiers=tiers))
        if o["kind"] == "PriorityClass"
    }
    assert by_name["high"] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": "high",
            "labels": {LABEL_MANAGED_BY: "gangops", "gangops.ai/preemptible": "false"},
            "annotations": {ANNOTATION_SOURCE: "tiers.yaml", ANNOTATION_REVISION: "rev1"},
        },
        "value": 100,
        "preemptionPolicy": "PreemptLowerPriority",
        "globalDefault": False,
        "description": "Production",
    }
    batch = by_name["batch"]
    assert "description" not in batch
    assert (batch["value"], batch["preemptionPolicy"], batch["globalDefault"]) == (
        -5,
        "Never",
        True,
    )
    assert batch["metadata"]["labels"]["gangops.ai/preemptible"] == "true"


def _hard(files: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        o["metadata"]["namespace"]: o["spec"]["hard"]
        for o in compiled(files)
        if o["kind"] == "ResourceQuota"
    }


GPU, CPU, MEM = "requests.nvidia.com/gpu", "requests.cpu", "requests.memory"
COUNT = "count/trainingjobs.ai.operator"
"""The object count quota key of TrainingJobs, as the API server knows it."""


@pytest.mark.parametrize(
    ("namespaces", "max", "expected"),
    [
        (("a",), {"gpu": 8, "cpu": "16", "memory": "64Gi"}, [{GPU: "8", CPU: "16", MEM: "64Gi"}]),
        (("c", "a", "b"), {"gpu": 10}, [{GPU: "4"}, {GPU: "3"}, {GPU: "3"}]),
        # (a max below one unit per namespace, which left a share of 0, is GP324 now)
        (("a", "b", "c"), {"gpu": 4}, [{GPU: "2"}, {GPU: "1"}, {GPU: "1"}]),
        (("a", "b", "c"), {"cpu": "1"}, [{CPU: "334m"}, {CPU: "333m"}, {CPU: "333m"}]),
        (("a", "b"), {"cpu": "2500m"}, [{CPU: "1250m"}, {CPU: "1250m"}]),
        (("a", "b"), {"cpu": "1500u"}, [{CPU: "1m"}, {CPU: "1m"}]),
        (("a", "b"), {"memory": "1Gi"}, [{MEM: "512Mi"}, {MEM: "512Mi"}]),
        (("a", "b", "c", "d"), {"memory": 10}, [{MEM: "3"}, {MEM: "3"}, {MEM: "2"}, {MEM: "2"}]),
        (
            ("a", "b", "c"),
            {"memory": "4Ti"},
            [{MEM: "1466015503702"}, {MEM: "1466015503701"}, {MEM: "1466015503701"}],
        ),
    ],
)
def test_resource_quota_split(
    namespaces: tuple[str, ...], max: dict[str, Any], expected: list[dict[str, str]]
) -> None:
    """The project's max split evenly in whole GPUs, millicores and bytes; the
    namespaces listed first take the remainders."""
    hard = _hard(policy_files(project("p").namespaces(*namespaces).max(**max).build()))
    assert [hard[ns] for ns in namespaces] == expected


@pytest.mark.parametrize(
    ("resource", "amount", "parts"),
    [
        ("cpu", "7", 3),
        ("cpu", "1001m", 7),
        ("cpu", "999", 1000),
        ("memory", "3Ti", 7),
        ("memory", "10Gi", 3),
        ("memory", "1e9", 7),
    ],
)
def test_shares_add_up_to_the_max_exactly(resource: str, amount: str, parts: int) -> None:
    namespaces = [f"n{i}" for i in range(parts)]
    key = {"cpu": CPU, "memory": MEM}[resource]
    hard = _hard(
        policy_files(project("p").namespaces(*namespaces).max(**{resource: amount}).build())
    )
    total = sum((parse_quantity(hard[ns][key]) for ns in namespaces), Fraction(0))
    assert total == parse_quantity(amount)


@pytest.mark.parametrize(("level", "expected"), [(None, "baseline"), ("restricted", "restricted")])
def test_project_namespaces_enforce_a_pod_security_level(level: str | None, expected: str) -> None:
    """Pods the controller creates for a tenant are held to the namespace's Pod
    Security level like the tenant's own; baseline unless the project says."""
    doc = project("p").namespaces("p", "q").build()
    if level is not None:
        doc["spec"]["podSecurity"] = level
    namespaces = [o for o in compiled(policy_files(doc)) if o["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == ["p", "q"]
    for n in namespaces:
        assert n["metadata"]["labels"][LABEL_POD_SECURITY] == expected
        assert n["metadata"]["labels"][f"{LABEL_POD_SECURITY}-version"] == "latest"


def _defaults(files: dict[str, str]) -> dict[str, dict[str, str]]:
    out = {}
    for o in compiled(files):
        if o["kind"] == "LimitRange":
            assert o["metadata"]["name"] == LIMIT_RANGE_NAME
            (limit,) = o["spec"]["limits"]
            assert limit["type"] == "Container" and set(limit) == {"type", "defaultRequest"}
            out[o["metadata"]["namespace"]] = limit["defaultRequest"]
    return out


@pytest.mark.parametrize(
    ("max", "expected"),
    [
        ({"gpu": 8}, None),
        ({"gpu": 8, "cpu": "64"}, {"cpu": DEFAULT_REQUESTS["cpu"]}),
        ({"memory": "1Ti"}, {"memory": DEFAULT_REQUESTS["memory"]}),
        ({"gpu": 8, "cpu": "64", "memory": "1Ti"}, DEFAULT_REQUESTS),
        # A share smaller than the default is the default: one pod still fits.
        ({"cpu": "1", "memory": "1Mi"}, {"cpu": "500m", "memory": "512Ki"}),
    ],
)
def test_quotas_that_track_cpu_or_memory_come_with_default_requests(
    max: dict[str, Any], expected: dict[str, str] | None
) -> None:
    """A pod that asks only for GPUs is not refused by quota admission (`must
    specify requests.cpu`): the namespace's LimitRange fills in a request for
    every resource its quota tracks besides GPUs, and sets no limit."""
    defaults = _defaults(policy_files(project("p").namespaces("p", "q").max(**max).build()))
    assert defaults == ({} if expected is None else {"p": expected, "q": expected})


@pytest.mark.parametrize(
    ("namespaces", "count", "expected"),
    [
        (("a",), 5, ["5"]),
        (("c", "a", "b"), 10, ["4", "3", "3"]),
        (("a", "b", "c", "d"), 6, ["2", "2", "1", "1"]),
        (("a", "b", "c"), 3, ["1", "1", "1"]),
        (("a", "b"), 1_000_000, ["500000", "500000"]),
    ],
)
def test_job_count_split(namespaces: tuple[str, ...], count: int, expected: list[str]) -> None:
    """`jobs.maxCount` split evenly like GPUs, in whole TrainingJobs, the namespaces
    listed first taking the remainders, beside the max's own keys."""
    doc = project("p").namespaces(*namespaces).max(gpu=12).jobs(maxCount=count).build()
    hard = _hard(policy_files(doc))
    gpus = split_evenly(12, len(namespaces))
    assert [hard[ns] for ns in namespaces] == [
        {GPU: str(g), COUNT: c} for g, c in zip(gpus, expected, strict=True)
    ]


def test_a_job_count_alone_is_a_quota_without_defaults() -> None:
    """A project whose max sets nothing still gets a ResourceQuota for its count
    (and no LimitRange: the quota tracks no CPU or memory)."""
    objects = compiled(
        policy_files(project("p").namespaces("p", "q").max().jobs(maxCount=3).build())
    )
    quotas = {o["metadata"]["namespace"]: o for o in objects if o["kind"] == "ResourceQuota"}
    assert {ns: q["spec"] for ns, q in quotas.items()} == {
        "p": {"hard": {COUNT: "2"}},
        "q": {"hard": {COUNT: "1"}},
    }
    assert quotas["p"]["metadata"]["name"] == QUOTA_NAME
    assert [o for o in objects if o["kind"] == "LimitRange"] == []


def test_a_job_count_leaves_the_scheduling_policy_as_it_was() -> None:
    """The API server enforces the count; the scheduler has nothing to do with it, so
    the compiled policy (and its ConfigMap) does not change when it is set."""
    without = project("p").namespaces("p", "q").build()
    with_count = project("p").namespaces("p", "q").jobs(maxCount=4).build()
    assert _policy(policy_files(with_count)) == _policy(policy_files(without))


def test_a_project_without_a_max_gets_no_quota() -> None:
    objects = compiled(policy_files(project("p").max().build()))
    assert [o["kind"] for o in objects if o["metadata"].get("namespace") == "p"] == []
    assert ("Namespace", "p") in [(o["kind"], o["metadata"]["name"]) for o in objects]


@pytest.mark.parametrize(
    ("total", "parts", "shares"),
    [(10, 3, [4, 3, 3]), (0, 2, [0, 0]), (5, 5, [1] * 5), (2, 4, [1, 1, 0, 0]), (9, 1, [9])],
)
def test_split_evenly(total: int, parts: int, shares: list[int]) -> None:
    assert split_evenly(total, parts) == shares


def _policy(files: dict[str, str]) -> dict[str, Any]:
    (configmap,) = [o for o in compiled(files) if o["kind"] == "ConfigMap"]
    policy: dict[str, Any] = json.loads(configmap["data"][POLICY_KEY])
    return policy


def test_scheduling_policy_resolves_every_default() -> None:
    files = policy_files(project("p").max(gpu=8).build())
    policy = _policy(files)
    assert policy["cluster"] == {
        "capacity": {"gpu": 64},
        "reserve": {"gpu": 8, "tiers": ["critical"]},
        "gang": {"timeoutSeconds": 300, "backoffLimit": 3},
        "preemption": {"enabled": True, "minRuntimeSeconds": 600, "maxPerHour": 20},
        "fairShare": {"enabled": True, "borrowing": True},
        "topology": {
            "levels": [
                "nvidia.com/gpu.clique",
                "topology.kubernetes.io/rack",
                "topology.kubernetes.io/zone",
            ]
        },
    }
    assert policy["tiers"] == [
        {"name": "critical", "value": 1000000, "preemptible": False,
         "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False},
        {"name": "normal", "value": 1000, "preemptible": False,
         "preemptionPolicy": "PreemptLowerPriority", "globalDefault": True},
        {"name": "batch", "value": 10, "preemptible": True,
         "preemptionPolicy": "Never", "globalDefault": False},
    ]  # fmt: skip
    (p,) = policy["projects"]
    assert p == {
        "name": "p",
        "namespaces": ["p"],
        "quota": {"guaranteed": {}, "max": {"gpu": 8}},
        "users": {"default": {"guaranteed": {}, "max": {}}, "members": []},
        "jobs": {"maxGPU": 8, "tiers": ["critical", "normal", "batch"], "defaultTier": "normal"},
    }


ALL = ["critical", "normal", "batch"]


@pytest.mark.parametrize(
    ("jobs", "tiers", "resolved"),
    [
        ({}, TIERS, (8, ALL, "normal")),
        ({"maxGPU": 2}, TIERS, (2, ALL, "normal")),
        ({"tiers": ["batch", "critical"]}, TIERS, (8, ["critical", "batch"], "batch")),
        ({"tiers": ["normal", "batch"], "defaultTier": "batch"}, TIERS, (8, ALL[1:], "batch")),
        ({}, (tier("critical", 9), tier("low", 1)), (8, ["critical", "low"], "low")),
        ({"tiers": []}, TIERS, (8, [], None)),
    ],
    ids=[
        "defaults",
        "maxGPU",
        "global-default-not-allowed",
        "explicit",
        "no-global-default",
        "no-tiers",
    ],
)
def test_scheduling_policy_job_defaults(
    jobs: dict[str, Any],
    tiers: tuple[dict[str, Any], ...],
    resolved: tuple[int, list[str], str | None],
) -> None:
    """maxGPU defaults to the project's max; tiers are listed highest first;
    the default tier is the explicit one, else the global default if allowed,
    else the lowest allowed."""
    files = policy_files(project("p").jobs(**jobs).build(), tiers=tiers)
    max_gpu, allowed, default = resolved
    assert _policy(files)["projects"][0]["jobs"] == {
        "maxGPU": max_gpu,
        "tiers": allowed,
        "defaultTier": default,
    }


def test_scheduling_policy_users_and_cluster_settings() -> None:
    p = (
        project("p")
        .guaranteed(gpu=4, cpu="8", memory="16Gi")
        .max(gpu=8, cpu="16", memory="32Gi")
        .user_default(1, 2)
        .user("ann", 2, 8)
        .build()
    )
    c = cluster(
        gpu=16,
        capacity={"gpu": 16, "cpu": "64", "memory": "256Gi"},
        reserve={"gpu": 2, "tiers": ["normal", "critical"]},
        gang={"timeoutSeconds": 60},
        preemption={"enabled": False},
        fairShare={"borrowing": False},
        topology={"levels": ["rack"]},
    )
    policy = _policy(policy_files(p, cluster_doc=c))
    assert policy["cluster"] == {
        "capacity": {"gpu": 16, "cpu": "64", "memory": "256Gi"},
        "reserve": {"gpu": 2, "tiers": ["critical", "normal"]},
        "gang": {"timeoutSeconds": 60, "backoffLimit": 3},
        "preemption": {"enabled": False, "minRuntimeSeconds": 600, "maxPerHour": 20},
        "fairShare": {"enabled": True, "borrowing": False},
        "topology": {"levels": ["rack"]},
    }
    assert policy["projects"][0]["quota"] == {
        "guaranteed": {"gpu": 4, "cpu": "8", "memory": "16Gi"},
        "max": {"gpu": 8, "cpu": "16", "memory": "32Gi"},
    }
    assert policy["projects"][0]["users"] == {
        "default": {"guaranteed": {"gpu": 1}, "max": {"gpu": 2}},
        "members": [{"name": "ann", "guaranteed": {"gpu": 2}, "max": {"gpu": 8}}],
    }


def test_system_namespace_and_revision_are_parameters() -> None:
    objects = compile_policy_set(
        valid_set(policy_files()), revision="r9", source_root=".", system_namespace="ops"
    )
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["namespace"] == "ops"
    assert {o["metadata"]["annotations"][ANNOTATION_REVISION] for o in objects} == {"r9"}


def test_multi_document_sources_compile_like_single_files() -> None:
    files = policy_files(project("a").build(), project("b").build())
    together = {"all.yaml": dump(*(d for text in files.values() for d in _docs(text)))}
    assert len(sources(together)) == 1
    assert [_without_annotations(o) for o in compiled(together)] == [
        _without_annotations(o) for o in compiled(files)
    ]


def _docs(text: str) -> list[Any]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load_all(text))


def _without_annotations(obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    out["metadata"].pop("annotations")
    return out


def test_reordering_users_changes_no_byte_of_the_compiled_policy() -> None:
    """Found by a review (D5): `plan --base` said "No changes" for a reorder of
    users.members while policy.json (and so the ConfigMap the reconciler writes)
    changed; their order means nothing, so the compiled policy lists them by name."""

    def members(*names: str) -> list[dict[str, Any]]:
        p = project("p").max(gpu=8)
        for name in names:
            p = p.user(name, 0, 4)
        return compiled(policy_files(p.build()))

    ab, ba = members("alice", "bob"), members("bob", "alice")
    assert ab == ba
    (cm,) = [o for o in ab if o["kind"] == "ConfigMap"]
    doc = json.loads(cm["data"]["policy.json"])
    assert [m["name"] for m in doc["projects"][0]["users"]["members"]] == ["alice", "bob"]
