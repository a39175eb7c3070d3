"""Validation: documents -> JSON Schema -> typed model -> semantic rules.

This is the one entry point the CLI, the planner and the reconciler use to
turn files into a `PolicySet`. It collects every problem of every file
instead of stopping at the first, and only hands out a `PolicySet` when there
is no error, so nothing downstream ever sees a half-valid policy.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from controller.clusterspec import ClusterSpecError, parse_cluster
from controller.policy import rules
from controller.policy.compiler import MAX_CONFIGMAP_BYTES, policy_json
from controller.policy.diagnostics import Diagnostic, did_you_mean, sort_key
from controller.policy.loader import (
    DEFAULT_LIMITS,
    KINDS,
    Document,
    Limits,
    Source,
    load_data,
    load_sources,
)
from controller.policy.model import (
    ClusterPolicy,
    PolicySet,
    PriorityTier,
    Project,
    build_cluster_policy,
    build_project,
    build_tier,
)
from controller.quantity import QuantityError, parse_quantity, too_large
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE, POLICY_CONFIGMAP, POLICY_KEY

__all__ = [
    "OutsideRepository",
    "ValidationResult",
    "check_scheduling_policy",
    "schema_dir",
    "validate_sources",
]

Resolver = Callable[[str], Source | None]
"""Finds a file by its path relative to the policy root (for `capacityFrom`); None
when there is none, `OutsideRepository` when the path leads out of the repository."""


class OutsideRepository(Exception):
    """A `capacityFrom` path that leads out of the policy repository (by `..`, an
    absolute path or a symbolic link): policies describe the repository, never
    the host that happens to validate or apply them."""


@dataclass
class ValidationResult:
    """Everything a validation run found."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    policy_set: PolicySet | None = None
    """Set only when there are no errors."""
    files: int = 0
    documents: int = 0

    @property
    def ok(self) -> bool:
        """True when no diagnostic is an error."""
        return not any(d.is_error for d in self.diagnostics)


