"""The fake of the `controller.reconciler.fetch.GitRepos` seam: repositories in memory.

Each URL holds its refs (branch and tag names to commits) and its commits
(each a dict of file path to text); `down` makes a URL unreachable and
`damaged` makes the next reads of a commit fail as a damaged cache does, so
the reconciler's Git source is unit-tested without a repository. The real
`GitCache` keeps its own integration tests against real repositories.
"""

from __future__ import annotations

import posixpath
import threading
from dataclasses import dataclass, field

from controller.policy.loader import Source
from controller.policy.validate import Resolver
from controller.reconciler.fetch import GitRepos
from controller.reconciler.git import GitAuth, GitError, GitRef


@dataclass
class Repo:
    refs: dict[str, str] = field(default_factory=dict)
    """`main`, `v1`, ... -> commit."""
    commits: dict[str, dict[str, str]] = field(default_factory=dict)
    """commit -> {path: text}."""


class FakeGit:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.down: set[str] = set()
        """URLs that cannot be reached."""
        self.damaged: dict[str, int] = {}
        """Commit -> how many more reads fail as from a damaged cache."""
        self.auths: list[GitAuth] = []
        """The credentials of each resolve, in order."""
        self.forgotten: list[str] = []
        self._locks: dict[str, threading.Lock] = {}

    def push(self, url: str, ref: str, sha: str, files: dict[str, str]) -> None:
        """Commit `files` as `sha` and point `ref` at it."""
        repo = self.repos.setdefault(url, Repo())
        repo.commits[sha] = dict(files)
        repo.refs[ref] = sha

    def lock(self, url: str) -> threading.Lock:
        return self._locks.setdefault(url, threading.Lock())

    def forget(self, url: str) -> None:
        self.forgotten.append(url)

    def resolve(self, url: str, ref: GitRef, *, auth: GitAuth, timeout_s: float) -> str:
        self.auths.append(auth)
        if url in self.down or url not in self.repos:
            raise GitError("GitOperationFailed", f"cannot reach {url}")
        repo = self.repos[url]
        sha = ref.commit if ref.commit in repo.commits else repo.refs.get(ref.name)
        if sha is None:
            raise GitError("ReferenceNotFound", f"{ref.describe()} not found in {url}")
        return sha

    def read(self, url: str, sha: str, path: str) -> tuple[list[Source], Resolver]:
        if self.damaged.get(sha):
            self.damaged[sha] -= 1
            raise GitError("ArtifactFailed", f"cannot read {sha[:12]} from the cache")
        if sha not in self.repos[url].commits:  # force-pushed away, say
            raise GitError("RevisionNotFetched", f"{sha[:12]} is not in the cache")
        files = self.repos[url].commits[sha]
        root = posixpath.normpath(path.strip("/") or ".")
        under = {p: text for p, text in files.items() if root == "." or p.startswith(root + "/")}
        if not under:
            raise GitError("PathNotFound", f"path {path!r} not found at {sha[:12]}")

        def source(p: str) -> Source:
            data = files[p].encode()
            return Source(path=p, size=len(data), read=lambda: data)

        def resolve(ref: str) -> Source | None:
            p = posixpath.normpath(posixpath.join(root, ref))
            return source(p) if p in files else None

        return [source(p) for p in sorted(under)], resolve


_: type[GitRepos] = FakeGit
"""mypy holds the fake to the seam (make lint)."""
