"""Auto-approval rules: validated with the policy set, matched first to last."""

from __future__ import annotations

import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

from controller.policy.loader import sources_from_paths
from controller.policy.sources import repository_resolver
from controller.policy.validate import validate_sources
from controller.quota.approval import approval, rules_of

ROOT = Path(__file__).resolve().parents[3]
RULES = """\
  quotaRequests:
    autoApprove:
      - decreases: true
      - maxIncrease: {gpu: 8}
        minUsage: 0.8
"""


def _with_rules(tmp_path: Path, rules: str) -> Path:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    shutil.copytree(ROOT / "clusters", tmp_path / "clusters")
    f = tmp_path / "policies" / "cluster-policy.yaml"
    f.write_text(f.read_text() + rules)
    # capacityFrom reads ../clusters/: within the repository, so make one
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path / "policies"


def test_the_rules_are_validated_with_the_policy_set(tmp_path: Path) -> None:
    root = _with_rules(tmp_path, RULES)
    result = validate_sources(
        sources_from_paths([root]), root=str(root), resolve=repository_resolver([root])
    )
    assert [d.message for d in result.diagnostics if d.is_error] == []
    rules = rules_of([(root / "cluster-policy.yaml").read_text()])
    assert rules == [{"decreases": True}, {"maxIncrease": {"gpu": 8}, "minUsage": 0.8}]


def test_a_misspelt_rule_is_an_error_at_its_line(tmp_path: Path) -> None:
    root = _with_rules(
        tmp_path, "  quotaRequests:\n    autoApprove:\n      - maxIncrese: {gpu: 8}\n"
    )
    result = validate_sources(
        sources_from_paths([root]), root=str(root), resolve=repository_resolver([root])
    )
    errors = [d for d in result.diagnostics if d.is_error and "maxIncrese" in d.message]
    assert len(errors) == 1, result.diagnostics
    assert errors[0].file.endswith("cluster-policy.yaml") and errors[0].line == 37


def test_rules_match_first_to_last() -> None:
    rules = [{"decreases": True}, {"maxIncrease": {"gpu": 8}, "minUsage": 0.8}]
    assert approval(rules, resource="gpu", delta=Fraction(-8), usage=None) == (
        "autoApprove[0]: decreases"
    )
    assert approval(rules, resource="gpu", delta=Fraction(8), usage=0.9) is not None
    assert approval(rules, resource="gpu", delta=Fraction(8), usage=0.5) is None  # too idle
    assert approval(rules, resource="gpu", delta=Fraction(8), usage=None) is None  # unknown
    assert approval(rules, resource="gpu", delta=Fraction(9), usage=0.99) is None  # too much
    assert approval(rules, resource="cpu", delta=Fraction(1), usage=0.99) is None
    assert approval([{"maxIncrease": {"gpu": 4}}], resource="gpu", delta=Fraction(4), usage=None)
    assert approval([], resource="gpu", delta=Fraction(-1), usage=None) is None