def schema_dir() -> Path:
    """Where the JSON Schemas live: `$GANGOPS_SCHEMAS`, else `schemas/` of the source tree."""
    env = os.environ.get("GANGOPS_SCHEMAS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "schemas"


@cache
def _validator(kind: str) -> Draft202012Validator:
    path = schema_dir() / f"{kind.lower()}.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    return Draft202012Validator(_inline_refs(schema, schema.get("$defs", {})))


def check_scheduling_policy(doc: Mapping[str, Any]) -> None:
    """Raise ValueError unless `doc` is a compiled scheduling policy as
    `schemas/schedulingpolicy.schema.json` describes it: the check for every copy
    of it built by hand rather than by `compiler.scheduling_policy`."""
    validator = _validator("SchedulingPolicy")
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        raise ValueError(f"not a compiled scheduling policy: at {where}: {e.message}")


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with its local `#/$defs/...` references replaced by their
    targets: the same meaning, and a third faster to validate with."""
    if isinstance(node, list):
        return [_inline_refs(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _inline_refs(v, defs) for k, v in node.items() if k != "$defs"}
    ref = out.pop("$ref", None)
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {**target, **out}
    if ref is not None:
        out["$ref"] = ref
    return out


def validate_sources(
    sources: Iterable[Source],
    *,
    root: str,
    resolve: Resolver,
    limits: Limits = DEFAULT_LIMITS,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
) -> ValidationResult:
    """Validate a policy set given as files. `root` labels set-wide problems;
    `system_namespace` (gangops' own) may not belong to a project."""
    loaded = load_sources(sources, limits=limits)
    result = ValidationResult(files=loaded.files, documents=len(loaded.documents))
    diags = list(loaded.diagnostics)
    if not loaded.documents and not any(d.is_error for d in diags):
        diags.append(Diagnostic("GP113", "no policy documents found", root))
    clusters: list[ClusterPolicy] = []
    tiers: list[PriorityTier] = []
    projects: list[Project] = []
    for doc in loaded.documents:
        problems = list(_schema_problems(doc))
        diags += problems
        if any(p.is_error for p in problems):
            continue
        if doc.kind == "ClusterPolicy":
            gpus, capacity_diags = _capacity_from(doc, resolve, limits)
            diags += capacity_diags
            clusters.append(build_cluster_policy(doc, capacity_gpu=gpus))
        elif doc.kind == "PriorityTier":
            tiers.append(build_tier(doc))
        else:
            projects.append(build_project(doc))
    if loaded.documents:
        diags += rules.check(
            documents=loaded.documents,
            clusters=clusters,
            tiers=tiers,
            projects=projects,
            root=root,
            system_namespace=system_namespace,
        )
    result.diagnostics = sorted(set(diags), key=sort_key)
    if result.ok and len(clusters) == 1:
        policy_set = PolicySet(
            cluster=clusters[0],
            tiers=tuple(sorted(tiers, key=lambda t: t.name)),
            projects=tuple(sorted(projects, key=lambda p: p.name)),
        )
        too_large = _too_large(policy_set, root)
        if too_large is None:
            result.policy_set = policy_set
        else:
            result.diagnostics = sorted([*result.diagnostics, too_large], key=sort_key)
    return result


def _too_large(policy_set: PolicySet, root: str) -> Diagnostic | None:
    """GP320 when the API server would refuse the scheduling-policy ConfigMap."""
    size = len(policy_json(policy_set))
    if size <= MAX_CONFIGMAP_BYTES:
        return None
    members = sum(len(p.members) for p in policy_set.projects)
    return Diagnostic(
        "GP320",
        f"the compiled scheduling policy (the ConfigMap {POLICY_CONFIGMAP}, key {POLICY_KEY}) "
        f"is {size:,} bytes, over the {MAX_CONFIGMAP_BYTES:,} bytes the API server allows "
        f"in a ConfigMap ({len(policy_set.projects):,} projects, {members:,} named users); "
        "name fewer users (users.default covers everyone not listed) or fewer projects",
        root,
    )


def _capacity_from(
    doc: Document, resolve: Resolver, limits: Limits
) -> tuple[int | None, list[Diagnostic]]:
    spec = doc.data["spec"]
    ref = spec.get("capacityFrom")
    has_gpu = isinstance(spec.get("capacity"), dict) and "gpu" in spec["capacity"]
    line, col = doc.pos(("spec", "capacityFrom") if ref else ("spec",))
    if ref is None:
        if has_gpu:
            return None, []
        msg = "set capacity.gpu, or capacityFrom naming a cluster description"
        return None, [Diagnostic("GP317", msg, doc.file, line, col)]
    if ref.startswith(("/", "\\", "~")) or (len(ref) > 1 and ref[1] == ":"):
        msg = f"capacityFrom: {ref!r} must be a path relative to the policy root"
        return None, [Diagnostic("GP317", msg, doc.file, line, col)]
    try:
        src = resolve(ref)
    except OutsideRepository as e:
        return None, [Diagnostic("GP317", f"capacityFrom: {e}", doc.file, line, col)]
    if src is None:
        return None, [Diagnostic("GP317", f"capacityFrom: {ref!r} not found", doc.file, line, col)]
    if src.refused is not None:
        msg = f"capacityFrom: {ref!r} {src.refused}"
        return None, [Diagnostic("GP317", msg, doc.file, line, col)]
    # Read as policy files are: the same size, nesting and alias-expansion limits.
    documents, problems = load_data(src, limits=limits)
    errors = [d for d in problems if d.is_error]
    if errors:
        where = f"{ref}:{errors[0].line}:{errors[0].column}" if errors[0].line else ref
        msg = f"capacityFrom: {where}: {errors[0].code} {errors[0].message}"
        return None, [Diagnostic("GP317", msg, doc.file, line, col)]
    if len(documents) != 1:
        msg = f"capacityFrom: {ref!r} must hold one document, found {len(documents)}"
        return None, [Diagnostic("GP317", msg, doc.file, line, col)]
    try:
        cluster = parse_cluster(documents[0], source=ref)
    except ClusterSpecError as e:
        return None, [Diagnostic("GP317", f"capacityFrom: {e}", doc.file, line, col)]
    return cluster.total_gpus, []


def _schema_problems(doc: Document) -> Iterator[Diagnostic]:
    if doc.kind not in KINDS:
        return
    validator = _validator(doc.kind)
    reported: set[tuple[str | int, ...]] = set()
    for err in validator.iter_errors(doc.data):
        reported.add(tuple(err.absolute_path))
        yield from _translate(doc, err)
    for d, path in _quantities(doc, doc.data, ()):
        if path not in reported:
            yield d


def _translate(doc: Document, err: ValidationError) -> Iterator[Diagnostic]:
    path = tuple(err.absolute_path)
    where = _dotted(path) or "document"
    line, col = doc.pos(path)
    schema = err.schema if isinstance(err.schema, dict) else {}
    kind = err.validator
    if kind == "additionalProperties" and isinstance(err.instance, dict):
        known = list(schema.get("properties", {}))
        for key in err.instance:
            if key in known:
                continue
            kline, kcol = doc.pos((*path, key))
            hint = did_you_mean(str(key), known)
            allowed = f"; allowed: {', '.join(known)}" if known and not hint else ""
            yield Diagnostic(
                "GP201",
                f"{_dotted((*path, key))}: unknown field {key!r}{hint}{allowed}",
                doc.file,
                kline,
                kcol,
            )
    elif kind == "required":
        missing = err.message.split("'")[1] if "'" in err.message else str(err.message)
        yield Diagnostic(
            "GP203", f"{where}: missing required field {missing!r}", doc.file, line, col
        )
    elif kind == "type":
        yield Diagnostic(
            "GP202",
            f"{where}: expected {_types(err.validator_value)}, found "
            f"{_type_name(err.instance)} {_short(err.instance)}",
            doc.file,
            line,
            col,
        )
    elif kind == "anyOf" and path and path[-1] in ("cpu", "memory"):
        value = err.instance
        fraction = isinstance(value, float) and math.isfinite(value) and value >= 0
        yield Diagnostic(
            "GP312",
            # A number with a fraction is a quantity, but these fields take a whole
            # number or a string, as the policy CRDs do (int-or-string).
            f'{where}: {_short(value)} must be quoted ("{value}") or written in '
            "smaller units (500m): a quantity here is a whole number or a string"
            if fraction
            else f"{where}: {_short(value)} is not a Kubernetes quantity "
            "(examples: 8, 500m, 64Gi, 2Ti)",
            doc.file,
            line,
            col,
        )
    elif (
        doc.kind == "PriorityTier" and path == ("spec", "value") and kind in ("minimum", "maximum")
    ):
        yield Diagnostic(
            "GP308",
            f"spec.value {err.instance} is outside -2147483648..1000000000 "
            "(higher values are reserved for system classes)",
            doc.file,
            line,
            col,
        )
    else:
        yield Diagnostic("GP204", f"{where}: {_constraint(err)}", doc.file, line, col)


_RESOURCE_KEYS = ("capacity", "guaranteed", "max")
"""Keys whose values are resource amounts (cpu and memory are quantities there)."""


def _quantities(
    doc: Document, value: Any, path: tuple[str | int, ...]
) -> Iterator[tuple[Diagnostic, tuple[str | int, ...]]]:
    """Quantities the schema's pattern lets through but the parser refuses
    (e.g. 1e99), or that are more than Kubernetes can hold (e.g. 1000E cores),
    each with its path."""
    if isinstance(value, dict):
        for k, v in value.items():
            amount = bool(path) and path[-1] in _RESOURCE_KEYS and k in ("cpu", "memory")
            if amount and isinstance(v, str | int) and not isinstance(v, bool):
                where = _dotted((*path, k))
                try:
                    why = too_large(k, parse_quantity(v))
                    hint = "; leave it out for no ceiling" if path[-1] == "max" else ""
                    msg = f"{where}: {_short(v)} is {why}{hint}" if why else None
                except QuantityError as e:
                    msg = f"{where}: {e}"
                if msg is not None:
                    line, col = doc.pos((*path, k))
                    yield Diagnostic("GP312", msg, doc.file, line, col), (*path, k)
            else:
                yield from _quantities(doc, v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _quantities(doc, v, (*path, i))


def _constraint(err: ValidationError) -> str:
    v, value = err.validator, err.validator_value
    found = _short(err.instance)
    messages = {
        "minimum": f"{found} is less than the minimum of {value}",
        "maximum": f"{found} is more than the maximum of {value}",
        "enum": f"{found} is not one of {', '.join(repr(x) for x in _as_list(value))}",
        "const": f"{found} must be {value!r}",
        "minLength": "must not be empty" if value == 1 else f"must be at least {value} characters",
        "maxLength": f"is longer than {value} characters",
        "minItems": "must have at least one item" if value == 1 else f"needs {value}+ items",
        "uniqueItems": f"{found} has duplicate items",
        "pattern": f"{found} does not match {value}",
    }
    return messages.get(str(v), err.message)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _dotted(path: Iterable[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _types(value: Any) -> str:
    names = {"integer": "an integer", "string": "a string", "boolean": "true or false",
             "object": "a mapping", "array": "a list", "number": "a number"}  # fmt: skip
    if isinstance(value, list):
        return " or ".join(names.get(str(v), str(v)) for v in value)
    return names.get(str(value), str(value))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", dict: "mapping", list: "list"}.get(
        type(value), type(value).__name__
    )


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
