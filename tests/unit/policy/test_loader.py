"""The loader: YAML in, documents with positions (or diagnostics) out, never a traceback."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.policy.diagnostics import Severity
from controller.policy.loader import (
    Limits,
    LoadResult,
    Source,
    load_data,
    load_sources,
    sources_from_paths,
)
from tests.unit.policy.builders import Files, sources, validate


def load(files: Files, limits: Limits | None = None) -> LoadResult:
    return load_sources(sources(files), limits=limits or Limits())


def where(result: LoadResult) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in result.diagnostics]


PROJECT = """\
apiVersion: policy.ai.operator/v1
kind: Project
metadata:
  name: nlp
spec:
  namespaces: [nlp, nlp-dev]
  quota:
    max: {gpu: 8, cpu: "16"}
  users:
    members:
      - name: ann
        max:
          gpu: 4
"""


@pytest.mark.parametrize(
    ("text", "line", "col", "problem"),
    [
        # Where the parser gave up, and where the construct to close opened.
        (
            "a: [1, 2\nb: 3\n",
            2,
            2,
            "did not find expected ',' or ']' (while parsing a flow sequence that opened at "
            "line 1, column 4)",
        ),
        ("a: b: c\n", 1, 5, "mapping values are not allowed in this context"),
        (
            "x: 1\na: 'open\n",
            3,
            1,
            "found unexpected end of stream (while scanning a quoted scalar that opened at "
            "line 2, column 4)",
        ),
        # A character YAML refuses, at its own line and column.
        ("x: 1\ny: a\x00b\n", 2, 5, "character U+0000 is not allowed in YAML"),
        ("x: 1\ny: \x1b\n", 2, 4, "character U+001B is not allowed in YAML"),
        ("a:\n\tb: 1\n", 2, 1, "cannot start any token: a tab, which YAML does not indent"),
        ("a: *nowhere\n", 1, 4, "found undefined alias"),
    ],
)
def test_yaml_syntax_error_is_located(text: str, line: int, col: int, problem: str) -> None:
    result = load({"a.yaml": text})
    assert where(result) == [("GP101", line, col)]
    assert problem in result.diagnostics[0].message
    assert result.documents == []


def test_every_duplicate_key_is_reported_at_its_place() -> None:
    text = "kind: Project\nkind: Project\nspec:\n  a: 1\n  b: 2\n  a: 3\nkind: Tier\n"
    result = load({"a.yaml": text})
    assert [(c, line, col) for c, line, col in where(result) if c == "GP102"] == [
        ("GP102", 2, 1),
        ("GP102", 6, 3),
        ("GP102", 7, 1),
    ]
    messages = [d.message for d in result.diagnostics if d.code == "GP102"]
    assert messages[0].startswith("duplicate key 'kind' (first defined on line 1)")
    assert "first defined on line 4" in messages[1]
    assert "first defined on line 1" in messages[2]


def test_the_later_duplicate_wins_and_is_where_the_key_points() -> None:
    text = PROJECT + "  namespaces: [other]\n"
    result = load({"a.yaml": text})
    (doc,) = result.documents
    assert doc.data["spec"]["namespaces"] == ["other"]
    assert doc.pos(("spec", "namespaces")) == (14, 3)


def test_positions_of_nested_fields() -> None:
    (doc,) = load({"a.yaml": PROJECT}).documents
    assert (doc.line, doc.column) == (1, 1)
    assert doc.pos(("metadata", "name")) == (4, 3)
    assert doc.pos(("spec", "namespaces", 1)) == (6, 21)
    assert doc.pos(("spec", "quota", "max", "cpu")) == (8, 19)
    assert doc.pos(("spec", "users", "members", 0)) == (11, 9)
    assert doc.pos(("spec", "users", "members", 0, "max", "gpu")) == (13, 11)
    # A path that is not there points at its nearest ancestor.
    assert doc.pos(("spec", "quota", "guaranteed", "gpu")) == (7, 3)
    assert doc.pos(("nowhere",)) == (1, 1)


def test_multi_document_file_keeps_each_documents_place() -> None:
    text = PROJECT + "---\n" + PROJECT.replace("nlp", "cv") + "...\n---\n" + PROJECT
    result = load({"a.yaml": text})
    assert [(d.name, d.line) for d in result.documents] == [("nlp", 1), ("cv", 15), ("nlp", 30)]
    assert result.documents[1].pos(("spec", "quota", "max", "cpu")) == (22, 19)
    assert result.diagnostics == []


def test_merge_keys_merge_and_local_keys_win() -> None:
    text = """\
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {name: p}
spec:
  quota:
    guaranteed: &small {gpu: 4, cpu: "8"}
    max:
      <<: [*small, {memory: 1Ti, gpu: 99}]
      gpu: 8
