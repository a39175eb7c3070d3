"""CustomResourceDefinitions, generated from the JSON Schemas in `schemas/`.

The schemas are the one source of truth for every policy kind; the CRDs that
let Argo CD, Flux or kubectl apply policies as custom resources, and the
PolicySource CRD, are derived from them here, so the two cannot drift apart
(a test compares the chart's `charts/gangops/files/crds/` with a fresh generation).

JSON Schema 2020-12 is richer than a CRD's structural OpenAPI v3 schema, so
the translation: local `$ref`s are inlined; `const` becomes a one-value
`enum`; `additionalProperties: false` is dropped (the API server prunes
unknown fields instead); `uniqueItems` becomes `x-kubernetes-list-type: set`;
the integer-or-quantity `anyOf` becomes `x-kubernetes-int-or-string` with
both branches' constraints merged.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

from controller.kube.client import FIELD_MANAGER, RESOURCES, KubeApi

__all__ = [
    "GROUP",
    "JOB_GROUP",
    "KINDS",
    "crd_file_name",
    "generate_crds",
    "install",
    "render_yaml",
    "render_yaml_stream",
]

GROUP = "policy.ai.operator"
VERSION = "v1"

KINDS: dict[str, tuple[str, str, list[str]]] = {
    "PolicySource": ("policysources", "policysource", ["ps"]),
    "ClusterPolicy": ("clusterpolicies", "clusterpolicy", ["cpol"]),
    "PriorityTier": ("prioritytiers", "prioritytier", ["tier"]),
    "Project": ("projects", "project", ["proj"]),
}
"""kind -> (plural, singular, short names). All are cluster-scoped."""

JOB_GROUP = "ai.operator"
"""The group of the namespaced kinds users (not platform teams) write: TrainingJob, QuotaRequest."""

_DROPPED = {"$schema", "$id", "title", "$defs", "$comment"}

_KSTATUS = {
    "type": "object",
    "description": "What the controller observed (kstatus conventions).",
    "properties": {
        "observedGeneration": {"type": "integer", "default": -1},
        "conditions": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}

_READY = '.status.conditions[?(@.type=="Ready")]'
_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "PolicySource": [
        {"name": "URL", "type": "string", "jsonPath": ".spec.url"},
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Status", "type": "string", "jsonPath": f"{_READY}.message"},
        {
            "name": "Revision",
            "type": "string",
            "jsonPath": ".status.lastAppliedRevision",
            "priority": 1,
        },
    ],
    "PriorityTier": [{"name": "Value", "type": "integer", "jsonPath": ".spec.value"}],
    "Project": [{"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces"}],
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    base: dict[str, Any] = {}
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        base = _inline(defs[ref.removeprefix("#/$defs/")], defs)
    return {**base, **{k: _inline(v, defs) for k, v in node.items() if k != "$ref"}}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {str: "string", float: "number", dict: "object", list: "array"}[type(value)]


def _structural(node: Any) -> Any:
    """One schema node in the CRD dialect."""
    if isinstance(node, list):
        return [_structural(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or (key == "additionalProperties" and value is False):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "uniqueItems":
            if value:
                out["x-kubernetes-list-type"] = "set"
        elif key == "properties":
            out[key] = {k: _structural(v) for k, v in value.items()}
        else:
            out[key] = _structural(value)
    branch_types = {b.get("type") for b in out.get("anyOf", ())}
    if branch_types == {"object", "string"}:
        # A short form or an object (a TrainingJob's tolerations): no structural type
        # says that; the API server keeps the value as written, and the controller
        # reads both forms.
        del out["anyOf"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif branch_types == {"integer", "string"}:
        # `minimum` constrains only the integer, `pattern` only the string: merged,
        # they mean what the two branches meant.
        for branch in out.pop("anyOf"):
            out.update({k: v for k, v in branch.items() if k != "type"})
        out["x-kubernetes-int-or-string"] = True
    elif "type" not in out and "enum" in out:
        out["type"] = _json_type(out["enum"][0])
    elif "type" not in out and "properties" in out:
        out["type"] = "object"
    return out


def _crd(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
    plural, singular, short = KINDS[kind]
    full = _inline(schema, schema.get("$defs", {}))
    props = full["properties"]
    status = _structural(props["status"]) if "status" in props else _KSTATUS
    open_api: dict[str, Any] = {
        "type": "object",
        "description": full.get("description", ""),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _structural(props["spec"]),
            "status": {**status, "default": {}},
        },
    }
    if "x-kubernetes-validations" in full:  # rules on the whole object (its name)
        open_api["x-kubernetes-validations"] = full["x-kubernetes-validations"]
    columns = [
        *_COLUMNS.get(kind, []),
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "gangops"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": short,
                "categories": ["gangops"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


_JOB_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
    {"name": "Tier", "type": "string", "jsonPath": ".status.tier"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
]


_QUOTA_COLUMNS: list[dict[str, Any]] = [
    {"name": "Project", "type": "string", "jsonPath": ".spec.project"},
    {"name": "Resource", "type": "string", "jsonPath": ".spec.resource"},
    {"name": "Amount", "type": "string", "jsonPath": ".spec.amount"},
    {"name": "State", "type": "string", "jsonPath": ".status.state"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "PR", "type": "string", "jsonPath": ".status.pullRequest.url", "priority": 1},
]


def _namespaced_crd(
    schema: dict[str, Any],
    *,
    kind: str,
    plural: str,
    short: str,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """A namespaced kind of group `ai.operator` (the ones users, not platform teams,
    write): the schema's CEL rules travel with it (`x-kubernetes-validations`)."""
    crd = _crd("PolicySource", schema)  # the same shape; names, group and scope differ
    spec = crd["spec"]
    crd["metadata"]["name"] = f"{plural}.{JOB_GROUP}"
    spec["group"] = JOB_GROUP
    spec["scope"] = "Namespaced"
    spec["names"] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "shortNames": [short],
        "categories": ["gangops"],
    }
    spec["versions"][0]["additionalPrinterColumns"] = columns
    return crd


