"""Diagnostics where people read them: text, json, GitHub workflow commands, SARIF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator

from controller.cli import main
from controller.policy.diagnostics import CODES, Diagnostic
from controller.policy.report import format_diagnostics, github_step_summary
from tests.unit.policy.builders import policy_files, project

DIAGS = [
    Diagnostic("GP202", "spec.quota.max.gpu: expected an integer", "p/nlp.yaml", 7, 12),
    Diagnostic("GP315", "user 'ann': max gpu 9 GPUs is more than 8", "p/nlp.yaml", 9, 5),
    Diagnostic("GP306", "projects' max gpu adds up to 80", "p/cluster.yaml", 5, 3),
    Diagnostic("GP103", "file is 2000000 bytes", "p/big.yaml"),
]


def test_text() -> None:
    assert format_diagnostics(DIAGS, fmt="text", files=3) == (
        "p/nlp.yaml:7:12: error GP202: spec.quota.max.gpu: expected an integer\n"
        "p/nlp.yaml:9:5: warning GP315: user 'ann': max gpu 9 GPUs is more than 8\n"
        "p/cluster.yaml:5:3: info GP306: projects' max gpu adds up to 80\n"
        "p/big.yaml: error GP103: file is 2000000 bytes\n"
        "2 errors, 1 warning in 3 files\n"
    )


@pytest.mark.parametrize(
    ("diags", "files", "summary"),
    [([], 1, "0 errors, 0 warnings in 1 file"), (DIAGS[:1], 2, "1 error, 0 warnings in 2 files")],
)
def test_text_summary_counts(diags: list[Diagnostic], files: int, summary: str) -> None:
    assert format_diagnostics(diags, fmt="text", files=files).splitlines()[-1] == summary


def test_json() -> None:
    doc = json.loads(format_diagnostics(DIAGS, fmt="json", files=3))
    assert doc["summary"] == {"files": 3, "errors": 2, "warnings": 1, "valid": False}
    assert doc["diagnostics"][0] == {
        "file": "p/nlp.yaml",
        "line": 7,
        "column": 12,
        "severity": "error",
        "code": "GP202",
        "name": "wrong-type",
        "message": "spec.quota.max.gpu: expected an integer",
    }
    assert [d["severity"] for d in doc["diagnostics"]] == ["error", "warning", "info", "error"]
    valid = json.loads(format_diagnostics(DIAGS[1:3], fmt="json", files=1))
    assert valid["summary"]["valid"] is True


def test_github_workflow_commands() -> None:
    lines = format_diagnostics(DIAGS, fmt="github", files=3).splitlines()
    assert lines == [
        "::error file=p/nlp.yaml,line=7,col=12,title=GP202 wrong-type"
        "::spec.quota.max.gpu: expected an integer",
        "::warning file=p/nlp.yaml,line=9,col=5,title=GP315 user-max-above-project"
        "::user 'ann': max gpu 9 GPUs is more than 8",
        "::notice file=p/cluster.yaml,line=5,col=3,title=GP306 max-overcommit"
        "::projects' max gpu adds up to 80",
        "::error file=p/big.yaml,title=GP103 file-too-large::file is 2000000 bytes",
        "2 errors, 1 warning in 3 files",
    ]


def test_github_escapes_data_and_properties() -> None:
    d = Diagnostic("GP101", "100% sure\r\nnext: line, really", "a,b:c%d.yaml", 1, 2)
    (line, _) = format_diagnostics([d], fmt="github", files=1).splitlines()
    assert line == (
        "::error file=a%2Cb%3Ac%25d.yaml,line=1,col=2,title=GP101 yaml-syntax"
        "::100%25 sure%0D%0Anext: line, really"
    )


def test_github_step_summary_table() -> None:
    d = Diagnostic("GP101", "a | b\nc", "x.yaml", 3, 1)
    assert github_step_summary([d], 1) == (
        "## gangops validate\n\n1 error, 0 warnings in 1 file\n\n"
        "| Severity | Code | Location | Message |\n|---|---|---|---|\n"
        # The newline shows as \n (an escaped backslash in markdown), on the one row.
        "| error | GP101 | `x.yaml:3:1` | a \\| b\\\\nc |\n"
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize(("fmt", "appended"), [("github", True), ("text", False)])
def test_github_step_summary_is_appended_when_set(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    appended: bool,
) -> None:
    _write(tmp_path, policy_files(project("p").max(gpu="8").build()))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["validate", ".", "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert "GP202" in out
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert ("| error | GP202 | `projects/p.yaml:" in text) is appended


def test_github_without_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, policy_files())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["validate", "--format", "github"]) == 0
    assert capsys.readouterr().out == "0 errors, 0 warnings in 2 files\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml", "tiers.yaml"]


def _sarif(diags: list[Diagnostic]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(format_diagnostics(diags, fmt="sarif", files=1))
    return doc


@pytest.mark.parametrize(
    "diags",
    [DIAGS, [], [Diagnostic("GP113", "no policy documents found", "my policies")]],
    ids=["mixed", "none", "file-level"],
)
def test_sarif_is_valid_sarif_2_1_0(sarif_schema: dict[str, Any], diags: list[Diagnostic]) -> None:
    doc = _sarif(diags)
    errors = sorted(Draft4Validator(sarif_schema).iter_errors(doc), key=str)
    assert [e.message for e in errors] == []
    assert doc["version"] == "2.1.0"


def test_sarif_validation_catches_a_broken_document(sarif_schema: dict[str, Any]) -> None:
    doc = _sarif(DIAGS)
    doc["runs"][0]["results"][0]["level"] = "fatal"
    assert not Draft4Validator(sarif_schema).is_valid(doc)


def test_sarif_results_and_rules() -> None:
    run = _sarif(DIAGS)["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["GP103", "GP202", "GP306", "GP315"]
    assert rules[1] == {
        "id": "GP202",
        "name": "wrong-type",
        "shortDescription": {"text": CODES["GP202"].doc},
        "defaultConfiguration": {"level": "error"},
    }
    results = run["results"]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert [r["level"] for r in results] == ["error", "warning", "note", "error"]
    assert results[0]["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "p/nlp.yaml"},
        "region": {"startLine": 7, "startColumn": 12},
    }
    assert results[3]["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "p/big.yaml"}
    }


def test_sarif_uri_is_a_uri() -> None:
    (result,) = _sarif([Diagnostic("GP101", "x", "my policies/a#1.yaml", 1, 1)])["runs"][0][
        "results"
    ]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "my%20policies/a%231.yaml"
    )


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        format_diagnostics(DIAGS, fmt="xml", files=1)