"""
    (doc,) = load({"a.yaml": text}).documents
    assert doc.data["spec"]["quota"]["max"] == {"gpu": 8, "cpu": "8", "memory": "1Ti"}
    assert doc.pos(("spec", "quota", "max", "gpu")) == (9, 7)
    assert doc.pos(("spec", "quota", "max", "cpu")) == (6, 33)


def test_a_local_key_beside_a_merge_key_is_located_where_it_is_written() -> None:
    """Found by a review: a value overriding a merged one was located in the merged
    mapping (`tier 'hgh' does not exist` pointed at `high` on the `<<` line), and a
    local key written before `<<` at the anchor."""
    text = """\
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {name: p}
spec:
  quota:
    guaranteed: &g {gpu: 4}
    max:
      gpu: 8
      <<: *g
  jobs:
    <<: {tiers: [high, normal], maxGPU: 4}
    tiers: [hgh]
"""
    (doc,) = load({"a.yaml": text}).documents
    assert doc.data["spec"]["quota"]["max"] == {"gpu": 8}
    assert doc.pos(("spec", "quota", "max", "gpu")) == (8, 7)
    assert doc.data["spec"]["jobs"] == {"tiers": ["hgh"], "maxGPU": 4}
    assert doc.pos(("spec", "jobs", "tiers")) == (12, 5)
    assert doc.pos(("spec", "jobs", "tiers", 0)) == (12, 13)
    assert doc.pos(("spec", "jobs", "maxGPU")) == (11, 33)  # merged: where it is written


def test_merged_policy_validates() -> None:
    text = """\
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {name: p}
spec:
  namespaces: [p]
  quota:
    guaranteed: &q {gpu: 2}
    max: {<<: *q, cpu: "4"}
