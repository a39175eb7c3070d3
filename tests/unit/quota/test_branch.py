"""The policy repository's clone: the quota loop finds a Project's file as the
reconciler reads the policy tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from controller.quota.branch import PolicyRepo

from .fake_forge import policy_remote


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """The example policies and, under a hidden directory, an old copy of the nlp
    Project (an archive the reconciler never reads)."""

    def archive(seed: Path) -> None:
        (seed / "policies" / ".archive").mkdir()
        shutil.copy(seed / "policies" / "projects" / "nlp.yaml", seed / "policies" / ".archive")

    return policy_remote(tmp_path, also=archive)


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
