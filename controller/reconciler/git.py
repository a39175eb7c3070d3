"""Policy revisions from Git: a local cache of each repository, fetched on demand.

A poll costs one `git ls-remote` (the tip of the branch or tag); only a tip
that is not in the cache costs a fetch. Fetches force-update the ref, so a
force-pushed branch or a moved tag is simply followed. What can go wrong is
told apart, because the controller reacts differently:

- the remote cannot be reached (`GitOperationFailed`): keep what is applied,
  retry with backoff;
- the branch, tag or commit does not exist (`ReferenceNotFound`), e.g. a
  deleted branch: keep what is applied, say so;
- the cache is damaged (a fetch fails though the remote answers, an object
  is missing, the cache is not a directory or its config does not parse):
  delete the cache and clone again, once, without bothering anyone; a cache
  that cannot be made again (`CacheFailed`) says why.

Files are read straight from the commit's tree (nothing is checked out), and
named by their path in the repository, so diagnostics point at
`policies/projects/nlp.yaml:12:5`.
"""

from __future__ import annotations

import configparser
import hashlib
import logging
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import git

from controller.gitauth import GitAuth, GitError, auth_from_secret
from controller.policy.loader import DEFAULT_LIMITS, Source
from controller.policy.sources import policy_root, tree_sources
from controller.policy.validate import Resolver

