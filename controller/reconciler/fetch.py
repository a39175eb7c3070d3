"""A PolicySource's revisions: resolve its ref, then read and build the files at a commit.

`Revisions` is what the reconciler asks for; `GitRevisions` is the one
implementation (credentials from the source's Secret, a damaged cache
deleted and cloned again, once, without bothering anyone; every other Git
failure is a `GitError` whose reason becomes the source's condition). It
reads Git through the `GitRepos` seam: `git.GitCache` is the real one (bare
clones on disk), and unit tests pass a fake holding commits in memory, so the
reconciler's Git source is tested without a repository.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Protocol

from controller.kube.client import RESOURCES, KubeApi
from controller.policy.build import Built, build
from controller.policy.loader import Source
from controller.policy.sources import policy_root
from controller.policy.validate import Resolver
from controller.reconciler.git import GitAuth, GitCache, GitError, GitRef, auth_from_secret
from controller.reconciler.spec import PolicySourceSpec, revision_string

__all__ = ["GitRepos", "GitRevisions", "Revisions"]


class GitRepos(Protocol):
    """A cache of Git repositories, one per URL (see `git.GitCache` for each call)."""

    def lock(self, url: str) -> threading.Lock:
        """The lock to hold while using the cache of `url`."""
        ...

    def forget(self, url: str) -> None:
        """Drop the cache of `url`; the next `resolve` clones again."""
        ...

    def resolve(self, url: str, ref: GitRef, *, auth: GitAuth, timeout_s: float) -> str:
        """The commit `ref` names at `url` now, fetched (raises `GitError`)."""
        ...

    def read(self, url: str, sha: str, path: str) -> tuple[list[Source], Resolver]:
        """The files under `path` at `sha`, and a resolver relative to `path`
        (raises `GitError`: PathNotFound, RevisionNotFetched for a commit it does not
        hold, or ArtifactFailed for a damaged cache)."""
        ...


class Revisions(Protocol):
    """Where a PolicySource's revisions come from."""

    def resolve(self, spec: PolicySourceSpec) -> str:
        """The commit `spec.ref` points at now (raises `GitError`)."""
        ...

    def build(self, spec: PolicySourceSpec, sha: str) -> tuple[str, Built]:
        """The policy set at `sha`, validated and compiled, and the commit it was
        read from (another one only if the cache had to be cloned again)."""
        ...


class GitRevisions:
    """Revisions read from Git through a cache (by default bare clones under `cache_dir`)."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        cache_dir: Path,
        system_namespace: str,
        git: GitRepos | None = None,
    ) -> None:
        self._kube = kube
        self._cache_dir = cache_dir
        self._system_namespace = system_namespace
        self._git: GitRepos = git or GitCache(cache_dir / "git")

    def resolve(self, spec: PolicySourceSpec, ref: GitRef | None = None) -> str:
        """The commit `ref` (by default the source's own) names now, fetched."""
        auth = GitAuth()
        if spec.secret_name:
            secret = self._kube.get(RESOURCES["Secret"], spec.secret_name, self._system_namespace)
            if secret is None:
                raise GitError(
                    "SecretNotFound",
                    f"secret {self._system_namespace}/{spec.secret_name} not found",
                )
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
            auth = auth_from_secret(data, key_dir=self._cache_dir / "keys")
        with self._git.lock(spec.url):
            return self._git.resolve(spec.url, ref or spec.ref, auth=auth, timeout_s=spec.timeout_s)

    def _read(self, spec: PolicySourceSpec, sha: str) -> tuple[list[Source], Resolver]:
        with self._git.lock(spec.url):
            return self._git.read(spec.url, sha, spec.path)

    def build(self, spec: PolicySourceSpec, sha: str) -> tuple[str, Built]:
        try:
            sources, resolve = self._read(spec, sha)
        except GitError as e:
            if e.reason == "RevisionNotFetched":
                # Every branch and tag fetched; ReferenceNotFound if none leads to it any
                # more (force-pushed away): nothing to re-clone for.
                self.resolve(spec, GitRef(commit=sha))
            elif e.reason == "ArtifactFailed":  # a damaged cache: clone again
                with self._git.lock(spec.url):
                    self._git.forget(spec.url)
                sha = self.resolve(spec)
            else:
                raise
            sources, resolve = self._read(spec, sha)
        built = build(
            sources,
            root=spec.path,
            resolve=resolve,
            revision=revision_string(spec.ref, sha),
            # named as the repository names it (`./policies` is `policies`), as the
            # source files are and as `plan --cluster` names it
            source_root=policy_root(spec.path),
            system_namespace=self._system_namespace,
        )
        return sha, built
