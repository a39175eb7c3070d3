"""`gangops plan` against real Git repositories made in tmp_path.

Each case commits a base policy set, writes the head set into the working
tree, runs `gangops plan policies --base HEAD --format json` in-process, and
checks every change (action, object, destructive), the warnings and the notes.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from controller.policy.plan import Change, FieldChange, Plan, make_plan
from controller.policy.report import GITHUB_COMMENT_LIMIT, format_plan
from controller.policy.sources import git_tree, working_tree
from controller.policy.validate import validate_sources
from tests.unit.policy.builders import (
    TIERS,
    cluster,
    compiled,
    policy_files,
    project,
    tier,
    valid_set,
)

CM = "ConfigMap/gangops-system/gangops-scheduling-policy"
COUNT = "spec.hard.count/trainingjobs.ai.operator"


class GitRepo:
    """A Git repository whose policies live under `policies/`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=test", "-c", "user.email=test@example.com",
             "-c", "commit.gpgsign=false", *args],
            cwd=self.root, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    def write(self, files: dict[str, str], under: str = "policies") -> None:
        """Make `under` hold exactly `files`."""
        top = self.root / under
        for old in top.rglob("*") if top.exists() else ():
            if old.is_file():
                old.unlink()
        for name, text in files.items():
            path = top / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitRepo:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    return GitRepo(tmp_path)


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", "policies", "--base", "HEAD", "--format", "json", *args]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def A(guaranteed: int = 4, max: int = 8) -> dict[str, Any]:
    return project("a").guaranteed(gpu=guaranteed).max(gpu=max).build()


def C(max_count: int | None = None) -> dict[str, Any]:
    """A project over two namespaces, with `jobs.maxCount` when given."""
    count = {} if max_count is None else {"maxCount": max_count}
    return project("c").namespaces("c", "c-dev").jobs(maxGPU=4, **count).build()


B = project("b").build()
BASE = policy_files(A(), B)
PROJECT_C = {
    "name": "c",
    "namespaces": ["c"],
    "quota": {"max": {"gpu": 8}},
    "users": {"members": []},
    "jobs": {"maxGPU": 8, "tiers": ["critical", "normal", "batch"], "defaultTier": "normal"},
}
"""Project c as the scheduling policy lists it (empty mappings are no fields)."""


@dataclass
class Case:
    name: str
    head: dict[str, str]
    changes: list[tuple[str, str, bool]]
    """(action, object id, destructive), in plan order."""
    warnings: tuple[str, ...] = ()
    """The start of each warning."""
    notes: tuple[str, ...] = ()
    """Substrings of the changes' notes."""
    fields: tuple[tuple[str, str, Any, Any], ...] = ()
    """(object id, field path, old, new) that must be among the changes' fields."""
    base: dict[str, str] | None = None
    """The committed set, when not `BASE`."""


