"""The controller's snapshot kept across steps (`view.SnapshotCache`) against the one
built from scratch (`view.build_snapshot`), side by side on random streams of
events: nodes added, changed (GPUs, readiness, rack, unhealthy GPUs) and deleted;
pods added, bound, finished and deleted, foreign or a running gang's; gangs
admitted, resized, moved and finished, and now and then a running gang's order
changed. After every step the two snapshots are the same (nodes with their free
devices, running gangs with their devices, usage and free figures, domains), and
the cycle's changes to the kept one (a gang forgotten, another assumed) never reach
the next step's. The one from scratch is built over the same pod view, as the
controller built it before, and over the pods themselves. Last, two controllers,
one keeping its snapshot, decide the same on the same changes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.gang.controller import GangController
from controller.gang.view import PodIndex, SnapshotCache, build_snapshot
from controller.kube.clock import FakeClock
from controller.scheduler.policy import POLICY_CONFIGMAP, POLICY_KEY
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import (
    Admit,
    JobId,
    NamespaceQuota,
    Node,
    Placement,
    PodPlacement,
    Running,
)
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import job, policy_doc

from .builders import admission
from .builders import foreign as gang_foreign
from .builders import job as gang_job
from .builders import node as gang_node
from .builders import pod as gang_pod

Obj = dict[str, Any]
NODES = ("a", "b", "c", "d")
UNLISTED = "e"
"""A node running gangs name but the cluster does not list."""
GANGS = ("j0", "j1", "j2", "j3")
NAMESPACES = ("p", "q")
QUOTAS = {"p": NamespaceQuota(gpu_milli=16_000), "q": NamespaceQuota(pods=4)}
LEVELS = ("topology.kubernetes.io/rack",)


@st.composite
def nodes(draw: st.DrawFn) -> tuple[str, str, Node | None]:
    name = draw(st.sampled_from(NODES))
    if draw(st.integers(0, 5)) == 0:
        return ("node", name, None)
    gpus = draw(st.sampled_from([2, 4, 8]))
    return (
        "node",
        name,
        Node(
            name=name,
            gpus=gpus,
            cpu_milli=draw(st.sampled_from([0, 8000])),
            gpu_model=draw(st.sampled_from(["A100", "H100"])),
            labels={"topology.kubernetes.io/rack": draw(st.sampled_from(["r0", "r1"]))},
            schedulable=draw(st.booleans()) or draw(st.booleans()),
            unhealthy=draw(st.frozensets(st.integers(0, gpus), max_size=2)),
        ),
    )


@st.composite
def pods(draw: st.DrawFn) -> tuple[str, tuple[str, str], Obj | None]:
    """A pod of a running gang's name (`j0-1`: owned while that gang runs with 2
    workers or more) or a foreign one, anywhere, in any phase; or its deletion."""
    ns = draw(st.sampled_from(NAMESPACES))
    name = f"{draw(st.sampled_from([*GANGS, 'x']))}-{draw(st.integers(0, 2))}"
    if draw(st.integers(0, 4)) == 0:
        return ("pod", (ns, name), None)
    spec: Obj = {
        "containers": [
            {
                "name": "t",
                "resources": {
                    "requests": {
                        "nvidia.com/gpu": str(draw(st.integers(0, 3))),
                        "cpu": draw(st.sampled_from(["0", "500m"])),
                    }
                },
            }
        ]
    }
    where = draw(st.sampled_from([None, *NODES, UNLISTED]))
    if where:
        spec["nodeName"] = where
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": name, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded"]))},
    }
    return ("pod", (ns, name), obj)


@st.composite
def admissions(draw: st.DrawFn) -> tuple[str, JobId, Running | None]:
    """A gang admitted (or moved, resized: the same id again), or finished."""
    gid = JobId(f"{draw(st.sampled_from(NAMESPACES))}/{draw(st.sampled_from(GANGS))}")
    if draw(st.integers(0, 3)) == 0:
        return ("gang", gid, None)
    b = job(gid).project(gid.split("/")[0]).tier(draw(st.sampled_from(["high", "batch"])))
    if draw(st.integers(0, 4)) == 0:
        b = b.share(500)
    else:
        per = draw(st.sampled_from([1, 2]))
        b = b.gang(per * draw(st.integers(1, 3)), per_worker=per)
    g = b.build()
    where = [draw(st.sampled_from([*NODES, UNLISTED])) for _ in range(g.workers)]
    placement = Placement(tuple(PodPlacement(n, (0,)) for n in where))
    return ("gang", gid, Running(g, placement, float(draw(st.integers(0, 2)))))


event = st.one_of(
    nodes(),
    pods(),
    admissions(),
    st.integers(0, 29).map(
        lambda i: (
            ("levels", None, None)
            if i == 0
            else ("reorder", JobId(f"p/{GANGS[i % len(GANGS)]}"), None)
            if i < 4
            else ("nothing", None, None)
        )
    ),
)
steps = st.lists(st.lists(event, max_size=6), min_size=1, max_size=12)
"""The events between two steps, for each step."""


def dump(s: Snapshot) -> object:
    """Everything a cycle reads of a snapshot, orders included."""
    return (
        [(n.name, n.node, n.free, n.whole, n.bad, n.cpu, n.mem, n.domains) for n in s.nodes],
        list(s.running.items()),
        list(s.namespace_usage.items()),
        list(s.project_usage.items()),
        list(s.user_usage.items()),
        s.outside_reserve,
        list(s.shrinkable.items()),
        s.free_milli,
        list(s.free_by_model.items()),
        s.empty_blocks,
        s.capacity,
        s.levels,
        [[(d, [m.name for m in ms]) for d, ms in level.items()] for level in s._domains],
    )


def _unordered(d: Any) -> object:
    """`dump`, namespaces in any order (a pod index lists them in the order their
    first live pod came, a list of pods in the list's order)."""
    return (*d[:2], dict(d[2]), *d[3:])


def _owned(running: dict[JobId, Running]) -> set[tuple[str, str]]:
    """The pods of the running gangs' attempt: `j0-0`, `j0-1`, ... one per worker."""
    out = set()
    for gid, r in running.items():
        ns, name = gid.split("/")
        out.update((ns, f"{name}-{i}") for i in range(r.gang.workers))
    return out


@settings(max_examples=300, deadline=None)
@given(steps, st.randoms(use_true_random=False))
def test_the_kept_snapshot_equals_one_built_from_scratch(
    stream: list[list[tuple[str, Any, Any]]], rnd: Any
) -> None:
    cluster: dict[str, Node] = {}
    index = PodIndex()
    store: dict[tuple[str, str], Obj] = {}
    running: dict[JobId, Running] = {}
    cache = SnapshotCache()
    levels: tuple[str, ...] = LEVELS
    for kind, key, value in (e for batch in stream for e in [*batch, ("step", None, None)]):
        if kind == "node":
            if value is None:
                cluster.pop(key, None)
            else:
                cluster[key] = value
        elif kind == "pod":
            index.update(key, value)
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value
        elif kind == "gang":
            if value is None:
                running.pop(key, None)
            else:
                running[key] = value
        elif kind == "reorder" and key in running:
            running[key] = running.pop(key)
        elif kind == "levels":
            levels = () if levels else LEVELS
        elif kind == "step":
            args = (list(cluster.values()), list(running.values()), _owned(running))
            kw: dict[str, Any] = {"levels": levels, "reserve_tiers": frozenset({"high"}),
                                  "quotas": QUOTAS}  # fmt: skip
            view = index.freeze()
            kept = cache.build(args[0], view, *args[1:], **kw)
            assert dump(kept) == dump(build_snapshot(args[0], view, *args[1:], **kw))
            scratch = build_snapshot(args[0], list(store.values()), *args[1:], **kw)
            assert _unordered(dump(kept)) == _unordered(dump(scratch))
            # what a cycle does to the step's snapshot stays in that snapshot
            if kept.running:
                kept.forget(rnd.choice(sorted(kept.running)))
            if kept.nodes:
                g = job("p/new").gang(2).build()
                kept.assume(Running(g, Placement((PodPlacement(kept.nodes[0].name, (0, 1)),)), 0))


def test_running_gangs_in_another_order_take_other_devices() -> None:
    """Devices on a shared node go to the running gangs in their order: when two swap,
    both are placed again (a stream rarely draws this)."""
    a = Node(name="a", gpus=8)
    one, two = (
        Running(
            job(f"p/{n}").gang(2, per_worker=2).build(),
            Placement((PodPlacement("a", (0, 1)),)),
            0.0,
        )
        for n in ("one", "two")
    )
    cache, view = SnapshotCache(), PodIndex().freeze()
    kw: dict[str, Any] = {"levels": (), "reserve_tiers": frozenset()}
    for order in ([one, two], [two, one]):
        kept = cache.build([a], view, order, set(), **kw)
        assert dump(kept) == dump(build_snapshot([a], view, order, set(), **kw))
    assert kept.running[JobId("p/two")].placement.pods[0].devices == (0, 1)


def _controller(*, kept: bool) -> GangController:
    """A controller on nodes n0-n5 (8 GPUs, racks of 2) with gangs r0-r3 running
    (8 GPUs on node n{i}) and gangs q0-q5 queued; its writes go nowhere."""
    c = GangController(FakeKube(), clock=FakeClock())
    c._submit = lambda w, assume=None: True  # type: ignore[method-assign]
    if not kept:
        c._snapshots = None  # type: ignore[assignment]
    doc = policy_doc(projects={"p": {"guaranteed": 64, "max": 64}}, preemption=False)
    c.config.assume(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": POLICY_CONFIGMAP, "namespace": c.settings.system_namespace,
                         "resourceVersion": "1"},
            "data": {POLICY_KEY: json.dumps(doc)},
        }
    )  # fmt: skip
    for i in range(6):
        n = gang_node(f"n{i}", 8, **{"topology.kubernetes.io/rack": f"r{i // 2}"})
        n["metadata"].update(uid=f"n{i}", resourceVersion="1")
        c.nodes.assume(n)
    for i in range(4):
        _admit(c, f"r{i}", f"n{i}", rv="1")
    for i in range(6):
        c.jobs.assume(gang_job(f"q{i}", 4))
    return c