"""
    result = validate(
        {
            "p.yaml": text,
            "c.yaml": "apiVersion: policy.ai.operator/v1\n"
            "kind: ClusterPolicy\nmetadata: {name: c}\nspec: {capacity: {gpu: 8}}\n",
        }
    )
    assert result.ok, result.diagnostics
    assert result.policy_set is not None
    assert result.policy_set.projects[0].quota.max.gpu == 2


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("---\n---\n", [("GP106", 2, 1), ("GP106", 3, 1)]),
        ("- a\n", [("GP107", 1, 1)]),
        ("just text\n", [("GP107", 1, 1)]),
        ("kind: Project\n", [("GP108", 1, 1)]),
        ("apiVersion: policy.ai.operator/v1\n", [("GP108", 1, 1)]),
        ("apiVersion: policy.ai.operator/v1\nkind: 7\n", [("GP108", 1, 1)]),
        ("apiVersion: policy.ai.operator/v1\nkind: PriorityTeir\n", [("GP109", 2, 1)]),
        ("apiVersion: policy.ai.operator/v1beta1\nkind: Project\n", [("GP110", 1, 1)]),
        ("apiVersion: apps/v1\nkind: Deployment\n", [("GP111", 2, 1)]),
        ("apiVersion: v1\nkind: ConfigMap\n", [("GP111", 2, 1)]),
        # Found by a review: near misses of the policy group were skipped as foreign,
        # and the project they held dropped from the policy set without an error.
        ("kind: Project\napiVersion: policy.ai.operator\n", [("GP110", 2, 1)]),
        ("apiVersion: policy.ai.operater/v1\nkind: Project\n", [("GP110", 1, 1)]),
        ("apiVersion: Policy.ai.operator/v1\nkind: PriorityTier\n", [("GP110", 1, 1)]),
        # ... but another group's Project, or a near group on another kind, is foreign
        ("apiVersion: project.openshift.io/v1\nkind: Project\n", [("GP111", 2, 1)]),
        ("apiVersion: policy.ai.operater/v1\nkind: Deployment\n", [("GP111", 2, 1)]),
    ],
)
def test_documents_that_are_not_policies(text: str, expect: list[tuple[str, int, int]]) -> None:
    result = load({"a.yaml": text})
    assert where(result) == expect
    assert result.documents == []


@pytest.mark.parametrize(
    "api_version",
    [
        "policy.ai.operator.v1",  # '.' for '/'
        "policy.ai.operator-v1",
        "policy.ai.operatorv1",
        "policy.ai.operator.v1beta1",
        "policy.ai.operater",  # a typo in the group, and no version
        "Policy.ai.operator",  # no version, and a capital P
    ],
)
def test_a_near_miss_of_the_api_version_without_a_slash_is_gp110(api_version: str) -> None:
    """Found by a review: the near-miss check compared the group before the last `/`,
    so an apiVersion with none (the version run into the group, or missing) was
    GP111, skipped as another group's document: the Project dropped from the policy
    set with exit 0, and the reconciler's prune deleted its namespaces' quotas."""
    text = f"apiVersion: {api_version}\nkind: Project\nmetadata: {{name: nlp}}\n"
    result = load({"p.yaml": text})
    assert where(result) == [("GP110", 1, 1)]
    message = result.diagnostics[0].message
    assert "use policy.ai.operator/v1; an apiVersion is group/version" in message
    assert result.documents == []


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("v1", "ConfigMap"),
        ("v1", "Project"),
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
        ("project.openshift.io/v1", "Project"),
        ("project.openshift.io", "Project"),
        ("management.cattle.io/v3", "Project"),
        ("kyverno.io/v1", "ClusterPolicy"),
        ("nvidia.com/v1", "ClusterPolicy"),
        ("policy.ai.operatorv1", "Deployment"),  # a near miss, but not of a policy kind
    ],
)
def test_other_groups_policy_kinds_stay_foreign(api_version: str, kind: str) -> None:
    """Found by the same review, which checked that reading a near miss without a
    `/` as GP110 turns no real neighbour of the policy kinds into an error."""
    result = load({"f.yaml": f"apiVersion: {api_version}\nkind: {kind}\n"})
    assert where(result) == [("GP111", 2, 1)]


def test_unknown_kind_suggests_the_nearest() -> None:
    result = load({"a.yaml": "apiVersion: policy.ai.operator/v1\nkind: PriorityTeir\n"})
    assert "did you mean 'PriorityTier'?" in result.diagnostics[0].message


def test_other_api_groups_are_skipped_as_info() -> None:
    result = validate(
        {
            "k.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
            "c.yaml": "apiVersion: policy.ai.operator/v1\nkind: ClusterPolicy\n"
            "metadata: {name: c}\nspec: {capacity: {gpu: 8}}\n",
        }
    )
    assert [(d.code, d.level) for d in result.diagnostics] == [("GP111", Severity.INFO)]
    assert result.ok


def test_an_alias_bomb_is_refused_quickly() -> None:
    levels = "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + levels
    start = time.perf_counter()
    result = load({"bomb.yaml": text})  # a billion nodes if expanded
    assert time.perf_counter() - start < 1.0
    # Where the fix goes: the first alias that took it over the limit (`d`'s
    # first `*c`), not the start of the document.
    assert where(result) == [("GP105", 4, 8)]
    assert "the alias *c here crossed the limit" in result.diagnostics[0].message


def test_an_alias_bomb_is_located_in_its_own_document_and_through_merge_keys() -> None:
    text = (
        "x: &x 1\ny: *x\n---\n"
        "m: &m {k: v}\n"
        "n: &n {<<: *m, a: [*m, *m]}\n"
        "o: &o [*n, *n, *n, *n, *n, *n, *n, *n, *n, *n]\n"
        f"p: [{', '.join(['*o'] * 20)}]\n"
    )
    result = load({"bomb.yaml": text})
    (d,) = [d for d in result.diagnostics if d.code == "GP105"]
    assert d.line == 7 and "the alias *o here crossed the limit" in d.message
    line = text.splitlines()[d.line - 1]
    assert line[d.column - 1 :].startswith("*o") and line[: d.column].count("*o") > 1


def test_aliases_within_the_budget_are_fine() -> None:
    text = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\napiVersion: v1\nkind: X\n"
    assert [d.code for d in load({"a.yaml": text}).diagnostics] == ["GP111"]


def test_a_recursive_alias_is_refused() -> None:
    result = load({"a.yaml": "kind: Project\nspec: &s {self: *s}\n"})
    assert where(result) == [("GP105", 2, 7)]


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 300_000 + "]" * 300_000,  # flow: libyaml's composer would crash
        "a: " + "{a: " * 250_000,  # unterminated: quadratic to scan to the end
        "- " * 500_000 + "x",
        "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 1200)),
        "a: " + "[" * 150 + "]" * 150,  # shallow enough to compose; checked while building
    ],
    ids=["flow", "open-flow", "block-sequence", "block-mapping", "composable"],
)
def test_deep_nesting_is_refused_quickly(text: str) -> None:
    start = time.perf_counter()
    result = load({"deep.yaml": text})
    assert time.perf_counter() - start < 1.0
    assert [d.code for d in result.diagnostics] == ["GP114"]
    assert result.diagnostics[0].line > 0


def test_nesting_up_to_the_limit_is_read() -> None:
    text = "apiVersion: v1\nkind: X\na: " + "[" * 99 + "]" * 99 + "\n"
    assert [d.code for d in load({"a.yaml": text}).diagnostics] == ["GP111"]
    assert [d.code for d in load({"a.yaml": text}, Limits(max_depth=50)).diagnostics] == ["GP114"]


def test_file_over_the_size_limit_is_not_read() -> None:
    def read() -> bytes:
        raise AssertionError("a file over the limit must not be read")

    result = load_sources([Source("big.yaml", 2_000_000, read)])
    assert where(result) == [("GP103", 0, 0)]
    assert "2000000 bytes, over the limit of 1048576" in result.diagnostics[0].message


def test_file_that_grew_since_it_was_listed() -> None:
    data = b"#" * 2000
    result = load_sources([Source("a.yaml", 10, lambda: data)], limits=Limits(max_file_bytes=1000))
    assert where(result) == [("GP103", 0, 0)]


def test_file_size_limit_is_configurable() -> None:
    files = {"a.yaml": "apiVersion: v1\nkind: X\n" + "#" * 100}
    assert [d.code for d in load(files, Limits(max_file_bytes=100)).diagnostics] == ["GP103"]
    assert [d.code for d in load(files, Limits(max_file_bytes=200)).diagnostics] == ["GP111"]


@pytest.mark.parametrize(
    ("data", "line", "col", "byte"),
    [
        (b"\xff\xfe", 1, 1, "0xff"),
        (b"kind: Project\nname: caf\xe9\n", 2, 10, "0xe9"),
        (b"a: 1\nb: 2\n# \xc3\n", 3, 3, "0xc3"),
    ],
)
def test_non_utf8_is_located(data: bytes, line: int, col: int, byte: str) -> None:
    result = load({"a.yaml": data})
    assert where(result) == [("GP104", line, col)]
    assert byte in result.diagnostics[0].message


@pytest.mark.parametrize(
    ("text", "col", "says"),
    [
        ("a: !!int abc\n", 4, "cannot be read as !!int"),
        ("a: !!float abc\n", 4, "cannot be read as !!float"),
        ("a: !!bool maybe\n", 4, "cannot be read as !!bool"),
        ("a: " + "9" * 5000 + "\n", 4, "cannot be read as !!int"),
    ],
)
def test_scalars_that_are_not_what_their_tag_says(text: str, col: int, says: str) -> None:
    result = load({"a.yaml": text})
    assert where(result)[0] == ("GP101", 1, col)
    assert says in result.diagnostics[0].message


def test_scalar_types() -> None:
    text = (
        "apiVersion: policy.ai.operator/v1\nkind: Project\nspec:\n"
        "  {i: 0x1f, o: 0o17, n: -12, f: 1.5, inf: -.inf, t: True, z: ~, s: '8', d: 2024-01-01}\n"
    )
    (doc,) = load({"a.yaml": text}).documents
    assert doc.data["spec"] == {
        "i": 31, "o": 15, "n": -12, "f": 1.5, "inf": float("-inf"), "t": True, "z": None,
        "s": "8", "d": "2024-01-01",
    }  # fmt: skip


def test_sources_from_paths(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    for name in ("b/z.yaml", "b/a.yml", "a.yaml", "notes.md", ".git/x.yaml", "b/.hidden.yaml"):
        (tmp_path / name).write_text("x: 1\n")
    found = sources_from_paths([tmp_path, tmp_path / "a.yaml"], root=tmp_path)
    # Sorted per directory, hidden directories skipped, each file once.
    assert [s.path for s in found] == ["a.yaml", "b/.hidden.yaml", "b/a.yml", "b/z.yaml"]
    assert found[0].size == 5 and found[0].read() == b"x: 1\n"
    with pytest.raises(FileNotFoundError):
        sources_from_paths([tmp_path / "missing"])


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda f: os.symlink(f, f), "is a symbolic link"),
        (lambda f: os.symlink("/dev/zero", f), "is a symbolic link"),
        (lambda f: os.symlink(f.parent / "real.yml", f), "is a symbolic link"),
        (os.mkfifo, "is a FIFO, not a regular file"),
    ],
    ids=["loop", "dev-zero", "regular-target", "fifo"],
)
def test_only_regular_files_are_read(
    tmp_path: Path, make: Callable[[Path], None], says: str
) -> None:
    """A link loop (a traceback), a link to /dev/zero (read until MemoryError)
    and a FIFO (blocked forever) each get GP112 at once; a link to a regular
    file too, as Git readers would see only its text."""
    (tmp_path / "real.yml").write_text(PROJECT)
    make(tmp_path / "odd.yaml")
    done: list[LoadResult] = []
    reader = threading.Thread(
        target=lambda: done.append(load_sources(sources_from_paths([tmp_path], root=tmp_path))),
        daemon=True,
    )
    reader.start()
    reader.join(timeout=30)
    assert done, "reading the policy files did not finish"
    (result,) = done
    (refused,) = [d for d in result.diagnostics if d.code == "GP112"]
    assert (refused.file, refused.line) == ("odd.yaml", 0) and says in refused.message
    assert [d.file for d in result.documents] == ["real.yml"]


def test_unreadable_file_on_disk(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone.yaml", tmp_path / "link.yaml")
    result = load_sources(sources_from_paths([tmp_path], root=tmp_path))
    assert where(result) == [("GP112", 0, 0)]
    assert result.diagnostics[0].file == "link.yaml"


def test_a_linked_directory_is_refused_not_dropped(tmp_path: Path) -> None:
    """os.walk does not follow it, so its projects left the policy without a word
    (found by a review); like a linked file, and as the Git reader sees it (a link
    of any name), it is refused."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "p.yaml").write_text(PROJECT)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "projects2").symlink_to(tmp_path / "real")
    result = load_sources(sources_from_paths([tmp_path / "policies"], root=tmp_path))
    (refused,) = result.diagnostics
    assert (refused.code, refused.file) == ("GP112", "policies/projects2")
    assert "is a symbolic link" in refused.message


