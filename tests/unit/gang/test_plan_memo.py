"""`plan` with a memo kept across steps (what a job's record, pods and nodes decide,
kept while none of them changes) decides what it decides without one, on random
streams of changes to jobs, pods, nodes and the time. Objects are replaced, never
changed, as the informers' caches replace them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.gang.lifecycle import Agenda, plan
from controller.gang.record import Admission
from controller.gang.view import Memo, PodIndex, job_views
from controller.nodehealth import RESTART_ANNOTATION
from controller.scheduler.types import JobId

from .builders import NS, POLICY, admission, job, job_id, node, pod

Obj = dict[str, Any]
POLICIES = (POLICY, replace(POLICY, gang_timeout_seconds=30.0))
JOBS = ("a", "b", "c")
NODES = ("n1", "n2")
RANKS = (0, 1)

change = st.one_of(
    st.tuples(st.just("pod_phase"), st.sampled_from(JOBS), st.sampled_from(RANKS),
              st.sampled_from(["Running", "Pending", "Failed", "Succeeded"])),
    st.tuples(st.just("pod_delete"), st.sampled_from(JOBS), st.sampled_from(RANKS)),
    st.tuples(st.just("pod_deleting"), st.sampled_from(JOBS), st.sampled_from(RANKS)),
    st.tuples(st.just("pod_back"), st.sampled_from(JOBS), st.sampled_from(RANKS)),
    st.tuples(st.just("stale_pod"), st.sampled_from(JOBS)),
    st.tuples(st.just("node_ready"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("node_gone"), st.sampled_from(NODES)),
    st.tuples(st.just("job_phase"), st.sampled_from(JOBS), st.sampled_from(["Running", "Queued"])),
    st.tuples(st.just("job_attempt"), st.sampled_from(JOBS)),
    st.tuples(st.just("job_restart"), st.sampled_from(JOBS)),
    st.tuples(st.just("time"), st.integers(0, 90)),
    st.tuples(st.just("policy"), st.sampled_from([0, 1])),
    st.tuples(st.just("override"), st.sampled_from(JOBS), st.sampled_from([None, 1, 2])),
    st.tuples(st.just("busy"), st.sampled_from(JOBS), st.booleans()),
    st.tuples(st.just("idle_step"),),
    st.tuples(st.just("nothing")),
)  # fmt: skip


class _Cluster:
    """The caches a step reads, changed the way the informers change them."""

    def __init__(self) -> None:
        self.rv = 1
        self.now = 1010.0
        self.attempts = dict.fromkeys(JOBS, 1)
        self.phases = dict.fromkeys(JOBS, "Running")
        self.restart: dict[str, str] = {}
        self.jobs: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.index = PodIndex()
        self.nodes = {n: node(n) for n in NODES}
        self.policy = POLICY
        self.overrides: dict[JobId, Admission | None] = {}
        self.busy: set[JobId] = set()
        for j in JOBS:
            self._job(j)
            for r in RANKS:
                self._pod(pod(j, r, node=NODES[r]))

    def _job(self, name: str) -> None:
        self.rv += 1
        adm = admission(*NODES, attempt=self.attempts[name], at=1000.0 + self.attempts[name])
        obj = job(name, len(RANKS), adm=adm, phase=self.phases[name])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if name in self.restart:
            obj["metadata"]["annotations"] = {RESTART_ANNOTATION: self.restart[name]}
        self.jobs[name] = obj

    def _pod(self, obj: Obj) -> None:
        key = (NS, obj["metadata"]["name"])
        self.pods[key] = obj
        self.index.put(obj)

    def _key(self, j: str, r: int, attempt: int | None = None) -> tuple[str, str]:
        return (NS, f"{j}-{attempt or self.attempts[j]}-{r}")

    def apply(self, c: tuple[Any, ...]) -> None:
        kind = c[0]
        if kind == "pod_phase" and self._key(c[1], c[2]) in self.pods:
            old = self.pods[self._key(c[1], c[2])]
            self._pod({**old, "status": {"phase": c[3]}})
        elif kind == "pod_delete" and self._key(c[1], c[2]) in self.pods:
            del self.pods[self._key(c[1], c[2])]
            self.index.remove(self._key(c[1], c[2]))
        elif kind == "pod_deleting" and self._key(c[1], c[2]) in self.pods:
            old = self.pods[self._key(c[1], c[2])]
            meta = {**old["metadata"], "deletionTimestamp": "1970-01-01T00:20:00Z"}
            self._pod({**old, "metadata": meta})
        elif kind == "pod_back":
            self._pod(pod(c[1], c[2], attempt=self.attempts[c[1]], node=NODES[c[2]]))
        elif kind == "stale_pod":
            self._pod(pod(c[1], 0, attempt=self.attempts[c[1]] - 1 or 9, node=NODES[0]))
        elif kind == "node_ready":
            self.nodes[c[1]] = node(c[1], ready=c[2])
        elif kind == "node_gone":
            self.nodes.pop(c[1], None)
        elif kind == "job_phase":
            self.phases[c[1]] = c[2]
            self._job(c[1])
        elif kind == "job_attempt":
            self.attempts[c[1]] += 1
            self._job(c[1])
        elif kind == "job_restart":
            self.restart[c[1]] = f"1970-01-01T00:{16 + self.rv % 40:02d}:00Z node drained"
            self._job(c[1])
        elif kind == "time":
            self.now += c[1]
        elif kind == "policy":  # a new policy: every gang parsed again
            self.policy = POLICIES[c[1]]
        elif kind == "override":  # a record written, its watch event not yet seen
            if c[2] is None:
                self.overrides.pop(job_id(c[1]), None)
            else:
                at = 1000.0 + c[2]
                self.overrides[job_id(c[1])] = admission(*NODES, attempt=c[2], at=at)
        elif kind == "busy":  # a write in flight
            (self.busy.add if c[2] else self.busy.discard)(job_id(c[1]))


def _agenda(todo: Agenda) -> object:
    return (
        todo.running,
        todo.owned,
        [(a.kind, a.job.id, a.message, a.by, a.workers,
          [p["metadata"]["name"] for p in a.pods]) for a in todo.actions],
        [g.id for g in todo.queue],
        todo.nominated, todo.backing_off, todo.preemptions_last_hour, todo.protected,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(change, max_size=25))
# found by CI: a restart request dated ahead of the time was kept as nothing to do,
# and stayed so once the time reached it
@example([("job_attempt", "a"), ("job_phase", "a", "Running"), ("job_restart", "b"), ("time", 10)])
def test_the_kept_plan_equals_one_made_from_scratch(stream: list[tuple[Any, ...]]) -> None:
    cluster = _Cluster()
    memo = Memo()
    for c in [("nothing",), *stream]:
        cluster.apply(c)
        memo.next_step()
        if c[0] == "idle_step":  # a step that read nothing carries the memo along
            memo.carry()
            continue
        jobs = list(cluster.jobs.values())
        policy, overrides, busy = cluster.policy, cluster.overrides, frozenset(cluster.busy)
        views = job_views(jobs, cluster.index.freeze(), policy, overrides=overrides, memo=memo)
        kept = plan(views, cluster.nodes, policy, now=cluster.now, busy=busy, memo=memo)
        fresh = plan(
            job_views(jobs, list(cluster.pods.values()), policy, overrides=overrides),
            cluster.nodes,
            policy,
            now=cluster.now,
            busy=busy,
        )
        assert _agenda(kept) == _agenda(fresh), c


def test_a_gang_running_as_recorded_is_planned_from_the_memo_until_something_changes() -> None:
    """The memo is used (a step after nothing changed keeps every running gang),
    and a change to a node the gang runs on is seen at once."""
    cluster = _Cluster()
    memo = Memo()

    def step() -> Agenda:
        memo.next_step()
        views = job_views(list(cluster.jobs.values()), cluster.index.freeze(), POLICY, memo=memo)
        return plan(views, cluster.nodes, POLICY, now=cluster.now, memo=memo)

    first = step()
    assert len(first.running) == 3 and not first.actions
    running = {id(r) for r in first.running}
    again = step()
    assert {id(r) for r in again.running} == running  # the very same, kept
    cluster.apply(("stale_pod", "a"))  # a pod of another attempt: to clean up
    cleanup = [a.pods for a in step().actions if a.kind == "cleanup"]
    assert len(cleanup) == 1 and [a.pods for a in step().actions] == cleanup
    assert next(a.pods for a in step().actions) is cleanup[0]  # kept, not found again
    cluster.apply(("node_ready", "n2", False))
    lost = step()
    assert sorted((a.kind, a.job.id) for a in lost.actions) == [
        ("cleanup", f"{NS}/a"),
        *(("restart", f"{NS}/{j}") for j in JOBS),
    ]