def _admit(c: GangController, name: str, on: str, *, rv: str) -> None:
    adm = admission(*[on] * 8)
    c.jobs.assume(gang_job(name, 8, adm=adm, phase="Running"))
    for rank in range(8):
        p = gang_pod(name, rank, node=on)
        p["metadata"]["resourceVersion"] = rv
        c.pods.assume(p)


def test_the_controller_decides_the_same_with_the_snapshot_kept() -> None:
    """Two controllers, one keeping its snapshot and one building it anew, see the
    same changes between steps (a gang finishes, another is admitted on its node, a
    foreign pod comes and goes, a node is cordoned) and decide the same each step."""
    kept, scratch = _controller(kept=True), _controller(kept=False)
    for i in range(6):
        decided = [c.step() for c in (kept, scratch)]
        assert decided[0] is not None and decided[1] is not None
        assert repr(decided[0].decisions) == repr(decided[1].decisions)
        for c in (kept, scratch):
            if i < 4:
                c.jobs.forget(f"r{i}", "p")
                for rank in range(8):
                    c.pods.forget(f"r{i}-1-{rank}", "p")
                _admit(c, f"q{i}", f"n{(i + 1) % 4}", rv="2")
            if i % 2:
                c.pods.forget("x", "other")
            else:
                c.pods.assume(gang_foreign("x", f"n{4 + i % 2}", 2))
            n = c.nodes.get(f"n{i}")
            assert n is not None
            cordoned = {**n, "spec": {"unschedulable": True},
                        "metadata": {**n["metadata"], "resourceVersion": "2"}}  # fmt: skip
            c.nodes.assume(cordoned)


