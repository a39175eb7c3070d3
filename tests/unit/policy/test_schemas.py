"""The JSON Schemas in schemas/: valid 2020-12; the policy kinds' schemas have
closed objects and every field described.

The custom resources' schemas there (TrainingJob, PolicySource) describe
Kubernetes objects, whose metadata and status are open by design; they are
only checked for validity here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from controller.policy.loader import KINDS
from controller.policy.validate import schema_dir
from tests.unit.policy.builders import REPO

SCHEMAS = sorted((REPO / "schemas").glob("*.schema.json"))
POLICY_SCHEMAS = [REPO / "schemas" / f"{kind.lower()}.schema.json" for kind in KINDS]

Schema = dict[str, Any]


def _load(path: Path) -> Schema:
    schema: Schema = json.loads(path.read_text(encoding="utf-8"))
    return schema


def _subschemas(schema: Schema, where: str = "#") -> Iterator[tuple[str, Schema]]:
    """Every schema inside `schema`, with a JSON-pointer-like place."""
    yield where, schema
    for key in ("properties", "$defs", "patternProperties"):
        for name, sub in schema.get(key, {}).items():
            yield from _subschemas(sub, f"{where}/{key}/{name}")
    for key in ("items", "additionalProperties", "not", "contains", "if", "then", "else"):
        if isinstance(schema.get(key), dict):
            yield from _subschemas(schema[key], f"{where}/{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key, [])):
            yield from _subschemas(sub, f"{where}/{key}/{i}")


def _target(root: Schema, schema: Schema) -> Schema:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    assert ref.startswith("#/"), f"only local references are expected, found {ref}"
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def test_there_is_a_schema_per_policy_kind() -> None:
    assert set(POLICY_SCHEMAS) <= set(SCHEMAS)
    assert schema_dir() == REPO / "schemas"


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_schema_is_valid_draft_2020_12(path: Path) -> None:
    schema = _load(path)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def _open_objects(schema: Schema) -> list[str]:
    """Objects that accept unknown keys. Records must say `additionalProperties:
    false`; maps (labels) give a schema for their values instead."""
    found = []
    for where, sub in _subschemas(schema):
        if sub.get("type") != "object" and "properties" not in sub:
            continue
        extra = sub.get("additionalProperties")
        closed = extra is False if "properties" in sub else isinstance(extra, dict)
        if not closed:
            found.append(where)
    return found


def _undescribed(schema: Schema) -> list[str]:
    """Properties without a description, on them or on their `$ref` target."""
    return [
        f"{where}/properties/{name}"
        for where, sub in _subschemas(schema)
        for name, prop in sub.get("properties", {}).items()
        if not (prop.get("description") or _target(schema, prop).get("description"))
    ]


@pytest.mark.parametrize("path", POLICY_SCHEMAS, ids=lambda p: p.name)
def test_every_object_is_closed(path: Path) -> None:
    assert _open_objects(_load(path)) == []


@pytest.mark.parametrize("path", POLICY_SCHEMAS, ids=lambda p: p.name)
def test_every_property_is_described(path: Path) -> None:
    assert _undescribed(_load(path)) == []


def _unbounded(schema: Schema) -> list[str]:
    """Numbers without a `maximum`: a value the controller must then turn into
    a float or a duration (an OverflowError in every scheduling step)."""
    return [
        where
        for where, sub in _subschemas(schema)
        if {"integer", "number"} & set(_as_list(sub.get("type"))) and "maximum" not in sub
    ]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize(
    "path",
    [*POLICY_SCHEMAS, REPO / "schemas" / "schedulingpolicy.schema.json"],
    ids=lambda p: p.name,
)
def test_every_number_is_bounded(path: Path) -> None:
    assert _unbounded(_load(path)) == []


def test_the_checks_find_what_they_look_for() -> None:
    bad: Schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "open": {"type": "object", "properties": {"x": {"description": "d"}}},
            "map": {"type": "object", "description": "no value schema"},
            "ref": {"$ref": "#/$defs/described"},
            "bare": {"type": "string"},
        },
        "$defs": {"described": {"description": "d", "anyOf": [{"type": "object"}]}},
    }
    assert _open_objects(bad) == [
        "#/properties/open",
        "#/properties/map",
        "#/$defs/described/anyOf/0",
    ]
    assert _undescribed(bad) == ["#/properties/open", "#/properties/bare"]
    numbers: Schema = {
        "properties": {
            "n": {"type": "number"},
            "i": {"type": ["integer", "null"], "maximum": 3},
            "q": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
        }
    }
    assert _unbounded(numbers) == ["#/properties/n", "#/properties/q/anyOf/0"]