__all__ = ["GitAuth", "GitCache", "GitError", "GitRef", "auth_from_secret"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GitRef:
    """What to follow: the first of commit, tag and branch that is set."""

    branch: str | None = None
    tag: str | None = None
    commit: str | None = None

    @property
    def name(self) -> str:
        """How the revision string names the ref (`main`, `v1.2`, or the commit)."""
        return self.commit or self.tag or self.branch or "main"

    def refspecs(self) -> list[str]:
        """The refs `ls-remote` asks for (empty for a pinned commit)."""
        if self.commit:
            return []
        if self.tag:
            return [f"refs/tags/{self.tag}", f"refs/tags/{self.tag}^{{}}"]
        return [f"refs/heads/{self.branch or 'main'}"]

    def describe(self) -> str:
        """For messages: `branch 'main'`, `tag 'v1'`, `commit 0123...`."""
        if self.commit:
            return f"commit {self.commit}"
        if self.tag:
            return f"tag {self.tag!r}"
        return f"branch {self.branch or 'main'!r}"


_NO_PROMPT = re.compile(r"could not read (Username|Password) for '[^']*': terminal prompts")


def _stderr(e: git.GitCommandError) -> str:
    """What went wrong, in one line of git's (or ssh's) own words.

    After "Could not read from remote repository" git has nothing to add; the
    reason (a host key that does not match known_hosts, a refused key, no
    repository there) is the line before, or two for a host key. Over HTTP a
    refused credential shows up as git failing to prompt for another one, which
    is said plainly instead.
    """
    text = e.stderr.strip().removeprefix("stderr: '").removesuffix("'") if e.stderr else str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    fatal = [i for i, ln in enumerate(lines) if ln.startswith(("fatal:", "error:", "ERROR:"))]
    if not fatal:
        return (lines or ["git failed"])[-1]
    i = fatal[-1]
    if lines[i] == "fatal: Could not read from remote repository." and i > 0:
        host_key = lines[i - 1] == "Host key verification failed." and i > 1
        return " ".join(lines[i - 2 : i] if host_key else lines[i - 1 : i])
    if _NO_PROMPT.search(lines[i]):
        return (
            "the server refused the credentials (HTTP 401 Unauthorized): check the"
            " secret's `username` and `password`, or `bearerToken`"
        )
    if lines[i].endswith(":") and i + 1 < len(lines):  # `unable to connect to host:` + why
        return f"{lines[i]} {lines[i + 1]}"
    return lines[i]


def _remove(path: Path) -> None:
    """Delete `path`, whatever it is (a directory, a file, a link)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class GitCache:
    """Bare clones of the repositories the sources name, one per URL."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _dir(self, url: str) -> Path:
        return self.root / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".git")

    def lock(self, url: str) -> threading.Lock:
        """The lock to hold while using the cache of `url`."""
        with self._guard:
            return self._locks.setdefault(url, threading.Lock())

    def forget(self, url: str) -> None:
        """Delete the cache of `url` (it is damaged); the next `resolve` clones again."""
        _remove(self._dir(url))

    def _repo(self, url: str, *, fresh: bool = False) -> git.Repo:
        """The cache of `url`: opened, and checked as git itself reads it (its config
        parses); a damaged one is deleted, whatever it became, and made again."""
        path = self._dir(url)
        try:
            if fresh and (path.exists() or path.is_symlink()):
                log.warning("re-cloning a damaged git cache url=%s cache=%s", url, path)
                _remove(path)
            if path.exists() or path.is_symlink():
                try:
                    repo = git.Repo(path)
                    repo.git.rev_parse("--is-bare-repository")
                    return repo
                except (
                    git.InvalidGitRepositoryError,
                    git.NoSuchPathError,
                    git.GitCommandError,
                    configparser.Error,
                    OSError,
                    ValueError,
                ) as e:
                    if fresh:
                        raise
                    log.warning("git cache damaged url=%s cache=%s error=%r", url, path, str(e))
                    return self._repo(url, fresh=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            return git.Repo.init(path, bare=True)
        except (git.GitError, configparser.Error, OSError, ValueError) as e:
            raise GitError("CacheFailed", f"the git cache {path} cannot be used: {e}") from e

    def resolve(self, url: str, ref: GitRef, *, auth: GitAuth, timeout_s: float) -> str:
        """The commit `ref` names at `url` now, fetched into the cache."""
        env = {"GIT_TERMINAL_PROMPT": "0", **auth.env}
        repo = self._repo(url)
        if ref.commit:
            if self._has(repo, ref.commit):
                return ref.commit
            self._fetch(
                url,
                repo,
                ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                env,
                timeout_s,
            )
            if not self._has(self._repo(url), ref.commit):
                raise GitError("ReferenceNotFound", f"{ref.describe()} not found in {url}")
            return ref.commit
        sha = self._ls_remote(repo, url, ref, env, timeout_s)
        if not self._has(repo, sha):
            target = ref.refspecs()[0]
            self._fetch(url, repo, [f"+{target}:{target}"], env, timeout_s)
        return sha

    def _ls_remote(
        self, repo: git.Repo, url: str, ref: GitRef, env: dict[str, str], timeout_s: float
    ) -> str:
        try:
            out = repo.git.ls_remote(url, *ref.refspecs(), env=env, kill_after_timeout=timeout_s)
        except git.GitCommandError as e:
            raise GitError("GitOperationFailed", f"cannot reach {url}: {_stderr(e)}") from None
        found: dict[str, str] = {}
        for line in str(out).splitlines():
            commit, _, name = line.partition("\t")
            found[name] = commit
        wanted = ref.refspecs()
        sha = found.get(wanted[-1]) or found.get(wanted[0])
        if sha is None:
            raise GitError("ReferenceNotFound", f"{ref.describe()} not found in {url}")
        return sha

    def _fetch(
        self,
        url: str,
        repo: git.Repo,
        refspecs: list[str],
        env: dict[str, str],
        timeout_s: float,
        *,
        retried: bool = False,
    ) -> None:
        try:
            repo.git.fetch(
                "--force", "--no-tags", url, *refspecs, env=env, kill_after_timeout=timeout_s
            )
        except git.GitCommandError as e:
            if retried:
                raise GitError("GitOperationFailed", f"fetch {url}: {_stderr(e)}") from None
            try:  # does the remote answer? then our cache is what is broken
                repo.git.ls_remote("--heads", url, env=env, kill_after_timeout=timeout_s)
            except git.GitCommandError:
                raise GitError("GitOperationFailed", f"fetch {url}: {_stderr(e)}") from None
            self._fetch(url, self._repo(url, fresh=True), refspecs, env, timeout_s, retried=True)

    @staticmethod
    def _has(repo: git.Repo, sha: str) -> bool:
        try:
            repo.commit(sha).tree  # noqa: B018 - reading it proves the objects are there
        except (ValueError, git.BadName, git.BadObject, git.GitCommandError):
            return False
        return True

    def read(self, url: str, sha: str, path: str) -> tuple[list[Source], Resolver]:
        """The YAML files under `path` at commit `sha` (already fetched), and a resolver
        relative to `path`. Raises GitError: PathNotFound; RevisionNotFetched when the
        cache does not hold the commit (the caller fetches it); ArtifactFailed when it
        cannot give the commit's files (the caller re-clones with `forget`)."""
        repo = self._repo(url)
        root = policy_root(path)
        try:
            repo.git.cat_file("-e", f"{sha}^{{commit}}")
        except git.GitCommandError:
            # Absent, not damaged: a commit no branch the cache fetched leads to (the
            # applied one, after a restart and a force-push). Fetched, not re-cloned.
            raise GitError("RevisionNotFetched", f"{sha[:12]} is not in the cache") from None
        try:
            commit = repo.commit(sha)
        except (ValueError, git.BadName, git.BadObject, git.GitCommandError) as e:
            raise GitError("ArtifactFailed", f"cannot read {sha[:12]} from the cache: {e}") from e

        def source(blob: git.Blob) -> Source:
            # Read now, so a damaged cache shows here (and is re-cloned) rather than
            # as an unreadable policy file; files over the loader's limit are left
            # unread for the loader to refuse.
            if blob.size > DEFAULT_LIMITS.max_file_bytes:
                return Source(path=str(blob.path), size=blob.size, read=lambda: b"")
            try:
                data: bytes = blob.data_stream.read()
            except (ValueError, git.BadObject, git.GitCommandError) as e:
                msg = f"cannot read {blob.path} at {sha[:12]}: {e}"
                raise GitError("ArtifactFailed", msg) from e
            return Source(path=str(blob.path), size=blob.size, read=lambda: data)

        try:
            sources, resolve = tree_sources(commit, root, source)
        except KeyError:
            raise GitError("PathNotFound", f"path {path!r} not found at {sha[:12]}") from None
        except (ValueError, git.BadObject, git.GitCommandError) as e:
            raise GitError("ArtifactFailed", f"cannot read {sha[:12]} from the cache: {e}") from e
        return sources, resolve
