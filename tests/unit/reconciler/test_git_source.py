"""The reconciler's Git source without a repository: a PolicySource reconciled
over the typed fakes of its two seams, the API server (`FakeKube`) and Git
(`FakeGit`). What Git answers (a new commit, an invalid revision, an
unreachable remote, a damaged cache, a Secret's credentials) and what the
reconciler then applies and reports. Real repositories are the integration
tests' (tests/integration/test_reconciler_git.py)."""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.kube.client import RESOURCES, ApiError
from controller.kube.clock import FakeClock
from controller.reconciler.controller import (
    DRIFT_MAX_WAIT_S,
    DRIFT_QUIET_S,
    Reconciler,
    ReconcilerSettings,
    _Fights,
    _State,
)
from controller.reconciler.fetch import GitRevisions
from controller.reconciler.git import GitAuth, GitRef
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE, POLICY_CONFIGMAP
from tests.unit.kube.fakes import FakeKube
from tests.unit.policy.builders import TIERS, policy_files, project, tier

from .fake_git import FakeGit

Obj = dict[str, Any]
URL = "https://git.example/platform/policies.git"
GOOD, NEXT = "a" * 40, "b" * 40
FILES = policy_files(project("nlp").max(gpu=8).build())
INVALID = {**FILES, "projects/nlp.yaml": FILES["projects/nlp.yaml"].replace("gpu: 8", "gpu: -1")}


class World:
    """A reconciler between the two fakes, with one PolicySource, `team`."""

    def __init__(self, tmp: Path, *, spec: Obj | None = None) -> None:
        self.kube, self.git, self.clock = FakeKube(), FakeGit(), FakeClock()
        settings = ReconcilerSettings(cache_dir=tmp, retry_base_s=1.0, retry_max_s=8.0)
        revisions = GitRevisions(
            self.kube,
            cache_dir=tmp,
            system_namespace=settings.system_namespace,
            git=self.git,
        )
        self.reconciler = Reconciler(
            self.kube,
            settings=settings,
            clock=self.clock,
            revisions=revisions,
            rng=random.Random(0),
        )
        source = {
            "apiVersion": "policy.ai.operator/v1",
            "kind": "PolicySource",
            "metadata": {"name": "team", "generation": 1},
            "spec": spec or {"url": URL, "ref": {"branch": "main"}, "interval": "1m"},
        }
        self.reconciler.sources.assume(self.kube.create(source, field_manager="test"))

    def reconcile(self, *, fetch: bool = True) -> float | None:
        return self.reconciler.reconcile("team", fetch=fetch)

    def status(self) -> Obj:
        obj = self.kube.get(RESOURCES["PolicySource"], "team")
        assert obj is not None
        status: Obj = obj.get("status") or {}
        return status

    def condition(self, kind: str) -> Obj:
        (cond,) = [c for c in self.status()["conditions"] if c["type"] == kind]
        return cond

    def applied(self) -> set[tuple[str, str]]:
        """(kind, name) of what the revision put in the cluster."""
        return {
            (kind, name)
            for kind, _, name in self.kube.objects
            if kind not in ("PolicySource", "Event")
        }


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.reconciler.stop()


