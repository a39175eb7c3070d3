"""The Argo CD health script for PolicySources (clusters/argocd), run by a real Lua.

Argo CD runs the script with the object in the global `obj` and reads the
`status` and `message` of the table it returns; so does this test, with the
`lua5.4` (or `lua`) interpreter. Without one the test is skipped, saying how
to install it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ARGOCD = Path(__file__).resolve().parents[3] / "clusters" / "argocd"
SCRIPT = ARGOCD / "health-policysource.lua"
KEY = "resource.customizations.health.policy.ai.operator_PolicySource"


def _lua(value: Any) -> str:
    """A Python value as a Lua table constructor."""
    if isinstance(value, dict):
        return "{" + ",".join(f"[{json.dumps(k)}]={_lua(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "{" + ",".join(_lua(v) for v in value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = shutil.which("lua5.4") or shutil.which("lua")
    if lua is None:
        pytest.skip("no Lua interpreter: install one (Debian: apt-get install lua5.4)")
    program = (
        f"obj = {_lua(obj)}\n"
        f"local hs = dofile({json.dumps(str(SCRIPT))})\n"
        'io.write(hs.status, "\\t", hs.message)\n'
    )
    out = subprocess.run([lua, "-e", program], capture_output=True, text=True, check=True)
    status, _, message = out.stdout.partition("\t")
    return status, message


def source(generation: int = 2, observed: int = 2, **conds: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PolicySource",
        "metadata": {"name": "main", "generation": generation},
        "spec": {"url": "https://example.com/p.git"},
        "status": {
            "observedGeneration": observed,
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": f"{t} says {r}"}
                for t, (s, r) in ((t, (v[0], v[1])) for t, v in conds.items())
            ],
        },
    }


@pytest.mark.parametrize(
    ("obj", "status", "message"),
    [
        (source(Ready=("True", "ReconciliationSucceeded")), "Healthy", "Ready says"),
        (
            source(Ready=("False", "ValidationFailed"), Stalled=("True", "ValidationFailed")),
            "Degraded",
            "ValidationFailed: Stalled says ValidationFailed",
        ),
        (
            source(
                Ready=("False", "GitOperationFailed"), Reconciling=("True", "GitOperationFailed")
            ),
            "Progressing",
            "Reconciling says",
        ),
        (
            source(observed=1, Ready=("True", "ReconciliationSucceeded")),
            "Progressing",
            "generation 2",
        ),
        (source(observed=-1), "Progressing", "generation 2"),
        ({"metadata": {"name": "x", "generation": 1}, "spec": {}}, "Progressing", "waiting"),
        ({**source(), "spec": {"suspend": True}}, "Suspended", "suspended"),
    ],
)
def test_health(obj: dict[str, Any], status: str, message: str) -> None:
    got_status, got_message = health(obj)
    assert got_status == status
    assert message in got_message


def test_the_argocd_cm_patch_carries_the_same_script() -> None:
    patch = YAML(typ="safe").load((ARGOCD / "argocd-cm.patch.yaml").read_text())
    assert patch["data"][KEY] == SCRIPT.read_text()