def test_a_yaml_directive_other_than_1_2_is_refused(tmp_path: Path) -> None:
    """Found by a review: read as YAML 1.2 here, as 1.1 by ruamel's other readers (the
    quota edits), `max: {gpu: 0100}` was 100 to validate and 64 to the edit."""
    (tmp_path / "p.yaml").write_text("%YAML 1.1\n---\n" + PROJECT)
    (tmp_path / "q.yaml").write_text("%YAML 1.2\n---\n" + PROJECT.replace("name: p", "name: q"))
    result = load_sources(sources_from_paths([tmp_path], root=tmp_path))
    (refused,) = result.diagnostics
    assert (refused.code, refused.file, refused.line) == ("GP101", "p.yaml", 1)
    assert "%YAML 1.1" in refused.message


@pytest.mark.parametrize(("written", "read"), [("1e5", 100000), ("32.0", 32), ("0.5", 0.5)])
def test_a_float_with_no_fraction_is_read_as_the_integer_it_is(written: str, read: object) -> None:
    """Found by a review: `value: 1e5` passed the schema (an integer, to JSON Schema)
    and was compiled as `value: 100000.0`, which the API server's int32 refuses."""
    text = f"apiVersion: policy.ai.operator/v1\nkind: PriorityTier\nspec: {{value: {written}}}\n"
    (doc,) = load({"a.yaml": text}).documents
    value = doc.data["spec"]["value"]
    assert value == read and type(value) is type(read)


