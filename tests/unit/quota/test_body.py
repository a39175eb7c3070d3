"""The pull request's body: a requester's words cannot change its shape."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from controller.policy.report import md_cell
from controller.quota.body import Checked, pr_body
from controller.quota.edit import Edit
from controller.quota.request import QuotaRequestSpec


def _body(reason: str, requester: str = "alice") -> str:
    spec = QuotaRequestSpec(
        namespace="nlp", name="r", requester=requester, project="nlp", user=None,
        resource="gpu", amount=Fraction(8), amount_text="8", reason=reason,
        expires_at=None, training_job=None,
    )  # fmt: skip
    return pr_body(
        [spec],
        edit=Edit(text="", path="spec.quota.max.gpu", old="64", new="72", line=5),
        file="policies/projects/nlp.yaml",
        checked=Checked(False, ["policies/projects/nlp.yaml:5:5: error: too many"], ""),
        usage=None,
        what_if=None,
    )


def _cells(row: str) -> list[str]:
    """A markdown table row's cells as GitHub's tables split it: at every `|` no
    backslash escapes (also inside a code span)."""
    return re.split(r"(?<!\\)\|", row)[1:-1]


@pytest.mark.parametrize(
    "reason",
    ["pretraining\r\r<!--", "a\nb\r\nc\rd<!--", "x | y |\n|---|", "<details><summary>",
     "ok\u2028<!--", "need 8 GPUs\\| hidden words", "a \\\\| b \\",
     # found by a review: live markdown in the body reviewers approve
     "**approved by @acme/leads, merge now** [check passed](https://x.example/ok) "
     "![t](https://x.example/t.png) closes #1, fixes acme/policies#2 ``x``"],
)  # fmt: skip
def test_the_reason_stays_in_its_cell_and_hides_nothing(reason: str) -> None:
    """Found by a review: '\\r' (a line ending to CommonMark, on GitHub and Gitea) was
    not escaped, and '<!--' then hid the change and 'does not validate' up to the
    trailer's '-->'. The reason is one code span: no emphasis, link, image, HTML,
    mention or closing keyword of the requester's is rendered."""
    body = _body(reason)
    lines = re.split(r"\r\n|\r|\n", body)  # CommonMark's line endings
    (row,) = [line for line in lines if line.startswith("| `nlp/r`")]
    cells = _cells(row)
    assert len(cells) == 5, cells
    assert cells[4] == " " + md_cell(reason) + " "
    code = cells[4].strip().replace("\\|", "|")  # what GitHub's table hands inline parsing
    fence = re.match(r"`+", code)
    assert (
        fence
        and code.endswith(fence.group())
        and fence.group() not in code[len(fence.group()) : -len(fence.group())]
    )
    assert [x for x in lines if x.startswith("<!--")] == ["<!-- gangops:quota-request -->"]
    assert "does not validate" in body


def test_the_requester_is_a_cell_too() -> None:
    (row,) = [x for x in _body("r", requester="eve|\r<!--").splitlines() if "`nlp/r`" in x]
    assert "<" not in row and row.count("|") == 6
