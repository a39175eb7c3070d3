"""The real Git cache (bare clones on disk) over a local repository: a commit the
cache does not hold is fetched, not taken for a damaged cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from controller.reconciler.fetch import GitRevisions
from controller.reconciler.git import GitCache, GitError
from controller.reconciler.spec import PolicySourceSpec
from tests.unit.kube.fakes import FakeKube
from tests.unit.policy.builders import policy_files, project


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


def test_a_commit_on_no_fetched_branch_is_fetched_and_one_gone_is_said(tmp_path: Path) -> None:
    """After a restart the cache holds only the followed branch; the applied commit,
    no longer on it (force-pushed), was read as a damaged cache and cloned again
    at every reconcile (found by a review)."""
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "old")
    applied = _commit(origin, policy_files(project("nlp").max(gpu=8).build()), "applied")
    _git(origin, "checkout", "-q", "--orphan", "main")
    _commit(origin, policy_files(project("nlp").max(gpu=16).build()), "rewritten")
    cache = GitCache(tmp_path / "cache")
    forgotten: list[str] = []
    cache.forget = forgotten.append  # type: ignore[method-assign]
    revisions = GitRevisions(
        FakeKube(), cache_dir=tmp_path, system_namespace="gangops-system", git=cache
    )
    spec = PolicySourceSpec.parse({"url": origin.as_uri(), "ref": {"branch": "main"}})
    revisions.resolve(spec)  # what a fresh cache fetches: main alone
    with pytest.raises(GitError) as e:
        cache.read(spec.url, applied, ".")
    assert e.value.reason == "RevisionNotFetched"
    sha, built = revisions.build(spec, applied)  # fetched from the branch that holds it
    assert sha == applied and built.objects is not None and forgotten == []
    _git(origin, "branch", "-D", "old")  # force-pushed away for good
    _git(origin, "reflog", "expire", "--expire=now", "--all")
    _git(origin, "gc", "-q", "--prune=now")
    fresh = GitRevisions(
        FakeKube(), cache_dir=tmp_path, system_namespace="gangops-system",
        git=GitCache(tmp_path / "cache2"),
    )  # fmt: skip
    fresh.resolve(spec)
    with pytest.raises(GitError) as e:
        fresh.build(spec, applied)
    assert e.value.reason == "ReferenceNotFound"
