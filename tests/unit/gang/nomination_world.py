"""A small simulated cluster that runs the gang controller's steps over the real pure
parts, for the two-cycle nomination property (`test_two_cycle_props`).

A nomination is carried across steps: one step decides a preemption and writes the
nominee's record and its victims' evictions, later steps admit the nominee once the
victims are gone. Between those steps writes land late, fail or are cut by a crash,
and pods start and terminate at their own pace. The one-cycle properties
(tests/unit/scheduler) cannot see what goes wrong there; this world can. It runs, as
`controller/gang/controller.py` does:

- `lifecycle.decide` (plan, snapshot, `cycle.schedule`) on JobViews and raw Pod and
  Node objects, with the controller's `busy` set (jobs with a write in flight) and
  its overrides (a write that carries a record counts at once: assume, then write);
- `lifecycle.action_write` and `lifecycle.cycle_writes` turned into writes, one per
  job in flight, as `GangController._submit` hands them out;
- a binder model (`binder.Binder.execute`): the status first (compare-and-swap on
  the resourceVersion), then the pods, created bound (a launch, refused by the
  namespace's ResourceQuota as the API server would) or deleted (they hold their
  GPUs until the kubelet model removes them);
- a kubelet model: bound pods start, deleted pods go.

The caller draws the order in which writes land, fail or are lost in a crash and in
which pods start and go. What the world records as a `Violation` (by its `kind`):

- `NODE_OVERCOMMITTED`: the live pods on a node (terminating ones included, and
  those of other schedulers) need more GPUs than it has in service;
- `PROJECT_MAX`, `USER_MAX`, `NAMESPACE_QUOTA_RECORDS`, `RESERVE`: the Admitted
  records hold more than a project's max, a user's max, a namespace's
  ResourceQuota, or eat into the reserve, beyond what the initial state already did
  ("the records alone never admit more than a project's max", docs/scheduler.md);
- `QUOTA_REFUSES_WORKER`: a worker pod is refused by its namespace's ResourceQuota
  because of pods that are not terminating (terminating ones are the transient the
  controller retries);
- `PREEMPTION_BUDGET`: evictions plus shrinks below gangSize written within the
  hour exceed maxPerHour minus what the hour had already spent;
- `NOMINEE_LEFT_WAITING` (`World.settle`): once every write has landed and every pod
  has started or gone, a gang is still Nominated;
- `DID_NOT_SETTLE` (`World.settle`): the writes never stop.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from controller.gang.lifecycle import Write, action_write, cycle_writes, decide, refused_write
from controller.gang.record import Admission, format_time
from controller.gang.view import JobView
from controller.nodehealth import UNHEALTHY_ANNOTATION
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import MILLI, Gang, JobId, NamespaceQuota, PodShape, namespace_of
from tests.unit.gang.builders import foreign, node

Obj = dict[str, Any]
T0 = 1_000_000.0
"""The world's clock at its first step."""
LABEL_JOB = "ai.operator/job-name"
BACKOFF = {"backoff_base_s": 5, "backoff_max_s": 300}

NODE_OVERCOMMITTED = "node over-committed"
PROJECT_MAX = "project max"
USER_MAX = "user max"
NAMESPACE_QUOTA_RECORDS = "namespace quota (records)"
RESERVE = "reserve"
QUOTA_REFUSES_WORKER = "namespace quota refuses a worker"
PREEMPTION_BUDGET = "preemption budget"
NOMINEE_LEFT_WAITING = "nominee left waiting once all landed"
DID_NOT_SETTLE = "did not settle"

Figures = tuple[dict[str, int], dict[tuple[str, str], int], dict[str, int], int]
"""GPUs (milli) the Admitted records hold: per project, per (project, user), per
namespace, and outside the reserve's tiers."""


class Violation(NamedTuple):
    kind: str
    detail: tuple[Any, ...]


def gpu_node(name: str, gpus: int, bad: int, labels: dict[str, str]) -> Obj:
    """A Ready node with `gpus` GPUs, the last `bad` of them unhealthy."""
    obj = node(name, gpus, **labels)
    if bad:
        unhealthy = ",".join(str(i) for i in range(gpus - bad, gpus))
        obj["metadata"]["annotations"] = {UNHEALTHY_ANNOTATION: unhealthy}
    return obj


