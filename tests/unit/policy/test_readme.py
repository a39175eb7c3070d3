"""The README's diagnostic-code table and the code registry say the same thing."""

from __future__ import annotations

import re

from controller.policy.diagnostics import CODES
from tests.unit.policy.builders import REPO

ROW = re.compile(r"^\|\s*(GP\d{3})\s*\|\s*([a-z0-9-]+)\s*\|\s*(error|warning|info)\s*\|")


def _readme_codes() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            assert m[1] not in rows, f"{m[1]} is listed twice in README.md"
            rows[m[1]] = (m[2], m[3])
    return rows


def test_every_code_is_documented_and_every_documented_code_exists() -> None:
    documented = _readme_codes()
    registered = {c.id: (c.name, c.severity.value) for c in CODES.values()}
    assert sorted(set(registered) - set(documented)) == [], "codes missing from README.md"
    assert sorted(set(documented) - set(registered)) == [], "README.md lists unknown codes"
    assert documented == registered
