"""The policy repository, writable: a working clone that proposes branches.

One clone per repository under the cache directory, fetched and pushed with
the PolicySource's own Git credentials (its secretRef). `propose` starts from
the tip of the base branch, writes one file, commits as gangops and
force-pushes the deterministic branch: the branch belongs to gangops, and a
repeated proposal whose tree is already on the remote pushes nothing, so a
pull request is never touched twice for the same content. Failures to reach
the remote raise `GitUnavailable` (the controller retries with backoff).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from controller.policy.loader import Source
from controller.policy.sources import policy_root, tree_sources
from controller.quota.approval import rules_of
from controller.quota.edit import find_project, owner_of

__all__ = ["GitUnavailable", "PolicyRepo", "Proposed"]

log = logging.getLogger(__name__)

AUTHOR = "gangops"
EMAIL = "gangops@noreply.invalid"


GIT_TIMEOUT_S = 120.0


class GitUnavailable(Exception):
    """The remote could not be read or written."""


@dataclass(frozen=True)
class Proposed:
    branch: str
    commit: str
    base_commit: str
    pushed: bool
    """False when the remote branch already held the same tree."""


@dataclass
class PolicyRepo:
    """A writable clone of the policy repository at `url`, on base branch `base`."""

    url: str
    base: str
    path: str
    """The policy root inside the repository (a PolicySource's spec.path)."""
    cache_dir: Path
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Credentials for `git` (`gitauth.auth_from_secret`): those of the PolicySource,
    which must be allowed to push branches."""
    timeout_s: float = GIT_TIMEOUT_S
    """A `git` command still running after this long is killed (`GitUnavailable`): a
    remote that accepts and never answers would hold the quota loop for good."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def workdir(self) -> Path:
        return self.cache_dir / hashlib.sha256(self.url.encode()).hexdigest()[:16]

    def _repo(self) -> git.Repo:
        if (self.workdir / ".git").is_dir():
            return git.Repo(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(self.workdir)
        repo.git.remote("add", "origin", self.url)
        with repo.config_writer() as cw:
            cw.set_value("user", "name", AUTHOR)
            cw.set_value("user", "email", EMAIL)
        return repo

    def _git(self, repo: git.Repo, *args: str) -> str:
        try:
            env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **self.env}
            return str(repo.git.execute(["git", *args], env=env, kill_after_timeout=self.timeout_s))
        except git.GitCommandError as e:
            raise GitUnavailable(f"git {args[0]} {self.url}: {_stderr(e)}") from None

    def fetch(self) -> git.Repo:
        """The clone, with origin's base branch fetched (and the gangops branches)."""
        repo = self._repo()
        self._git(
            repo,
            "fetch",
            "--prune",
            "--force",
            "origin",
            f"+refs/heads/{self.base}:refs/remotes/origin/{self.base}",
            "+refs/heads/gangops/*:refs/remotes/origin/gangops/*",
        )
        return repo

    def base_commit(self) -> str:
        with self._lock:
            return str(self.fetch().commit(f"origin/{self.base}").hexsha)

    def project_file(self, project: str) -> tuple[str, str]:
        """The path (in the repository) and text at the base's tip of the file that
        defines Project `project`; raises LookupError if none does."""
        with self._lock:
            repo = self.fetch()
            for path, text in self._files(repo):
                if "Project" in text and find_project(text, project):
                    return path, text
        raise LookupError(f"no file under {self.path!r} of {self.url} defines Project {project!r}")

    def approval_rules(self) -> list[dict[str, Any]]:
        """The ClusterPolicy's quotaRequests.autoApprove rules at the base's tip."""
        with self._lock:
            repo = self.fetch()
            return rules_of([text for _, text in self._files(repo)])

    def project_of_namespace(self, namespace: str) -> str:
        """The Project that owns `namespace` at the base's tip; LookupError if none."""
        with self._lock:
            repo = self.fetch()
            for _, text in self._files(repo):
                if "Project" in text and namespace in text:
                    found = owner_of(text, namespace)
                    if found:
                        return found
        raise LookupError(f"no Project under {self.path!r} of {self.url} owns {namespace!r}")

    def _files(self, repo: git.Repo) -> Iterator[tuple[str, str]]:
        """The policy files at the base's tip, as the reconciler reads them
        (`sources.tree_sources`): the root as the repository names it (`./policies`
        is `policies`), hidden directories skipped, links refused and not read."""

        def source(blob: git.Blob) -> Source:
            data = blob.data_stream.read()  # now: a later blob's stream closes this one
            return Source(path=str(blob.path), size=blob.size, read=lambda: data)

        commit = repo.commit(f"origin/{self.base}")
        try:
            sources, _ = tree_sources(commit, policy_root(self.path), source)
        except KeyError:
            raise LookupError(f"no {self.path!r} in {self.url} at {self.base}") from None
        for s in sources:
            if s.refused is None:
                yield s.path, s.read().decode("utf-8", "replace")

    def propose(self, *, branch: str, file: str, text: str, message: str) -> Proposed:
        """Branch `branch` = the base's tip plus `file` set to `text`, pushed."""
        with self._lock:
            repo = self.fetch()
            base = repo.commit(f"origin/{self.base}")
            self._git(repo, "checkout", "--quiet", "--force", "-B", "gangops-work", base.hexsha)
            (self.workdir / file).write_text(text, encoding="utf-8")
            self._git(repo, "add", "--", file)
            self._git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
            head = repo.head.commit
            remote = f"refs/remotes/origin/{branch}"
            try:
                theirs = repo.commit(remote)
            except (git.BadName, ValueError):
                theirs = None
            if (
                theirs is not None
                and theirs.tree.hexsha == head.tree.hexsha
                and base.hexsha in {p.hexsha for p in theirs.parents}
            ):
                return Proposed(branch, theirs.hexsha, base.hexsha, pushed=False)
            self._git(repo, "push", "--force", "origin", f"HEAD:refs/heads/{branch}")
            log.info("pushed branch=%s commit=%s url=%s", branch, head.hexsha, self.url)
            return Proposed(branch, head.hexsha, base.hexsha, pushed=True)

    def conflicts(self, branch: str) -> bool:
        """Whether pushed branch `branch` no longer merges cleanly into the base's tip
        (`git merge-tree`, which writes nothing to the working tree)."""
        with self._lock:
            repo = self.fetch()
            try:
                repo.git.merge_tree("--write-tree", f"origin/{self.base}", f"origin/{branch}")
            except git.GitCommandError as e:
                if e.status == 1:  # merged with conflicts
                    return True
                raise GitUnavailable(f"git merge-tree {self.url}: {_stderr(e)}") from None
            return False

    def checkout(self, commit: str) -> Path:
        """The working tree at `commit` (for validating and planning what a branch holds)."""
        with self._lock:
            repo = self._repo()
            self._git(repo, "checkout", "--quiet", "--force", "--detach", commit)
            return self.workdir

    def contains(self, *, descendant: str, ancestor: str) -> bool:
        """Whether `descendant` includes `ancestor` (both fetched)."""
        with self._lock:
            repo = self.fetch()
            try:
                repo.git.merge_base("--is-ancestor", ancestor, descendant)
            except git.GitCommandError:
                return False
            return True


def _stderr(e: git.GitCommandError) -> str:
    text = str(e.stderr or e).strip()
    return text.removeprefix("stderr:").strip().strip("'").strip()
