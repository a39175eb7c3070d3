"""Hypothesis: whatever the files hold, only diagnostics come out.

The example policies in policies/ are mutated (keys deleted, renamed or
duplicated, values replaced by other types, unicode, huge numbers, None),
edited as text, or replaced by random text; the loader, the validator and the
compiler must never raise. Generated valid sets must always validate cleanly
and compile.
"""

from __future__ import annotations

import json
from copy import deepcopy
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.policy.compiler import compile_policy_set
from controller.policy.diagnostics import CODES, Diagnostic
from controller.policy.sources import working_tree
from controller.policy.validate import ValidationResult
from controller.quantity import parse_quantity
from tests.unit.policy.builders import REPO, cluster, dump, policy_files, project, validate

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOISE = settings(SETTINGS, max_examples=100)
"""For input that rarely gets past the parser: fewer examples find as much."""

CLUSTER_YAML = (REPO / "clusters" / "local" / "cluster.yaml").read_text()


def _example_files() -> dict[str, str]:
    on_disk, _ = working_tree(REPO / "policies")
    return {s.path.removeprefix("policies/"): s.read().decode() for s in on_disk}


EXAMPLE = _example_files()
SMALL = policy_files(project("p").build())
EXTRA = {"../clusters/local/cluster.yaml": CLUSTER_YAML}


def _docs(text: str) -> list[Any]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load_all(text))


EXAMPLE_DOCS = {name: _docs(text) for name, text in EXAMPLE.items()}


def check(files: dict[str, str | bytes]) -> ValidationResult:
    """Validate and, when valid, compile `files`; nothing may raise."""
    result = validate(files, extra=EXTRA)
    names = set(files) | {"."}
    for d in result.diagnostics:
        assert isinstance(d, Diagnostic) and d.code in CODES
        assert d.file in names, d
        assert d.line >= 0 and d.column >= 0
        assert d.message
    if result.policy_set is not None:
        objects = compile_policy_set(result.policy_set, revision="r", source_root=".")
        json.dumps(objects)
    return result


def test_the_example_is_valid() -> None:
    assert check(dict(EXAMPLE)).ok


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 1, 2**31, -(2**31) - 1, 10**9 + 1, 2**63, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["", "500m", "1e99", "2Ti", "-1", "system-x", "kube-system", "ÿ\u202e", "a" * 300]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    doc = deepcopy(doc)
    path = data.draw(st.sampled_from(_paths(doc)))
    if not path:
        return data.draw(values)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    key = path[-1]
    op = data.draw(st.sampled_from(["delete", "replace", "insert", "rename"]))
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = data.draw(values)
    elif op == "insert" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=10))] = data.draw(values)
    elif op == "insert":
        parent.insert(key, data.draw(values))
    elif isinstance(parent, dict):
        parent[str(key) + data.draw(st.text(min_size=1, max_size=2))] = parent.pop(key)
    return doc


@SETTINGS
@given(data=st.data())
def test_mutated_documents_give_diagnostics_not_tracebacks(data: st.DataObject) -> None:
    changed: dict[str, list[Any]] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(sorted(EXAMPLE_DOCS)))
        docs = changed.setdefault(name, list(EXAMPLE_DOCS[name]))
        i = data.draw(st.integers(0, len(docs) - 1))
        docs[i] = _mutate(docs[i], data)
    check({**EXAMPLE, **{name: dump(*docs) for name, docs in changed.items()}})


def _edit_text(text: str, data: st.DataObject) -> str:
    lines = text.splitlines(keepends=True)
    op = data.draw(st.sampled_from(["cut", "insert", "duplicate-line", "swap-lines", "replace"]))
    at = data.draw(st.integers(0, len(text)))
    if op == "cut":
        return text[:at] + text[at + data.draw(st.integers(1, 40)) :]
    if op == "insert":
        snippet = data.draw(
            st.text(max_size=20)
            | st.sampled_from(
                ["&a", "*a", "<<: *a", "!!int ", "? ", "- ", "[", "{", "'", "\t", ": "]
            )
        )
        return text[:at] + snippet + text[at:]
    i = data.draw(st.integers(0, len(lines) - 1))
    if op == "duplicate-line":  # duplicate keys, mostly
        return "".join(lines[: i + 1] + lines[i:])
    if op == "swap-lines":
        j = data.draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)
    # A file holds UTF-8 (or bytes, the raw test's): no lone surrogates, which have no
    # encoding and would fail the fixture, not the validator.
    return text[:at] + data.draw(st.characters(exclude_categories=["Cs"])) + text[at + 1 :]