def worker_pod(g: Gang, attempt: int, rank: int, node_name: str, phase: str) -> Obj:
    """Worker `rank` of `g`'s attempt, bound to `node_name`, as the binder creates it."""
    ns, name = g.id.split("/")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{attempt}-{rank}",
            "namespace": ns,
            "uid": f"pod-{ns}-{name}-{attempt}-{rank}",
            "labels": {
                LABEL_JOB: name,
                "ai.operator/attempt": str(attempt),
                "ai.operator/rank": str(rank),
            },
            "ownerReferences": [{"uid": f"uid-{g.id}"}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(g.pod.gpus)}}}
            ],
        },
        "status": {"phase": phase},
    }


def _gpus(pod: Obj) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])


def _terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


@dataclass
class World:
    policy: SchedulingPolicy
    node_objs: dict[str, Obj]
    in_service: dict[str, int]
    """Node -> GPUs in service (allocatable minus unhealthy)."""
    quotas: dict[str, NamespaceQuota]
    """Namespace -> its ResourceQuota."""
    gangs: dict[JobId, Gang] = field(default_factory=dict)
    """Each job's gang as its spec asks for it."""
    jobs: dict[JobId, Obj] = field(default_factory=dict)
    """The TrainingJob objects as the API server holds them."""
    pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    """(namespace, name) -> Pod, as the API server holds them."""
    flights: dict[JobId, Write] = field(default_factory=dict)
    """The write in flight for each busy job."""
    overrides: dict[JobId, Admission | None] = field(default_factory=dict)
    """Records assumed by in-flight writes (the controller's overrides)."""
    now: float = T0
    budget_left: int = 0
    """Evictions and shrinks below gangSize the hour still allows."""
    preemptions: int = 0
    """Evictions and shrinks below gangSize written so far."""
    initial: Figures = ({}, {}, {}, 0)
    """The records' figures before the first step: a limit they already broke is
    checked against what they held."""
    violations: list[Violation] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    """What happened, step by step: shown when the property fails."""

    @property
    def capacity(self) -> int:
        """GPUs (milli) in service, as the snapshot counts them."""
        return sum(self.in_service.values()) * MILLI

    def _violation(self, kind: str, *detail: Any) -> None:
        self.violations.append(Violation(kind, detail))

    # ------------------------------------------------------------ building

    def add_job(self, g: Gang, adm: Admission | None = None, **status: Any) -> None:
        """A TrainingJob for `g` with `status` (and `adm` recorded); an Admitted record's
        pods run already."""
        ns, name = g.id.split("/")
        st: Obj = dict(status)
        if adm is not None:
            st["admission"] = adm.to_dict()
            st["attempts"] = adm.attempt
            st.setdefault("phase", "Running" if adm.state == "Admitted" else "Queued")
        self.jobs[g.id] = {
            "apiVersion": "ai.operator/v1",
            "kind": "TrainingJob",
            "metadata": {
                "name": name, "namespace": ns, "uid": f"uid-{g.id}", "generation": 1,
                "resourceVersion": "1",
            },
            "status": st,
        }  # fmt: skip
        self.gangs[g.id] = g
        if adm is not None and adm.state == "Admitted":
            for rank, where in enumerate(adm.placement.pods):
                self._create_pod(g, adm.attempt, rank, where.node, checked=False)

    def add_foreign(self, node_name: str, gpus: int) -> None:
        """A pod of another scheduler using `gpus` GPUs of the node."""
        pod = foreign(f"f-{node_name}", node_name, gpus)
        self.pods[("other", pod["metadata"]["name"])] = pod

    # ------------------------------------------------------------ reading

    def record(self, job: JobId) -> Admission | None:
        """The job's record as written."""
        return Admission.from_status(self.jobs[job].get("status") or {})

    def views(self) -> list[JobView]:
        """The controller's view of each job: its record (or the one an in-flight
        write assumed) and its pods."""
        by_job: dict[tuple[str, str], list[Obj]] = {}
        for p in self.pods.values():
            labels = p["metadata"].get("labels") or {}
            if LABEL_JOB in labels:
                by_job.setdefault((p["metadata"]["namespace"], labels[LABEL_JOB]), []).append(p)
        out = []
        for job, obj in self.jobs.items():
            adm = self.overrides[job] if job in self.overrides else self.record(job)
            ns, name = job.split("/")
            mine = sorted(by_job.get((ns, name), []), key=lambda p: p["metadata"]["name"])
            out.append(JobView(obj, job, None, self.gangs[job], None, adm, mine))
        return out

    def figures(self) -> Figures:
        """What the Admitted records (as written) hold, each at the size it holds."""
        per_project: Counter[str] = Counter()
        per_user: Counter[tuple[str, str]] = Counter()
        per_namespace: Counter[str] = Counter()
        outside_reserve = 0
        for job in self.jobs:
            adm = self.record(job)
            if adm is None or adm.state != "Admitted":
                continue
            g = self.gangs[job]
            size = len(adm.placement.pods)
            if size != g.workers:
                g = g.resized(size)
            per_project[g.project] += g.gpu_total
            per_user[(g.project, g.user)] += g.gpu_total
            per_namespace[namespace_of(g.id) or ""] += g.gpu_total
            if g.tier not in self.policy.reserve_tiers:
                outside_reserve += g.gpu_total
        return dict(per_project), dict(per_user), dict(per_namespace), outside_reserve

    def _quota(self, ns: str) -> int | None:
        """The namespace's ResourceQuota on GPUs (milli), if any."""
        quota = self.quotas.get(ns)
        return None if quota is None else quota.gpu_milli

    def node_load(self, node_name: str) -> int:
        """GPUs the node's live pods (terminating ones included) use."""
        return sum(
            _gpus(p)
            for p in self.pods.values()
            if p["spec"].get("nodeName") == node_name
            and p["status"]["phase"] not in ("Succeeded", "Failed")
        )

    def namespace_load(self, ns: str, *, terminating: bool) -> int:
        """GPUs (milli) the namespace's live pods use, with or without the
        terminating ones."""
        return MILLI * sum(
            _gpus(p)
            for p in self.pods.values()
            if p["metadata"]["namespace"] == ns
            and p["status"]["phase"] not in ("Succeeded", "Failed")
            and (terminating or not _terminating(p))
        )

    # ------------------------------------------------------------ checks

    def check_records(self, why: str) -> None:
        """The Admitted records keep every limit (or break none more than at the
        start)."""
        projects0, users0, namespaces0, outside0 = self.initial
        projects, users, namespaces, outside = self.figures()
        for name, p in self.policy.projects.items():
            held = projects.get(name, 0)
            if p.max is not None and held > max(p.max, projects0.get(name, 0)):
                self._violation(PROJECT_MAX, name, held, p.max, why)
            for (project, user), by_user in users.items():
                ceiling = p.user(user).max if project == name else None
                if ceiling is not None and by_user > max(ceiling, users0.get((project, user), 0)):
                    self._violation(USER_MAX, project, user, by_user, ceiling, why)
            quota = self._quota(name)  # project p's jobs live in namespace p
            in_namespace = namespaces.get(name, 0)
            if quota is not None and in_namespace > max(quota, namespaces0.get(name, 0)):
                self._violation(NAMESPACE_QUOTA_RECORDS, name, in_namespace, quota, why)
        if self.policy.reserve:
            usable = self.capacity - self.policy.reserve
            if outside > max(usable, outside0):
                self._violation(RESERVE, outside, usable, why)

    # ------------------------------------------------------------ pods

    def _create_pod(
        self, g: Gang, attempt: int, rank: int, node_name: str, *, checked: bool = True
    ) -> bool:
        """Create a worker pod bound to `node_name`; False if the namespace's
        ResourceQuota refuses it. `checked`: quota and node load are checked (not
        for the initial state's pods)."""
        ns, name = g.id.split("/")
        key = (ns, f"{name}-{attempt}-{rank}")
        if key in self.pods:
            return True
        if checked:
            quota = self._quota(ns)
            need = g.pod.gpus * MILLI
            if quota is not None and self.namespace_load(ns, terminating=True) + need > quota:
                hard = self.namespace_load(ns, terminating=False) + need > quota
                self.log.append(f"quota refuses {key} (not only terminating pods: {hard})")
                if hard:
                    self._violation(QUOTA_REFUSES_WORKER, key, self.now)
                return False
        phase = "Pending" if checked else "Running"
        self.pods[key] = worker_pod(g, attempt, rank, node_name, phase)
        load = self.node_load(node_name)
        if checked and load > self.in_service[node_name]:
            self._violation(NODE_OVERCOMMITTED, node_name, load, self.in_service[node_name], key)
        return True

    def kubelet(self, rnd: random.Random, p_start: float = 0.5, p_gone: float = 0.5) -> None:
        """Each pending pod starts with probability `p_start`; each deleted pod goes
        with probability `p_gone`."""
        for key in list(self.pods):
            p = self.pods[key]
            if _terminating(p):
                if rnd.random() < p_gone:
                    del self.pods[key]
                    self.log.append(f"pod {key} gone")
            elif p["status"]["phase"] == "Pending" and rnd.random() < p_start:
                p["status"] = {"phase": "Running"}

    # ------------------------------------------------------------ the step

    def step(self) -> None:
        """`GangController._step`: decide, then hand out the writes."""
        views = self.views()
        busy = frozenset(self.flights)
        todo, _, result = decide(
            views, self.node_objs, list(self.pods.values()), self.policy, now=self.now,
            busy=busy, quotas=self.quotas,
        )  # fmt: skip
        for a in todo.actions:
            w = action_write(a, self.policy, now=self.now, **BACKOFF)
            if w is not None:
                self._submit(w)
        for w in cycle_writes(result, views, now=self.now):
            self._submit(w, assume=w.record)
        resizes = [(r.gang.id, r.gang.workers) for r in result.resizes]
        self.log.append(
            f"t={self.now - T0:g} decisions={'; '.join(_say(d) for d in result.decisions)}"
            + (f" resizes={resizes}" if resizes else "")
            + f" actions={[(a.kind, a.job.id) for a in todo.actions]}"
            f" busy={sorted(busy)} releasing={dict(todo.releasing)}"
            f" last_hour={todo.preemptions_last_hour}"
        )
        self.now += 1.0

    def _submit(self, w: Write, *, assume: Admission | None = None) -> None:
        """`GangController._submit`: one write per job in flight; one that carries a
        record is assumed at once."""
        job = w.job.id
        if w.empty or job in self.flights:
            return
        self.flights[job] = w
        if assume is not None:
            self.overrides[job] = assume

    # ------------------------------------------------------------ the binder

    def land(self, job: JobId) -> None:
        """`Binder.execute` of the job's in-flight write, then what `_submit`'s `run`
        does when it ends."""
        w = self.flights.pop(job)
        try:
            self._execute(w)
        finally:
            self.overrides.pop(job, None)

    def fail(self, job: JobId) -> None:
        """The write failed before anything of it was written (an ApiError)."""
        self.flights.pop(job)
        self.overrides.pop(job, None)
        self.log.append(f"write of {job} failed")

    def crash(self, rnd: random.Random) -> None:
        """The controller dies: each in-flight write has landed whole, only its
        status, or nothing; what it assumed is forgotten."""
        for job in list(self.flights):
            w = self.flights.pop(job)
            x = rnd.random()
            if x < 1 / 3:
                self._execute(w)
            elif x < 2 / 3:
                self._write_status(w)
            self.overrides.pop(job, None)
        self.log.append("controller crashed")

    def _write_status(self, w: Write) -> bool:
        """The write's status, compare-and-swap; False on a conflict."""
        if w.phase is None:
            return True
        obj = self.jobs[w.job.id]
        meta = obj["metadata"]
        if w.conditional and meta["resourceVersion"] != w.job.obj["metadata"]["resourceVersion"]:
            self.log.append(f"write {w.kind} of {w.job.id} conflicts")
            return False
        st = dict(obj.get("status") or {})
        if w.record is not None:
            st["admission"] = w.record.to_dict()
        elif w.clear:
            st.pop("admission", None)
        for k, v in w.fields.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = v
        st.update(phase=w.phase, reason=w.reason, message=w.message)
        st["observedGeneration"] = meta["generation"]
        new_meta = {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1)}
        self.jobs[w.job.id] = {**obj, "metadata": new_meta, "status": st}
        if "preemptedAt" in w.fields or "shrunkAt" in w.fields:
            self.preemptions += 1
            if self.preemptions > self.budget_left:
                self._violation(
                    PREEMPTION_BUDGET, self.preemptions, self.budget_left, w.kind, w.job.id
                )
        said = f" record={_say_record(w.record)}" if w.record else (" cleared" if w.clear else "")
        self.log.append(f"landed {w.kind} of {w.job.id}{said}")
        self.check_records(f"{w.kind} {w.job.id}")
        return True

    def _execute(self, w: Write) -> None:
        """`Binder.execute`: the status, then the pods (a refused launch gives the
        GPUs back, `lifecycle.refused_write`)."""
        if not self._write_status(w):
            return
        job = w.job.id
        if w.launch:
            adm = w.record if w.record is not None else w.job.admission
            if adm is not None:
                g = self.gangs[job]
                for rank, where in enumerate(adm.placement.pods):
                    if not self._create_pod(g, adm.attempt, rank, where.node):
                        v = JobView(self.jobs[job], job, None, g, None, adm, [])
                        refused = refused_write(
                            v, obj="pod", status=403, message="exceeded quota", now=self.now,
                            **BACKOFF,
                        )  # fmt: skip
                        self._write_status(refused)
                        break
        for p in w.delete:
            live = self.pods.get((p["metadata"]["namespace"], p["metadata"]["name"]))
            if live is not None and not _terminating(live):
                live["metadata"]["deletionTimestamp"] = format_time(self.now)

    # ------------------------------------------------------------ settling

    def quiet(self) -> bool:
        """No write in flight, no pod starting or terminating."""
        return not self.flights and not any(
            _terminating(p) or p["status"]["phase"] == "Pending" for p in self.pods.values()
        )

    def settle(self, rnd: random.Random, steps: int = 40) -> None:
        """Let everything land and run, step after step, until the world is quiet;
        then no gang may be left Nominated (its victims are gone: docs/scheduler.md's
        "admitted once they are gone"), at the latest once its nomination has expired
        (the gang timeout: a nominee whose own admission failed after the nodes it was
        promised were taken waits that long, documented under "Still open")."""
        if not self._quiet_within(rnd, steps):
            return
        if any(self._nominated()):
            self.now += self.policy.gang_timeout_seconds
            if not self._quiet_within(rnd, steps):
                return
        for job in self._nominated():
            self._violation(NOMINEE_LEFT_WAITING, job)

    def _quiet_within(self, rnd: random.Random, steps: int) -> bool:
        for _ in range(steps):
            for job in list(self.flights):
                self.land(job)
            self.kubelet(rnd, 1.0, 1.0)
            self.step()
            if self.quiet():
                return True
        self._violation(DID_NOT_SETTLE, steps)
        return False

    def _nominated(self) -> list[str]:
        out = []
        for job in self.jobs:
            adm = self.record(job)
            if adm is not None and adm.state == "Nominated":
                out.append(job)
        return out


