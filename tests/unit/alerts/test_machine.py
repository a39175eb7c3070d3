"""The alert actions' state machine as tables: each case is a script of deliveries and
clock ticks on one node, and what the node shows at the end (quarantined GPUs, cordon,
taint, the job requests and Events). The clock is a number: no test sleeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest

from controller.alerts.machine import (
    MAX_ENTRIES,
    Incoming,
    JobRequest,
    NodeFacts,
    NodeState,
    Result,
    describe,
    step,
)
from controller.alerts.payload import Alert
from controller.alerts.policy import AlertPolicy, Breaker
from tests.unit.alerts.builders import ENFORCE, LEAK, SHADOW, STALE, T0, XID, alert, policy


@dataclass
class Node:
    """A node as the machine sees it, carried through a script: its recorded state
    and what the Node object shows; `apply` does what the actor would write."""

    state: NodeState = field(default_factory=NodeState)
    unschedulable: bool = False
    tainted: bool = False
    quarantined: tuple[int, ...] = ()
    jobs: list[JobRequest] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def apply(self, r: Result) -> None:
        self.state = r.state
        if r.cordon is not None:
            self.unschedulable = r.cordon
        if r.taint is not None:
            self.tainted = r.taint
        if r.quarantine is not None:
            self.quarantined = r.quarantine
        self.jobs += r.jobs
        self.reasons += [n.reason for n in r.notes]
        self.messages += [n.message for n in r.notes]


Tick = tuple[float, list[Alert]]
"""Seconds after T0, and the alerts delivered then (none: a periodic tick)."""


def run(
    script: list[Tick],
    pol: AlertPolicy = ENFORCE,
    *,
    node: Node | None = None,
    job: str = "",
    nodes: int = 100,
    recent: int = 0,
) -> Node:
    n = node or Node()
    for t, alerts in script:
        facts = NodeFacts(n.unschedulable, n.tainted, nodes=nodes, recent=recent)
        r = step(n.state, [Incoming(a, job) for a in alerts], pol, facts, node="n1", now=T0 + t)
        n.apply(r)
        # what the state records after a write is what a restarted controller reads
        assert NodeState.from_json(r.state.to_json()) == r.state
    return n


leak = alert(LEAK, gpu=1, fp="leak1")
leak_gone = replace(leak, status="resolved")
leak2 = alert(LEAK, gpu=3, fp="leak3")
leak2_gone = replace(leak2, status="resolved")
xid = alert(XID, gpu=None, fp="xid")
xid_gone = replace(xid, status="resolved")
again = alert(LEAK, gpu=1, fp="leak1", starts="2027-01-15T09:00:00Z")


@pytest.mark.parametrize(
    ("name", "script", "pol", "want_quarantined", "want_cordoned", "want_reasons"),
    [
        ("a leak quarantines its GPU only", [(0, [leak])], ENFORCE, (1,), False,
         ["AlertAction"]),
        ("a duplicate delivery does nothing more", [(0, [leak]), (5, [leak]), (9, [leak, leak])],
         ENFORCE, (1,), False, ["AlertAction"]),
        ("resolved stays out until the cool-down", [(0, [leak]), (60, [leak_gone]), (659, [])],
         ENFORCE, (1,), False, ["AlertAction", "AlertResolved"]),
        ("after the cool-down the GPU returns", [(0, [leak]), (60, [leak_gone]), (660, [])],
         ENFORCE, (), False, ["AlertAction", "AlertResolved", "GPUReturned"]),
        ("a late copy of the firing after the resolve does not act again",
         [(0, [leak]), (60, [leak_gone]), (300, [leak]), (359, [leak]), (660, [])],
         ENFORCE, (), False, ["AlertAction", "AlertResolved", "GPUReturned"]),
        ("the same instance firing again past the replay window acts again (Alertmanager"
         " resolved it when Prometheus' updates stopped, and fires it when they resume)",
         [(0, [leak]), (60, [leak_gone]), (360, [leak])],
         ENFORCE, (1,), False, ["AlertAction", "AlertResolved", "AlertAction"]),
        ("and after the undo",
         [(0, [leak]), (60, [leak_gone]), (660, []), (700, [leak]), (701, [leak_gone])],
         ENFORCE, (1,), False,
         ["AlertAction", "AlertResolved", "GPUReturned", "AlertAction", "AlertResolved"]),
        ("a resolved that overtakes its firing: nothing", [(0, [leak_gone]), (1, [leak])],
         ENFORCE, (), False, []),
        ("the same alert firing again later is a new instance",
         [(0, [leak]), (60, [leak_gone]), (660, []), (3600, [again])],
         ENFORCE, (1,), False, ["AlertAction", "AlertResolved", "GPUReturned", "AlertAction"]),
        ("two GPUs; one returns, the other stays",
         [(0, [leak, leak2]), (60, [leak_gone]), (700, [])],
         ENFORCE, (3,), False, ["AlertAction", "AlertAction", "AlertResolved", "GPUReturned"]),
        ("a node action taints and cordons", [(0, [xid])], ENFORCE, (), True, ["AlertAction"]),
        ("a node action is undone after its cool-down",
         [(0, [xid]), (10, [xid_gone]), (610, [])], ENFORCE, (), False,
         ["AlertAction", "AlertResolved", "NodeReturned"]),
        ("a GPU alert without a GPU label cordons the node",
         [(0, [alert(LEAK, gpu=None, fp="nogpu")])], ENFORCE, (), True, ["AlertAction"]),
        ("shadow mode records and does nothing", [(0, [leak, xid]), (5, [leak])], SHADOW, (),
         False, ["ShadowAction", "ShadowAction"]),
        ("an alert no rule names does nothing", [(0, [alert(STALE, fp="s")])], ENFORCE, (),
         False, []),
        ("a firing whose endsAt has passed is a resolved replay",
         [(0, [alert(LEAK, fp="old", ends=T0 - 60)])], ENFORCE, (), False, []),
    ],
)  # fmt: skip
def test_deliveries(
    name: str,
    script: list[Tick],
    pol: AlertPolicy,
    want_quarantined: tuple[int, ...],
    want_cordoned: bool,
    want_reasons: list[str],
) -> None:
    n = run(script, pol)
    assert n.quarantined == want_quarantined, name
    assert (n.unschedulable, n.tainted) == (want_cordoned, want_cordoned), name
    assert n.reasons == want_reasons, name


@pytest.mark.parametrize(
    ("name", "found_cordoned", "found_tainted", "want_cordoned", "want_tainted"),
    [
        ("an operator's cordon stays after the undo", True, False, True, False),
        ("an operator's taint stays after the undo", False, True, False, True),
        ("both stay", True, True, True, True),
        ("gangops' own are removed", False, False, False, False),
    ],
)
def test_never_undoes_what_it_did_not_place(
    name: str, found_cordoned: bool, found_tainted: bool, want_cordoned: bool, want_tainted: bool
) -> None:
    n = Node(unschedulable=found_cordoned, tainted=found_tainted)
    run([(0, [xid])], node=n)
    assert n.unschedulable and n.tainted, name
    assert (n.state.cordoned, n.state.tainted) == (not found_cordoned, not found_tainted)
    run([(10, [xid_gone]), (700, [])], node=n)
    assert (n.unschedulable, n.tainted) == (want_cordoned, want_tainted), name


def test_a_job_is_asked_to_checkpoint_then_restarted_after_the_grace_period() -> None:
    a = alert(LEAK, gpu=1, fp="leak1", pod=("team-a", "train-0"))
    n = run([(0, [a]), (119, []), (120, []), (200, [])], job="team-a/train")
    assert [(j.kind, j.job, j.key) for j in n.jobs] == [
        ("checkpoint", "team-a/train", a.key),
        ("restart", "team-a/train", a.key),
    ]
    assert n.reasons == ["CheckpointRequested", "AlertAction", "RestartRequested"]


def test_no_restart_when_the_fault_resolves_within_the_grace_period() -> None:
    a = alert(LEAK, gpu=1, fp="leak1", pod=("team-a", "train-0"))
    n = run([(0, [a]), (30, [replace(a, status="resolved")]), (200, [])], job="team-a/train")
    assert [j.kind for j in n.jobs] == ["checkpoint"]


def test_shadow_mode_never_touches_the_job() -> None:
    a = alert(LEAK, gpu=1, fp="leak1", pod=("team-a", "train-0"))
    assert run([(0, [a]), (500, [])], SHADOW, job="team-a/train").jobs == []


@pytest.mark.parametrize(
    ("nodes", "recent", "acts"),
    [
        (100, 4, True),  # min(10 % of 100, 5) = 5: a fifth node acts
        (100, 5, False),  # a sixth does not
        (30, 2, True),  # min(3, 5) = 3
        (30, 3, False),
        (5, 0, True),  # at least one node, even in a small cluster
        (5, 1, False),
    ],
)
def test_the_breaker_holds_a_new_node_beyond_the_limit(nodes: int, recent: int, acts: bool) -> None:
    n = run([(0, [leak])], nodes=nodes, recent=recent)
    assert (n.quarantined == (1,)) is acts
    assert ("CircuitOpen" in n.reasons) is not acts
    if not acts:
        assert n.state.entries[leak.key].held == "circuit-open"
        # held, it is not acted on later either, and its replay changes nothing
        run([(60, [leak]), (120, [])], node=n, nodes=nodes, recent=0)
        assert n.quarantined == ()


def test_a_node_already_acted_on_is_not_held_by_the_breaker() -> None:
    n = run([(0, [leak])], recent=0)
    run([(10, [leak2])], node=n, recent=50)
    assert n.quarantined == (1, 3)
    assert "CircuitOpen" not in n.reasons


def test_the_breaker_limit_is_configurable() -> None:
    wide = policy((LEAK, "quarantine-gpus", "enforce"), breaker=Breaker(50, 50, 300))
    assert wide.breaker.limit(100) == 50
    assert run([(0, [leak])], wide, recent=49).quarantined == (1,)


def test_the_state_survives_a_restart_at_every_point() -> None:
    """A controller that restarts between any two deliveries reads the state back from
    the annotation and ends where one that never restarted does."""
    a = alert(LEAK, gpu=1, fp="leak1", pod=("team-a", "train-0"))
    gone = replace(a, status="resolved")
    script: list[Tick] = [(0, [a, xid]), (5, [a]), (130, []), (140, [gone]),
                          (150, [xid_gone]), (800, []), (900, [a])]  # fmt: skip
    whole = run(script, job="team-a/train")
    for cut in range(1, len(script)):
        first = run(script[:cut], job="team-a/train")
        revived = replace(first, state=NodeState.from_json(first.state.to_json()))
        rest = run(script[cut:], node=revived, job="team-a/train")
        assert (rest.quarantined, rest.unschedulable, rest.tainted, rest.jobs, rest.reasons) == (
            whole.quarantined, whole.unschedulable, whole.tainted, whole.jobs, whole.reasons,
        )  # fmt: skip


def test_resolved_entries_are_forgotten_a_day_after_their_cool_down() -> None:
    n = run([(0, [leak]), (10, [leak_gone]), (610, [])])
    assert leak.key in n.state.entries
    run([(610 + 86400 + 1, [])], node=n)
    assert n.state.entries == {}


def test_describe_says_why_and_when() -> None:
    n = run([(0, [leak, xid])])
    text = describe(n.state, now=T0 + 1)
    assert "GPU 1: GangopsGPUMemoryLeak since 2027-01-15T08:00:00Z" in text
    assert "node cordoned: GangopsGPUFatalXID" in text
    assert "back 600s after the alert resolves" in text
    run([(30, [leak_gone])], node=n)
    assert (
        "GPU 1: GangopsGPUMemoryLeak since 2027-01-15T08:00:00Z, back at 2027-01-15T08:10:30Z"
        in (describe(n.state, now=T0 + 31))
    )
    run([(10_000, [xid_gone]), (20_000, [])], node=n)
    assert describe(n.state, now=T0 + 20_000) == ""


def test_an_unreadable_state_annotation_reads_as_empty() -> None:
    assert NodeState.from_json("{not json") == NodeState()
    assert NodeState.from_json('{"entries": {"k": {"bogus": 1}}}') == NodeState()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("acted_at", "2027-01-15T08:00:00Z"),
        ("quarantined", ["1"]),
        ("entry.fired_at", "soon"),
        ("entry.resolved_at", [1]),
        ("entry.gpus", [True]),
        ("entry.mode", "sometimes"),
        ("entry.cooldown_s", float("inf")),
    ],
)
def test_a_wrong_typed_part_of_the_state_is_left_out_and_the_rest_kept(
    field: str, value: object
) -> None:
    """Found by a review: a hand-edited `acted_at` of "2027-..." was read as is, and
    the step then failed on it every pass, for every node (no alert acted on, no
    quarantine lifted anywhere)."""
    n = run([(0, [alert(LEAK, gpu=1, fp="a"), alert(LEAK, gpu=2, fp="b")])])
    doc = json.loads(n.state.to_json())
    first = sorted(doc["entries"])[0]
    if field.startswith("entry."):
        doc["entries"][first][field.removeprefix("entry.")] = value
    else:
        doc[field] = value
    read = NodeState.from_json(json.dumps(doc))
    kept = {
        k: e for k, e in n.state.entries.items() if not field.startswith("entry.") or k != first
    }
    assert read.entries == kept
    assert read.acted_at == (None if field == "acted_at" else n.state.acted_at)
    assert read.quarantined == (() if field == "quarantined" else n.state.quarantined)
    assert read.cordoned == n.state.cordoned
    step(read, [], ENFORCE, NodeFacts(), node="n1", now=T0 + 60)  # and the step takes it


def test_an_alert_no_rule_names_is_not_recorded() -> None:
    """Nothing to do, nothing to remember (found by a review: every instance of any
    alert naming the node was kept a day, past the Node's annotation limit)."""
    n = run([(0, [alert(STALE, fp=f"{i:016x}") for i in range(50)])])
    assert n.state.entries == {}


def test_a_node_keeps_at_most_max_entries_the_ones_in_force_first() -> None:
    """Instances that flap (fire, resolve, again under a new fingerprint) are each kept
    a day: beyond `MAX_ENTRIES` the oldest holding nothing in force go, and the
    annotation stays far below the API server's 256 KiB."""
    n = run([(0, [xid])])  # in force all along
    for i in range(MAX_ENTRIES + 100):
        flap = alert(XID, gpu=None, fp=f"{i:016x}")
        run([(1 + i, [flap]), (1 + i, [replace(flap, status="resolved")])], node=n)
    assert len(n.state.entries) == MAX_ENTRIES and xid.key in n.state.entries
    assert n.unschedulable
    assert len(n.state.to_json()) < 128 * 1024
    oldest = alert(XID, gpu=None, fp=f"{0:016x}")
    assert oldest.key not in n.state.entries  # the oldest resolved went first


def test_bounding_the_entries_keeps_an_effect_until_its_last_cool_down_ends() -> None:
    n = Node()
    flaps = MAX_ENTRIES + 50
    for i in range(flaps):
        flap = alert(XID, gpu=None, fp=f"{i:016x}")
        run([(i, [flap]), (i, [replace(flap, status="resolved")])], node=n)
    assert len(n.state.entries) == MAX_ENTRIES
    last_back = flaps - 1 + 600  # the XID rule's cool-down: 600 s
    run([(last_back - 1, [])], node=n)
    assert n.unschedulable
    run([(last_back, [])], node=n)
    assert not n.unschedulable and "NodeReturned" in n.reasons


LAPSE = replace(ENFORCE, resolve_timeout_s=1800.0)


def test_an_alert_not_sent_again_within_the_resolve_timeout_lapses_and_is_undone() -> None:
    """Found by a review: a `resolved` lost (queued when the controller restarted;
    Alertmanager sends one once) held its quarantine for good."""
    n = run([(0, [leak]), (1799, [])], LAPSE)
    assert n.quarantined == (1,)
    n = run([(1800, [])], LAPSE, node=n)
    assert n.quarantined == (1,) and n.reasons[-1] == "AlertLapsed"  # the cool-down runs
    assert "undone after the 600s cool-down, at " in n.messages[-1], n.messages[-1]
    n = run([(1800 + 600, [])], LAPSE, node=n)
    assert n.quarantined == () and n.reasons[-1] == "GPUReturned"
    n = run([(3000, [leak])], LAPSE, node=n)  # firing after all: acted on again
    assert n.quarantined == (1,) and n.reasons[-1] == "AlertAction"


def test_an_alert_sent_again_within_the_resolve_timeout_stays_in_force() -> None:
    script: list[Tick] = [(t, [leak]) for t in range(0, 7200, 300)]  # every 5 minutes
    n = run([*script, (6600 + 1799, [])], LAPSE)
    assert n.quarantined == (1,) and "AlertLapsed" not in n.reasons
    # noted at most every timeout / 4 (450 s): at every other repeat, the last at 6600
    assert [e.seen_at for e in n.state.entries.values()] == [T0 + 6600]
    n = run([(6600 + 1800, []), (6600 + 1800 + 600, [])], LAPSE, node=n)
    assert n.quarantined == () and n.reasons[-2:] == ["AlertLapsed", "GPUReturned"]


def test_a_resolved_instance_does_not_lapse_again() -> None:
    n = run([(0, [leak]), (60, [leak_gone]), (5000, [])], LAPSE)
    assert n.quarantined == () and "AlertLapsed" not in n.reasons


def test_an_entry_due_to_lapse_that_alertmanager_holds_is_heard_now_and_kept() -> None:
    """`held`: what the actor found Alertmanager still holding (a silenced alert is
    not sent again); the next lapse is a whole timeout later."""
    n = run([(0, [leak]), (0, [xid])], LAPSE)
    assert n.state.lapsing(1800, T0 + 1799) == []
    assert sorted(n.state.lapsing(1800, T0 + 1800)) == sorted([leak.key, xid.key])
    facts = NodeFacts(n.unschedulable, n.tainted, nodes=100)
    r = step(n.state, [], LAPSE, facts, node="n1", now=T0 + 1800, held={leak.key})
    n.apply(r)
    assert r.outcomes == ((LEAK, "kept"), (XID, "lapsed"))
    assert n.state.entries[leak.key].seen_at == T0 + 1800 and n.reasons[-1] == "AlertLapsed"
    assert n.state.lapsing(1800, T0 + 3599) == [] and n.quarantined == (1,)
    n = run([(3600, [])], LAPSE, node=n)  # no longer held: lapses
    assert n.state.entries[leak.key].lapsed and n.reasons[-2:] == ["AlertLapsed", "NodeReturned"]
