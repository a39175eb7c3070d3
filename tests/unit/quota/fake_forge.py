"""The unit tests' forge: `FakeForge`, typed against the `controller.quota.forge.Forge`
seam, over a real bare Git repository.

Pull requests live in a dict; `merge` merges the branch into the base on the
bare repository with `git merge --no-ff` (a real merge commit the reconciler
would fetch), `get` says whether a branch conflicts with the base (`git
merge-tree`), `close` closes one unmerged, and `down` makes every call raise
`ForgeUnavailable` as an outage would.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from controller.quota.forge import Forge, ForgeUnavailable, PullRequest


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


ROOT = Path(__file__).resolve().parents[3]


def policy_remote(tmp: Path, *, also: Callable[[Path], None] = lambda seed: None) -> Path:
    """A bare repository `tmp/policies.git` on branch main holding this checkout's
    policies/ and, beside them, the cluster file their `capacityFrom` names; `also`
    adds to the seed's working tree before its one commit."""
    remote = tmp / "policies.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "--quiet", "-b", "main")
    shutil.copytree(ROOT / "policies", seed / "policies")
    (seed / "clusters" / "local").mkdir(parents=True)
    shutil.copy(ROOT / "clusters" / "local" / "cluster.yaml", seed / "clusters" / "local")
    also(seed)
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "seed")
    git(seed, "push", "--quiet", str(remote), "main")
    return remote


@dataclass
class FakeForge:
    remote: Path
    """The bare repository the pull requests are on."""
    base: str = "main"
    prs: dict[int, PullRequest] = field(default_factory=dict)
    heads: dict[int, str] = field(default_factory=dict)
    bodies: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    down: bool = False
    green: bool = True
    calls: list[str] = field(default_factory=list)

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if self.down:
            raise ForgeUnavailable(f"{call}: HTTP 503 Service Unavailable")

    def find_open(self, *, head: str) -> PullRequest | None:
        self._check("find_open")
        for n, pr in self.prs.items():
            if self.heads[n] == head and pr.state == "open":
                return pr
        return None

    def open(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        self._check("open")
        n = len(self.prs) + 1
        self.prs[n] = PullRequest(n, f"https://forge.test/acme/policies/pulls/{n}", "open")
        self.heads[n] = head
        self.bodies[n] = [(title, body)]
        return self.prs[n]

    def update(self, number: int, *, title: str, body: str) -> PullRequest:
        self._check("update")
        self.bodies[number].append((title, body))
        return self.prs[number]

    def get(self, number: int) -> PullRequest:
        """The pull request, and whether its branch conflicts with the base now (as a
        forge works it out: a merge of the two, here `git merge-tree`)."""
        self._check("get")
        pr = self.prs[number]
        if pr.state == "open":
            merge = subprocess.run(
                ["git", "merge-tree", "--write-tree", self.base, self.heads[number]],
                cwd=self.remote,
                capture_output=True,
                text=True,
            )
            pr = replace(pr, conflicted=merge.returncode == 1)
        return pr

    def checks_green(self, pr: PullRequest) -> bool:
        self._check("checks_green")
        return self.green

    def merge(self, number: int) -> PullRequest:
        self._check("merge")
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            git(work, "clone", "--quiet", "--branch", self.base, str(self.remote), ".")
            git(
                work,
                "-c",
                "user.name=reviewer",
                "-c",
                "user.email=r@example.invalid",
                "merge",
                "--no-ff",
                "--quiet",
                "-m",
                f"Merge #{number}",
                f"origin/{self.heads[number]}",
            )
            git(work, "push", "--quiet", "origin", self.base)
            sha = git(work, "rev-parse", "HEAD")
        self.prs[number] = replace(self.prs[number], state="merged", merge_sha=sha)
        return self.prs[number]

    def close(self, number: int) -> None:
        self.prs[number] = replace(self.prs[number], state="closed")


_: type[Forge] = FakeForge
"""mypy holds the fake to the seam."""
