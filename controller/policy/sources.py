"""Where policy files come from: the working tree, or a Git tree at some ref.

The validator reads `Source`s and never opens files itself, so `plan --base`
can validate and compile the policy set exactly as it was at a commit,
without checking it out. Both kinds of source name files the same way
(relative to the current directory), so a plan compares like with like.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import git

from controller.policy.loader import LINK_REFUSED, YAML_SUFFIXES, Source, sources_from_paths
from controller.policy.validate import OutsideRepository, Resolver

__all__ = [
    "GitRefError",
    "git_tree",
    "outside_repository",
    "policy_root",
    "repository_resolver",
    "repository_top",
    "tree_sources",
    "working_revision",
    "working_tree",
]


class GitRefError(Exception):
    """The path is not in a Git repository, or the ref does not name a commit."""


def working_tree(root: Path, *, in_repository: bool = False) -> tuple[list[Source], Resolver]:
    """The YAML files under `root` on disk, and a resolver relative to `root` (see
    `repository_resolver`). Their paths are relative to the current directory, or
    with `in_repository` to the top of the Git working tree `root` is in, as the
    reconciler reads them from a commit (outside a repository, as without it)."""
    top = repository_top(root) if in_repository else None
    return sources_from_paths([root], root=top), repository_resolver([root])


def policy_root(path: str) -> str:
    """A policy root in a repository (a PolicySource's `spec.path`) as the repository
    names it: `./policies`, `policies/` and `/policies` are `policies`, `/` and `./`
    are `.`. The reconciler names the root in the objects' `gangops.ai/source-file`
    so, as `plan --cluster` does (`git.GitCache.read` reads the tree so as well)."""
    return posixpath.normpath(path.strip("/") or ".")


def outside_repository(path: str) -> str | None:
    """Why a policy root (a PolicySource's `spec.path`) leaves its repository, or None
    when it stays inside (`policies/../teams` is `teams`: inside). The CRD refuses
    any `..` segment in a new object; this is for ones created before that rule."""
    root = policy_root(path)
    if root == ".." or root.startswith("../"):
        return f"path {path!r} leaves the repository (it is {root!r} from its top)"
    return None


def repository_top(root: Path) -> Path | None:
    """The top of the Git working tree `root` is in, or None outside one."""
    try:
        return Path(str(_repo(root).working_tree_dir)).resolve()
    except GitRefError:
        return None


def repository_resolver(roots: Sequence[Path]) -> Resolver:
    """A resolver of paths relative to each of `roots` in turn that never leaves the
    repository: the Git working tree a root is in, else the root itself. A path
    through a symbolic link is refused (`LINK_REFUSED`), as the Git resolver
    would read the link's text; only regular files are read."""
    bases = []
    for root in roots:
        base = root if root.is_dir() else root.parent
        try:
            top = Path(str(_repo(base).working_tree_dir))
        except GitRefError:
            top = base
        bases.append((base, top.resolve()))

    def resolve(ref: str) -> Source | None:
        for base, top in bases:
            p = base / ref
            try:
                real = p.resolve()
            except (OSError, RuntimeError):  # a symlink loop
                return Source(path=p.as_posix(), size=0, read=bytes, refused=LINK_REFUSED)
            if not real.is_relative_to(top):
                raise OutsideRepository(f"{ref!r} is outside the repository ({top})")
            try:
                st = real.stat()
            except OSError:
                continue
            if Path(os.path.normpath(base.resolve() / ref)) != real:
                # A link on the way: Git would hold its text, not its target.
                return Source(path=p.as_posix(), size=0, read=bytes, refused=LINK_REFUSED)
            if stat.S_ISREG(st.st_mode):
                return Source(path=p.as_posix(), size=st.st_size, read=real.read_bytes)
        return None

    return resolve


def _repo(root: Path) -> git.Repo:
    try:
        return git.Repo(root if root.is_dir() else root.parent, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitRefError(f"{root}: not inside a Git repository") from None


def working_revision(root: Path) -> str:
    """The commit the working tree is at, with `-dirty` when `root` has local
    changes; `working-tree` outside a Git repository."""
    try:
        repo = _repo(root)
        sha = repo.head.commit.hexsha
    except (GitRefError, ValueError):
        return "working-tree"
    rel = os.path.relpath(root.resolve(), Path(str(repo.working_tree_dir)).resolve())
    dirty = repo.is_dirty(untracked_files=True, path=rel)
    return f"{sha}-dirty" if dirty else sha


def _hidden(commit: git.Commit, obj: object) -> bool:
    """A hidden directory, not walked (as on disk, `loader.sources_from_paths`); a
    hidden file is read, on disk and in Git alike. A hidden symbolic link to a
    directory is a hidden directory too: Git stores it as a blob, but on disk
    `os.walk` lists it among the directories, which are skipped when hidden
    before a link among them is refused (GP112)."""
    if not isinstance(obj, git.Tree | git.Blob) or not Path(str(obj.path)).name.startswith("."):
        return False
    return isinstance(obj, git.Tree) or _links_to_tree(commit, obj)


def tree_sources(
    commit: git.Commit, root: str, source: Callable[[git.Blob], Source]
) -> tuple[list[Source], Resolver]:
    """The YAML files at or under `root` (a path in the commit, "." for the
    top) as `source` makes them, sorted by path, hidden directories skipped;
    and a resolver of paths relative to `root` that never leaves the commit.
    A `root` that is a symbolic link to a directory of the commit is that
    directory, as on disk, where the directory a linked root names is walked; a
    link to anything else is refused (GP112), as a linked file is on disk.
    Raises KeyError when `root` does not exist in the commit."""
    item = commit.tree if root == "." else commit.tree / root
    if isinstance(item, git.Blob) and (linked := _linked_tree(commit, item)) is not None:
        root, item = linked, commit.tree / linked
    sources: list[Source] = []
    base = root
    if isinstance(item, git.Blob):
        sources.append(_blob_source(item, source))
        base = posixpath.dirname(root)
    elif isinstance(item, git.Tree):
        for obj in item.traverse(prune=lambda obj, _depth: _hidden(commit, obj)):
            # a link to a directory (not hidden: `_hidden` pruned those) is refused (as
            # on disk, where it is not walked): its projects would otherwise leave the
            # policy without a word
            if isinstance(obj, git.Blob) and (
                str(obj.path).endswith(YAML_SUFFIXES) or _links_to_tree(commit, obj)
            ):
                sources.append(_blob_source(obj, source))
    sources.sort(key=lambda s: s.path)

    def resolve(ref: str) -> Source | None:
        target = posixpath.normpath(posixpath.join(base, ref))
        if target.startswith(("..", "/")):
            raise OutsideRepository(f"{ref!r} is outside the repository")
        try:
            blob = commit.tree / target
        except KeyError:
            return None
        return _blob_source(blob, source) if isinstance(blob, git.Blob) else None

    return sources, resolve


_LINK_MODE = 0o120000
"""A tree entry's mode for a symbolic link (its blob holds the target's path)."""


def _links_to_tree(commit: git.Commit, blob: git.Blob) -> bool:
    """Whether `blob` is a symbolic link to a directory of `commit`."""
    return _linked_tree(commit, blob) is not None


def _linked_tree(commit: git.Commit, blob: git.Blob) -> str | None:
    """The path of the directory of `commit` that `blob` is a symbolic link to, if it
    is one (a target outside the commit is none)."""
    if blob.mode != _LINK_MODE or blob.size > 4096:
        return None
    target = posixpath.normpath(
        posixpath.join(
            posixpath.dirname(str(blob.path)), blob.data_stream.read().decode(errors="replace")
        )
    )
    if target.startswith(("..", "/")):
        return None
    try:
        return target if isinstance(commit.tree / target, git.Tree) else None
    except KeyError:
        return None


def _blob_source(blob: git.Blob, source: Callable[[git.Blob], Source]) -> Source:
    """`source(blob)`, or for a symbolic link a refused `Source` whose blob is
    never read: the same verdict `sources_from_paths` gives the working tree."""
    src = source(blob)
    return replace(src, size=0, refused=LINK_REFUSED) if blob.mode == _LINK_MODE else src


def _commit(repo: git.Repo, ref: str) -> git.Commit:
    """The commit `ref` names, resolved by Git itself, so every revision syntax
    Git knows works (reflog entries `HEAD@{1}`, `@{-1}`, `main@{yesterday}`,
    which GitPython's own parser fails on with tracebacks); GitRefError otherwise."""
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        return repo.commit(sha)
    except (git.GitCommandError, git.BadName, ValueError):
        raise GitRefError(f"{ref!r} does not name a commit") from None


def git_tree(root: Path, ref: str) -> tuple[list[Source], Resolver, str]:
    """The YAML files under `root` as they were at `ref`, a resolver into that
    tree, and the commit's full hash. A `root` that did not exist at `ref`
    gives no files (everything in the plan is then a create)."""
    repo = _repo(root)
    commit = _commit(repo, ref)
    top = Path(str(repo.working_tree_dir)).resolve()
    rel = Path(os.path.relpath(root.resolve(), top)).as_posix()
    if rel.startswith(".."):
        raise GitRefError(f"{root} is outside the repository at {top}")
    cwd = Path(os.path.abspath(Path.cwd()))

    def display(path_in_repo: str) -> str:
        # Named as `sources_from_paths` names the working tree's files, so a
        # plan compares like with like: relative to the current directory
        # when below it, else as `root` was given.
        under_root = path_in_repo if rel == "." else posixpath.relpath(path_in_repo, rel)
        try:
            return (Path(os.path.abspath(root)) / under_root).relative_to(cwd).as_posix()
        except ValueError:
            return (root / under_root).as_posix()

    def source(blob: git.Blob) -> Source:
        # Open the blob's stream only when it is read: GitPython streams all
        # share one `git cat-file --batch` process, so a stream opened early
        # and read late returns another object's bytes.
        def read() -> bytes:
            data: bytes = blob.data_stream.read()
            return data

        return Source(path=display(str(blob.path)), size=blob.size, read=read)

    try:
        sources, resolve = tree_sources(commit, rel, source)
    except KeyError:
        return [], lambda _ref: None, commit.hexsha
    return sources, resolve, commit.hexsha
