"""Properties of one scheduling cycle over random small clusters and queues (1-5
nodes, some GPUs held by other schedulers or out of service, three projects with
guarantees, maxes, user maxes, per-job maxes and namespace quotas, a reserve,
shared and elastic gangs, part of the hour's preemption budget spent): no decision
set over-commits a device, a node, a quota, the reserve or the budget; every victim
is one the policy allows; the queue's order and the decision memo change nothing;
and a single preemption evicts no gang it does not need."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import controller.scheduler.cycle as cycle
from controller.scheduler.cycle import schedule
from controller.scheduler.placement import place
from controller.scheduler.snapshot import Foreign, Snapshot
from controller.scheduler.types import MILLI, NamespaceQuota, Pending, Preempt
from tests.unit.scheduler.builders import TIERS, job, node, policy

EXAMPLES = 200

LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")
PROJECTS = ("a", "b", "c")
USERS = ("u1", "u2")


@st.composite
def specs(draw):
    n_nodes = draw(st.integers(1, 5))
    nodes = [
        (draw(st.sampled_from([4, 8])), draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        for _ in range(n_nodes)
    ]  # gpus, foreign, bad
    projects = {}
    for p in PROJECTS:
        g = draw(st.integers(0, 8))
        m = draw(st.sampled_from([None, 8, 12, 16]))
        if m is not None and g > m:
            g = m
        um = draw(st.sampled_from([None, 4, 8]))
        projects[p] = {
            "guaranteed": g,
            "max": m,
            "users": {"u1": (0, um), "u2": (0, None)},
            "job_max": draw(st.sampled_from([None, 8])),
        }
    reserve = draw(st.sampled_from([0, 0, 4, 8]))
    nsq = {p: draw(st.sampled_from([None, 6, 10])) for p in PROJECTS}

    def gang(prefix, i, most):
        per = draw(st.sampled_from([1, 2, 4]))
        size = per * draw(st.integers(1, most))
        el = None
        if draw(st.booleans()):
            lo = per * draw(st.integers(1, size // per))
            el = (lo, size * draw(st.integers(1, 3)))
        shared = draw(st.integers(0, 6)) == 0
        return dict(
            name=f"{draw(st.sampled_from(PROJECTS))}/{prefix}{i}",
            user=draw(st.sampled_from(USERS)),
            tier=draw(st.sampled_from(list(TIERS))),
            size=size,
            per=per,
            el=None if shared else el,
            at=float(i),
            shared=draw(st.sampled_from([250, 500])) if shared else None,
        )

    warm = [gang("r", i, 4) for i in range(draw(st.integers(0, 8)))]
    queue = [gang("q", i, 4) for i in range(draw(st.integers(0, 7)))]
    last_hour = draw(st.integers(0, 5))
    return dict(
        nodes=nodes,
        projects=projects,
        reserve=reserve,
        nsq=nsq,
        warm=warm,
        queue=queue,
        last_hour=last_hour,
        grow=draw(st.booleans()),
    )


def build_gang(d):
    b = job(d["name"]).project(d["name"].split("/")[0]).user(d["user"]).tier(d["tier"]).at(d["at"])
    if d["shared"]:
        b = b.share(d["shared"])
    else:
        b = b.gang(d["size"], per_worker=d["per"])
        if d["el"]:
            b = b.elastic(*d["el"])
    return b.build()


def cluster_of(s, pol, running=()):
    nodes = [
        node(f"n{i}", g, clique=f"c{i // 2}", rack=f"r{i // 4}")
        for i, (g, _, _) in enumerate(s["nodes"])
    ]
    from dataclasses import replace

    nodes = [
        replace(n, unhealthy=frozenset(range(n.gpus - bad, n.gpus))) if bad else n
        for n, (_, _, bad) in zip(nodes, s["nodes"], strict=False)
    ]
    foreign = [Foreign(f"n{i}", f) for i, (_, f, _) in enumerate(s["nodes"]) if f]
    nsq = {p: NamespaceQuota(gpu_milli=v * MILLI) for p, v in s["nsq"].items() if v is not None}
    return Snapshot(
        nodes, levels=LEVELS, foreign=foreign, reserve_tiers=pol.reserve_tiers,
        namespace_quota=nsq, running=list(running),
    )  # fmt: skip


def setup(s):
    pol = policy(s["projects"], reserve=s["reserve"], max_per_hour=6)
    snap = cluster_of(s, pol)
    schedule(snap, [build_gang(d) for d in s["warm"]], pol, now=-10_000)
    if s["grow"]:
        schedule(snap, [], pol, now=-5_000)
    return snap, pol, [build_gang(d) for d in s["queue"]]


def figures(snap):
    return (
        dict(snap.project_usage),
        dict(snap.user_usage),
        dict(snap.namespace_usage),
        snap.outside_reserve,
    )


def check_limits(pol, snap, before, after):
    (pu0, uu0, nu0, out0), (pu1, uu1, nu1, out1) = before, after
    for name, p in pol.projects.items():
        if p.max is not None:
            assert pu1.get(name, 0) <= max(p.max, pu0.get(name, 0)), ("project max", name)
        for u in USERS:
            m = p.user(u).max
            if m is not None:
                k = (name, u)
                assert uu1.get(k, 0) <= max(m, uu0.get(k, 0)), ("user max", k)
        q = snap.namespace_quota.get(name)
        if q is not None:
            assert nu1.get(name, (0,))[0] <= max(q.gpu_milli, nu0.get(name, (0,))[0]), (
                "ns quota",
                name,
            )
    if pol.reserve:
        usable = snap.capacity - pol.reserve
        assert out1 <= max(usable, out0), ("reserve", out0, out1, usable)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_one_cycle_never_overcommits(s):
    snap, pol, queue = setup(s)
    before = figures(snap)
    running_before = dict(snap.running)
    res = schedule(snap, queue, pol, now=0.0, preemptions_last_hour=s["last_hour"])
    # devices
    used = Counter()
    for r in snap.running.values():
        for p in r.placement.pods:
            for d in p.devices:
                used[(p.node, d)] += r.gang.pod.gpu_milli if r.gang.pod.shared else MILLI
    for (n, d), v in used.items():
        ns = snap.by_name[n]
        assert v <= MILLI and d < len(ns.free)
    for ns in snap.nodes:
        held = sum(MILLI - f for f in ns.free)
        assert ns.node.gpus * MILLI - held >= 0
    check_limits(pol, snap, before, figures(snap))
    # preemptions
    budget = max(0, 6 - s["last_hour"])
    spent = 0
    for d in res.decisions:
        if isinstance(d, Preempt):
            for v in d.victims:
                vr = running_before[v]
                spent += 1
                ok = vr.gang.preemptible and vr.gang.priority <= d.gang.priority
                pol.projects[vr.gang.project]
                reclaim = vr.gang.project != d.gang.project
                assert ok or reclaim, ("victim", v, d.gang.id)
                assert (
                    vr.gang.priority < d.gang.priority
                    or res.reserved_for in (None, d.gang.id)
                    or reclaim
                )
            for v, keep in d.shrinks:
                vr = running_before[v]
                assert keep < vr.gang.workers
                if keep < vr.gang.submitted_workers:
                    spent += 1
    assert spent <= budget, (spent, budget)
    # growth
    waiting = any(
        isinstance(d, Preempt) or (isinstance(d, Pending) and d.code in ("Capacity", "Reserved"))
        for d in res.decisions
    )
    assert not (waiting and res.resizes)
    for rz in res.resizes:
        g = rz.gang
        assert g.workers <= g.max_workers
        jm = pol.projects[g.project].job_max
        assert jm is None or g.gpu_total <= jm


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(), st.randoms())
def test_queue_order_and_memo_do_not_change_decisions(s, rnd):
    def run(shuffle, memo):
        snap, pol, queue = setup(s)
        if shuffle:
            rnd.shuffle(queue)
        orig = cycle._decide
        if not memo:
            cycle._decide = lambda snap, policy, state, g, now: cycle._decided(
                snap, policy, state, g, now
            )
        try:
            res = schedule(snap, queue, pol, now=0.0, preemptions_last_hour=s["last_hour"])
        finally:
            cycle._decide = orig
        return ([repr(d) for d in res.decisions], [repr(r) for r in res.resizes])

    base = run(False, True)
    assert run(True, True) == base
    assert run(False, False) == base


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_single_preemption_is_inclusion_minimal_and_justified(s):
    snap, pol, queue = setup(s)
    pu0 = dict(snap.project_usage)
    running_before = dict(snap.running)
    if not queue:
        return
    g = queue[0]
    res = schedule(snap, [g], pol, now=0.0, preemptions_last_hour=s["last_hour"])
    (d,) = res.decisions
    if not isinstance(d, Preempt) or not d.victims:
        return
    for v in d.victims:
        vg = running_before[v].gang
        gp, vp = pol.projects[g.project], pol.projects[vg.project]
        lower = vg.preemptible and vg.priority < g.priority
        reclaim = (
            vg.project != g.project
            and pu0.get(vg.project, 0) > vp.guaranteed
            and pu0.get(g.project, 0) + g.gpu_total <= gp.guaranteed
        )
        assert lower or reclaim, (v, g.id)
    snap.forget(g.id)
    for v in d.victims:
        snap.assume(running_before[v])
        ok = (
            cycle.quota(snap, pol, g) is None
            and cycle._outside_reserve(snap, pol, g) is None
            and place(snap, g) is not None
        )
        snap.forget(v)
        assert not ok, ("victim not needed", v, d.victims)