def test_the_branchs_commit_is_applied_and_reported_ready(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    assert world.reconcile() == pytest.approx(60 * (1 + random.Random(0).uniform(0, 0.1)))
    assert ("ConfigMap", POLICY_CONFIGMAP) in world.applied()
    assert ("Namespace", "nlp") in world.applied()
    cm = world.kube.get(RESOURCES["ConfigMap"], POLICY_CONFIGMAP, DEFAULT_SYSTEM_NAMESPACE)
    assert cm is not None
    assert cm["metadata"]["annotations"]["gangops.ai/revision"] == f"main@sha1:{GOOD}"
    assert world.condition("Ready")["status"] == "True"
    assert world.status()["lastAppliedRevision"] == f"main@sha1:{GOOD}"


def test_an_invalid_commit_applies_nothing_and_keeps_the_last_good_one(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    before = {k: v["metadata"]["resourceVersion"] for k, v in world.kube.objects.items()}
    world.git.push(URL, "main", NEXT, INVALID)
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "ValidationFailed"
    assert "projects/nlp.yaml" in world.condition("Stalled")["message"]
    assert world.status()["lastAppliedRevision"] == f"main@sha1:{GOOD}"
    assert world.status()["lastAttemptedRevision"] == f"main@sha1:{NEXT}"
    after = {k: v["metadata"]["resourceVersion"] for k, v in world.kube.objects.items()}
    assert {k: v for k, v in after.items() if k[0] != "PolicySource" and k[0] != "Event"} == {
        k: v for k, v in before.items() if k[0] != "PolicySource" and k[0] != "Event"
    }
    assert world.kube.dry_runs.count(POLICY_CONFIGMAP) == 1  # only the good revision's


def test_an_unreachable_remote_is_retried_with_a_doubling_delay(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.git.down.add(URL)
    assert [world.reconcile() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert world.condition("Ready")["reason"] == "GitOperationFailed"
    assert world.applied() == set()
    world.git.down.clear()
    world.reconcile()
    assert world.condition("Ready")["status"] == "True"
    world.git.down.add(URL)
    assert world.reconcile() == 1.0  # a success starts the doubling over


def test_a_remote_down_for_days_waits_the_longest_retry_not_an_overflow(world: World) -> None:
    world.git.down.add(URL)
    world.reconciler._states["team"] = _State(failures=1024)  # a week of failures
    assert world.reconcile() == 8.0  # retry_max_s


def test_a_moved_branch_is_followed_at_the_next_poll_not_before(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    resolves = len(world.git.auths)
    world.git.push(URL, "main", NEXT, FILES)
    world.reconcile(fetch=False)  # drift correction: the revision in hand
    assert len(world.git.auths) == resolves
    assert world.status()["lastAppliedRevision"] == f"main@sha1:{GOOD}"
    world.clock.advance(61)
    world.reconcile(fetch=False)  # the poll is due
    assert world.status()["lastAppliedRevision"] == f"main@sha1:{NEXT}"


def test_a_damaged_cache_is_cloned_again_once_without_a_word(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.git.damaged[GOOD] = 1
    world.reconcile()
    assert world.git.forgotten == [URL]
    assert world.condition("Ready")["status"] == "True"


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    w = World(tmp_path, spec={"url": URL, "ref": {"branch": "main"}, "path": "nowhere"})
    w.git.push(URL, "main", GOOD, FILES)
    w.reconcile()
    assert w.condition("Ready")["reason"] == "PathNotFound"
    assert w.applied() == set()
    w.reconciler.stop()


def test_credentials_come_from_the_sources_secret(tmp_path: Path) -> None:
    spec = {"url": URL, "ref": {"branch": "main"}, "secretRef": {"name": "git-credentials"}}
    w = World(tmp_path, spec=spec)
    w.git.push(URL, "main", GOOD, FILES)
    w.reconcile()
    assert w.condition("Ready")["reason"] == "SecretNotFound"
    assert w.git.auths == []
    secret = {"username": b"bot", "password": b"s3cret"}
    w.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "git-credentials", "namespace": DEFAULT_SYSTEM_NAMESPACE},
            "data": {k: base64.b64encode(v).decode() for k, v in secret.items()},
        },
        field_manager="test",
    )
    w.reconcile()
    assert w.condition("Ready")["status"] == "True"
    basic = base64.b64encode(b"bot:s3cret").decode()
    assert w.git.auths[-1].env["GIT_CONFIG_VALUE_0"] == f"Authorization: Basic {basic}"
    w.reconciler.stop()


def _delete_by_hand(world: World, kind: str, name: str, namespace: str = "") -> None:
    """A person deletes a managed object (the informer sees it go)."""
    del world.kube.objects[(kind, namespace, name)]
    world.reconciler.managed[kind].forget(name, namespace)


DRIFTED = [("ResourceQuota", "gangops-quota", "nlp"), ("PriorityClass", "normal", "")]


def test_while_the_newest_revision_is_invalid_drift_is_corrected_from_the_last_good_one(
    world: World,
) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    assert {(k, n) for k, n, _ in DRIFTED} <= world.applied()
    world.git.push(URL, "main", NEXT, INVALID)
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "ValidationFailed"
    for kind, name, ns in DRIFTED:
        _delete_by_hand(world, kind, name, ns)
    world.reconcile(fetch=False)  # the drift event
    assert {(k, n) for k, n, _ in DRIFTED} <= world.applied()
    assert world.condition("Stalled")["reason"] == "ValidationFailed"  # still said
    assert world.status()["lastAppliedRevision"] == f"main@sha1:{GOOD}"


def _restarted(first: World, tmp_path: Path) -> World:
    """A new reconciler over `first`'s API server and Git, as after a restart."""
    again = World.__new__(World)
    again.kube, again.git, again.clock = first.kube, first.git, FakeClock()
    settings = ReconcilerSettings(cache_dir=tmp_path)
    again.reconciler = Reconciler(
        again.kube,
        settings=settings,
        clock=again.clock,
        revisions=GitRevisions(
            again.kube, cache_dir=tmp_path, system_namespace=settings.system_namespace,
            git=again.git,
        ),
        rng=random.Random(0),
    )  # fmt: skip
    again.reconciler.sources.assume(again.kube.get(RESOURCES["PolicySource"], "team") or {})
    return again


def test_after_a_restart_the_last_good_revision_is_built_again_to_correct_drift(
    tmp_path: Path,
) -> None:
    first = World(tmp_path)
    first.git.push(URL, "main", GOOD, FILES)
    first.reconcile()
    first.git.push(URL, "main", NEXT, INVALID)
    first.reconcile()
    first.reconciler.stop()
    again = _restarted(first, tmp_path)
    for kind, name, ns in DRIFTED:
        del again.kube.objects[(kind, ns, name)]
    again.reconcile()
    assert {(k, n) for k, n, _ in DRIFTED} <= again.applied()
    assert again.condition("Stalled")["reason"] == "ValidationFailed"
    again.reconciler.stop()


def test_an_applied_revision_force_pushed_away_is_said_and_not_fetched_at_each_reconcile(
    tmp_path: Path,
) -> None:
    """Found by a review: after a restart, the applied commit, force-pushed away,
    was taken for a damaged cache: the clone deleted and made again at every
    reconcile, and the status still said it kept that revision."""
    first = World(tmp_path)
    first.git.push(URL, "main", GOOD, FILES)
    first.reconcile()
    first.reconciler.stop()
    first.git.push(URL, "main", NEXT, INVALID)
    del first.git.repos[URL].commits[GOOD]  # main force-pushed; GOOD is gone
    again = _restarted(first, tmp_path)
    again.reconcile()
    stalled = again.condition("Stalled")
    assert stalled["reason"] == "ValidationFailed"
    assert f"main@sha1:{GOOD}, applied last, is no longer in the repository" in stalled["message"]
    resolves = len(again.git.auths)
    for _ in range(3):
        again.reconcile(fetch=False)  # drift events
    assert len(again.git.auths) == resolves and again.git.forgotten == []
    # The branch is put back on it, then moves on to another invalid commit: the
    # revision is in hand again, and the status no longer says it is lost.
    again.git.push(URL, "main", GOOD, FILES)
    again.clock.advance(61)
    again.reconcile()
    assert again.condition("Ready")["status"] == "True"
    again.git.push(URL, "main", "c" * 40, INVALID)
    again.clock.advance(61)
    again.reconcile()
    assert "no longer in the repository" not in again.condition("Stalled")["message"]
    again.reconciler.stop()


def test_while_the_remote_is_out_of_reach_drift_is_corrected_from_what_was_applied(
    world: World,
) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    world.git.down.add(URL)
    for kind, name, ns in DRIFTED:
        _delete_by_hand(world, kind, name, ns)
    world.clock.advance(61)  # a poll: the remote does not answer
    world.reconcile(fetch=False)
    assert world.condition("Ready")["reason"] == "GitOperationFailed"
    assert {(k, n) for k, n, _ in DRIFTED} <= world.applied()


class _Broken(FakeGit):
    """Git whose reads fail in a way nobody foresaw."""

    def resolve(self, url: str, ref: GitRef, *, auth: GitAuth, timeout_s: float) -> str:
        raise RuntimeError("something nobody foresaw")


def test_a_reconcile_that_crashes_says_so_on_the_source_and_is_retried(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    assert world.condition("Ready")["status"] == "True"
    broken = _Broken()
    world.reconciler._revisions = GitRevisions(
        world.kube, cache_dir=Path("/nonexistent"), system_namespace=DEFAULT_SYSTEM_NAMESPACE,
        git=broken,
    )  # fmt: skip
    world.reconciler.sources.assume(world.kube.get(RESOURCES["PolicySource"], "team") or {})
    world.clock.advance(61)
    world.reconciler._run("team", True)  # what the worker runs for a due source
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReconcileFailed")
    assert "RuntimeError: something nobody foresaw" in ready["message"]
    assert f"keeping main@sha1:{GOOD}" in ready["message"]


def test_dry_run_refused_revision_still_keeps_last_good_state(world: World) -> None:
    """docs/reconciler.md: 'Nothing of a refused revision is applied; the last
    good revision stays.' A hand-deleted GPU quota comes back while the newest
    revision is refused at dry-run (found by a review: only invalid or unreachable
    revisions kept it; a DryRunFailed one re-applied itself, refused, each drift)."""
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    world.git.push(
        URL,
        "main",
        NEXT,
        policy_files(project("nlp").max(gpu=8).build(), project("cv").max(gpu=4).build()),
    )
    world.kube.refuse = {"cv": ApiError(403, "Forbidden", "denied by admission webhook")}
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "DryRunFailed"
    _delete_by_hand(world, "ResourceQuota", "gangops-quota", "nlp")
    world.reconcile(fetch=False)  # the drift event
    assert ("ResourceQuota", "nlp", "gangops-quota") in world.kube.objects


def test_a_recreated_priorityclass_the_api_server_refuses_leaves_the_old_one(
    tmp_path: Path,
) -> None:
    """With allowRecreate the class is deleted, then created at its new value; refused
    as written (admission), the old class is created again and the revision stalls
    (found by a review: the class stayed deleted, and pods naming it were refused)."""
    w = World(tmp_path, spec={"url": URL, "ref": {"branch": "main"}, "allowRecreate": True})
    try:
        real = w.kube.apply

        def apply(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
            if obj["kind"] == "PriorityClass" and obj.get("value") == 2_000:
                raise ApiError(403, "Forbidden", "denied by admission webhook")
            return real(obj, **kw)

        w.kube.apply = apply  # type: ignore[method-assign]
        w.git.push(URL, "main", GOOD, FILES)
        w.reconcile()
        before = w.kube.objects[("PriorityClass", "", "normal")]["value"]
        tiers = tuple(
            tier("normal", 2_000, globalDefault=True) if t["metadata"]["name"] == "normal" else t
            for t in TIERS
        )
        w.git.push(URL, "main", NEXT, policy_files(project("nlp").max(gpu=8).build(), tiers=tiers))
        w.reconcile()
        assert w.condition("Stalled")["reason"] == "RecreateRefused"
        assert w.kube.objects[("PriorityClass", "", "normal")]["value"] == before
        w.clock.advance(300)
        w.reconcile()  # the next poll: still there, still refused
        assert w.kube.objects[("PriorityClass", "", "normal")]["value"] == before
    finally:
        w.reconciler.stop()


def test_prune_keeps_a_namespace_that_holds_pods(tmp_path: Path) -> None:
    """With pruneNamespaces, a project that leaves the repository takes its namespace
    with it, but never one holding pods: deleting it would delete them (found by a
    review: a team's namespace, adopted by the apply, went with its running job)."""
    w = World(tmp_path, spec={"url": URL, "ref": {"branch": "main"}, "pruneNamespaces": True})
    try:
        w.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cv"}},
                      field_manager="kubectl")  # fmt: skip
        w.kube.create({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "train-0", "namespace": "cv"}},
                      field_manager="kubectl")  # fmt: skip
        both = policy_files(project("nlp").max(gpu=8).build(), project("cv").max(gpu=4).build())
        w.git.push(URL, "main", GOOD, both)
        w.reconcile()
        w.git.push(URL, "main", NEXT, FILES)  # cv leaves the policy repository
        w.reconcile()
        assert ("Namespace", "", "cv") in w.kube.objects and (
            "Pod",
            "cv",
            "train-0",
        ) in w.kube.objects
        assert ("ResourceQuota", "cv", "gangops-quota") not in w.kube.objects  # the rest goes
    finally:
        w.reconciler.stop()


def test_what_goes_into_a_namespace_made_by_hand_is_dry_run(world: World) -> None:
    """The cache holds only labelled objects, so a namespace made by hand read as new,
    and its objects skipped the dry-run: refused at apply, half of the revision had
    been written (found by a review). Now the whole revision is refused first."""
    real = world.kube.apply

    def apply(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        if obj["kind"] == "ResourceQuota" and obj["metadata"].get("namespace") == "cv":
            raise ApiError(403, "Forbidden", "quotas in cv are managed by the platform team")
        return real(obj, **kw)

    world.kube.apply = apply  # type: ignore[method-assign]
    world.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cv"}},
                      field_manager="kubectl")  # fmt: skip
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    world.git.push(URL, "main", NEXT, policy_files(
        project("nlp").max(gpu=16).build(), project("cv").max(gpu=4).build()))  # fmt: skip
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "DryRunFailed"
    nlp = world.kube.objects[("ResourceQuota", "nlp", "gangops-quota")]["spec"]["hard"]
    assert nlp["requests.nvidia.com/gpu"] == "8", "half of the refused revision was applied"


def _undone(world: World, kind: str, name: str, namespace: str = "") -> float:
    """Another writer deletes a managed object; the informer hands the reconciler the
    event. Returns how long the correction it queues waits."""
    obj = world.kube.objects[(kind, namespace, name)]
    _delete_by_hand(world, kind, name, namespace)
    world.reconciler._on_managed("DELETED", obj)
    return world.reconciler._queue._due.pop("team") - world.clock.monotonic()


QUOTA = ("ResourceQuota", "gangops-quota", "nlp")
CLASS = ("PriorityClass", "normal", "")


def _applied_then_quiet(world: World) -> None:
    world.git.push(URL, "main", GOOD, FILES)
    world.reconcile()
    world.clock.advance(DRIFT_QUIET_S + 1)  # nobody changed anything back at once


def test_drift_corrected_again_and_again_waits_longer_each_time(world: World) -> None:
    """Noticed and left last stop: another writer fighting over a managed object (an
    operator deleting or rewriting it) met a correction at the API server's speed, for
    ever. A change within `DRIFT_QUIET_S` of the reconciler's last write of the object
    now waits 1 s, doubling to `DRIFT_MAX_WAIT_S`."""
    _applied_then_quiet(world)
    waits = []
    for _ in range(11):
        waits.append(_undone(world, *QUOTA))
        world.clock.advance(waits[-1])
        world.reconcile(fetch=False)  # the drift event's reconcile, when it is due
        assert ("ResourceQuota", "gangops-quota") in world.applied()
        world.clock.advance(0.5)  # the other writer changes it back half a second later
    assert waits == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, DRIFT_MAX_WAIT_S]
    world.reconcile(fetch=False)  # nothing drifted: nothing written, nothing counted
    assert _undone(world, *QUOTA) == DRIFT_MAX_WAIT_S


def test_a_fight_over_one_object_delays_no_other_and_ends_after_a_quiet_spell(
    world: World,
) -> None:
    """Found by a review: the wait was the source's, so a person deleting a
    PriorityClass while an operator fought over a ResourceQuota had it put back five
    minutes late; and a fight's wait outlived the fight (10 s plus the wait itself)."""
    _applied_then_quiet(world)
    for _ in range(11):
        world.clock.advance(_undone(world, *QUOTA))
        world.reconcile(fetch=False)
        world.clock.advance(0.5)
    assert _undone(world, *CLASS) == 0  # another object: at once, mid-fight
    world.reconcile(fetch=False)
    assert {("ResourceQuota", "gangops-quota"), ("PriorityClass", "normal")} <= world.applied()
    world.clock.advance(DRIFT_QUIET_S + 1)  # the other writer stopped
    assert _undone(world, *QUOTA) == 0
    world.reconcile(fetch=False)
    world.clock.advance(DRIFT_QUIET_S + 1)
    assert _undone(world, *QUOTA) == 0  # a first correction again: no fight to slow


def test_a_fight_over_two_objects_corrected_in_turn_slows_each(world: World) -> None:
    """Found by a review: only the source's last correction was compared, so a writer
    undoing two objects, each seen by its own reconcile (A, B, A, B, ...), was never
    slowed."""
    _applied_then_quiet(world)
    waits = []
    for _ in range(4):
        for obj in (QUOTA, CLASS):
            waits.append(_undone(world, *obj))
            world.clock.advance(waits[-1])
            world.reconcile(fetch=False)
            world.clock.advance(0.5)
    assert waits == [0, 0, 1, 1, 2, 2, 4, 4]


def _during_sync(world: World, then: Callable[[], None]) -> None:
    """`then` runs as each sync that wrote something returns, before the reconciler
    looks at what it wrote (a watch event arriving while the sync ends)."""
    r = world.reconciler
    real = r._apply_revision

    def apply(*a: Any, **kw: Any) -> Any:
        result = real(*a, **kw)
        if result.writes:
            then()
        return result

    r._apply_revision = apply  # type: ignore[method-assign]


def test_a_change_back_seen_before_the_sync_returns_is_judged_against_its_write(
    world: World,
) -> None:
    """Found by a review: a fight's record was written after the sync returned, so a
    change back that arrived first (a mutating webhook's is the write's own echo) was
    judged against the correction before, and the fight started over at 16 s."""
    _applied_then_quiet(world)
    _during_sync(world, lambda: waits.append(_undone(world, *QUOTA)))
    waits = [_undone(world, *QUOTA)]
    for _ in range(11):
        world.clock.advance(waits[-1])
        world.reconcile(fetch=False)
    assert waits == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, DRIFT_MAX_WAIT_S, DRIFT_MAX_WAIT_S]


def test_the_echo_of_a_correction_is_no_change(world: World, caplog: Any) -> None:
    """Found by a review: the watch's echo of the reconciler's own write counted as a
    change; before the sync returned it brought the next correction forward, and
    later it marked a correction made a minute on (another object's drift putting this
    one back too) as a fight."""
    _applied_then_quiet(world)
    r = world.reconciler
    key = ("ResourceQuota", "nlp", "gangops-quota")

    def echo() -> None:
        r._on_managed("ADDED", world.kube.objects[key])
        assert "team" not in r._queue._due  # no change: nothing queued

    _during_sync(world, echo)
    waits = []
    for _ in range(11):
        waits.append(_undone(world, *QUOTA))
        world.clock.advance(waits[-1])
        world.reconcile(fetch=False)
        world.clock.advance(0.5)
    assert waits == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, DRIFT_MAX_WAIT_S]
    world.clock.advance(60)  # the fight is over; a person deletes both at once
    quota = world.kube.objects[key]
    _delete_by_hand(world, *QUOTA)
    assert _undone(world, *CLASS) == 0  # its event first; its reconcile puts both back
    caplog.clear()
    world.reconcile(fetch=False)
    assert ("ResourceQuota", "gangops-quota") in world.applied()
    assert "another writer" not in caplog.text
    r._on_managed("DELETED", quota)  # the quota's own event, handled after: it is back


def test_writes_long_past_are_forgotten() -> None:
    """The record of every object the reconciler writes is kept only while it can
    start a fight: objects pruned or renamed over months of revisions are not kept
    for good."""
    clock = FakeClock()
    fights = _Fights(clock)
    for i in range(1000):
        fights.wrote(f"ResourceQuota team-{i}/gangops-quota")
    clock.advance(2 * (DRIFT_QUIET_S + DRIFT_MAX_WAIT_S) + 1)
    fights.wrote("PriorityClass normal")
    assert list(fights._by_obj) == ["PriorityClass normal"]
    assert fights.changed("ResourceQuota team-1/gangops-quota") == 0  # as for a new one
