"""Printing diagnostics and plans where people read them.

Diagnostics: `text` (`file:line:col: error GP123: message`, what editors and
terminals link), `json`, `github` (workflow commands that annotate the pull
request, plus a step summary when `GITHUB_STEP_SUMMARY` is set) and `sarif`
(SARIF 2.1.0 for code-scanning uploads). Plans: `text`, `markdown` (a
pull-request comment kept under GitHub's 65,536-character limit) and `json`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from controller import __version__
from controller.policy.diagnostics import CODES, Diagnostic, Severity
from controller.policy.plan import Change, Plan

__all__ = [
    "DIAGNOSTIC_FORMATS",
    "GITHUB_COMMENT_LIMIT",
    "PLAN_FORMATS",
    "format_diagnostics",
    "format_plan",
    "github_step_summary",
    "md_cell",
    "md_code",
    "summary_line",
]

DIAGNOSTIC_FORMATS = ("text", "json", "github", "sarif")
PLAN_FORMATS = ("text", "markdown", "json")
GITHUB_COMMENT_LIMIT = 65536
_CAUTION_STEPS = 20
"""Destructive steps named in the markdown plan's caution box; the rest follow it."""
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def summary_line(diags: Sequence[Diagnostic], files: int) -> str:
    """`2 errors, 1 warning in 7 files` (info diagnostics are not counted)."""
    n = Counter(d.level for d in diags)
    e, w = n[Severity.ERROR], n[Severity.WARNING]
    return (
        f"{e} error{'s' * (e != 1)}, {w} warning{'s' * (w != 1)} "
        f"in {files} file{'s' * (files != 1)}"
    )


def format_diagnostics(diags: Sequence[Diagnostic], *, fmt: str, files: int) -> str:
    """The diagnostics in `fmt` (one of `DIAGNOSTIC_FORMATS`), ending in a newline."""
    if fmt == "text":
        lines = [_text(d) for d in diags]
        return "\n".join([*lines, summary_line(diags, files)]) + "\n"
    if fmt == "json":
        doc = {
            "diagnostics": [_json(d) for d in diags],
            "summary": {
                "files": files,
                "errors": sum(d.level is Severity.ERROR for d in diags),
                "warnings": sum(d.level is Severity.WARNING for d in diags),
                "valid": not any(d.is_error for d in diags),
            },
        }
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "github":
        lines = [_github(d) for d in diags]
        return "\n".join([*lines, summary_line(diags, files)]) + "\n"
    if fmt == "sarif":
        return json.dumps(_sarif(diags), indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]"
)


def _printable(s: str) -> str:
    """`s` on one line as it is: control characters, line and paragraph
    separators and bidirectional overrides become escapes (`\\n`, `\\x1b`,
    `\\u202e`), so a file name or a value cannot start a line of its own, move
    the cursor or reorder what a reader sees."""

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
        if c in named:
            return named[c]
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _UNPRINTABLE.sub(escape, s)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<|~&])")
_MD_BLOCK_START = re.compile(r"^(\s*|\s*\d+)([-+=#>]|(?<=\d)[.)])")


def md_code(s: str) -> str:
    """`s` as a markdown code span that shows it literally: on one line, fenced by
    a run of backticks longer than any inside (CommonMark), so nothing in it is
    bold, a link, an image or a mention."""
    s = _printable(s)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_cell(s: str) -> str:
    """`s` as a code span (`md_code`) in one markdown table cell: its `|` escaped,
    as GitHub's tables read it even inside a code span."""
    return md_code(s).replace("|", "\\|")


def _md_text(s: str) -> str:
    """`s` as markdown text that renders literally: on one line, the characters
    that make emphasis, code, links, images, HTML and tables backslash-escaped,
    nothing at its start that opens a block, no autolink and no mention."""
    t = _MD_SPECIAL.sub(r"\\\1", _printable(s))
    t = _MD_BLOCK_START.sub(r"\1\\\2", t)
    t = re.sub(r"://", r"\\://", t)
    t = re.sub(r"(?i)\b(www)\.", r"\1\\.", t)
    return t.replace("@", "@\u200b")


def _where(d: Diagnostic) -> str:
    if d.line:
        return f"{d.file}:{d.line}:{d.column}"
    return d.file


def _text(d: Diagnostic) -> str:
    return _printable(f"{_where(d)}: {d.level.value} {d.code}: {d.message}")


def _json(d: Diagnostic) -> dict[str, Any]:
    return {
        "file": d.file,
        "line": d.line,
        "column": d.column,
        "severity": d.level.value,
        "code": d.code,
        "name": CODES[d.code].name,
        "message": d.message,
    }


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def _github(d: Diagnostic) -> str:
    command = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    props = [f"file={_escape_property(d.file)}"]
    if d.line:
        props += [f"line={d.line}", f"col={d.column}"]
    props.append(f"title={_escape_property(f'{d.code} {CODES[d.code].name}')}")
    return f"::{command[d.level]} {','.join(props)}::{_escape_data(d.message)}"


def github_step_summary(diags: Sequence[Diagnostic], files: int) -> str:
    """A markdown table of the diagnostics for `$GITHUB_STEP_SUMMARY`."""
    out = ["## gangops validate", "", summary_line(diags, files), ""]
    if diags:
        out += ["| Severity | Code | Location | Message |", "|---|---|---|---|"]
        for d in diags:
            where = md_cell(_where(d))
            out.append(f"| {d.level.value} | {d.code} | {where} | {_md_text(d.message)} |")
    return "\n".join(out) + "\n"


