"""The values reference in charts/gangops/README.md, generated from values.schema.json
(key, type, default from values.yaml, description), between two markers.

Regenerate with `python -m tests.unit.chart.reference`; a test fails when it is stale.
"""

from __future__ import annotations

import json
from typing import Any

from ruamel.yaml import YAML

from .helm import CHART

README = CHART / "README.md"
BEGIN = "<!-- values reference: generated from values.schema.json; do not edit -->\n"
END = "<!-- end of values reference -->\n"


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    return str(schema.get("type", "refused"))


def _rows(schema: dict[str, Any], defaults: Any, path: str = "") -> list[str]:
    rows = []
    for key, sub in schema.get("properties", {}).items():
        p = f"{path}.{key}" if path else key
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if "properties" in sub:
            rows += _rows(sub, default, p)
            continue
        shown = "" if default is None and key not in (defaults or {}) else json.dumps(default)
        cell = f"`{shown}`" if shown else ""
        desc = sub.get("description", "").replace("|", "\\|")
        rows.append(f"| `{p}` | {_type(sub)} | {cell} | {desc} |")
    return rows


def table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = YAML(typ="safe").load((CHART / "values.yaml").read_text())
    head = "| Key | Type | Default | Description |\n|---|---|---|---|\n"
    return head + "\n".join(_rows(schema, defaults)) + "\n"


def render_reference(readme: str) -> str:
    """`readme` with the text between the markers replaced by a fresh table."""
    before, rest = readme.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return before + BEGIN + table() + END + after


if __name__ == "__main__":
    README.write_text(render_reference(README.read_text()))
    print(f"wrote {README}")
