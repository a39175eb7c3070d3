"""The minimal edit: one value changed, every other byte of the file kept."""

from __future__ import annotations

import difflib
from fractions import Fraction
from pathlib import Path

import pytest

from controller.quota.edit import EditError, edit_max, read_max

ROOT = Path(__file__).resolve().parents[3]

BLOCK = """\
# Vision: image models.   (a comment the edit must keep)
apiVersion: policy.ai.operator/v1
kind: Project
metadata:
  name: vision
spec:
  namespaces:
    - vision
  quota:
    max:
      memory: "1Ti"     # quoted on purpose
      gpu: 16           # keys out of the usual order
      cpu: '128'
  users:
    default:
      max:
        gpu: 4
    members:
      - name: dana
        max:
          gpu: 8
      # the last member; a comment after it
      - name: erin
        guaranteed: {gpu: 2}
---
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {name: other}
spec:
  namespaces: [other]
  quota: {max: {gpu: 16}}
"""


def _diff(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=0)
        if line[0] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_the_project_max_changes_in_place_in_a_block_mapping_with_comments() -> None:
    e = edit_max(BLOCK, project="vision", user=None, resource="gpu", delta=Fraction(8))
    assert _diff(BLOCK, e.text) == [
        "-      gpu: 16           # keys out of the usual order\n",
        "+      gpu: 24           # keys out of the usual order\n",
    ]
    assert (e.path, e.old, e.new, e.line) == ("spec.quota.max.gpu", "16", "24", 12)


def test_quoting_is_kept_and_quantities_add_up() -> None:
    e = edit_max(BLOCK, project="vision", user=None, resource="memory", delta=Fraction(2**39))
    assert _diff(BLOCK, e.text) == [
        '-      memory: "1Ti"     # quoted on purpose\n',
        '+      memory: "1536Gi"     # quoted on purpose\n',
    ]
    e = edit_max(BLOCK, project="vision", user=None, resource="cpu", delta=Fraction(64))
    assert _diff(BLOCK, e.text) == ["-      cpu: '128'\n", "+      cpu: '192'\n"]


def test_only_the_named_document_of_a_multi_document_file_changes() -> None:
    e = edit_max(BLOCK, project="other", user=None, resource="gpu", delta=Fraction(1))
    assert _diff(BLOCK, e.text) == ["-  quota: {max: {gpu: 16}}\n", "+  quota: {max: {gpu: 17}}\n"]


def test_a_listed_member_is_raised_and_an_unlisted_one_added_from_the_default() -> None:
    e = edit_max(BLOCK, project="vision", user="dana", resource="gpu", delta=Fraction(4))
    assert _diff(BLOCK, e.text) == ["-          gpu: 8\n", "+          gpu: 12\n"]
    # erin has no max of her own: hers is the default's (4), now set on her entry.
    e = edit_max(BLOCK, project="vision", user="erin", resource="gpu", delta=Fraction(4))
    assert _diff(BLOCK, e.text) == ["+        max: {gpu: 8}\n"]
    assert e.old is None and e.path == "spec.users.members[erin].max.gpu"
    # frank is not listed: a new entry after the last one (and its comment stays put).
    e = edit_max(BLOCK, project="vision", user="frank", resource="gpu", delta=Fraction(2))
    assert _diff(BLOCK, e.text) == ["+      - {name: frank, max: {gpu: 6}}\n"]
    assert read_max(e.text, project="vision", user="frank", resource="gpu") == 6


def test_the_example_policy_files_take_a_one_line_diff() -> None:
    text = (ROOT / "policies" / "projects" / "nlp.yaml").read_text(encoding="utf-8")
    e = edit_max(text, project="nlp", user=None, resource="gpu", delta=Fraction(8))
    assert _diff(text, e.text) == [
        '-    max: {gpu: 64, cpu: "512", memory: 4Ti}\n',
        '+    max: {gpu: 72, cpu: "512", memory: 4Ti}\n',
    ]
    back = edit_max(e.text, project="nlp", user=None, resource="gpu", delta=Fraction(-8))
    assert back.text == text  # the revert of a temporary grant restores the file exactly


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"project": "nope", "user": None, "resource": "gpu"}, "no Project named 'nope'"),
        ({"project": "other", "user": None, "resource": "cpu"}, "has no max cpu to raise"),
        ({"project": "other", "user": "x", "resource": "gpu"}, "has no max gpu"),
    ],
)
def test_what_cannot_be_edited_is_said(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(EditError, match=message):
        edit_max(BLOCK, delta=Fraction(1), **kwargs)  # type: ignore[arg-type]


def test_a_cut_below_zero_is_refused() -> None:
    with pytest.raises(EditError, match="below zero"):
        edit_max(BLOCK, project="other", user=None, resource="gpu", delta=Fraction(-17))


@pytest.mark.parametrize(
    "user", ["12345", "true", "null", "1e3", "0x1F", "no", "y", "off", "1:20", "x: \U0001f600"]
)
def test_a_username_yaml_would_read_as_another_type_is_added_quoted(user: str) -> None:
    # Label values all, and so usernames; plain in `{name: ...}` they read as a number,
    # a boolean or nothing, the member is not found again and the edit was lost. `no`,
    # `y` and `off` are booleans to YAML 1.1 (kubectl: GP115 refused the loop's own
    # pull request, found by a review); `1:20` does not parse in a flow mapping.
    e = edit_max(BLOCK, project="vision", user=user, resource="gpu", delta=Fraction(2))
    assert _diff(BLOCK, e.text) == [f'+      - {{name: "{user}", max: {{gpu: 6}}}}\n']
    assert read_max(e.text, project="vision", user=user, resource="gpu") == 6