def _sarif(diags: Sequence[Diagnostic]) -> dict[str, Any]:
    used = sorted({d.code for d in diags})
    index = {code: i for i, code in enumerate(used)}
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    results = []
    for d in diags:
        location: dict[str, Any] = {"artifactLocation": {"uri": quote(d.file or ".")}}
        if d.line:
            location["region"] = {"startLine": d.line, "startColumn": max(d.column, 1)}
        results.append(
            {
                "ruleId": d.code,
                "ruleIndex": index[d.code],
                "level": level[d.level],
                "message": {"text": d.message},
                "locations": [{"physicalLocation": location}],
            }
        )
    rules = [
        {
            "id": code,
            "name": CODES[code].name,
            "shortDescription": {"text": CODES[code].doc},
            "defaultConfiguration": {"level": level[CODES[code].severity]},
        }
        for code in used
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gangops",
                        "version": __version__,
                        "informationUri": "https://github.com/gangops/gangops",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }


_SYMBOL = {"create": "+", "update": "~", "recreate": "-/+", "delete": "-"}


def _value(v: Any, limit: int = 160) -> str:
    text = "(absent)" if v is None else json.dumps(v, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_plan(plan: Plan, *, fmt: str, base: str, head: str) -> str:
    """The plan in `fmt` (one of `PLAN_FORMATS`), ending in a newline."""
    if fmt == "json":
        return json.dumps(_plan_json(plan, base, head), indent=2) + "\n"
    if fmt == "text":
        return _plan_text(plan, base, head)
    if fmt == "markdown":
        return _plan_markdown(plan, base, head)
    raise ValueError(f"unknown format {fmt!r}")


def _counts(plan: Plan) -> str:
    c = plan.counts()
    return (
        f"{c['create']} to create, {c['update']} to update, "
        f"{c['recreate']} to recreate, {c['delete']} to delete"
    )


def _plan_json(plan: Plan, base: str, head: str) -> dict[str, Any]:
    return {
        "base": base,
        "head": head,
        "destructive": plan.destructive,
        "counts": plan.counts(),
        "warnings": list(plan.warnings),
        "changes": [
            {
                "action": c.action,
                "kind": c.kind,
                "namespace": c.namespace or None,
                "name": c.name,
                "destructive": c.destructive,
                "notes": list(c.notes),
                "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in c.fields],
            }
            for c in plan.changes
        ],
    }


def _plan_text(plan: Plan, base: str, head: str) -> str:
    return "\n".join(_printable(line) for line in _plan_lines(plan, base, head)) + "\n"


def _plan_lines(plan: Plan, base: str, head: str) -> list[str]:
    out = [f"Plan {base} -> {head}: {_counts(plan)}"]
    if not plan.changes and not plan.warnings:
        out.append("No changes. The cluster already matches the policies.")
    for w in plan.warnings:
        out.append(f"!! DESTRUCTIVE: {w}")
    for c in plan.changes:
        flag = "  !! DESTRUCTIVE" if c.destructive else ""
        out.append(f"{_SYMBOL[c.action]} {c.action} {c.id}{flag}")
        for f in c.fields:
            out.append(f"      {f.path}: {_value(f.old)} -> {_value(f.new)}")
        for n in c.notes:
            out.append(f"      note: {n}")
    return out


def _change_md(c: Change) -> list[str]:
    flag = " :warning: **destructive**" if c.destructive else ""
    lines = [f"- **{c.action}** {md_code(c.id)}{flag}"]
    lines += [
        f"  - {md_code(f.path)}: {md_code(_value(f.old))} → {md_code(_value(f.new))}"
        for f in c.fields
    ]
    lines += [f"  - {_md_text(n)}" for n in c.notes]
    return lines


def _plan_markdown(plan: Plan, base: str, head: str) -> str:
    head_lines = [
        "### gangops plan",
        "",
        f"{md_code(base)} → {md_code(head)}: **{_counts(plan)}**",
        "",
    ]
    body: list[str] = []
    if plan.destructive:
        steps = [
            *(_md_text(w) for w in plan.warnings),
            *(f"{c.action} {md_code(c.id)}" for c in plan.changes if c.destructive),
        ]
        head_lines += ["> [!CAUTION]", "> This change has destructive steps:"]
        head_lines += [f"> - {step}" for step in steps[:_CAUTION_STEPS]]
        if len(steps) > _CAUTION_STEPS:
            head_lines.append(f"> - …and {len(steps) - _CAUTION_STEPS} more, listed below")
            # The changes below are flagged themselves; the warnings are not.
            body += [f"- :warning: {_md_text(w)}" for w in plan.warnings[_CAUTION_STEPS:]]
        head_lines.append("")
    if not plan.changes and not plan.warnings:
        head_lines.append("No changes.")
    for c in plan.changes:
        body += _change_md(c)
    budget = GITHUB_COMMENT_LIMIT - 1024 - sum(len(x) + 1 for x in head_lines)
    kept: list[str] = []
    used = 0
    for line in body:
        if used + len(line) + 1 > budget:
            rest = len(body) - len(kept)
            kept.append(
                f"\n…{rest} more lines cut to fit a GitHub comment; "
                "run `gangops plan --format text` for the whole plan."
            )
            break
        kept.append(line)
        used += len(line) + 1
    if kept:
        kept = ["<details open><summary>Changes</summary>", "", *kept, "", "</details>"]
    return "\n".join(head_lines + kept) + "\n"
