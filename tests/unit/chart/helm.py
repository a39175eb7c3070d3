"""The real `helm`, built from its Go module (tools/helm/build.sh, cached by version),
and the chart rendered by it, for the chart's unit and integration tests.

Building takes minutes the first time (the build prints its progress and time);
without Go the tests that need helm fail and say why, as the control plane's do.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "gangops"
VALUES_DIR = Path(__file__).parent / "values"
BUILD = ROOT / "tools" / "helm" / "build.sh"
KUBE_VERSION = "1.35.4"
"""The local control plane's version (clusters/local/go.mod): what `helm template`
renders for, so capabilities match the server the renders are applied to."""

Obj = dict[str, Any]


@functools.cache
def helm_binary() -> str:
    """The path of helm, built once per version (tools/helm/build.sh)."""
    out = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tools/helm/build.sh failed (exit {out.returncode}); see its output")
    return out.stdout.strip().splitlines()[-1]


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm; with `check`, a failure raises with helm's own words."""
    out = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    return out


def value_files() -> list[Path]:
    """The values files every check runs over (tests/unit/chart/values/)."""
    return sorted(VALUES_DIR.glob("*.yaml"))


def set_args(values: Mapping[str, Any] | None) -> list[str]:
    """`--set-json` arguments that set each top-level key of `values`."""
    import json

    return [a for k, v in (values or {}).items() for a in ("--set-json", f"{k}={json.dumps(v)}")]


def template_text(
    *files: Path,
    values: Mapping[str, Any] | None = None,
    release: str = "gangops",
    namespace: str = "gangops-system",
    extra: Iterable[str] = (),
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION, *extra]
    for f in files:
        args += ["--values", str(f)]
    return helm(*args, *set_args(values), check=check)


def render(*files: Path, values: Mapping[str, Any] | None = None, **kw: Any) -> list[Obj]:
    """The chart rendered by `helm template`, as objects."""
    return parse(template_text(*files, values=values, **kw).stdout)


def parse(text: str) -> list[Obj]:
    yaml = YAML(typ="safe", pure=True)
    return [d for d in yaml.load_all(text) if d]


def find(objs: list[Obj], kind: str, suffix: str = "") -> Obj:
    """The one object of `kind` whose name ends with `suffix`."""
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{len(found)} {kind} objects named *{suffix}"
    return found[0]
