"""The GPU recording rules the chart ships (charts/gangops/files/prometheus/), checked
and run by the real `promtool`: `check rules` (syntax, names, the linter) and `test
rules` over recording-rules.test.yaml, one case per rule with input series.

Without promtool (Debian package `prometheus`) the tests skip, saying how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from controller.devcluster.prometheus import INSTALL_HINT, RECORDING_RULES

HERE = Path(__file__).parent
RULE_TESTS = HERE / "recording-rules.test.yaml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip(f"promtool is not installed: {INSTALL_HINT}")
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, cwd=HERE, timeout=60, check=False
    )


def test_the_rules_pass_promtool_check() -> None:
    out = promtool("check", "rules", str(RECORDING_RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 17 rules found" in out.stdout


def test_each_rule_computes_what_its_test_case_expects() -> None:
    out = promtool("test", "rules", str(RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_rule_has_a_test_case() -> None:
    rules = {
        line.split(":", 1)[1].strip()
        for line in RECORDING_RULES.read_text().splitlines()
        if line.strip().startswith("- record:")
    }
    tested = {
        line.split(":", 1)[1].strip()
        for line in RULE_TESTS.read_text().splitlines()
        if line.strip().startswith("- expr:")
    }
    assert rules == tested
