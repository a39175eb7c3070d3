"""Builders for policy tests: policy documents and in-memory policy sets.

`project("nlp").namespaces("nlp", "nlp-dev").max(gpu=16).build()` makes one
Project document as a dict; `dump(...)` turns documents into YAML text; and
`validate({...})` validates a policy set given as `{path: text}` without
touching the disk. Every default is the smallest thing that is valid: a
ClusterPolicy with 64 GPUs (8 reserved for `critical`) and the tiers
`critical`, `normal` (the global default) and `batch`.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Mapping
from copy import deepcopy
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from controller.policy.compiler import compile_policy_set
from controller.policy.diagnostics import Diagnostic
from controller.policy.loader import API_VERSION, DEFAULT_LIMITS, Limits, Source
from controller.policy.model import PolicySet
from controller.policy.validate import ValidationResult, validate_sources

REPO = Path(__file__).resolve().parents[3]
"""The repository root (the example policies live in `REPO / "policies"`)."""

Files = Mapping[str, "str | bytes | OSError"]
"""A policy set on no disk: display path -> text, raw bytes, or the error reading raises."""


def doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A policy document of `kind`."""
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def cluster(gpu: int | None = 64, **spec: Any) -> dict[str, Any]:
    """A ClusterPolicy named `default`; `spec` keys replace the defaults."""
    base: dict[str, Any] = {"reserve": {"gpu": 8, "tiers": ["critical"]}}
    if gpu is not None:
        base["capacity"] = {"gpu": gpu}
    return doc("ClusterPolicy", "default", {**base, **spec})


def tier(name: str, value: int, **spec: Any) -> dict[str, Any]:
    """A PriorityTier."""
    return doc("PriorityTier", name, {"value": value, **spec})


TIERS = (
    tier("critical", 1_000_000),
    tier("normal", 1_000, globalDefault=True),
    tier("batch", 10, preemptible=True, preemptionPolicy="Never"),
)


class ProjectBuilder:
    """Builds a Project document; by default one namespace named like the project
    and a max of 8 GPUs."""

    def __init__(self, name: str) -> None:
        self._doc = doc("Project", name, {"namespaces": [name], "quota": {"max": {"gpu": 8}}})

    @property
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._doc["spec"]
        return spec

    def namespaces(self, *names: str) -> ProjectBuilder:
        self._spec["namespaces"] = list(names)
        return self

    def guaranteed(self, **amounts: Any) -> ProjectBuilder:
        self._spec["quota"]["guaranteed"] = amounts
        return self

    def max(self, **amounts: Any) -> ProjectBuilder:
        self._spec["quota"]["max"] = amounts
        return self

    def user_default(self, guaranteed: int, max: int) -> ProjectBuilder:
        users = self._spec.setdefault("users", {})
        users["default"] = {"guaranteed": {"gpu": guaranteed}, "max": {"gpu": max}}
        return self

    def user(self, name: str, guaranteed: int, max: int) -> ProjectBuilder:
        members = self._spec.setdefault("users", {}).setdefault("members", [])
        members.append({"name": name, "guaranteed": {"gpu": guaranteed}, "max": {"gpu": max}})
        return self

    def jobs(self, **jobs: Any) -> ProjectBuilder:
        self._spec["jobs"] = jobs
        return self

    def build(self) -> dict[str, Any]:
        return deepcopy(self._doc)


def project(name: str) -> ProjectBuilder:
    """Start a Project document."""
    return ProjectBuilder(name)


def dump(*docs: Any) -> str:
    """Documents as one multi-document YAML text, in block style."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buf = io.StringIO()
    yaml.dump_all(list(docs), buf)
    return buf.getvalue()


def policy_files(
    *projects: dict[str, Any],
    cluster_doc: dict[str, Any] | None = None,
    tiers: tuple[dict[str, Any], ...] = TIERS,
) -> dict[str, str]:
    """A policy set as files: `cluster.yaml`, `tiers.yaml`, `projects/<name>.yaml`."""
    files = {"cluster.yaml": dump(cluster_doc or cluster()), "tiers.yaml": dump(*tiers)}
    for p in projects:
        files[f"projects/{p['metadata']['name']}.yaml"] = dump(p)
    return files


def sources(files: Files) -> list[Source]:
    """In-memory sources, in the order given."""
    out = []
    for path, content in files.items():
        out.append(_source(path, content))
    return out


def _source(path: str, content: str | bytes | OSError) -> Source:
    if isinstance(content, OSError):
        error = content

        def fail() -> bytes:
            raise error

        return Source(path=path, size=0, read=fail)
    data = content.encode() if isinstance(content, str) else content
    return Source(path=path, size=len(data), read=lambda: data)


def validate(
    files: Files, *, limits: Limits = DEFAULT_LIMITS, extra: Files | None = None
) -> ValidationResult:
    """Validate `files` as a policy set rooted at `.`; `capacityFrom` is
    resolved in `files` and `extra` (files that are no policy documents)."""
    everything = {**files, **(extra or {})}

    def resolve(ref: str) -> Source | None:
        path = posixpath.normpath(ref)
        return _source(path, everything[path]) if path in everything else None

    return validate_sources(sources(files), root=".", resolve=resolve, limits=limits)


def valid_set(files: Files) -> PolicySet:
    """The policy set of `files`, which must be valid."""
    result = validate(files)
    assert result.policy_set is not None, located(result.diagnostics)
    return result.policy_set


def compiled(files: Files, revision: str = "rev1") -> list[dict[str, Any]]:
    """The objects `files` compile to."""
    return compile_policy_set(valid_set(files), revision=revision, source_root=".")


def located(diags: list[Diagnostic]) -> list[tuple[str, str, int]]:
    """(code, file, line) of each diagnostic, in order."""
    return [(d.code, d.file, d.line) for d in diags]