def generate_crds(schema_dir: Path) -> list[dict[str, Any]]:
    """The CRDs of every kind in `KINDS`, from `<schema_dir>/<kind>.schema.json`,
    and the namespaced TrainingJob and QuotaRequest CRDs."""
    crds = []
    for kind in KINDS:
        path = schema_dir / f"{kind.lower()}.schema.json"
        crds.append(_crd(kind, json.loads(path.read_text(encoding="utf-8"))))
    for kind, plural, short, columns in (
        ("TrainingJob", "trainingjobs", "tj", _JOB_COLUMNS),
        ("QuotaRequest", "quotarequests", "qr", _QUOTA_COLUMNS),
    ):
        schema = json.loads((schema_dir / f"{kind.lower()}.schema.json").read_text("utf-8"))
        crds.append(_namespaced_crd(schema, kind=kind, plural=plural, short=short, columns=columns))
    return crds


def crd_file_name(crd: dict[str, Any]) -> str:
    """`<group>_<plural>.yaml`, the layout controller-gen uses for charts."""
    spec = crd["spec"]
    return f"{spec['group']}_{spec['names']['plural']}.yaml"


_HEADER = (
    "# Generated by `gangops install-crds --output-dir charts/gangops/files` (from schemas/\n"
    "# and controller/jobs/admission.py); do not edit: change the source and regenerate.\n"
)


def render_yaml(crd: dict[str, Any]) -> str:
    """A CRD (or any object) as a YAML file with a do-not-edit header."""
    return _HEADER + _dump(crd)


def render_yaml_stream(objs: list[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML file with a do-not-edit header."""
    return _HEADER + "".join("---\n" + _dump(o) for o in objs)


def _dump(obj: dict[str, Any]) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    buf = io.StringIO()
    yaml.dump(obj, buf)
    return buf.getvalue()


def install(kube: KubeApi, crds: list[dict[str, Any]], *, timeout_s: float = 30.0) -> None:
    """Server-side apply the CRDs and wait until the API server serves them
    (condition Established); raises TimeoutError naming those that are not."""
    for crd in crds:
        kube.apply(crd, field_manager=FIELD_MANAGER)
    pending = {c["metadata"]["name"] for c in crds}
    deadline = time.monotonic() + timeout_s
    while pending:
        for name in sorted(pending):
            live = kube.get(RESOURCES["CustomResourceDefinition"], name) or {}
            conds = (live.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not established after {timeout_s:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