@pytest.mark.parametrize(
    ("written", "apart"),
    [
        # YAML 1.1's booleans, which YAML 1.2 reads as strings.
        ("no", True),
        ("Off", True),
        ("y", True),
        ("N", True),
        ("YES", True),
        # Integers written with a leading 0: octal to YAML 1.1 and kubectl's go-yaml.
        ("010", True),
        ("-010", True),
        ("0_10", True),
        # What YAML 1.1 reads otherwise but kubectl's go-yaml reads as gangops does
        # (checked with sigs.k8s.io/yaml v1.6.0): base 60, 0o, a leading 0 that is
        # no octal; and a scalar too long to be a word or number of a policy.
        ("1:20", False),
        ("22:00", False),
        ("1:20.5", False),
        ("0o10", False),
        ("08", False),
        ("1" + ":0" * 2500, False),
        ("0" + "7" * 100, False),
        # What both read alike.
        ("nlp", False),
        ("true", False),
        ("False", False),
        ("8", False),
        ("0", False),
        ("-3", False),
        ("0x1F", False),
        ("1e3", False),
        ("32.0", False),
        ("1_000", False),
        ("~", False),
        ("2026-01-01", False),
        # Quoted, tagged, or a block scalar: a string to both.
        ('"no"', False),
        ("'off'", False),
        ("!!str y", False),
        ("! on", False),
        ("&anchored !!str n", False),
        ("|-\n      no", False),
        # A tag both follow, read apart all the same.
        ("!!int 010", True),
    ],
)
def test_a_scalar_yaml_1_1_reads_otherwise_is_gp115(written: str, apart: bool) -> None:
    result = load({"p.yaml": PROJECT + f"  extra: {written}\n"})
    assert where(result) == ([("GP115", 14, 10)] if apart else [])