@SETTINGS
@given(data=st.data())
def test_edited_text_gives_diagnostics_not_tracebacks(data: st.DataObject) -> None:
    files: dict[str, str | bytes] = dict(EXAMPLE)
    for _ in range(data.draw(st.integers(1, 3))):
        name = data.draw(st.sampled_from(sorted(EXAMPLE)))
        files[name] = _edit_text(str(files[name]), data)
    check(files)


@NOISE
@given(text=st.text(max_size=300), raw=st.binary(max_size=100))
def test_random_text_and_bytes_give_diagnostics_not_tracebacks(text: str, raw: bytes) -> None:
    check({**SMALL, "random.yaml": text, "raw.yaml": raw})


@NOISE
@given(
    text=st.lists(
        st.sampled_from(
            ["a:", " b:", "- ", "[", "]", "{", "}", ", ", "&x ", "*x", "<<: ", "---", "\n", "? ",
             "!!int ", "!!bool ", "~", "1", "'q'", "\"", "#", "|", ">", "  ", "kind: Project",
             "apiVersion: policy.ai.operator/v1", "spec:", "metadata: {name: p}"]
        ),
        max_size=60,
    ).map("".join)
)  # fmt: skip
def test_yaml_shaped_noise_gives_diagnostics_not_tracebacks(text: str) -> None:
    check({**SMALL, "noise.yaml": text})


@st.composite
def valid_sets(draw: st.DrawFn) -> dict[str, str]:
    """A valid policy set: guarantees fit the capacity, users fit their project."""
    capacity = draw(st.integers(8, 512))
    reserve = draw(st.integers(0, capacity // 4))
    free = capacity - reserve
    projects = []
    namespaces = iter(f"ns-{i}" for i in range(1000))
    for i in range(draw(st.integers(0, 5))):
        guaranteed = draw(st.integers(0, free))
        free -= guaranteed
        spaces = draw(st.integers(1, 3))
        # at least one GPU per namespace (GP324), and jobs no larger than the largest
        # namespace's share (GP323)
        least = max(guaranteed, spaces)
        maximum = draw(st.integers(least, least * 4))
        p = (
            project(f"p{i}")
            .namespaces(*(next(namespaces) for _ in range(spaces)))
            .guaranteed(
                gpu=guaranteed, cpu=draw(st.sampled_from(["0", "1", "1001m"])), memory="1000000"
            )
            .max(
                gpu=maximum,
                cpu=draw(st.sampled_from(["8", "8500m", "12", "1001m"])),
                memory=draw(st.sampled_from(["1Gi", "3Gi", "10G", "1000001"])),
            )
        )
        left = guaranteed
        for u in range(draw(st.integers(0, 3))):
            g = draw(st.integers(0, left))
            left -= g
            p = p.user(f"user-{u}", g, draw(st.integers(g, maximum)))
        tiers = draw(st.lists(st.sampled_from(["critical", "normal", "batch"]), unique=True))
        if tiers:
            p = p.jobs(tiers=tiers, maxGPU=draw(st.integers(1, -(-maximum // spaces))))
        projects.append(p.build())
    return policy_files(*projects, cluster_doc=cluster(gpu=capacity, reserve={"gpu": reserve}))


@SETTINGS
@given(files=valid_sets())
def test_valid_sets_validate_and_compile(files: dict[str, str]) -> None:
    result = validate(files)
    assert result.policy_set is not None, result.diagnostics
    # GP323 without jobs.maxGPU is a warning: the default, the max, spans namespaces
    assert all(d.code in ("GP306", "GP323") for d in result.diagnostics), result.diagnostics
    objects = compile_policy_set(result.policy_set, revision="r", source_root=".")
    for p in result.policy_set.projects:
        hard = [
            o["spec"]["hard"]
            for o in objects
            if o["kind"] == "ResourceQuota"
            and o["metadata"]["labels"]["gangops.ai/project"] == p.name
        ]
        for key, resource in (("requests.nvidia.com/gpu", "gpu"), ("requests.cpu", "cpu")):
            total = sum((parse_quantity(h[key]) for h in hard), Fraction(0))
            assert total == p.quota.max.get(resource)  # type: ignore[arg-type]
