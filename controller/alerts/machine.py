"""The alert actions' state machine: one node's recorded alerts in, its next state out.

Everything gangops does about alerts on a node is recorded on that Node, in the
`gangops.ai/alert-actions` annotation (`NodeState`, JSON), and written together with
the change it describes in one compare-and-swap patch. So a controller restart at
any point finds either the old state and the old node or the new state and the new
node, and converges; no database is needed.

`step` takes the state, the alerts that arrived for the node, the policy, what the
Node shows (`NodeFacts`) and the time, and returns the next state and what to
change (`Result`):

- an alert instance (`fingerprint@startsAt`) is acted on once: a duplicate, a
  reordered or replayed delivery, an Alertmanager restart find its entry and do
  nothing; a `resolved` that overtakes its `firing` leaves a resolved entry, so the
  late `firing` does nothing either; entries are kept a day after they resolve. A
  `firing` of a resolved instance past `REPLAY_WINDOW_S`, or of one that lapsed
  (not sent again within the policy's resolve timeout, its resolve lost), is the
  alert firing again, and is acted on anew. An entry due to lapse that Alertmanager
  still holds (`held`: silenced, inhibited, or firing and not yet sent again, as the
  actor asked it) is heard now instead;
- `enforce` rules act: quarantine the GPUs the alert names (the
  `gangops.ai/quarantined-gpus` annotation the scheduler honours) or taint and cordon
  the node; ask the job that holds the GPU to checkpoint, and after the grace period
  to restart its gang elsewhere. `shadow` rules only record what they would have
  done (an Event and a metric);
- the breaker: a node not yet acted on is acted on only while fewer than
  `Breaker.limit(nodes)` nodes started an episode within the window; otherwise the
  entry is held (`circuit-open`), with a `CircuitOpen` Event;
- undo: once every entry behind an action has resolved and its cool-down has
  passed, what gangops placed is removed, and only that: a cordon or a taint that
  was there before gangops acted is never touched (it is not recorded as ours).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

from controller.alerts.payload import Alert
from controller.alerts.policy import ActionKind, AlertPolicy, Mode
from controller.nodehealth import FAULT_TAINT, OUT_OF_SERVICE_ANNOTATION

__all__ = [
    "REASON_ANNOTATION",
    "STATE_ANNOTATION",
    "TAINT_KEY",
    "Entry",
    "Incoming",
    "JobRequest",
    "NodeFacts",
    "NodeState",
    "Note",
    "Result",
    "describe",
    "step",
]

STATE_ANNOTATION = "gangops.ai/alert-actions"
"""The node's `NodeState`, JSON."""
REASON_ANNOTATION = OUT_OF_SERVICE_ANNOTATION
"""Why the node or some of its GPUs are out of service and when they come back, in
words (`describe`); what `kubectl describe node` shows a person."""
TAINT_KEY = FAULT_TAINT
"""The taint (effect NoSchedule) gangops places on a node it cordons."""
RETAIN_S = 86400.0
"""A resolved entry is kept this long after its cool-down, so a late replay of its
delivery still finds it."""
REPLAY_WINDOW_S = 300.0
"""A firing of a resolved instance within this long of its resolve is a late copy of
an earlier delivery (reordered, or from another Alertmanager of a cluster);
later, it fires again: Alertmanager resolves an alert whose updates from
Prometheus stopped past its endsAt (about 4 minutes), and fires the same instance
(the same startsAt) again when they resume."""
MAX_ENTRIES = 256
"""At most this many entries per node (about 250 bytes each in the annotation, whose
Node the API server refuses past 256 KiB of annotations): beyond it the oldest
that hold nothing in force go first."""

