"""The gang scheduler's metrics, read from a running controller's registry while
a small two-project scenario plays out on the local control plane: gangs bound
(and how long that took), cycles, the queue by project and tier, and the GPUs
each project's users hold, guaranteed and borrowed."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from controller.kube.client import RESOURCES, Kube

from .gang_helpers import BATCH, HIGH, GangEnv, policy_doc
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

Labels = tuple[str, ...]


def _samples(registry: CollectorRegistry, name: str) -> dict[Labels, float]:
    """Every sample called `name`, by its label values (in the metric's label order)."""
    return {
        tuple(s.labels.values()): s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == name
    }


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def _bound(registry: CollectorRegistry, tier: str) -> tuple[float, float]:
    """(observations, seconds in all) of the creation-to-bound histogram for `tier`."""
    return (
        _value(registry, "gangops_gang_bound_seconds_count", tier=tier),
        _value(registry, "gangops_gang_bound_seconds_sum", tier=tier),
    )


def _until(
    registry: CollectorRegistry, name: str, want: dict[Labels, float]
) -> dict[Labels, float]:
    """Wait until the samples called `name` are exactly `want`; return them."""

    def probe() -> dict[Labels, float] | None:
        got = _samples(registry, name)
        return got if got == want else None

    if not want:
        wait_for(f"{name} to have no samples", lambda: not _samples(registry, name))
        return {}
    return wait_for(f"{name} == {want}", probe)


def test_metrics_follow_gangs_through_admission_queueing_and_borrowing(
    gang_env: GangEnv, alice: Kube
) -> None:
    env = gang_env
    began = time.time()
    env.claim(2)  # 16 GPUs
    ml, cv = env.namespace, env.new_namespace()
    projects = {
        "ml": {"namespace": ml, "guaranteed": 4, "max": 12},
        "cv": {"namespace": cv, "guaranteed": 4, "max": 4},
    }
    env.set_policy(policy_doc(projects))
    reg = env.start().metrics.registry

    # Cycles run (and are timed) before there is any work.
    wait_for("a scheduling cycle", lambda: _value(reg, "gangops_scheduling_cycle_seconds_count"))
    idle_cycles = _value(reg, "gangops_scheduling_cycle_seconds_count")

    def run(name: str, *, tier: str, gang: int, namespace: str, as_: Kube | None = None) -> None:
        """Create a job, wait until it runs; exactly one bound time observed, and a
        plausible one: at most the time since just before its creation (plus the
        second its creationTimestamp is truncated by), and not nothing."""
        n0, s0 = _bound(reg, tier)
        created = time.time()
        user = "alice" if as_ is alice else "admin"
        env.create(env.job(name, gang=gang, tier=tier, user=user, namespace=namespace), as_=as_)
        wait_for(f"{name} Running", lambda: env.status(name, namespace).get("phase") == "Running")
        n1, s1 = _bound(reg, tier)
        assert n1 == n0 + 1, f"{name}: {n1 - n0} creation-to-bound observations for tier {tier}"
        assert 0 < s1 - s0 <= time.time() - created + 1.0

    # ml: 3 GPUs within its guarantee of 4, then alice's 5 of which 4 are above it.
    run("alpha", tier=BATCH, gang=3, namespace=ml)
    run("beta", tier=HIGH, gang=5, namespace=ml, as_=alice)
    assert env.status("beta", ml)["admission"]["borrowedGPUs"] == 4
    # cv: exactly its guarantee, which is also its max.
    run("gamma", tier=BATCH, gang=4, namespace=cv)
    allocated: dict[Labels, float] = {
        ("ml", "admin", "guaranteed"): 3.0,
        ("ml", "admin", "borrowed"): 0.0,
        ("ml", "alice", "guaranteed"): 1.0,
        ("ml", "alice", "borrowed"): 4.0,
        ("cv", "admin", "guaranteed"): 4.0,
        ("cv", "admin", "borrowed"): 0.0,
    }
    _until(reg, "gangops_gpus_allocated", allocated)
    _until(reg, "gangops_queue_depth", {})

    def in_cv(name: str, key: str, value: str) -> None:
        wait_for(f"{cv}/{name} {key} {value}", lambda: env.status(name, cv).get(key) == value)

    # cv at its max: three more wait, two batch and one high, while 4 GPUs are free.
    creating = time.time()
    for name, tier, gang in (("delta", BATCH, 2), ("epsilon", BATCH, 1), ("zeta", HIGH, 1)):
        env.create(env.job(name, gang=gang, tier=tier, namespace=cv))
    queued = time.time()
    for name in ("delta", "epsilon", "zeta"):
        in_cv(name, "reason", "Quota")
    depth: dict[Labels, float] = {("cv", BATCH): 2.0, ("cv", HIGH): 1.0}
    _until(reg, "gangops_queue_depth", depth)
    assert reg.get_sample_value("gangops_queue_depth", {"project": "cv", "tier": BATCH}) == 2
    assert reg.get_sample_value("gangops_queue_depth", {"project": "ml", "tier": BATCH}) is None
    # Several cycles later, nothing has moved.
    seen = _value(reg, "gangops_scheduling_cycle_seconds_count")
    wait_for(
        "three more cycles",
        lambda: _value(reg, "gangops_scheduling_cycle_seconds_count") >= seen + 3,
    )
    assert _samples(reg, "gangops_queue_depth") == depth
    assert _samples(reg, "gangops_gpus_allocated") == allocated  # waiting holds nothing
    before = {tier: _bound(reg, tier) for tier in (BATCH, HIGH)}
    assert before[BATCH][0] == 2 and before[HIGH][0] == 1

    # Raising cv's max lets all three in, each above cv's guarantee: borrowed.
    projects["cv"]["max"] = 8
    freed = time.time()
    env.set_policy(policy_doc(projects))
    for name in ("delta", "epsilon", "zeta"):
        in_cv(name, "phase", "Running")
    _until(reg, "gangops_queue_depth", {})
    allocated[("cv", "admin", "borrowed")] = 4.0
    _until(reg, "gangops_gpus_allocated", allocated)
    after = {tier: _bound(reg, tier) for tier in (BATCH, HIGH)}
    # Counted from creation, not from admission: each was created between `creating`
    # and `queued`, and bound after `freed`.
    waited = time.time() - creating + 1.0
    assert after[HIGH][0] == 2
    assert freed - queued < after[HIGH][1] - before[HIGH][1] < waited
    assert after[BATCH][0] == 4
    assert 2 * (freed - queued) < after[BATCH][1] - before[BATCH][1] < 2 * waited

    # A job that goes takes its user's GPUs with it: alice's labels drop out.
    env.kube.delete(RESOURCES["TrainingJob"], "beta", namespace=ml)
    del allocated[("ml", "alice", "guaranteed")], allocated[("ml", "alice", "borrowed")]
    _until(reg, "gangops_gpus_allocated", allocated)

    cycles = _value(reg, "gangops_scheduling_cycle_seconds_count")
    assert cycles > idle_cycles
    cycle_s = _value(reg, "gangops_scheduling_cycle_seconds_sum")
    assert 0 < cycle_s < time.time() - began  # each cycle a part of the test's time
    assert cycle_s / cycles < 0.5  # a cycle over a handful of jobs takes milliseconds
    assert _samples(reg, "gangops_preemptions_total") == {}  # nobody was evicted