def test_gp115_names_both_readings_and_the_fix() -> None:
    result = load(
        {"p.yaml": PROJECT.replace("[nlp, nlp-dev]", "[nlp, off]").replace("gpu: 4", "gpu: 010")}
    )
    assert [(d.line, d.column, d.message) for d in result.diagnostics] == [
        (
            6,
            21,
            'off is "off" to gangops (YAML 1.2) but false to YAML 1.1 readers, such as '
            "kubectl and Argo CD (sigs.k8s.io/yaml) applying the policies as custom "
            'resources; quote it ("off") to keep the string',
        ),
        (
            13,
            16,
            "010 is 10 to gangops (YAML 1.2) but 8 to YAML 1.1 readers, such as "
            "kubectl and Argo CD (sigs.k8s.io/yaml) applying the policies as custom "
            "resources; write it as 10",
        ),
    ]
    assert all(d.level is Severity.ERROR for d in result.diagnostics)


def test_gp115_once_per_scalar_through_aliases_and_in_every_document() -> None:
    doc = PROJECT + "  a: &n no\n  b: [*n, *n]\n  c: {<<: {k: *n}}\n"
    result = load({"p.yaml": doc + "---\n" + doc.replace("name: nlp", "name: cv")})
    assert where(result) == [("GP115", 14, 6), ("GP115", 31, 6)]


def test_gp115_is_for_policies_only() -> None:
    """A foreign document is skipped whole; a cluster description is gangops' alone."""
    foreign = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: no, b: 010}\n"
    assert [d.code for d in load({"c.yaml": foreign}).diagnostics] == ["GP111"]
    data, diags = load_data(sources({"c.yaml": "nodes: [{name: no, gpus: 010}]\n"})[0])
    assert (data, diags) == ([{"nodes": [{"name": "no", "gpus": 10}]}], [])
