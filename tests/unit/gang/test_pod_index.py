"""The controller's incremental pod index (`view.PodIndex`) against the same index
built from scratch, on random streams of pod changes: what a step reads of it
(each job's pods, and the snapshot built over it) is the same either way, so the
decisions are. Fed the way the controller feeds it too: through the pod
informer's cache (lists, watch events, `assume`, `forget`)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.gang.view import Memo, PodIndex, PodView, build_snapshot, job_views, node_of
from controller.kube.client import RESOURCES
from controller.kube.clock import FakeClock
from controller.kube.informer import Informer
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import NamespaceQuota, Running
from tests.unit.kube.fakes import FakeKube

from .builders import POLICY, admission, job, node

Obj = dict[str, Any]
NODES = [node_of(node(n, 8)) for n in ("a", "b", "c")]
NAMESPACES = ("p", "q")
QUOTAS = {"p": NamespaceQuota(gpu_milli=8000)}


@st.composite
def pods(draw: st.DrawFn, rv: int = 1) -> Obj:
    """A pod of a small universe (names collide, so changes replace pods): any
    namespace, job label, node (d is no node of the cluster), phase, request."""
    ns = draw(st.sampled_from(NAMESPACES))
    name = f"pod{draw(st.integers(0, 7))}"
    job_name = draw(st.sampled_from([None, "j", "k"]))
    labels = {"ai.operator/job-name": job_name, "ai.operator/attempt": "1"} if job_name else {}
    spec: Obj = {
        "containers": [
            {
                "name": "t",
                "resources": {
                    "requests": {
                        "nvidia.com/gpu": str(draw(st.integers(0, 3))),
                        "cpu": draw(st.sampled_from(["0", "500m", "2"])),
                    }
                },
            }
        ]
    }
    where = draw(st.sampled_from([None, "a", "b", "c", "d"]))
    if where:
        spec["nodeName"] = where
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{ns}-{name}-{draw(st.integers(0, 3))}",
            "resourceVersion": str(rv),
            "labels": labels,
            "ownerReferences": [{"uid": f"uid-{job_name}"}] if job_name else [],
        },
        "spec": spec,
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]))},
    }


changes = st.lists(
    st.one_of(
        pods().map(lambda p: ("put", p)),
        st.tuples(st.sampled_from(NAMESPACES), st.integers(0, 7)).map(
            lambda k: ("remove", (k[0], f"pod{k[1]}"))
        ),
    ),
    max_size=40,
)


def _key(p: Obj) -> tuple[str, str]:
    return (p["metadata"]["namespace"], p["metadata"]["name"])


def _state(snap: Snapshot) -> object:
    return (
        {ns.name: (list(ns.free), ns.whole, ns.cpu, ns.mem) for ns in snap.nodes},
        snap.namespace_usage,
        snap.free_milli,
        snap.project_usage,
    )


def _same_reading(incremental: PodView, store: list[Obj], owned: set[tuple[str, str]]) -> None:
    """What a step reads of the view equals what it reads of the pods themselves."""
    scratch = PodIndex.of(store).freeze()
    assert incremental == scratch
    jobs = [job("j", 2), job("k", 1, adm=admission("a"))]
    for ns in NAMESPACES:
        for j in jobs:
            j["metadata"]["namespace"] = ns
    assert [v.pods for v in job_views(jobs, incremental, POLICY)] == [
        v.pods for v in job_views(jobs, store, POLICY)
    ]
    gang = job_views([job("k", 1, adm=admission("a"))], [], POLICY)[0].gang
    assert gang is not None
    assert POLICY is not None
    running = [Running(gang, admission("a").placement, 0.0)]
    kw: dict[str, Any] = {"levels": (), "reserve_tiers": frozenset(), "quotas": QUOTAS}
    assert _state(build_snapshot(NODES, incremental, running, owned, **kw)) == _state(
        build_snapshot(NODES, store, running, owned, **kw)
    )


@settings(max_examples=100, deadline=None)
@given(changes, st.sets(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(
    [f"pod{i}" for i in range(8)]))))  # fmt: skip
def test_incremental_index_equals_one_built_from_scratch(
    stream: list[tuple[str, Any]], owned: set[tuple[str, str]]
) -> None:
    index = PodIndex()
    store: dict[tuple[str, str], Obj] = {}
    memo = Memo()
    jobs = [job("j", 2), job("k", 1, adm=admission("a")), job("j", 2), job("k", 1)]
    jobs[2]["metadata"]["namespace"] = "q"
    jobs[3]["metadata"].update(namespace="q", uid="uid-k-again")  # deleted, created again
    for op, arg in stream:
        if op == "put":
            index.put(arg)
            store[_key(arg)] = arg
        else:
            index.remove(arg)
            store.pop(arg, None)
        # A step after each change: each job's pods, kept in the memo across steps
        # while they do not change (`Memo.owned`), are those of the pods themselves.
        memo.next_step()
        kept = job_views(jobs, index.freeze(), POLICY, memo=memo)
        assert [v.pods for v in kept] == [
            v.pods for v in job_views(jobs, list(store.values()), POLICY)
        ]
    _same_reading(index.freeze(), list(store.values()), owned)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.lists(pods(), max_size=10).map(lambda ps: ("list", ps)),
            st.lists(
                st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), pods()), max_size=8
            ).map(lambda evs: ("watch", evs)),
            pods().map(lambda p: ("assume", p)),
            st.tuples(st.sampled_from(NAMESPACES), st.integers(0, 7)).map(
                lambda k: ("forget", (k[0], f"pod{k[1]}"))
            ),
        ),
        max_size=12,
    ),
    st.sets(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(["pod0", "pod1", "pod2"]))),
)
def test_the_informer_keeps_the_index_equal_to_its_cache(
    ops: list[tuple[str, Any]], owned: set[tuple[str, str]]
) -> None:
    kube = FakeKube()
    index = PodIndex()
    inf = Informer(kube, RESOURCES["Pod"], clock=FakeClock(), on_store=index.update)
    for op, arg in ops:
        if op == "list":
            kube.lists = [(list({_key(p): p for p in arg}.values()), "1")]
            inf._list()
        elif op == "watch":
            kube.watches = [[{"type": t, "object": p} for t, p in arg]]
            inf._watch()
        elif op == "assume":
            inf.assume(arg)
        else:
            inf.forget(arg[1], arg[0])
    view = inf.locked(index.freeze)
    _same_reading(view, inf.items(), owned)


def test_a_changed_pod_moves_its_gpus() -> None:
    """Deleting the update path (a change adding without taking the old pod out)
    shows here: the pod moved from a to b holds nothing on a any more."""
    index = PodIndex()
    p = {
        "metadata": {"name": "x", "namespace": "p", "uid": "x", "resourceVersion": "1"},
        "spec": {"nodeName": "a", "containers": [
            {"name": "t", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    index.put(p)
    moved = {**p, "spec": {**p["spec"], "nodeName": "b"}}
    index.put(moved)
    foreign, other = index.freeze().held(set(), {"a", "b"}, {"p"})
    assert foreign == {"b": (2, 0, 0, 1)}
    assert other == {"p": (2000, 0, 0, 1)}
    index.put({**moved, "status": {"phase": "Succeeded"}})
    assert index.freeze().held(set(), {"a", "b"}, {"p"}) == ({}, {})
