"""Benchmarks of the policy pipeline (issue: validate + render at scale, hostile files).

Figures, measured in-process with `time.perf_counter` and `tracemalloc`:

- validate + compile of 1,000 generated Project files (plus tiers and a
  ClusterPolicy), from disk: the pull-request check on a large organisation's
  repository. Threshold 2 s, from the issue; measured 2026-12-02 at about
  0.6-0.9 s on the 2-core development machine with ruamel.yaml.clib's C parser
  (`make bench`).
- rejection of a 100 MB policy file and of an alias bomb: threshold 1 s each
  and 10 MiB of peak Python allocation (from the issue: "without large memory
  growth"); measured at well under 10 ms and under 1 MiB.

Run: `make bench` (or `.venv/bin/python -m tests.perf policy`).
"""

from __future__ import annotations

import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from controller.policy.compiler import compile_policy_set
from controller.policy.loader import sources_from_paths
from controller.policy.validate import validate_sources
from tests.perf.harness import Result

__all__ = ["run"]

PROJECTS = 1000
RENDER_LIMIT_S = 2.0
REJECT_LIMIT_S = 1.0
REJECT_PEAK_MIB = 10.0

_CLUSTER = """apiVersion: policy.ai.operator/v1
kind: ClusterPolicy
metadata: {name: default}
spec:
  capacity: {gpu: 100000}
  reserve: {gpu: 8, tiers: [critical]}
"""
_TIERS = "---\n".join(
    f"apiVersion: policy.ai.operator/v1\nkind: PriorityTier\nmetadata: {{name: {name}}}\n"
    f"spec: {{value: {value}, preemptible: {str(name == 'batch').lower()}}}\n"
    for name, value in (("critical", 1000000), ("high", 100000), ("normal", 10000), ("batch", 1))
)
_PROJECT = """# generated project {i}
apiVersion: policy.ai.operator/v1
kind: Project
metadata:
  name: team-{i:04d}
spec:
  namespaces: [team-{i:04d}, team-{i:04d}-dev]
  quota:
    guaranteed: {{gpu: 8, cpu: "64", memory: 512Gi}}
    max: {{gpu: 16, cpu: "128", memory: 1Ti}}
  users:
    default: {{guaranteed: {{gpu: 1}}, max: {{gpu: 8}}}}
    members:
      - {{name: user-{i}-a, guaranteed: {{gpu: 2}}, max: {{gpu: 16}}}}
      - {{name: user-{i}-b, guaranteed: {{gpu: 2}}, max: {{gpu: 16}}}}
  jobs:
    maxGPU: 8  # each namespace's share of the max (GP323)
    tiers: [high, normal, batch]
"""


def _generate(root: Path) -> None:
    (root / "cluster.yaml").write_text(_CLUSTER)
    (root / "tiers.yaml").write_text(_TIERS)
    projects = root / "projects"
    projects.mkdir()
    for i in range(PROJECTS):
        (projects / f"team-{i:04d}.yaml").write_text(_PROJECT.format(i=i))


def _validate_and_compile(root: Path) -> int:
    result = validate_sources(sources_from_paths([root]), root=str(root), resolve=lambda _: None)
    if result.policy_set is None:
        raise AssertionError(f"generated policies are invalid: {result.diagnostics[:3]}")
    return len(compile_policy_set(result.policy_set, revision="bench", source_root=str(root)))


def _seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _measure(fn: Callable[[], object]) -> tuple[float, float]:
    """Seconds and peak MiB allocated while running `fn`."""
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak / 2**20


def _rejected(path: Path, code: str) -> None:
    result = validate_sources(sources_from_paths([path]), root=str(path), resolve=lambda _: None)
    if not any(d.code == code for d in result.diagnostics):
        raise AssertionError(f"{path.name} was not rejected with {code}: {result.diagnostics}")


def _alias_bomb() -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return "\n".join(lines) + "\n"


def run() -> list[Result]:
    """Run the policy benchmarks and return their figures."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "repo")
        root.mkdir()
        _generate(root)
        _validate_and_compile(root)  # warm the schema cache, as a long-running check would be
        best = min(_seconds(lambda: _validate_and_compile(root)) for _ in range(3))

        big = Path(tmp, "big.yaml")
        with big.open("wb") as f:
            f.truncate(100 * 2**20)
        big_s, big_mib = _measure(lambda: _rejected(big, "GP103"))

        bomb = Path(tmp, "bomb.yaml")
        bomb.write_text(_alias_bomb())
        bomb_s, bomb_mib = _measure(lambda: _rejected(bomb, "GP105"))
    return [
        Result(f"policy: validate+render {PROJECTS} project files", best, "s", RENDER_LIMIT_S),
        Result("policy: reject 100 MB file", big_s, "s", REJECT_LIMIT_S),
        Result("policy: reject 100 MB file, peak alloc", big_mib, "MiB", REJECT_PEAK_MIB),
        Result("policy: reject alias bomb", bomb_s, "s", REJECT_LIMIT_S),
        Result("policy: reject alias bomb, peak alloc", bomb_mib, "MiB", REJECT_PEAK_MIB),
    ]
