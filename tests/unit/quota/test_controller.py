"""The quota-request loop over the fake API server and the fake forge, with a real
Git remote (a bare repository seeded with the example policies): one pull request
per project and resource, idempotent passes, the four states, the revert of a
temporary grant, and its finalizer (a deleted temporary grant is still reverted)."""

from __future__ import annotations

import base64
import datetime as dt
import difflib
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from controller.kube.client import RESOURCES, ApiError, NotLeaderError, Resource
from controller.kube.clock import FakeClock
from controller.quota.controller import QuotaController, QuotaSettings
from controller.quota.forge import ForgeError
from controller.quota.request import FINALIZER
from tests.unit.kube.fakes import FakeKube

from .fake_forge import FakeForge, git, policy_remote

ROOT = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]
_QR = RESOURCES["QuotaRequest"]
START = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.UTC)


class ListingKube(FakeKube):
    """FakeKube whose list answers from the objects it holds, counting the lists."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: dict[str, int] = {}

    def list(
        self, res: Resource, *, namespace: str | None = None, label_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        self._check()
        self.listed[res.kind] = self.listed.get(res.kind, 0) + 1
        found = [o for (kind, _, _), o in sorted(self.objects.items()) if kind == res.kind]
        return [dict(o) for o in found], str(self.rv)


@dataclass
class World:
    kube: ListingKube
    forge: FakeForge
    clock: FakeClock
    ctl: QuotaController
    remote: Path
    tokens: list[str] | None = None
    """The tokens the forge clients were made with."""

    def request(self, name: str, *, amount: int | str = 8, **spec: Any) -> None:
        obj = {
            "apiVersion": "ai.operator/v1",
            "kind": "QuotaRequest",
            "metadata": {
                "name": name,
                "namespace": spec.pop("namespace", "nlp"),
                "generation": 1,
                "labels": {"ai.operator/user": "alice"},
            },
            "spec": {
                "project": "nlp",
                "resource": "gpu",
                "amount": amount,
                "reason": "pretraining run",
                **spec,
            },
        }
        self.kube.create(obj, field_manager="test")

    def step(self) -> None:
        """A pass, with the job cache as its watch would have it (a list here)."""
        self.ctl.jobs.relist()
        self.ctl.step()

    def status(self, name: str, namespace: str = "nlp") -> Obj:
        obj = self.kube.get(_QR, name, namespace)
        assert obj is not None
        return dict(obj.get("status") or {})

    def delete(self, name: str, namespace: str = "nlp") -> None:
        """What the requester's `kubectl delete` does."""
        self.kube.delete(_QR, name, namespace=namespace)

    def finalizers(self, name: str, namespace: str = "nlp") -> list[str] | None:
        """The request's finalizers; None once it is gone."""
        obj = self.kube.get(_QR, name, namespace)
        return None if obj is None else list(obj["metadata"].get("finalizers") or [])

    def applied(self, commit: str) -> None:
        """What the reconciler writes once it applied `commit`."""
        src = self.kube.objects[("PolicySource", "", "platform")]
        src["status"] = {"lastAppliedRevision": f"main@sha1:{commit}"}

    def main_file(self) -> str:
        return git(self.remote, "show", "main:policies/projects/nlp.yaml") + "\n"


@pytest.fixture
def world(tmp_path: Path) -> World:
    remote = policy_remote(tmp_path)
    kube = ListingKube()
    kube.create(
        {
            "apiVersion": "policy.ai.operator/v1",
            "kind": "PolicySource",
            "metadata": {"name": "platform"},
            "spec": {
                "url": remote.as_uri(),
                "ref": {"branch": "main"},
                "path": "policies",
                "forge": {
                    "type": "gitea",
                    "api": "https://forge.test/api/v1",
                    "repository": "acme/policies",
                    "secretRef": {"name": "forge-token"},
                },
            },
        },
        field_manager="test",
    )
    token = base64.b64encode(b"s3cret\n").decode()
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "forge-token", "namespace": "gangops-system"},
            "data": {"token": token},
        },
        field_manager="test",
    )
    forge = FakeForge(remote)
    tokens: list[str] = []

    def factory(spec: Obj, tok: str) -> FakeForge:
        tokens.append(tok)
        assert spec["repository"] == "acme/policies"
        return forge

    clock = FakeClock(START)
    ctl = QuotaController(
        kube, QuotaSettings(cache_dir=tmp_path / "cache"), forge_factory=factory, clock=clock
    )
    w = World(kube, forge, clock, ctl, remote)
    w.tokens = tokens
    return w