def _say(d: Any) -> str:
    kind = type(d).__name__
    extra = ""
    if kind == "Preempt":
        extra = f" victims={list(d.victims)} shrinks={list(d.shrinks)}"
    if kind == "Pending":
        extra = f" {d.code}"
    if kind in ("Admit", "Preempt"):
        extra += f" on {sorted(d.placement.nodes().items())}"
    return f"{kind} {d.gang.id}{extra}"


def _say_record(a: Admission) -> str:
    out = f"{a.state}#{a.attempt} {sorted(a.placement.nodes().items())}"
    if a.victims:
        out += f" victims={list(a.victims)}"
    if a.shrinks:
        out += f" shrinks={list(a.shrinks)}"
    return out


def from_snapshot(
    policy: SchedulingPolicy,
    node_objs: dict[str, Obj],
    in_service: dict[str, int],
    quotas: dict[str, NamespaceQuota],
    foreign_gpus: dict[str, int],
    snap: Snapshot,
    queue: list[Gang],
    *,
    last_hour: int,
) -> World:
    """A world whose running gangs are `snap`'s (records Admitted, pods Running), whose
    queued gangs are `queue` (no record yet), with `foreign_gpus[node]` GPUs used by
    other schedulers and `last_hour` preemptions of the hour already spent."""
    w = World(policy, node_objs, in_service, quotas)
    for n, gpus in foreign_gpus.items():
        if gpus:
            w.add_foreign(n, gpus)
    for r in snap.running.values():
        attempt = 1 if r.gang.workers == r.gang.submitted_workers else 2
        spec = r.gang
        if spec.base_workers is not None:  # grown: the spec asks for its base size
            spec = replace(spec, workers=spec.base_workers, base_workers=None)
        w.add_job(spec, Admission("Admitted", attempt, r.placement, T0 + r.started, 0))
    for g in queue:
        w.add_job(g)
    for i in range(last_hour):  # the hour's preemptions, on jobs that have finished since
        g = Gang(JobId(f"done/old{i}"), "a", "u1", "batch", 1000, 0.0, 1, PodShape())
        w.add_job(g, phase="Succeeded", preemptedAt=format_time(T0 - 60))
    w.budget_left = max(0, policy.max_preemptions_per_hour - last_hour)
    w.initial = w.figures()
    return w