def test_a_long_change_log_starts_again_and_the_snapshot_is_built_anew() -> None:
    """The pod index's log of changes is bounded even while no step reads it: past
    it, a view cannot say what changed since an older one, and what the foreign
    pods hold is counted from every pod."""
    index = PodIndex()
    a = Node(name="a", gpus=8)
    kw: dict[str, Any] = {"levels": (), "reserve_tiers": frozenset()}
    cache = SnapshotCache()
    first = index.freeze()
    cache.build([a], first, [], set(), **kw)
    index.put(gang_foreign("x", "a", 1))
    assert index.freeze().changed_since(first) == {("other", "x")}
    for gpus in range(1100):
        index.put(gang_foreign("x", "a", 1 + gpus % 3))
    last = index.freeze()
    assert last.changed_since(first) is None
    kept = cache.build([a], last, [], set(), **kw)
    assert dump(kept) == dump(build_snapshot([a], last, [], set(), **kw))
    assert kept.nodes[0].whole == 8 - 1 - 1099 % 3


def test_steps_with_nothing_to_decide_build_no_snapshot_and_the_next_one_catches_up() -> None:
    """With nothing queued or nominated and no elastic gang that may grow, a step
    decides nothing whatever the snapshot: it builds none (at 5,000 nodes that was
    most of an idle controller's CPU, docs/performance.md). The first step with a
    gang queued again builds from everything that changed meanwhile, and decides as a
    controller building its snapshot anew does."""
    kept, scratch = _controller(kept=True), _controller(kept=False)
    builds: list[int] = []
    real = kept._snapshots.build

    def counted(*args: Any, **kwargs: Any) -> Snapshot:
        builds.append(1)
        return real(*args, **kwargs)

    kept._snapshots.build = counted  # type: ignore[method-assign]
    for c in (kept, scratch):
        for i in range(6):
            c.jobs.forget(f"q{i}", "p")
    for i in range(4):
        for c in (kept, scratch):
            result = c.step()
            assert result is not None and not result.decisions
            c.jobs.forget(f"r{i}", "p")
            for rank in range(8):
                c.pods.forget(f"r{i}-1-{rank}", "p")
            c.pods.assume(gang_foreign(f"x{i}", f"n{4 + i % 2}", 2))
    assert builds == []
    for c in (kept, scratch):
        for i in range(6):
            c.jobs.assume(gang_job(f"q{i}", 4))
    decided = [c.step() for c in (kept, scratch)]
    assert builds == [1]
    assert decided[0] is not None and decided[1] is not None
    assert sum(isinstance(d, Admit) for d in decided[0].decisions) == 6
    assert repr(decided[0].decisions) == repr(decided[1].decisions)