def _branch_diff(w: World, branch: str) -> list[str]:
    before = w.main_file().splitlines(True)
    after = (git(w.remote, "show", f"{branch}:policies/projects/nlp.yaml") + "\n").splitlines(True)
    return [
        line
        for line in difflib.unified_diff(before, after, n=0)
        if line[0] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_a_request_becomes_one_pull_request_with_a_one_line_diff(world: World) -> None:
    w = world
    w.ctl.usage = lambda project, max_gpus: f"recent usage of {project} (max {max_gpus:g})"
    w.request("more-gpus")
    w.step()
    status = w.status("more-gpus")
    assert status["state"] == "Pending"
    pr = status["pullRequest"]
    assert pr["url"] == "https://forge.test/acme/policies/pulls/1"
    assert pr["branch"] == "gangops/quota/nlp/gpu" and pr["valid"] is True
    assert _branch_diff(w, "gangops/quota/nlp/gpu") == [
        '-    max: {gpu: 64, cpu: "512", memory: 4Ti}\n',
        '+    max: {gpu: 72, cpu: "512", memory: 4Ti}\n',
    ]
    title, body = w.forge.bodies[1][0]
    assert title == "Raise max gpu of project nlp: 64 -> 72"
    assert "| `nlp/more-gpus` | alice | +8 | never | `pretraining run` |" in body
    assert "The policy set validates." in body and "### Plan" in body
    assert "ResourceQuota" in body  # the plan names the objects that change
    assert "### Recent usage\n\nrecent usage of nlp (max 64)" in body
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert w.tokens == ["s3cret"]  # from the Secret spec.forge.secretRef names, trimmed


def test_passes_are_idempotent_and_a_second_request_updates_the_same_pull_request(
    world: World,
) -> None:
    w = world
    w.request("first")
    w.step()
    pushed = git(w.remote, "rev-parse", "gangops/quota/nlp/gpu")
    w.step()
    w.step()
    assert git(w.remote, "rev-parse", "gangops/quota/nlp/gpu") == pushed
    assert w.forge.calls.count("open") == 1 and "update" not in w.forge.calls
    w.request("second", amount=4, namespace="nlp-dev")
    w.step()
    assert len(w.forge.prs) == 1 and w.forge.calls.count("update") == 1
    assert (
        w.status("second", "nlp-dev")["pullRequest"]["url"]
        == w.status("first")["pullRequest"]["url"]
    )
    assert _branch_diff(w, "gangops/quota/nlp/gpu")[1] == (
        '+    max: {gpu: 76, cpu: "512", memory: 4Ti}\n'
    )
    _, body = w.forge.bodies[1][-1]
    assert "`nlp/first`" in body and "`nlp-dev/second`" in body


def _job(w: World, name: str, owner: str, phase: str) -> None:
    """A TrainingJob of `owner` in nlp, in `phase`."""
    w.kube.create(
        {
            "apiVersion": "ai.operator/v1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "nlp", "labels": {"ai.operator/user": owner}},
            "status": {"phase": phase},
        },
        field_manager="test",
    )


def test_merged_is_ready_only_once_the_reconciler_applied_it(world: World) -> None:
    w = world
    w.request("grow", trainingJob="bert")
    _job(w, "bert", "alice", "Pending")
    w.step()
    job = w.kube.get(RESOURCES["TrainingJob"], "bert", "nlp")
    assert job is not None and job["status"]["quotaRequest"]["state"] == "Pending"
    assert job["status"]["quotaRequest"]["url"] == "https://forge.test/acme/policies/pulls/1"
    merged = w.forge.merge(1)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    status = w.status("grow")
    assert status["state"] == "Pending" and "waiting for the reconciler" in status["message"]
    assert status["pullRequest"]["mergeCommit"] == merged.merge_sha
    w.applied(git(w.remote, "rev-parse", f"{merged.merge_sha}^1"))  # the revision before
    w.step()
    w.step()
    assert w.status("grow")["state"] == "Pending"
    _commit(w, "policies/README.md", lambda t: t + "\nA later commit.\n")
    w.applied(git(w.remote, "rev-parse", "main"))  # a later revision contains the merge
    w.step()
    assert w.status("grow")["state"] == "Ready"
    job = w.kube.get(RESOURCES["TrainingJob"], "bert", "nlp")
    assert job is not None and job["status"]["quotaRequest"]["state"] == "Ready"
    assert job["status"]["phase"] == "Pending"  # the rest of the job's status is the scheduler's


def test_a_pull_request_closed_unmerged_rejects_the_request(world: World) -> None:
    w = world
    w.request("no")
    w.step()
    w.forge.close(1)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    status = w.status("no")
    assert status["state"] == "Rejected" and "closed unmerged" in status["message"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Stalled"] == "True"


def test_a_pass_the_api_server_refuses_as_busy_waits_as_long_as_it_asks(world: World) -> None:
    """A failed pass waits 30 s, or the longer wait the API server asks for (the
    Retry-After of API Priority and Fairness' 429 or a 503)."""
    waits: list[float] = []

    def wait(stop: threading.Event, seconds: float) -> bool:
        waits.append(seconds)
        stop.set()  # one pass is enough
        return True

    world.clock.wait = wait  # type: ignore[method-assign]
    for asked in (None, 120.0):

        def busy(asked: float | None = asked) -> None:
            raise ApiError(429, "TooManyRequests", "too many", retry_after=asked)

        world.ctl.step = busy  # type: ignore[method-assign]
        world.ctl._stop.clear()
        world.ctl.run()
    assert waits == [30.0, 120.0]


def test_a_forge_outage_retries_with_backoff_then_recovers(world: World) -> None:
    w = world
    w.forge.down = True
    w.request("later")
    w.step()
    status = w.status("later")
    assert status["state"] == "Retry" and "HTTP 503" in status["message"]
    assert status["retry"]["attempts"] == 1
    calls = len(w.forge.calls)
    w.step()  # inside the backoff: nothing is tried
    assert len(w.forge.calls) == calls
    w.clock.advance(2)
    w.step()
    assert w.status("later")["retry"]["attempts"] == 2  # the wait doubles: 4 s now
    w.forge.down = False
    w.clock.advance(4)
    w.step()
    status = w.status("later")
    assert status["state"] == "Pending" and "retry" not in status
    assert len(w.forge.prs) == 1


def test_a_pull_request_merged_as_a_second_request_arrives_is_counted_once(world: World) -> None:
    """Read within forge_poll_s, a merged pull request still looked open: the two
    requests were rebuilt over a base that held the first already (64 + 8 + 8 + 4)."""
    w = world
    w.request("first")
    w.step()
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()  # read once: open (kept forge_poll_s)
    w.forge.merge(1)
    w.clock.advance(1)
    w.request("second", amount=4, namespace="nlp-dev")
    w.step()
    first = w.status("first")
    assert first["pullRequest"]["number"] == 1 and first["pullRequest"]["merged"] is True
    w.step()
    second = w.status("second", "nlp-dev")
    assert second["pullRequest"]["number"] == 2
    assert w.forge.bodies[2][-1][0] == "Raise max gpu of project nlp: 72 -> 76"
    w.forge.merge(2)
    assert "{gpu: 76," in w.main_file()


def test_a_pull_request_left_conflicting_by_a_merge_before_it_is_built_again_on_the_new_base(
    world: World,
) -> None:
    """Found by a review: the gpu and cpu requests of one project edit the same line
    (`max: {gpu: 64, cpu: "512", ...}`); once one merged, the other conflicted, and
    sat Pending on a pull request nobody could merge (its group had not changed)."""
    w = world
    w.request("more-gpu")
    w.request("more-cpu", namespace="nlp-dev", resource="cpu", amount="64")
    w.step()
    w.forge.merge(1)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()  # reads #2 conflicting, and builds its branch again on the new main
    assert git(w.remote, "rev-parse", "gangops/quota/nlp/cpu^") == git(
        w.remote, "rev-parse", "main"
    )
    assert _branch_diff(w, "gangops/quota/nlp/cpu") == [
        '-    max: {gpu: 72, cpu: "512", memory: 4Ti}\n',
        '+    max: {gpu: 72, cpu: "576", memory: 4Ti}\n',
    ]
    assert w.status("more-cpu", "nlp-dev")["pullRequest"]["number"] == 2
    pushed = git(w.remote, "rev-parse", "gangops/quota/nlp/cpu")
    for _ in range(3):  # no longer conflicting: left as it is
        w.clock.advance(w.ctl.settings.forge_poll_s)
        w.step()
    assert git(w.remote, "rev-parse", "gangops/quota/nlp/cpu") == pushed
    w.forge.merge(2)  # a real merge: it would fail on a conflict
    assert '{gpu: 72, cpu: "576",' in w.main_file()


def test_a_conflict_the_forge_reports_while_still_checking_rebuilds_nothing(world: World) -> None:
    """Gitea's mergeable is false while it checks a pull request again after its base
    moved (found by a review): a rebuild then would push for nothing and run the
    repository's checks again. The conflict is checked here before any rebuild."""
    w = world
    w.request("more-gpu")
    w.step()
    pushed = git(w.remote, "rev-parse", "gangops/quota/nlp/gpu")
    _commit(w, "policies/README.md", lambda t: t + "\nA later commit.\n")  # the base moves
    get = w.forge.get
    w.forge.get = lambda n: replace(get(n), conflicted=True)  # type: ignore[method-assign]
    for _ in range(3):
        w.clock.advance(w.ctl.settings.forge_poll_s)
        w.step()
    assert git(w.remote, "rev-parse", "gangops/quota/nlp/gpu") == pushed
    assert w.forge.calls.count("update") == 0


def test_a_forge_refusal_reading_a_pull_request_retries_that_request_alone(
    world: World,
) -> None:
    """An expired token (401) or a deleted merge request (404) while reading one pull
    request ended every pass: no request of any project was proposed again."""
    w = world
    w.request("first")
    w.step()
    get = w.forge.get

    def refused(number: int) -> Any:
        if number == 1:
            raise ForgeError("GET .../pulls/1: HTTP 401 Unauthorized")
        return get(number)

    w.forge.get = refused  # type: ignore[method-assign]
    w.request("other", project="vision", namespace="vision")
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    status = w.status("first")
    assert status["state"] == "Retry" and "HTTP 401 Unauthorized" in status["message"]
    assert w.status("other", "vision")["state"] == "Pending"
    w.forge.get = get  # type: ignore[method-assign]
    w.clock.advance(2)
    w.step()
    assert w.status("first")["state"] == "Pending" and len(w.forge.prs) == 2


def test_an_unforeseen_error_in_one_group_leaves_the_others_proposed(world: World) -> None:
    w = world

    def usage(project: str, max_gpus: float | None) -> str | None:
        if project == "nlp":
            raise RuntimeError("usage query broke")
        return None

    w.ctl.usage = usage
    w.request("mine")
    w.request("theirs", project="vision", namespace="vision")
    w.step()
    status = w.status("mine")
    assert status["state"] == "Retry" and "usage query broke" in status["message"]
    assert w.status("theirs", "vision")["state"] == "Pending"


def test_a_request_from_another_projects_namespace_is_rejected(world: World) -> None:
    w = world
    w.request("sneaky", namespace="vision")
    w.step()
    status = w.status("sneaky", "vision")
    assert status["state"] == "Rejected"
    assert "namespace vision is not one of project nlp's" in status["message"]
    assert w.forge.prs == {}


def test_a_temporary_grant_opens_its_revert_when_it_expires(world: World) -> None:
    w = world
    expires = START + dt.timedelta(hours=2)
    w.request("burst", expiresAt=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    w.step()
    w.applied(w.forge.merge(1).merge_sha)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    assert w.status("burst")["state"] == "Ready"
    assert "{gpu: 72," in w.main_file()
    w.step()
    assert len(w.forge.prs) == 1  # not yet expired
    w.clock.advance(2 * 3600)
    w.step()
    status = w.status("burst")
    assert status["state"] == "Ready" and status["revert"]["number"] == 2
    branch = status["revert"]["branch"]
    assert branch == "gangops/quota-revert/nlp/burst"
    assert _branch_diff(w, branch) == [
        '-    max: {gpu: 72, cpu: "512", memory: 4Ti}\n',
        '+    max: {gpu: 64, cpu: "512", memory: 4Ti}\n',
    ]
    assert w.forge.bodies[2][0][0] == "Revert temporary max gpu of project nlp: 72 -> 64"
    w.applied(w.forge.merge(2).merge_sha)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    w.step()
    assert w.status("burst")["state"] == "Expired"


def test_a_revert_that_does_not_validate_waits_for_a_reviewer(world: World) -> None:
    """Auto-approval merges a raise only when the policy set validates; the revert of
    a temporary grant was merged whatever its checks said."""
    w = world
    rules = "  quotaRequests:\n    autoApprove:\n      - decreases: true\n"
    _commit(w, "policies/cluster-policy.yaml", lambda t: t + rules)
    w.request("burst", expiresAt=(START + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    w.step()
    w.applied(w.forge.merge(1).merge_sha)
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    assert w.status("burst")["state"] == "Ready"
    # Meanwhile the guarantee is raised to 70, within the raised max (72) but not 64.
    _commit(
        w,
        "policies/projects/nlp.yaml",
        lambda t: t.replace("guaranteed: {gpu: 32,", "guaranteed: {gpu: 70,"),
    )
    w.clock.advance(2 * 3600)
    w.step()
    revert = w.status("burst")["revert"]
    assert revert["number"] == 2 and revert["valid"] is False
    for _ in range(2):
        w.clock.advance(w.ctl.settings.forge_poll_s)
        w.step()
    assert w.forge.prs[2].state == "open" and w.forge.calls.count("merge") == 1  # PR 1's


def _commit(w: World, path: str, change: Callable[[str], str]) -> None:
    """Change one file on the remote's main, as a reviewer's commit would."""
    work = w.remote.parent / f"work-{len(list(w.remote.parent.iterdir()))}"
    git(w.remote.parent, "clone", "--quiet", str(w.remote), str(work))
    f = work / path
    f.write_text(change(f.read_text()))
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "c")
    git(work, "push", "--quiet", "origin", "main")


def _opt_in(w: World) -> None:
    """Commit `quotaRequests: {autoPropose: true}` to project nlp."""
    _commit(
        w,
        "policies/projects/nlp.yaml",
        lambda t: t.replace("  jobs:\n", "  quotaRequests: {autoPropose: true}\n  jobs:\n"),
    )


def _blocked_job(w: World) -> None:
    """Job nlp/bert of bob, waiting for its project's max (4 GPUs short)."""
    w.kube.create(
        {
            "apiVersion": "ai.operator/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "bert", "namespace": "nlp", "labels": {"ai.operator/user": "bob"}},
            "status": {
                "phase": "Queued",
                "reason": "Quota",
                "message": "project nlp at max: 60 of 64 GPUs in use, this job needs 8",
            },
        },
        field_manager="test",
    )


def test_a_job_blocked_by_its_projects_max_gets_a_proposal_where_the_project_opted_in(
    world: World,
) -> None:
    w = world
    _blocked_job(w)
    w.step()
    assert w.kube.get(_QR, "bert-quota", "nlp") is None  # nlp has not opted in
    _opt_in(w)
    w.step()
    assert w.kube.get(_QR, "bert-quota", "nlp") is None  # asked again only after recheck_s
    w.clock.advance(w.ctl.settings.recheck_s)
    w.step()
    qr = w.kube.get(_QR, "bert-quota", "nlp")
    assert qr is not None and qr["spec"]["amount"] == 4
    assert qr["metadata"]["labels"]["ai.operator/user"] == "bob"
    assert qr["status"]["state"] == "Pending"
    job = w.kube.get(RESOURCES["TrainingJob"], "bert", "nlp")
    assert job is not None
    assert job["status"]["quotaRequest"] == {
        "name": "bert-quota",
        "state": "Pending",
        "message": "waiting for review of pull request https://forge.test/acme/policies/pulls/1",
        "url": "https://forge.test/acme/policies/pulls/1",
    }
    w.step()
    assert len(w.forge.prs) == 1  # proposed once


def test_the_repositorys_rules_merge_a_small_increase_once_its_checks_are_green(
    world: World,
) -> None:
    w = world
    rules = "  quotaRequests:\n    autoApprove:\n      - maxIncrease: {gpu: 8}\n"
    _commit(w, "policies/cluster-policy.yaml", lambda t: t + rules)
    w.forge.green = False
    w.request("small", amount=4)
    w.step()
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    assert w.forge.prs[1].state == "open" and "merge" not in w.forge.calls  # checks red
    w.forge.green = True
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    assert w.forge.prs[1].state == "merged"
    w.applied(w.forge.prs[1].merge_sha)
    w.step()
    assert w.status("small")["state"] == "Ready"
    w.request("large", amount=16)  # over the rule's 8: a reviewer decides
    w.step()
    w.clock.advance(w.ctl.settings.forge_poll_s)
    w.step()
    assert w.forge.prs[2].state == "open" and w.forge.calls.count("merge") == 1


def test_passes_read_the_watched_job_cache_not_a_list_of_every_job_each_second(
    world: World,
) -> None:
    """A pass a second listed every TrainingJob to find those blocked only by a max:
    18 % of gangops run's samples in a burst of 125 gangs (docs/performance.md), and
    at 5,000 queued jobs a list of 5,000 a second. The jobs come from a cache a watch
    keeps; until it has listed them no proposal is made."""
    w = world
    _opt_in(w)
    _blocked_job(w)
    w.ctl.step()
    assert w.kube.get(_QR, "bert-quota", "nlp") is None  # the cache has not listed yet
    w.ctl.jobs.relist()
    for _ in range(5):
        w.ctl.step()
    qr = w.kube.get(_QR, "bert-quota", "nlp")
    assert qr is not None and qr["spec"]["amount"] == 4
    assert w.kube.listed.get("TrainingJob") == 1  # the cache's one list
    cached = w.ctl.jobs.get("bert", "nlp")
    assert cached is not None and set(cached["status"]) == {"phase", "reason", "message"}


def test_a_replica_that_does_not_lead_pushes_and_opens_nothing(world: World) -> None:
    """The API writes are fenced by the client; the Git push and the forge's writes
    by the controller's own fence (found by a review: a deposed replica pushed the
    branch and opened the pull request before its first refused API write)."""
    leading = [False]
    world.ctl.fence = lambda: leading[0]
    world.request("more-gpus")
    with pytest.raises(NotLeaderError):
        world.step()
    branches = git(world.remote, "branch", "--list")
    assert world.forge.prs == {} and "gangops/quota" not in branches
    leading[0] = True
    world.step()
    assert len(world.forge.prs) == 1


def test_a_request_naming_someone_elses_job_leaves_that_job_alone(world: World) -> None:
    """Found by a review: alice's request named bob's blocked job, put its state there,
    and so stopped bob's own automatic proposal (a job that has one is skipped)."""
    w = world
    _job(w, "bobs", "bob", "Queued")
    w.request("grow", trainingJob="bobs")  # alice's
    w.step()
    job = w.kube.get(RESOURCES["TrainingJob"], "bobs", "nlp")
    assert job is not None and "quotaRequest" not in job["status"]


@pytest.mark.parametrize("path", ["policies", "./policies", "policies/", "/policies"])
def test_every_spelling_of_the_policy_root_gives_a_validated_pull_request(
    world: World, path: str
) -> None:
    """Found by a review: with spec.path `/policies` the pull request's check read
    the controller's own /policies (FileNotFoundError, every pass, after the branch
    was pushed); `./policies` failed before 4c0e58a as well."""
    world.kube.objects[("PolicySource", "", "platform")]["spec"]["path"] = path
    world.request("more-gpus")
    world.step()
    status = world.status("more-gpus")
    assert status.get("state") == "Pending" and status["pullRequest"]["valid"] is True, status
    _, body = world.forge.bodies[1][0]
    assert "The policy set validates." in body and "### Plan" in body


@pytest.mark.parametrize("path", ["../policies", "policies/../.."])
def test_a_policy_root_outside_the_repository_is_named_as_the_reason(
    world: World, path: str
) -> None:
    """Found by a review: a PolicySource written before the CRD refused '..' segments
    gave a bare LookupError (no '../policies' in the clone); the reconciler stops such
    a source, and the request says why. Nothing is pushed."""
    world.kube.objects[("PolicySource", "", "platform")]["spec"]["path"] = path
    world.request("more-gpus")
    world.step()
    status = world.status("more-gpus")
    assert status.get("state") == "Rejected", status
    assert "PolicySource platform" in status["message"], status
    assert "leaves the repository" in status["message"], status
    assert world.forge.prs == {}


def _in(hours: float) -> str:
    return (START + dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _poll(w: World, passes: int = 1) -> None:
    """Passes far enough apart that each reads the forge again."""
    for _ in range(passes):
        w.clock.advance(w.ctl.settings.forge_poll_s)
        w.step()


def test_a_temporary_grant_deleted_once_applied_is_reverted_and_goes_only_when_that_is_applied(
    world: World,
) -> None:
    """Found by a review: the revert was driven by the live object alone, so a tenant
    who deleted the request (tenants hold `delete` on quotarequests) kept the grant."""
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    assert w.finalizers("burst") == [FINALIZER]  # added in the pass that opened pull request 1
    w.applied(w.forge.merge(1).merge_sha)
    _poll(w)
    assert w.status("burst")["state"] == "Ready" and "{gpu: 72," in w.main_file()
    w.delete("burst")
    w.step()  # two hours before expiresAt: the deletion ends the grant now
    status = w.status("burst")
    assert status["revert"]["number"] == 2 and "the request was deleted" in status["message"]
    _, body = w.forge.bodies[2][0]
    assert "`nlp/burst`, a temporary grant until 2026-12-03 12:00 UTC, was deleted" in body
    assert w.finalizers("burst") == [FINALIZER]
    revert = w.forge.merge(2)
    _poll(w, 2)
    assert w.finalizers("burst") == [FINALIZER]  # merged, not yet applied
    w.applied(revert.merge_sha)
    w.step()
    assert w.finalizers("burst") is None and "{gpu: 64," in w.main_file()
    w.clock.advance(3 * 3600)
    _poll(w, 2)
    assert len(w.forge.prs) == 2  # nothing more once it is gone


def test_a_temporary_grant_deleted_between_its_merge_and_its_application_is_reverted(
    world: World,
) -> None:
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    merged = w.forge.merge(1)
    _poll(w)
    assert w.status("burst")["pullRequest"]["merged"] is True
    w.delete("burst")
    _poll(w, 2)
    assert w.finalizers("burst") == [FINALIZER] and "revert" not in w.status("burst")
    w.applied(merged.merge_sha)  # the grant is applied: now it can be taken back
    _poll(w, 2)
    assert w.status("burst")["revert"]["number"] == 2
    w.applied(w.forge.merge(2).merge_sha)
    _poll(w, 2)
    assert w.finalizers("burst") is None and "{gpu: 64," in w.main_file()


def test_a_deleted_grant_whose_revert_a_reviewer_closes_goes_and_the_grant_stays(
    world: World,
) -> None:
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    w.applied(w.forge.merge(1).merge_sha)
    _poll(w)
    w.delete("burst")
    w.step()
    assert w.status("burst")["revert"]["number"] == 2
    w.forge.close(2)
    _poll(w, 2)
    assert w.finalizers("burst") is None and "{gpu: 72," in w.main_file()


def test_a_temporary_request_deleted_while_its_pull_request_is_open_is_withdrawn_from_it(
    world: World,
) -> None:
    """Its branch is pushed without it (no forge call closes a pull request): alone,
    the branch changes nothing, so merging it later grants nothing to revert."""
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    w.delete("burst")
    _poll(w)
    assert w.finalizers("burst") is None
    assert _branch_diff(w, "gangops/quota/nlp/gpu") == []
    title, body = w.forge.bodies[1][-1]
    assert title.startswith("Withdrawn:") and "`nlp/burst`" in body
    assert w.forge.prs[1].state == "open"
    w.forge.merge(1)
    assert "{gpu: 64," in w.main_file()


def test_a_temporary_request_deleted_from_a_shared_pull_request_leaves_the_others_in_it(
    world: World,
) -> None:
    w = world
    w.request("burst", expiresAt=_in(2))
    w.request("steady", amount=4, namespace="nlp-dev")
    w.step()
    assert _branch_diff(w, "gangops/quota/nlp/gpu")[1] == (
        '+    max: {gpu: 76, cpu: "512", memory: 4Ti}\n'
    )
    assert w.finalizers("burst") == [FINALIZER] and w.finalizers("steady", "nlp-dev") == []
    w.delete("burst")
    _poll(w)
    assert w.finalizers("burst") is None
    assert _branch_diff(w, "gangops/quota/nlp/gpu")[1] == (
        '+    max: {gpu: 68, cpu: "512", memory: 4Ti}\n'
    )
    assert w.status("steady", "nlp-dev")["state"] == "Pending"
    assert "`nlp/burst`" not in w.forge.bodies[1][-1][1]


@pytest.mark.parametrize("deleted", [False, True])
def test_a_grant_the_repository_no_longer_holds_ends_without_a_revert(
    world: World, deleted: bool
) -> None:
    """Found by a review: a temporary grant whose Project was removed from the
    repository since (nothing left to take back) logged a warning every pass, and,
    deleted, kept its finalizer, and its namespace, for good."""
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    w.applied(w.forge.merge(1).merge_sha)
    _poll(w)
    assert w.status("burst")["state"] == "Ready"
    work = w.remote.parent / "work-rm"
    git(w.remote.parent, "clone", "--quiet", str(w.remote), str(work))
    git(work, "rm", "-q", "policies/projects/nlp.yaml")
    git(work, "-c", "user.name=t", "-c", "user.email=t@e.invalid", "commit", "-qm", "rm nlp")
    git(work, "push", "--quiet", "origin", "main")
    if deleted:
        w.delete("burst")
    else:
        w.clock.advance(2 * 3600)
    w.step()
    if deleted:
        assert w.kube.get(_QR, "burst", "nlp") is None  # gone: nothing was owed
    else:
        status = w.status("burst")
        assert status["revert"]["closed"] is True and "Project 'nlp'" in status["message"]
        assert w.finalizers("burst") == []  # nothing is owed back any more
    assert len(w.forge.prs) == 1  # no revert opened


def test_a_request_with_nothing_to_revert_is_deleted_at_once(world: World) -> None:
    """A temporary grant whose pull request was closed unmerged sheds its finalizer
    once Rejected; a permanent request never carries one."""
    w = world
    w.request("burst", expiresAt=_in(2))
    w.step()
    assert w.finalizers("burst") == [FINALIZER]
    w.forge.close(1)
    _poll(w)
    assert w.status("burst")["state"] == "Rejected" and w.finalizers("burst") == []
    w.delete("burst")
    assert w.finalizers("burst") is None
    w.request("forever", namespace="nlp-dev")
    w.step()
    assert w.finalizers("forever", "nlp-dev") == []
    w.delete("forever", "nlp-dev")
    assert w.finalizers("forever", "nlp-dev") is None
    w.forge.down = True  # never opened: nothing was proposed, nothing to withdraw
    w.request("later", expiresAt=_in(2), namespace="nlp-dev")
    w.step()
    assert w.status("later", "nlp-dev")["state"] == "Retry"
    assert w.finalizers("later", "nlp-dev") == [FINALIZER]
    w.delete("later", "nlp-dev")
    w.clock.advance(2)
    w.step()
    assert w.finalizers("later", "nlp-dev") is None


def test_a_temporary_request_whose_finalizer_is_refused_opens_no_pull_request(
    world: World,
) -> None:
    """Without its finalizer (a chart whose role lacks `patch` on quotarequests) a
    grant could outlive its request: it waits in Retry, saying why."""
    w = world
    patch = w.kube.merge_patch

    def no_metadata(res: Resource, name: str, body: Obj, **kw: Any) -> Obj:
        if kw.get("subresource") is None and res.kind == "QuotaRequest":
            raise ApiError(403, "Forbidden", "cannot patch resource quotarequests")
        return patch(res, name, body, **kw)

    w.kube.merge_patch = no_metadata  # type: ignore[method-assign]
    w.request("burst", expiresAt=_in(2))
    w.step()
    status = w.status("burst")
    assert status["state"] == "Retry" and "cannot patch resource quotarequests" in status["message"]
    assert w.forge.prs == {}
    w.kube.merge_patch = patch  # type: ignore[method-assign]
    w.clock.advance(2)
    w.step()
    assert w.status("burst")["state"] == "Pending" and w.finalizers("burst") == [FINALIZER]
