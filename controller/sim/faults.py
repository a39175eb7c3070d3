"""Scripted GPU faults for the simulator, and the simulated device plugin that hands
out physical GPUs, so a placement can be checked against the fault schedule.

A faults file (YAML) uses the vocabulary of the node agent's scenarios
(docs/agent.md), with simulated seconds since the first arrival and a node::

    events:
      - {at: 3600, node: node-07, gpu: 3, kind: xid, xid: 79}   # off the bus: out for good
      - {at: 7200, node: node-02, gpu: 1, kind: xid, xid: 48}   # reset-class: out 600 s
      - {at: 9000, node: node-02, gpu: 5, kind: lost}           # out until a reset
      - {at: 9600, node: node-02, gpu: 5, kind: reset, seconds: 60}   # back after 60 s
      - {at: 100,  node: node-05, gpu: 0, kind: hang, seconds: 900}   # out for 900 s

What takes a GPU out, and for how long, is what the agent does: an XID is classed by
the shared catalogue (`controller.nodehealth.XID_CLASSES`); application XIDs and
ignored ones change nothing; a reset-class XID takes the GPU out for the agent's
clean period (600 s) or `seconds`; an XID 79 (reboot-node) and `lost` take it out
until a `reset` of that GPU ends (or for `seconds`); `reset` holds it out for its
`seconds` (default 2) and brings it back clean; `hang` for its `seconds` (default:
for good). A bad file is refused with file:line.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.nodehealth import XidClass, classify_xid
from controller.scheduler.types import MILLI, Node, PodPlacement, PodShape
from controller.telemetry_data import load_events

__all__ = ["CLEAN_PERIOD_S", "Devices", "Fault", "FaultError", "FaultSchedule", "load_faults"]

CLEAN_PERIOD_S = 600.0
"""The agent's default `--clean-period`: a reset-class fault clears after it."""
KINDS = ("xid", "lost", "reset", "hang")