Held = Literal["", "shadow", "circuit-open", "no-action"]


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Entry:
    """What the node's state records about one alert instance."""

    alert: str
    action: ActionKind
    mode: Mode
    fired_at: float
    """When gangops first heard of the instance (its clock, epoch seconds)."""
    cooldown_s: float
    gpus: tuple[int, ...] = ()
    """The GPUs it quarantines; empty for a node action."""
    held: Held = ""
    """Why it does not act: shadow mode, the breaker, or a rule with no action."""
    resolved_at: float | None = None
    job: str = ""
    """`namespace/name` of the TrainingJob holding the GPU, when known."""
    restart_at: float | None = None
    """When the job's gang is restarted (its checkpoint grace period ends)."""
    restarted: bool = False
    seen_at: float | None = None
    """When Alertmanager last sent it firing, where later than `fired_at` (noted at
    most a few times per `AlertPolicy.resolve_timeout_s`, not at each repeat)."""
    lapsed: bool = False
    """Resolved because it was not sent again within the resolve timeout, not by a
    resolve: a firing that comes after reopens it."""

    def heard_at(self) -> float:
        return self.fired_at if self.seen_at is None else max(self.fired_at, self.seen_at)

    def lapses(self, timeout_s: float, now: float) -> bool:
        """Due to lapse: not resolved, and not heard of for `timeout_s` (0: never)."""
        return bool(timeout_s) and self.resolved_at is None and now - self.heard_at() >= timeout_s

    def acting(self, now: float) -> bool:
        """Its action is in force: enforced and not yet past its cool-down."""
        if self.held or self.mode != "enforce" or self.action == "none":
            return False
        return self.resolved_at is None or now < self.resolved_at + self.cooldown_s

    def back_at(self) -> float | None:
        return None if self.resolved_at is None else self.resolved_at + self.cooldown_s


@dataclass(frozen=True)
class NodeState:
    """Everything gangops did about alerts on one node."""

    entries: Mapping[str, Entry] = field(default_factory=dict)
    cordoned: bool = False
    """gangops cordoned the node (and will uncordon it); False when it found it cordoned."""
    tainted: bool = False
    """gangops placed the `TAINT_KEY` taint; False when it found one there."""
    quarantined: tuple[int, ...] = ()
    """The GPUs gangops took out of service (its annotation's value)."""
    acted_at: float | None = None
    """When the node's current (or last) episode began: the breaker's count."""

    def to_json(self) -> str:
        doc = asdict(self)
        doc["entries"] = {k: asdict(e) for k, e in sorted(self.entries.items())}
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> NodeState:
        """The state an annotation holds. What cannot be read is left out, field by
        field and entry by entry, and the rest kept: a person who edits it by hand
        loses only that part of gangops' memory, never a node, and a wrong type
        never reaches the step (where it would fail every pass, on every node)."""
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            return cls()
        if not isinstance(doc, dict):
            return cls()
        raw = doc.get("entries")
        entries = {}
        for k, e in raw.items() if isinstance(raw, dict) else ():
            try:
                entries[str(k)] = _entry(e)
            except (ValueError, TypeError, KeyError):
                continue
        return cls(
            entries=entries,
            cordoned=doc.get("cordoned") is True,
            tainted=doc.get("tainted") is True,
            quarantined=_or(_gpus, doc.get("quarantined"), ()),
            acted_at=_or(_time, doc.get("acted_at"), None),
        )

    def in_episode(self, now: float) -> bool:
        return any(e.acting(now) for e in self.entries.values())

    def lapsing(self, timeout_s: float, now: float) -> list[str]:
        """The instances due to lapse at `now`, unless heard of: those a step with no
        alerts lapses (a step with alerts may hear of some)."""
        return [k for k, e in self.entries.items() if e.lapses(timeout_s, now)]


def _or(read: Callable[[Any], Any], value: Any, default: Any) -> Any:
    try:
        return read(value)
    except (ValueError, TypeError):
        return default