CASES = [
    Case("no changes", BASE, []),
    Case(
        "create, update and delete",
        policy_files(A(max=16), project("c").build()),
        [
            ("create", "Namespace/c", False),
            ("update", "ResourceQuota/a/gangops-quota", False),
            ("create", "ResourceQuota/c/gangops-quota", False),
            ("update", CM, False),
            ("delete", "ResourceQuota/b/gangops-quota", True),
            ("delete", "Namespace/b", True),
        ],
        notes=("loses its quota backstop", "everything in the namespace is deleted"),
        fields=(
            ("ResourceQuota/a/gangops-quota", "spec.hard.requests.nvidia.com/gpu", "8", "16"),
            (CM, "data.policy.json.projects[a].quota.max.gpu", 8, 16),
            (CM, "data.policy.json.projects[c]", None, PROJECT_C),
        ),
    ),
    Case(
        "a tier's value changes: recreate",
        policy_files(A(), B, tiers=(TIERS[0], tier("normal", 2000, globalDefault=True), TIERS[2])),
        [("recreate", "PriorityClass/normal", True), ("update", CM, False)],
        notes=("value is immutable: 1000 -> 2000",),
        fields=(("PriorityClass/normal", "value", 1000, 2000),),
    ),
    Case(
        "a tier's value changes: the plan says recreating needs allowRecreate",
        policy_files(A(), B, tiers=(TIERS[0], tier("normal", 2000, globalDefault=True), TIERS[2])),
        [("recreate", "PriorityClass/normal", True), ("update", CM, False)],
        notes=("spec.allowRecreate: true", "refuses the whole revision"),
    ),
    Case(
        "globalDefault moves to another tier: the old default is cleared first",
        policy_files(
            A(),
            B,
            tiers=(
                TIERS[0],
                tier("normal", 1000),
                tier("batch", 10, preemptible=True, preemptionPolicy="Never", globalDefault=True),
            ),
        ),
        [
            ("update", "PriorityClass/normal", False),
            ("update", "PriorityClass/batch", False),
            ("update", CM, False),
        ],
        notes=(
            "globalDefault passes to 'batch': applied first",
            "takes globalDefault from 'normal', once 'normal' is cleared",
        ),
    ),
    Case(
        "the default tier is renamed: the old default is deleted first",
        policy_files(
            A(), B, tiers=(TIERS[0], tier("standard", 1000, globalDefault=True), TIERS[2])
        ),
        [
            ("delete", "PriorityClass/normal", True),
            ("create", "PriorityClass/standard", False),
            ("update", CM, False),
        ],
        notes=(
            "deleted first, before 'standard' takes globalDefault",
            "takes globalDefault from 'normal', once 'normal' is deleted",
        ),
    ),
    Case(
        "a tier's preemption policy changes: recreate",
        policy_files(A(), B, tiers=(*TIERS[:2], tier("batch", 10, preemptible=True))),
        [("recreate", "PriorityClass/batch", True), ("update", CM, False)],
        notes=("preemptionPolicy is immutable",),
    ),
    Case(
        "a tier's description changes: update",
        policy_files(A(), B, tiers=(tier("critical", 1_000_000, description="x"), *TIERS[1:])),
        [("update", "PriorityClass/critical", False)],
        fields=(("PriorityClass/critical", "description", None, "x"),),
    ),
    Case(
        "a tier is deleted",
        policy_files(A(), B, tiers=TIERS[:2]),
        [("update", CM, False), ("delete", "PriorityClass/batch", True)],
        notes=("tier 'batch' disappears",),
    ),
    Case(
        "a guarantee is cut",
        policy_files(A(guaranteed=2), B),
        [("update", CM, False)],
        warnings=("project 'a': guaranteed gpu cut 4 GPUs -> 2 GPUs",),
    ),
    Case(
        "a max is cut below the old guarantee",
        policy_files(A(guaranteed=2, max=3), B),
        [("update", "ResourceQuota/a/gangops-quota", False), ("update", CM, False)],
        warnings=("project 'a': max gpu cut to 3 GPUs, below the 4 GPUs it was guaranteed",),
        notes=("lowered 8 -> 3",),
    ),
    Case(
        "a quota is lowered: a note, not a warning",
        policy_files(A(), project("b").max(gpu=6).build()),
        [("update", "ResourceQuota/b/gangops-quota", False), ("update", CM, False)],
        notes=("spec.hard.requests.nvidia.com/gpu lowered 8 -> 6",),
    ),
    Case(
        "jobs.maxCount is set: each quota gets its share, the scheduling policy is unchanged",
        policy_files(A(), B, C(5)),
        [
            ("update", "ResourceQuota/c/gangops-quota", False),
            ("update", "ResourceQuota/c-dev/gangops-quota", False),
        ],
        fields=(
            ("ResourceQuota/c/gangops-quota", COUNT, None, "3"),
            ("ResourceQuota/c-dev/gangops-quota", COUNT, None, "2"),
        ),
        base=policy_files(A(), B, C()),
    ),
    Case(
        "jobs.maxCount is removed: the count leaves each quota",
        policy_files(A(), B, C()),
        [
            ("update", "ResourceQuota/c/gangops-quota", False),
            ("update", "ResourceQuota/c-dev/gangops-quota", False),
        ],
        fields=(
            ("ResourceQuota/c/gangops-quota", COUNT, "3", None),
            ("ResourceQuota/c-dev/gangops-quota", COUNT, "2", None),
        ),
        base=policy_files(A(), B, C(5)),
    ),
    Case(
        "jobs.maxCount is lowered: creates are refused, no pod waits",
        policy_files(A(), B, C(3)),
        [
            ("update", "ResourceQuota/c/gangops-quota", False),
            ("update", "ResourceQuota/c-dev/gangops-quota", False),
        ],
        notes=(
            f"{COUNT} lowered 3 -> 2: Kubernetes accepts a quota below current usage; existing "
            "TrainingJobs are kept, creating one is refused until fewer than that are left",
            f"{COUNT} lowered 2 -> 1",
        ),
        base=policy_files(A(), B, C(5)),
    ),
    Case(
        "a namespace is renamed",
        policy_files(A(), project("b").namespaces("b2").build()),
        [
            ("create", "Namespace/b2", False),
            ("create", "ResourceQuota/b2/gangops-quota", False),
            ("update", CM, False),
            ("delete", "ResourceQuota/b/gangops-quota", True),
            ("delete", "Namespace/b", True),
        ],
        notes=("loses its quota backstop", "everything in the namespace is deleted"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_plan(case: Case, repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write(case.base or BASE)
    repo.commit("base")
    repo.write(case.head)
    plan = plan_json(capsys)
    by_id = {_id(c): c for c in plan["changes"]}
    assert [(c["action"], _id(c), c["destructive"]) for c in plan["changes"]] == case.changes
    assert [w[: len(start)] for w, start in zip(plan["warnings"], case.warnings, strict=True)] == (
        list(case.warnings)
    )
    assert plan["destructive"] == (bool(case.warnings) or any(d for _, _, d in case.changes))
    notes = "\n".join(n for c in plan["changes"] for n in c["notes"])
    for text in case.notes:
        assert text in notes
    if not case.notes:
        assert notes == ""
    for obj, path, old, new in case.fields:
        assert {"path": path, "old": old, "new": new} in by_id[obj]["fields"]


def _id(change: dict[str, Any]) -> str:
    return "/".join(filter(None, (change["kind"], change["namespace"], change["name"])))


def test_no_changes_text(repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write(BASE)
    repo.commit()
    assert main(["plan", "policies", "--base", "HEAD"]) == 0
    assert capsys.readouterr().out == (
        "Plan HEAD -> working tree: 0 to create, 0 to update, 0 to recreate, 0 to delete\n"
        "No changes. The cluster already matches the policies.\n"
    )


def test_text_marks_destructive_steps(repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write(BASE)
    repo.commit()
    repo.write(policy_files(A(guaranteed=2)))
    assert main(["plan", "policies", "--base", "HEAD"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0] == "Plan HEAD -> working tree: 0 to create, 1 to update, 0 to recreate, 2 to delete"
    )
    assert "!! DESTRUCTIVE: project 'a': guaranteed gpu cut 4 GPUs -> 2 GPUs;" in out[1]
    assert "- delete Namespace/b  !! DESTRUCTIVE" in out
    assert "      data.policy.json.projects[a].quota.guaranteed.gpu: 4 -> 2" in out


def test_the_revision_annotation_causes_no_update(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.write(BASE)
    first = repo.commit("policies")
    (repo.root / "README.md").write_text("unrelated\n")
    second = repo.commit("docs")
    assert first != second
    plan = plan_json(capsys, "--base", "HEAD~1")
    assert plan["changes"] == [] and plan["warnings"] == []
    # A dirty working tree (revision "<sha>-dirty") is no change either.
    (repo.root / "policies" / "tiers.yaml").write_text(BASE["tiers.yaml"] + "# a comment\n")
    assert plan_json(capsys)["changes"] == []


def test_revision_annotation_is_ignored_but_other_annotations_are_not() -> None:
    files = policy_files(A(), B)
    old, new = compiled(files, revision="r1"), compiled(files, revision="r2")
    assert make_plan(old, new).changes == ()
    moved = {**files, "projects/moved.yaml": files["projects/b.yaml"]}
    del moved["projects/b.yaml"]
    plan = make_plan(old, compiled(moved, revision="r2"))
    assert [(c.action, c.id) for c in plan.changes] == [
        ("update", "Namespace/b"),
        ("update", "ResourceQuota/b/gangops-quota"),
    ]
    assert plan.changes[0].fields == (
        FieldChange(
            "metadata.annotations.gangops.ai/source-file", "projects/b.yaml", "projects/moved.yaml"
        ),
    )


def test_a_bad_base_ref_is_a_usage_error(repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write(BASE)
    repo.commit()
    assert main(["plan", "policies", "--base", "no-such-ref"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "'no-such-ref' does not name a commit" in err


@pytest.mark.parametrize("ref", ["@{-1}", "@{5}", "HEAD@{5}", "main@{3}", "HEAD@{nonsense}", ""])
def test_a_reflog_ref_git_cannot_resolve_is_a_usage_error(
    repo: GitRepo, capsys: pytest.CaptureFixture[str], ref: str
) -> None:
    """GitPython's own parser raised IndexError or NotImplementedError on these."""
    repo.write(BASE)
    repo.commit()
    assert main(["plan", "policies", "--base", ref]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{ref!r} does not name a commit" in err


@pytest.mark.parametrize("ref", ["HEAD@{1}", "main@{1}", "@{1}", "HEAD@{1.year.ago}"])
def test_reflog_refs_name_the_commits_git_says(
    repo: GitRepo, capsys: pytest.CaptureFixture[str], ref: str
) -> None:
    repo.write(BASE)
    repo.commit("first")
    repo.write(policy_files(A(max=16), B))
    repo.commit("second")
    # Each names the first commit (a date older than the reflog: its oldest entry).
    plan = plan_json(capsys, "--base", ref)
    assert plan["counts"] == {"create": 0, "update": 2, "recreate": 0, "delete": 0}


def test_a_repository_without_commits_is_a_usage_error(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.write(BASE)
    assert main(["plan", "policies", "--base", "HEAD"]) == 2
    assert "does not name a commit" in capsys.readouterr().err


def test_outside_a_repository_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").mkdir()
    assert main(["plan", "policies", "--base", "HEAD"]) == 2
    assert "not inside a Git repository" in capsys.readouterr().err


def test_a_missing_path_is_a_usage_error(repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "nowhere", "--base", "HEAD"]) == 2
    assert "nowhere: no such file or directory" in capsys.readouterr().err


def test_an_invalid_working_tree_gives_no_plan(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.write(BASE)
    repo.commit()
    repo.write({**BASE, "projects/b.yaml": BASE["projects/b.yaml"].replace("gpu: 8", "gpu: x")})
    assert main(["plan", "policies", "--base", "HEAD"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "policies/projects/b.yaml:" in err and "error GP202" in err
    assert "the working tree's policies are invalid; no plan" in err


@pytest.mark.parametrize(
    "broken",
    [
        {"all.yaml": "a: [\n"},  # not one document: a syntax error
        {**BASE, "projects/a.yaml": BASE["projects/a.yaml"].replace("gpu: 8", "gpu: x")},
    ],
    ids=["syntax-error", "schema-error"],
)
def test_an_invalid_base_is_planned_from_empty(
    repo: GitRepo, capsys: pytest.CaptureFixture[str], broken: dict[str, str]
) -> None:
    repo.write(broken)
    repo.commit("broken")
    repo.write(BASE)
    assert main(["plan", "policies", "--base", "HEAD", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert "warning: the policies at HEAD do not validate" in err
    plan = json.loads(out)
    assert plan["counts"] == {"create": 8, "update": 0, "recreate": 0, "delete": 0}


def test_a_policy_root_new_since_the_base_is_all_creates(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.commit("empty")
    repo.write(BASE)
    assert main(["plan", "policies", "--base", "HEAD", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out)["counts"]["create"] == 8


def test_capacity_from_is_read_at_the_base(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    description = "kind: Cluster\nspec:\n  pools: [{{name: a, count: {n}, gpusPerNode: 8}}]\n"
    files = policy_files(A(), B, cluster_doc=cluster(gpu=None, capacityFrom="../c/cluster.yaml"))
    repo.write(files)
    repo.write({"cluster.yaml": description.format(n=8)}, under="c")
    repo.commit()
    repo.write({"cluster.yaml": description.format(n=16)}, under="c")
    plan = plan_json(capsys)
    (change,) = plan["changes"]
    assert {"path": "data.policy.json.cluster.capacity.gpu", "old": 64, "new": 128} in change[
        "fields"
    ]


def test_markdown(repo: GitRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write(BASE)
    repo.commit()
    repo.write(policy_files(A(guaranteed=2), project("c").build()))
    assert main(["plan", "policies", "--base", "HEAD", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith(
        "### gangops plan\n\n`HEAD` → `working tree`: "
        "**2 to create, 1 to update, 0 to recreate, 2 to delete**\n\n"
        "> [!CAUTION]\n> This change has destructive steps:\n"
        "> - project 'a': guaranteed gpu cut 4 GPUs -> 2 GPUs;"
    )
    assert "> - delete `Namespace/b`\n" in md
    assert "- **delete** `Namespace/b` :warning: **destructive**\n" in md
    assert "- **create** `Namespace/c`\n" in md
    assert md.rstrip().endswith("</details>")


def _huge_set(n: int, **max: Any) -> dict[str, str]:
    projects = [
        project(f"project-{i:04d}").namespaces(f"ns-{i:04d}", f"ns-{i:04d}-dev").max(**max).build()
        for i in range(n)
    ]
    # JSON is YAML, and dumps thousands of documents much faster.
    return {
        **policy_files(cluster_doc=cluster(gpu=100_000)),
        "projects.yaml": "\n---\n".join(json.dumps(p) for p in projects),
    }


@pytest.fixture(scope="module")
def huge() -> dict[str, list[dict[str, Any]]]:
    """2,000 projects (8,000 objects), before and after every quota changes."""
    return {
        "base": compiled(_huge_set(2000, gpu=8, cpu="64")),
        "head": compiled(_huge_set(2000, gpu=4, cpu="32")),
    }


@pytest.mark.parametrize("which", ["create", "update", "delete"])
def test_markdown_of_a_huge_plan_fits_a_github_comment(
    huge: dict[str, list[dict[str, Any]]], which: str
) -> None:
    base, head = {
        "create": ([], huge["head"]),
        "update": (huge["base"], huge["head"]),
        "delete": (huge["base"], []),
    }[which]
    plan = make_plan(base, head)
    assert plan.counts()[which] >= 4000
    md = format_plan(plan, fmt="markdown", base="main", head="working tree")
    assert len(md) <= GITHUB_COMMENT_LIMIT
    assert "more lines cut to fit a GitHub comment" in md
    assert md.rstrip().endswith("</details>")


@pytest.mark.parametrize("removed", [True, False], ids=["last removed", "first added"])
def test_a_named_list_emptied_or_filled_is_its_entries_only(removed: bool) -> None:
    """Found by a review (D9): removing the last project printed
    `data.policy.json.projects: (absent) -> []` besides the real removal."""
    some, none = compiled(policy_files(A())), compiled(policy_files())
    plan = make_plan(some, none) if removed else make_plan(none, some)
    (cm,) = [c for c in plan.changes if c.kind == "ConfigMap"]
    paths = [f.path for f in cm.fields]
    assert "data.policy.json.projects" not in paths
    assert "data.policy.json.projects[a]" in paths


def test_markdown_with_many_warnings_fits_a_github_comment() -> None:
    warnings = tuple(f"project 'p{i}': guaranteed gpu cut 8 GPUs -> 0 GPUs; " + "x" * 200
                     for i in range(5000))  # fmt: skip
    plan = Plan(changes=(Change("update", "ConfigMap", "c", "ns"),), warnings=warnings)
    md = format_plan(plan, fmt="markdown", base="a", head="b")
    assert len(md) <= GITHUB_COMMENT_LIMIT
    assert "…and 4980 more, listed below" in md
    assert "- :warning: project 'p20': guaranteed gpu cut" in md


def test_plan_sets_are_compared_when_known() -> None:
    base_set, head_set = valid_set(policy_files(A())), valid_set(policy_files(A(guaranteed=1)))
    objects = compiled(policy_files(A()))
    assert make_plan(objects, objects, base_set=base_set, head_set=head_set).warnings == (
        "project 'a': guaranteed gpu cut 4 GPUs -> 1 GPU; its running work above the new "
        "guarantee becomes borrowed and may be preempted",
    )
    assert make_plan(objects, objects).warnings == ()


@pytest.mark.parametrize("how", ["relative", "absolute", "from-below", "from-outside"])
def test_how_the_path_is_given_changes_nothing(
    repo: GitRepo,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    how: str,
) -> None:
    repo.write(BASE)
    repo.commit()
    path = {
        "relative": "policies/",
        "absolute": str(repo.root / "policies"),
        "from-below": "..",
        "from-outside": str(repo.root / "policies"),
    }[how]
    if how == "from-below":
        monkeypatch.chdir(repo.root / "policies" / "projects")
    elif how == "from-outside":
        monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert main(["plan", path, "--base", "HEAD", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []


def _verdicts(root: Path, ref: str | None) -> list[tuple[str, str, int, str]]:
    if ref is None:
        sources, resolve = working_tree(root)
    else:
        sources, resolve, _ = git_tree(root, ref)
    result = validate_sources(sources, root=str(root), resolve=resolve)
    return [(d.code, d.file, d.line, d.message) for d in result.diagnostics]


def test_symbolic_links_get_the_same_verdict_from_disk_and_from_git(repo: GitRepo) -> None:
    """`validate` used to follow a link that Git readers (`plan --base`, the
    reconciler) see as the text of its target: a commit that passed CI and
    stalled the reconciler. Both readers now refuse links alike, under the
    policy path (GP112) and through `capacityFrom` (GP317)."""
    description = "kind: Cluster\nspec:\n  pools: [{name: a, count: 8, gpusPerNode: 8}]\n"
    files = policy_files(A(), B, cluster_doc=cluster(gpu=None, capacityFrom="c/cluster.desc"))
    repo.write(files)
    repo.write({"team.yaml": files["projects/b.yaml"].replace("b", "team")}, under="shared")
    repo.write({"cluster.yaml": description}, under="c")
    (repo.root / "policies" / "c").mkdir()
    os.symlink("../../c/cluster.yaml", repo.root / "policies" / "c" / "cluster.desc")
    os.symlink("../shared/team.yaml", repo.root / "policies" / "team.yaml")
    repo.commit()
    on_disk = _verdicts(Path("policies"), None)
    assert on_disk == _verdicts(Path("policies"), "HEAD")
    assert [(code, file) for code, file, _, _ in on_disk] == [
        ("GP317", "policies/cluster.yaml"),
        ("GP112", "policies/team.yaml"),
    ]
    assert all("is a symbolic link; links are not followed" in m for *_, m in on_disk)


def test_a_linked_directory_gets_the_same_verdict_from_disk_and_from_git(repo: GitRepo) -> None:
    """Found by a review: both readers skipped it, and its projects left the policy
    without a word (a pruning source would then delete their objects)."""
    files = policy_files(A(), B)
    repo.write(files)
    repo.write({"team.yaml": files["projects/b.yaml"].replace("b", "team")}, under="shared")
    os.symlink("../shared", repo.root / "policies" / "more")
    repo.commit()
    on_disk = _verdicts(Path("policies"), None)
    assert on_disk == _verdicts(Path("policies"), "HEAD")
    assert [(code, file) for code, file, _, _ in on_disk] == [("GP112", "policies/more")]


def test_a_hidden_file_is_read_at_the_base_as_in_the_working_tree(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: `validate` read `.tiers.yaml` from disk, the Git reader (the
    reconciler's, `plan --base`'s) skipped it, so a tree that validated in CI stalled
    the reconciler, and the plan of an unchanged tree was every object created."""
    files = BASE.copy()
    files[".tiers.yaml"] = files.pop("tiers.yaml")
    repo.write(files)
    repo.commit()
    plan = plan_json(capsys)
    assert plan["changes"] == [] and not plan.get("warnings")


def test_the_live_plan_names_source_files_as_the_reconciler_does(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: `plan --cluster` named each object's source file relative
    to the current directory, the reconciler relative to the repository's top, so run
    from anywhere else every object showed as an update of its annotation."""
    import argparse
    import os

    from controller.cli import _compile_tree
    from controller.policy.compiler import ANNOTATION_SOURCE

    repo.write(BASE)
    repo.commit()
    args = argparse.Namespace(system_namespace="gangops-system", max_file_size=0, revision="r")
    seen = []
    for cwd, root in [(".", "policies"), ("policies", "."), ("..", f"{repo.root.name}/policies")]:
        monkeypatch.chdir(repo.root / cwd)
        _, objects = _compile_tree(args, Path(root), as_applied=True)
        assert objects is not None
        seen.append(sorted({o["metadata"]["annotations"][ANNOTATION_SOURCE] for o in objects}))
        monkeypatch.chdir(repo.root)
    assert seen[0] == seen[1] == seen[2]
    assert seen[0] == ["policies", "policies/projects/a.yaml", "policies/projects/b.yaml",
                       "policies/tiers.yaml"]  # fmt: skip
    assert os.getcwd() == str(repo.root)


def test_a_hidden_link_to_a_directory_is_skipped_from_disk_and_from_git_alike(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: the Git reader pruned only hidden trees, and Git stores a
    link as a blob, so `policies/.previous -> ../archive` was refused (GP112) there,
    while on disk `os.walk` lists the link among the directories and the hidden one
    is skipped: `validate` passed, the reconciler stalled, `plan --base` created
    everything. Both skip it as the hidden directory it reads as; a hidden link to
    a file is still refused by both, as a hidden file is still read."""
    repo.write(BASE)
    repo.write({"projects/old.yaml": BASE["projects/b.yaml"].replace("b", "old")}, "archive")
    os.symlink("../archive", repo.root / "policies" / ".previous")
    os.symlink("../archive", repo.root / "policies" / ".previous.yaml")
    os.symlink("tiers.yaml", repo.root / "policies" / ".tiers.yaml")
    repo.commit()
    on_disk = _verdicts(Path("policies"), None)
    assert on_disk == _verdicts(Path("policies"), "HEAD")
    assert [(code, file) for code, file, _, _ in on_disk] == [("GP112", "policies/.tiers.yaml")]
    os.unlink(repo.root / "policies" / ".tiers.yaml")
    repo.commit()
    plan = plan_json(capsys)
    assert plan["changes"] == [] and not plan.get("warnings")


def test_the_live_plan_names_source_files_as_the_reconciler_does_through_a_link(
    repo: GitRepo, tmp_path: Path
) -> None:
    """Found by a review: the repository's top was resolved, the files' paths only
    made absolute, so a policy path through a linked directory (a checkout reached
    by a link) was never below the top, and every file kept the name it was given:
    every object an update of its `gangops.ai/source-file` annotation."""
    import argparse

    from controller.cli import _compile_tree
    from controller.policy.compiler import ANNOTATION_SOURCE

    repo.write(BASE)
    repo.commit()
    link = tmp_path.parent / f"{tmp_path.name}-link"
    os.symlink(tmp_path, link)
    args = argparse.Namespace(system_namespace="gangops-system", max_file_size=0, revision="r")
    _, objects = _compile_tree(args, link / "policies", as_applied=True)
    assert objects is not None
    seen = sorted({o["metadata"]["annotations"][ANNOTATION_SOURCE] for o in objects})
    assert seen == ["policies", "policies/projects/a.yaml", "policies/projects/b.yaml",
                    "policies/tiers.yaml"]  # fmt: skip


@pytest.mark.parametrize("spec_path", ["policies", "./policies", "policies/", "/policies"])
def test_the_live_plan_names_the_policy_root_as_the_reconciler_applies_it(
    repo: GitRepo, tmp_path: Path, spec_path: str
) -> None:
    """Found by a review: the reconciler wrote the root's `gangops.ai/source-file`
    annotation with `spec.path` as written (`./policies` in clusters/flux), `plan
    --cluster` as the repository names it (`policies`): an update in every plan,
    never applied away. The reconciler's own read and build of the commit (its
    GitRevisions over a file:// clone, no cluster) against the plan's compile."""
    import argparse

    from controller.cli import _compile_tree
    from controller.policy.compiler import ANNOTATION_SOURCE
    from controller.reconciler.fetch import GitRevisions
    from controller.reconciler.git import GitRef
    from controller.reconciler.spec import PolicySourceSpec

    repo.write(BASE)
    repo.commit()
    spec = PolicySourceSpec(url=f"file://{repo.root}", ref=GitRef(branch="main"), path=spec_path)
    revisions = GitRevisions(
        None,  # type: ignore[arg-type]  # no Secret to read
        cache_dir=tmp_path / ".cache",
        system_namespace="gangops-system",
    )
    _, built = revisions.build(spec, revisions.resolve(spec))
    assert built.objects is not None
    args = argparse.Namespace(system_namespace="gangops-system", max_file_size=0, revision="r")
    _, planned = _compile_tree(args, Path("policies"), as_applied=True)
    assert planned is not None

    def sources(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
        return {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]):
                o["metadata"]["annotations"][ANNOTATION_SOURCE]
            for o in objects
        }  # fmt: skip

    assert sources(planned) == sources(built.objects)
    assert "policies" in sources(built.objects).values()


def test_a_policy_root_that_is_a_link_is_read_on_a_git_ref_as_on_disk(
    repo: GitRepo, tmp_path: Path
) -> None:
    """Found by a review: a PolicySource whose spec.path is a link to a directory
    (`current -> policies`) had the link's text read as a YAML document (GP107,
    nothing applied) while `validate current` walked the directory; a root that
    links to a file is refused on a Git ref as on disk (GP112)."""
    from controller.reconciler.fetch import GitRevisions
    from controller.reconciler.git import GitRef
    from controller.reconciler.spec import PolicySourceSpec

    repo.write(BASE)
    os.symlink("policies", repo.root / "current")
    os.symlink("policies/projects/a.yaml", repo.root / "one.yaml")
    repo.commit()
    revisions = GitRevisions(
        None,  # type: ignore[arg-type]  # no Secret to read
        cache_dir=tmp_path / ".cache",
        system_namespace="gangops-system",
    )

    def built(path: str) -> Any:
        spec = PolicySourceSpec(url=f"file://{repo.root}", ref=GitRef(branch="main"), path=path)
        return revisions.build(spec, revisions.resolve(spec))[1]

    def content(objects: list[dict[str, Any]] | None) -> list[Any]:
        assert objects is not None
        return [(o["kind"], o["metadata"]["name"], o.get("spec"), o.get("data")) for o in objects]

    assert main(["validate", "current"]) == 0
    assert content(built("current").objects) == content(built("policies").objects)
    assert main(["validate", "one.yaml"]) == 1
    assert [d.code for d in built("one.yaml").validation.diagnostics if d.is_error] == ["GP112"]