class FaultError(ValueError):
    """A faults file that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Fault:
    at: float
    node: str
    gpu: int
    kind: str
    seconds: float | None = None
    xid: int = 0
    line: int = 0


def _fault(raw: Any, line: int) -> Fault:
    if not isinstance(raw, Mapping):
        raise ValueError("an event is a mapping with `at`, `node`, `gpu` and `kind`")
    unknown = sorted(set(raw) - {"at", "node", "gpu", "kind", "seconds", "xid"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; expected at, node, gpu, "
                         "kind, seconds, xid")  # fmt: skip
    kind = str(raw.get("kind", ""))
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    at, node, gpu = raw.get("at"), raw.get("node"), raw.get("gpu")
    if isinstance(at, bool) or not isinstance(at, int | float) or at < 0:
        raise ValueError(f"`at` must be seconds since the first arrival (>= 0), got {at!r}")
    if not isinstance(node, str) or not node:
        raise ValueError("an event needs `node: NAME` (a node of --cluster)")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise ValueError(f"an event needs `gpu: INDEX` (an integer >= 0), got {gpu!r}")
    xid = raw.get("xid")
    if kind == "xid" and (isinstance(xid, bool) or not isinstance(xid, int)):
        raise ValueError("an xid event needs `xid: NUMBER`")
    seconds = raw.get("seconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
    ):
        raise ValueError(f"`seconds` must be a positive number, got {seconds!r}")
    return Fault(
        at=float(at),
        node=node,
        gpu=gpu,
        kind=kind,
        seconds=None if seconds is None else float(seconds),
        xid=int(xid or 0),
        line=line,
    )


class FaultSchedule:
    """Which GPUs are out of service at any simulated time (the ground truth)."""

    def __init__(self, faults: Sequence[Fault], *, source: str = "<faults>") -> None:
        self.faults = tuple(sorted(faults, key=lambda f: f.at))
        self.source = source
        spans: list[tuple[float, float, str, int]] = []
        out: dict[tuple[str, int], float] = {}
        """Per GPU out until a reset: since when."""
        for f in self.faults:
            key = (f.node, f.gpu)
            if f.kind == "reset":
                if key in out:
                    spans.append((out.pop(key), f.at, *key))
                spans.append((f.at, f.at + (f.seconds or 2.0), *key))
                continue
            if f.kind == "xid":
                cls = classify_xid(f.xid)
                if cls in (XidClass.IGNORE, XidClass.RESTART_APP):
                    continue
                if cls is XidClass.RESET_GPU:
                    spans.append((f.at, f.at + (f.seconds or CLEAN_PERIOD_S), *key))
                    continue
            if f.seconds is not None:
                spans.append((f.at, f.at + f.seconds, *key))
            else:
                out.setdefault(key, f.at)
        spans += [(since, math.inf, *key) for key, since in out.items()]
        self._times = sorted({t for s in spans for t in s[:2] if t != math.inf})
        self._states: list[dict[str, frozenset[int]]] = []
        for t in self._times:
            state: dict[str, set[int]] = {}
            for a, b, node, gpu in spans:
                if a <= t < b:
                    state.setdefault(node, set()).add(gpu)
            self._states.append({n: frozenset(g) for n, g in state.items()})

    @property
    def changes(self) -> list[float]:
        """Times at which some GPU goes out or comes back."""
        return list(self._times)

    def at(self, t: float) -> Mapping[str, frozenset[int]]:
        """Per node, the GPUs out of service at `t`."""
        i = bisect.bisect_right(self._times, t) - 1
        return self._states[i] if i >= 0 else {}

    def check(self, nodes: Sequence[Node]) -> None:
        """FaultError (file:line) for an event on a node or GPU the cluster lacks."""
        gpus = {n.name: n.gpus for n in nodes}
        for f in self.faults:
            if f.node not in gpus:
                raise FaultError(f"{self.source}:{f.line}: no node {f.node!r} in the cluster")
            n = gpus[f.node]
            if f.gpu >= n:
                raise FaultError(
                    f"{self.source}:{f.line}: node {f.node} has {n} GPUs (0..{n - 1}), "
                    f"the event names GPU {f.gpu}"
                )


def load_faults(path: Path) -> FaultSchedule:
    """Parse a faults file; FaultError with file:line for anything wrong."""
    faults = []
    for line, raw in load_events(path, FaultError, hint=" (docs/simulator.md)"):
        try:
            faults.append(_fault(raw, line))
        except ValueError as e:
            raise FaultError(f"{path}:{line}: {e}") from None
    return FaultSchedule(faults, source=str(path))


class Devices:
    """The simulated device plugin: the physical GPUs each job's pods get. Like the
    NVIDIA device plugin it hands out healthy GPUs first, but it only knows what is
    healthy from the ground truth, so a scheduler that offered more GPUs on a node
    than are in service gets a bad one: that placement is counted."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.free = {n.name: [MILLI] * n.gpus for n in nodes}
        self.held: dict[str, list[tuple[str, int, int]]] = {}
        """Job -> (node, device, milli) it holds."""

    def bind(
        self,
        job: str,
        pod: PodShape,
        pods: Sequence[PodPlacement],
        bad: Mapping[str, frozenset[int]],
    ) -> bool:
        """Give each pod physical GPUs on its node; True when any of them is out of
        service at the time (`bad`)."""
        self.release(job)
        held = self.held.setdefault(job, [])
        hit = False
        for p in pods:
            free = self.free.get(p.node)
            if free is None:
                continue
            out = bad.get(p.node, frozenset())
            if pod.shared:
                fits = [i for i, f in enumerate(free) if f >= pod.gpu_milli] or range(len(free))
                picks = [min(fits, key=lambda i: (i in out, free[i], i))]
                milli = pod.gpu_milli
            else:
                order = sorted(range(len(free)), key=lambda i: (-free[i], i in out, i))
                picks, milli = order[: pod.gpus], MILLI
            for i in picks:
                free[i] -= milli
                held.append((p.node, i, milli))
                hit = hit or i in out
        return hit

    def release(self, job: str) -> None:
        for node, i, milli in self.held.pop(job, ()):
            self.free[node][i] += milli