def _time(value: Any) -> float | None:
    """A time or duration of the state: a finite number (not a bool), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _number(value: Any) -> float:
    if (t := _time(value)) is None:
        raise ValueError("a number is required")
    return t


def _gpus(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ValueError(f"not a list of GPU indices: {value!r}")
    return tuple(value)


def _one_of(value: Any, allowed: Any) -> Any:
    if value not in get_args(allowed):
        raise ValueError(f"{value!r} is not one of {get_args(allowed)}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def _entry(e: Any) -> Entry:
    """One entry of the annotation, every field of its type (ValueError otherwise)."""
    if not isinstance(e, dict):
        raise ValueError(f"not an entry: {e!r}")
    return Entry(
        alert=_text(e["alert"]),
        action=_one_of(e["action"], ActionKind),
        mode=_one_of(e["mode"], Mode),
        fired_at=_number(e["fired_at"]),
        cooldown_s=_number(e["cooldown_s"]),
        gpus=_gpus(e.get("gpus")),
        held=_one_of(e.get("held", ""), Held),
        resolved_at=_time(e.get("resolved_at")),
        job=_text(e.get("job", "")),
        restart_at=_time(e.get("restart_at")),
        restarted=e.get("restarted") is True,
        seen_at=_time(e.get("seen_at")),
        lapsed=e.get("lapsed") is True,
    )


@dataclass(frozen=True)
class NodeFacts:
    """What the Node and the cluster show, read just before the step."""

    unschedulable: bool = False
    tainted: bool = False
    """The node carries a `TAINT_KEY` taint."""
    nodes: int = 1
    """Nodes in the cluster (the breaker's percentage is of these)."""
    recent: int = 0
    """Other nodes whose episode began within the breaker's window."""


@dataclass(frozen=True)
class Incoming:
    """An alert for this node, with the TrainingJob holding its GPU (when known)."""

    alert: Alert
    job: str = ""


@dataclass(frozen=True)
class JobRequest:
    """An annotation to write on a TrainingJob."""

    kind: Literal["checkpoint", "restart"]
    job: str
    """`namespace/name`."""
    key: str
    """The alert instance asking, so the request is written once."""
    message: str


@dataclass(frozen=True)
class Note:
    """An Event to record: on the node (`job` empty) or on a TrainingJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    job: str = ""


Outcome = Literal[
    "acted", "shadow", "circuit_open", "duplicate", "resolved", "lapsed", "kept", "undone",
    "ignored", "restarted"
]  # fmt: skip


@dataclass(frozen=True)
class Result:
    """The node's next state and what to change to get there."""

    state: NodeState
    cordon: bool | None = None
    """True: cordon the node; False: uncordon it; None: leave it."""
    taint: bool | None = None
    """True: add the `TAINT_KEY` taint; False: remove it; None: leave it."""
    quarantine: tuple[int, ...] | None = None
    """The quarantined GPUs' new list; None: unchanged."""
    jobs: tuple[JobRequest, ...] = ()
    notes: tuple[Note, ...] = ()
    outcomes: tuple[tuple[str, Outcome], ...] = ()
    """(alert name, what happened) for the metrics."""
    circuit_open: bool = False


def _fires_again(old: Entry, now: float) -> bool:
    """A firing delivery of the instance `old` records opens it anew: it lapsed (no
    resolve came, the alert was still firing after all), or it resolved longer ago
    than a late copy of a delivery could come."""
    if old.resolved_at is None:
        return False
    return old.lapsed or now - old.resolved_at >= REPLAY_WINDOW_S


def _what(action: ActionKind, gpus: Sequence[int], node: str) -> str:
    if action == "quarantine-gpus" and gpus:
        return f"take GPU {','.join(map(str, gpus))} of node {node} out of service"
    return f"taint ({TAINT_KEY}:NoSchedule) and cordon node {node}"


def step(
    state: NodeState,
    incoming: Sequence[Incoming],
    policy: AlertPolicy,
    facts: NodeFacts,
    *,
    node: str,
    now: float,
    held: Collection[str] = frozenset(),
) -> Result:
    """The node's next state after `incoming` at time `now` (epoch seconds), with what
    is due at `now` (restarts after their grace, undo after the cool-down, lapses).

    `held`: instances Alertmanager still holds (firing, silenced or inhibited), as it
    answered just before: one due to lapse is heard now instead, and kept."""
    entries = dict(state.entries)
    jobs: list[JobRequest] = []
    notes: list[Note] = []
    outcomes: list[tuple[str, Outcome]] = []
    acted_at = state.acted_at
    circuit_open = False
    recent = facts.recent
    timeout = policy.resolve_timeout_s  # 0: entries never lapse
    for item in incoming:
        a = item.alert
        rule = policy.rule(a.name)
        old = entries.get(a.key)
        if old is not None and not a.resolved(now) and _fires_again(old, now):
            old = None  # acted on again, as a new instance
        if rule.action == "none" and old is None:
            outcomes.append((a.name, "resolved" if a.resolved(now) else "ignored"))
            continue  # nothing to do, nor to remember
        if a.resolved(now):
            if old is None:
                entries[a.key] = Entry(
                    a.name, rule.action, rule.mode, now, rule.cooldown_s,
                    held="no-action", resolved_at=now,
                )  # fmt: skip
                outcomes.append((a.name, "resolved"))
            elif old.resolved_at is None:
                entries[a.key] = replace(old, resolved_at=now)
                outcomes.append((a.name, "resolved"))
                if old.acting(now):
                    notes.append(Note("Normal", "AlertResolved", (
                        f"{a.name} resolved; what it did is undone after the"
                        f" {old.cooldown_s:g}s cool-down, at {_iso(now + old.cooldown_s)}"
                        " if no other alert holds it"
                    )))  # fmt: skip
            else:
                outcomes.append((a.name, "duplicate"))
            continue
        if old is not None:
            if timeout and old.resolved_at is None and now - old.heard_at() >= timeout / 4:
                entries[a.key] = replace(old, seen_at=now)  # still firing: not lapsed
            outcomes.append((a.name, "duplicate"))
            continue
        action: ActionKind = rule.action
        gpus: tuple[int, ...] = ()
        if action == "quarantine-gpus":
            if a.gpu is None:
                action = "cordon-node"
            else:
                gpus = (a.gpu,)
        entry = Entry(a.name, action, rule.mode, now, rule.cooldown_s, gpus=gpus, job=item.job)
        what = _what(action, gpus, node)
        if action == "none":
            entries[a.key] = replace(entry, held="no-action")
            outcomes.append((a.name, "ignored"))
            continue
        if rule.mode == "shadow":
            entries[a.key] = replace(entry, held="shadow")
            outcomes.append((a.name, "shadow"))
            shadow = f"{a.name}: would {what} (shadow mode; nothing done)"
            notes.append(Note("Normal", "ShadowAction", shadow))
            continue
        in_episode = any(e.acting(now) for e in entries.values())
        limit = policy.breaker.limit(facts.nodes)
        if not in_episode and recent >= limit:
            entries[a.key] = replace(entry, held="circuit-open")
            outcomes.append((a.name, "circuit_open"))
            circuit_open = True
            notes.append(Note("Warning", "CircuitOpen", (
                f"{a.name}: did not {what}: {recent} nodes were acted on within"
                f" {policy.breaker.window_s:g}s, the most allowed ({limit}: min"
                f" {policy.breaker.max_percent:g}% of {facts.nodes} nodes,"
                f" {policy.breaker.max_nodes}); alerting only"
            )))  # fmt: skip
            continue
        if not in_episode:
            acted_at = now
            recent += 1
        if rule.restart_job and item.job:
            entry = replace(entry, restart_at=now + rule.grace_s)
            jobs.append(JobRequest("checkpoint", item.job, a.key, (
                f"{a.name} on node {node}: checkpoint now; the gang is restarted"
                f" elsewhere in {rule.grace_s:g}s"
            )))  # fmt: skip
            notes.append(Note("Warning", "CheckpointRequested", (
                f"{a.name} on node {node} (GPU {','.join(map(str, gpus)) or 'all'}):"
                f" checkpoint requested; the gang restarts elsewhere at {_iso(now + rule.grace_s)}"
            ), job=item.job))  # fmt: skip
        entries[a.key] = entry
        outcomes.append((a.name, "acted"))
        notes.append(Note("Warning", "AlertAction", f"{a.name}: {what}"))
    for key, e in list(entries.items()):
        if not e.lapses(timeout, now):
            continue
        if key in held:  # silenced or inhibited (not sent), or not yet sent again
            entries[key] = replace(e, seen_at=now)
            outcomes.append((e.alert, "kept"))
            continue
        # Alertmanager sends a firing alert again every repeat_interval, a resolve
        # once: one not sent for this long has resolved, and its resolve was lost.
        entries[key] = e = replace(e, resolved_at=now, lapsed=True)
        outcomes.append((e.alert, "lapsed"))
        if e.acting(now):
            notes.append(Note("Warning", "AlertLapsed", (
                f"{e.alert}: not sent again by Alertmanager for {timeout:g}s,"
                " taken as resolved (its resolve was lost; or it is silenced, and"
                " gangops could not ask Alertmanager);"
                f" what it did is undone after the {e.cooldown_s:g}s cool-down,"
                f" at {_iso(now + e.cooldown_s)}, if no other alert holds it"
            )))  # fmt: skip
    for key, e in list(entries.items()):
        if e.restart_at is not None and not e.restarted and e.restart_at <= now:
            entries[key] = replace(e, restarted=True)
            if e.resolved_at is not None or not e.acting(now):
                continue  # the fault went away within the grace period
            jobs.append(JobRequest("restart", e.job, key, (
                f"{e.alert} on node {node}: restart the gang elsewhere (grace period over)"
            )))  # fmt: skip
            notes.append(Note("Warning", "RestartRequested", (
                f"{e.alert} on node {node}: the gang is restarted elsewhere; this restart"
                " is not counted against backoffLimit"
            ), job=e.job))  # fmt: skip
            outcomes.append((e.alert, "restarted"))
    live = [e for e in entries.values() if e.acting(now)]
    want_gpus = tuple(sorted({g for e in live if e.action == "quarantine-gpus" for g in e.gpus}))
    want_node = any(e.action == "cordon-node" for e in live)
    cordon = taint = None
    cordoned, tainted = state.cordoned, state.tainted
    if want_node and not cordoned and not facts.unschedulable:
        cordon, cordoned = True, True
    elif not want_node and cordoned:
        cordon, cordoned = False, False
    if want_node and not tainted and not facts.tainted:
        taint, tainted = True, True
    elif not want_node and tainted:
        taint, tainted = False, False
    quarantine = want_gpus if want_gpus != state.quarantined else None
    back = [g for g in state.quarantined if g not in want_gpus]
    if back:
        notes.append(Note("Normal", "GPUReturned", (
            f"GPU {','.join(map(str, back))} of node {node} back in service: the alerts"
            " behind it resolved and their cool-down passed"
        )))  # fmt: skip
    if cordon is False or taint is False:
        notes.append(Note("Normal", "NodeReturned", (
            f"node {node}: gangops removed the cordon and taint it placed: the alerts"
            " behind them resolved and their cool-down passed"
        )))  # fmt: skip
    node_undone = cordon is False or taint is False
    for e in entries.values():
        done = not e.held and not e.acting(now) and e.back_at() is not None
        if done and (set(e.gpus) & set(back) or (e.action == "cordon-node" and node_undone)):
            outcomes.append((e.alert, "undone"))
    for key, e in list(entries.items()):
        end = e.back_at()
        if end is not None and end + RETAIN_S < now:
            del entries[key]
    _bound(entries, now)
    new = NodeState(entries, cordoned, tainted, want_gpus, acted_at)
    return Result(
        new, cordon, taint, quarantine, tuple(jobs), tuple(notes), tuple(outcomes), circuit_open
    )


def _bound(entries: dict[str, Entry], now: float) -> None:
    """Keep at most `MAX_ENTRIES`: first the oldest holding nothing in force go; then
    the resolved ones still in their cool-down, oldest end first, all but the last
    to end of each effect (the node, or a set of GPUs), which holds it as long."""
    for cooling in (False, True):
        if len(entries) <= MAX_ENTRIES:
            return
        if not cooling:
            gone = sorted((e.fired_at, k) for k, e in entries.items() if not e.acting(now))
        else:
            last: dict[tuple[str, tuple[int, ...]], tuple[float, str]] = {}
            for k, e in entries.items():
                end = e.back_at()
                if end is not None and e.acting(now):
                    last[(e.action, e.gpus)] = max(last.get((e.action, e.gpus), (end, k)), (end, k))
            keep = {k for _, k in last.values()}
            gone = sorted(
                (end, k)
                for k, e in entries.items()
                if (end := e.back_at()) is not None and e.acting(now) and k not in keep
            )
        for _, key in gone[: len(entries) - MAX_ENTRIES]:
            del entries[key]


def describe(state: NodeState, *, now: float) -> str:
    """Why the node or its GPUs are out of service and when they come back, in words;
    empty when gangops holds nothing on the node."""
    parts = []
    for e in sorted(state.entries.values(), key=lambda e: e.fired_at):
        if not e.acting(now):
            continue
        what = f"GPU {','.join(map(str, e.gpus))}" if e.gpus else "node cordoned"
        back = e.back_at()
        when = (
            f"back at {_iso(back)}"
            if back is not None
            else f"back {e.cooldown_s:g}s after the alert resolves"
        )
        parts.append(f"{what}: {e.alert} since {_iso(e.fired_at)}, {when}")
    return "; ".join(parts)
