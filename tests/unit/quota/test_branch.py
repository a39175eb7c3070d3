"""The policy repository's clone: the quota loop finds a Project's file as the
reconciler reads the policy tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from controller.quota.branch import PolicyRepo

from .fake_forge import git

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare repository holding the example policies, and under a hidden directory
    an old copy of the nlp Project (an archive the reconciler never reads)."""
    remote = tmp_path / "policies.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "--quiet", "-b", "main")
    shutil.copytree(ROOT / "policies", seed / "policies")
    (seed / "policies" / ".archive").mkdir()
    shutil.copy(ROOT / "policies" / "projects" / "nlp.yaml", seed / "policies" / ".archive")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "seed")
    git(seed, "push", "--quiet", str(remote), "main")
    return remote


@pytest.mark.parametrize("path", ["policies", "./policies", "policies/", "/policies"])
def test_a_projects_file_is_found_as_the_reconciler_reads_the_tree(
    remote: Path, tmp_path: Path, path: str
) -> None:
    """Found by a review: `path: ./policies` (clusters/flux/gangops.yaml's habit) raised
    KeyError out of every quota request's pass, and a Project under a hidden directory
    could be the file edited, though the reconciler skips it."""
    repo = PolicyRepo(url=remote.as_uri(), base="main", path=path, cache_dir=tmp_path / "cache")
    file, text = repo.project_file("nlp")
    assert file == "policies/projects/nlp.yaml" and "kind: Project" in text
    assert repo.project_of_namespace("nlp-dev") == "nlp"


def test_a_policy_root_the_repository_lacks_is_a_lookup_error(remote: Path, tmp_path: Path) -> None:
    repo = PolicyRepo(url=remote.as_uri(), base="main", path="polices", cache_dir=tmp_path)
    with pytest.raises(LookupError, match="no 'polices' in"):
        repo.project_file("nlp")
