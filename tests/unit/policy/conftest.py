"""Fixtures for the policy tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SARIF_MODULE = "github.com/owenrumney/go-sarif/v3@v3.3.1"
SARIF_SCHEMA_FILE = "pkg/report/v210/sarif/schema.go"


@pytest.fixture(scope="session")
def sarif_schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The official SARIF 2.1.0 JSON Schema (draft-04).

    It is not vendored: go-sarif embeds it as a Go string constant
    (`const schema = \\`...\\``), so it is fetched with `go mod download`
    (from the module cache when it is there) once per session. Without Go,
    or without the module, the tests that need it are skipped, saying why.
    """
    go = shutil.which("go")
    if go is None:
        pytest.skip("the SARIF 2.1.0 schema is read from a Go module, and `go` is not installed")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    try:
        proc = subprocess.run(
            [go, "mod", "download", "-json", SARIF_MODULE],
            cwd=tmp_path_factory.mktemp("go"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"`go mod download {SARIF_MODULE}` took over 120 s (no network?)")
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        reason = info.get("Error") or proc.stderr.strip() or f"exit {proc.returncode}"
        pytest.skip(f"cannot download {SARIF_MODULE} for the SARIF schema: {reason}")
    source = (Path(info["Dir"]) / SARIF_SCHEMA_FILE).read_text(encoding="utf-8")
    start = source.index("const schema = `") + len("const schema = `")
    schema: dict[str, Any] = json.loads(source[start : source.index("`", start)])
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
    return schema
