"""Policy sources over a real Git server: `git daemon` on loopback.

What the remote does (force-pushes, moved tags, deleted branches, going away
and coming back) and what happens to the controller's cache (corruption) must
never cost the cluster its last good revision.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.kube.client import RESOURCES, ApiError

from .kube import wait_for
from .reconciler_helpers import PolicyRepo, ReconcileEnv, git, managed, project

pytest_plugins = ["tests.integration.reconciler_fixtures"]


@dataclass
class GitServer:
    """`git daemon` serving `base` on a loopback port; `stop` and `start` at will."""

    base: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "git",
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                f"--port={self.port}",
                f"--base-path={self.base}",
                str(self.base),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def answers() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for("git daemon to listen", answers, timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"


@pytest.fixture
def served(policy_repo: PolicyRepo, tmp_path: Path) -> Iterator[tuple[GitServer, str]]:
    """The policy repository pushed to a bare repository that `git daemon` serves."""
    if shutil.which("git") is None:
        pytest.fail("git is not installed")
    base = tmp_path / "served"
    base.mkdir()
    git(base, "init", "-q", "--bare", "-b", "main", "policies.git")
    git(policy_repo.path, "remote", "add", "origin", str(base / "policies.git"))
    git(policy_repo.path, "push", "-q", "origin", "main")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = GitServer(base, port)
    server.start()
    yield server, server.url("policies.git")
    server.stop()


def _push(repo: PolicyRepo, *refs: str) -> None:
    git(repo.path, "push", "-q", "--force", "origin", *(refs or ("main",)))


def _ask(env: ReconcileEnv, src: str, value: str) -> None:
    env.patch_source(
        src, {"metadata": {"annotations": {"gangops.ai/reconcile-requested-at": value}}}
    )


def _gpus(env: ReconcileEnv, ns: str) -> str:
    q = managed(env.kube, "ResourceQuota", "gangops-quota", ns) or {}
    return str(q.get("spec", {}).get("hard", {}).get("requests.nvidia.com/gpu"))


def test_remote_down_keeps_the_applied_revision_and_recovers_when_back(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo, served: tuple[GitServer, str]
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    server, url = served
    env.start(retry_base_s=0.2, retry_max_s=0.5)
    src = env.create_source("main", url)
    good = repo.head()
    env.wait_condition(src, "Ready", revision_sha=good)
    server.stop()
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=10))
    sha = repo.commit("while the server is down")
    _ask(env, src, "down")
    obj = env.wait_condition(src, "Ready", "False", reason="GitOperationFailed")
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert f"keeping main@sha1:{good}" in ready["message"], ready["message"]
    assert "127.0.0.1" in ready["message"]
    reconciling = next(c for c in obj["status"]["conditions"] if c["type"] == "Reconciling")
    assert reconciling["status"] == "True"
    assert not any(c["type"] == "Stalled" for c in obj["status"]["conditions"])
    assert obj["status"]["lastAppliedRevision"] == f"main@sha1:{good}"
    assert _gpus(env, n("b")) == "8"
    # Back up: the retry (with backoff, no new request needed) applies the new commit.
    _push(repo)
    server.start()
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=15)
    assert _gpus(env, n("b")) == "10"


def test_force_push_moved_tag_and_deleted_branch(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo, served: tuple[GitServer, str]
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    _, url = served
    env.start()
    # Force-push: history rewritten, the new tip is applied.
    branch = env.create_source("main", url)
    env.wait_condition(branch, "Ready", revision_sha=repo.head())
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=10))
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "--amend", "-m", "rewritten")
    rewritten = repo.head()
    _push(repo)
    _ask(env, branch, "force")
    env.wait_condition(branch, "Ready", revision_sha=rewritten)
    assert _gpus(env, n("b")) == "10"
    env.kube.delete(RESOURCES["PolicySource"], branch)

    # A moved tag is followed.
    git(repo.path, "tag", "-a", "-m", "v1", "v1")
    _push(repo, "main", "refs/tags/v1")
    tagged = env.create_source("tag", url, ref={"tag": "v1"})
    obj = env.wait_condition(tagged, "Ready", revision_sha=repo.head())
    assert obj["status"]["lastAppliedRevision"] == f"v1@sha1:{repo.head()}"
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=12))
    moved = repo.commit("move v1")
    git(repo.path, "tag", "-f", "-a", "-m", "v1 moved", "v1")
    _push(repo, "main", "refs/tags/v1")
    _ask(env, tagged, "moved")
    env.wait_condition(tagged, "Ready", revision_sha=moved)
    assert _gpus(env, n("b")) == "12"
    env.kube.delete(RESOURCES["PolicySource"], tagged)

    # A deleted branch: the applied revision stays, the status says why.
    git(repo.path, "push", "-q", "origin", "main:release")
    release = env.create_source("release", url, ref={"branch": "release"})
    env.wait_condition(release, "Ready", revision_sha=moved)
    git(repo.path, "push", "-q", "origin", ":release")
    _ask(env, release, "deleted")
    obj = env.wait_condition(release, "Ready", "False", reason="ReferenceNotFound")
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert "branch 'release' not found" in ready["message"], ready["message"]
    assert f"keeping release@sha1:{moved}" in ready["message"]
    assert _gpus(env, n("b")) == "12"


def test_a_corrupt_cache_is_recloned(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo, served: tuple[GitServer, str]
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    _, url = served
    rec = env.start()
    src = env.create_source("main", url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    caches = list((env.cache_dir / "git").glob("*.git"))
    assert len(caches) == 1
    # Damage every object and ref in the cache.
    for f in (caches[0] / "objects").rglob("*"):
        if f.is_file():
            f.chmod(0o644)
            f.write_bytes(b"garbage")
    (caches[0] / "HEAD").write_text("garbage\n")
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=6))
    sha = repo.commit("after corruption")
    _push(repo)
    rec.reconcile(src, fetch=True)
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=15)
    assert _gpus(env, n("b")) == "6"


@pytest.mark.parametrize("damage", ["replaced by a file", "config garbled"])
def test_a_cache_that_is_no_repository_at_all_is_recloned(
    reconcile_env: ReconcileEnv,
    policy_repo: PolicyRepo,
    served: tuple[GitServer, str],
    damage: str,
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    _, url = served
    env.start()
    src = env.create_source("main", url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    (cache,) = list((env.cache_dir / "git").glob("*.git"))
    if damage == "replaced by a file":
        shutil.rmtree(cache)
        cache.write_text("x\n")
    else:
        (cache / "config").write_bytes(b"[core\n\0")
    repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=6))
    sha = repo.commit(f"after the cache was {damage}")
    _push(repo)
    _ask(env, src, damage)
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=15)
    assert _gpus(env, n("b")) == "6"


def test_a_remote_that_never_answers_does_not_hold_up_another_source(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        env.start()
        env.create_source("hangs", f"git://127.0.0.1:{silent.getsockname()[1]}/x.git", timeout="5m")
        time.sleep(1)  # its reconcile is waiting on the silent remote
        src = env.create_source("main", repo.url)
        env.wait_condition(src, "Ready", revision_sha=repo.head(), timeout=15)
        env.kube.delete(RESOURCES["PriorityClass"], n("low"))
        wait_for(
            "the PriorityClass to be recreated",
            lambda: managed(env.kube, "PriorityClass", n("low")),
            timeout=5,
        )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timeout", "1h", "timeout must be between 1s and 10m"),
        ("timeout", "0s", "timeout must be between 1s and 10m"),
        ("interval", "0s", "interval must be at least 10s"),
        ("path", "policies/../../etc", "path must stay inside the repository"),
        ("path", "..", "it may not have a '..' segment"),
    ],
)
def test_absurd_timeouts_and_intervals_are_refused_at_admission(
    reconcile_env: ReconcileEnv, field: str, value: str, message: str
) -> None:
    with pytest.raises(ApiError) as e:
        reconcile_env.create_source("absurd", "https://git.example/p.git", **{field: value})
    assert e.value.status == 422 and message in e.value.message, e.value.message
