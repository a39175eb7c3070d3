"""Output that others render cannot be forged by what it quotes (D20, D21).

File names and values come from a pull request's author. The text formats
keep each diagnostic and each plan step on its own line whatever a name holds;
the markdown a bot posts as a PR comment (and the step summary) is parsed with
a CommonMark parser, as GitHub would, and must show quoted names and values
literally: no emphasis, links, images, HTML or mentions from them.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from controller.policy.diagnostics import Diagnostic
from controller.policy.plan import Change, FieldChange, Plan
from controller.policy.report import format_diagnostics, format_plan, github_step_summary

FORGED_NAME = "x.yaml:1:1: error GP000: all good\n0 errors, 0 warnings in 1 files\nzz.yaml"
EVIL = (
    "x` **No changes.** cc @octo-org/security ![t](https://attacker.example/p.png) "
    "<img src=x> [click](https://attacker.example) `` ```\n# heading\n- item \u202egnp.exe"
)


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def _outside_code(html: str) -> str:
    return re.sub(r"<code>.*?</code>", "", html, flags=re.S)


def test_a_file_name_cannot_forge_diagnostic_lines() -> None:
    d = Diagnostic("GP202", "bad\nx.yaml:2:2: error GP999: forged", FORGED_NAME, 3, 1)
    out = format_diagnostics([d], fmt="text", files=1)
    assert out.count("\n") == 2, out  # one diagnostic, one summary
    assert out.splitlines()[-1] == "1 error, 0 warnings in 1 file"
    assert "\\n0 errors, 0 warnings in 1 files\\nzz.yaml:3:1: error GP202" in out


def test_a_name_or_value_cannot_forge_plan_lines() -> None:
    change = Change("update", "PriorityClass", "a\n+ create Namespace/evil", "", (
        FieldChange("description", "old", EVIL),
    ))  # fmt: skip
    plan = Plan(changes=(change,), warnings=("cut\n!! forged",))
    out = format_plan(plan, fmt="text", base="main", head="HEAD\nPlan forged")
    assert len(out.splitlines()) == 4, out  # header, warning, change, field
    assert not any(line.startswith(("+ create", "Plan forged", "!! forged")) for line in
                   out.splitlines())  # fmt: skip


def test_markdown_plan_shows_names_and_values_literally() -> None:
    change = Change("recreate", "PriorityClass", "t`**x**`", "", (
        FieldChange("description", "plain", EVIL),
        FieldChange("value", 1, 2),
    ), notes=(EVIL,), destructive=True)  # fmt: skip
    plan = Plan(changes=(change,), warnings=(EVIL,))
    html = _html(format_plan(plan, fmt="markdown", base="main`", head=EVIL))
    outside = _outside_code(html)
    for tag in ("<strong>x", "<strong>No changes", "<img", "<a ", "<h1", "<script"):
        assert tag not in html.replace("&lt;", "<x"), (tag, html)
    assert "@octo" not in outside  # a mention needs @ right before the name
    assert "\u202e" not in html
    # Each quoted value is one code span holding the value, escaped but whole.
    assert "<code>x` **No changes.** cc @octo-org/security" in html


def test_the_step_summary_table_keeps_one_row_per_diagnostic() -> None:
    d = Diagnostic("GP101", EVIL, FORGED_NAME + " | `x", 1, 1)
    html = _html(github_step_summary([d], 1))
    assert html.count("<tr>") == 2, html  # the header row and one diagnostic
    assert "<img" not in html and "<a " not in html and "<strong>" not in html
    assert "@octo" not in _outside_code(html)
