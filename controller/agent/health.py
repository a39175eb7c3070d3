"""GPU health, decided from XID errors and from how NVML answers: pure values in,
a new state out (table-tested in tests/unit/agent/test_health.py).

XID classes follow NVIDIA's XID catalogue ("Xid Errors", the resolution column):
an application fault is the application's (restart it; the GPU stays healthy), a
GPU fault needs a GPU reset, a bus fault needs the node rebooted. Treating an
application XID as fatal is how NVSentinel once quarantined 77 healthy nodes after
one job crash: unknown XIDs therefore do not take a GPU out (they are counted and
logged); `--xid-class XID=CLASS` changes any entry.

A GPU returns to healthy only through a recorded transition: after a reset (NVML
sees it again after it was lost, or a reset is reported), once a call that hung
returns, or after a clean period without a new fault of the class that took it
out. A GPU that needs a reboot stays out until the agent restarts on a new boot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from controller.nodehealth import XID_CLASSES, XidClass, classify_xid

__all__ = [
    "XID_CLASSES",
    "GpuHealth",
    "State",
    "XidClass",
    "after_clean_period",
    "after_reset",
    "after_sample",
    "classify_xid",
    "on_hang",
    "on_lost",
    "on_xid",
    "parse_xid_class",
]


def parse_xid_class(text: str) -> tuple[int, XidClass]:
    """`48=reset-gpu` -> (48, RESET_GPU); ValueError with the accepted values otherwise."""
    xid, sep, cls = text.partition("=")
    values = ", ".join(c.value for c in XidClass)
    try:
        if not sep:
            raise ValueError
        return int(xid), XidClass(cls.strip())
    except ValueError:
        raise ValueError(f"expected XID=CLASS with CLASS one of {values}, got {text!r}") from None


class State(Enum):
    HEALTHY = "healthy"
    RESET_REQUIRED = "reset_required"
    REBOOT_REQUIRED = "reboot_required"
    LOST = "lost"
    """NVML reports the GPU lost (or gone, or needing a reset)."""
    UNRESPONSIVE = "unresponsive"
    """A call to NVML for this GPU did not return within the deadline."""


_SEVERITY = {
    State.HEALTHY: 0,
    State.UNRESPONSIVE: 1,
    State.LOST: 2,
    State.RESET_REQUIRED: 2,
    State.REBOOT_REQUIRED: 3,
}


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health, with why and since when."""

    state: State = State.HEALTHY
    reason: str = ""
    since: float = 0.0
    last_fault: float = 0.0
    """When the fault that keeps it out was last seen (for the clean period)."""

    @property
    def healthy(self) -> bool:
        return self.state is State.HEALTHY


def _worse(h: GpuHealth, state: State, reason: str, now: float) -> GpuHealth:
    """Move to `state` unless the GPU is already in a worse one; a repeat of the same
    fault only refreshes `last_fault`."""
    if _SEVERITY[state] < _SEVERITY[h.state]:
        return h
    if state is h.state:
        return replace(h, last_fault=now)
    return GpuHealth(state, reason, since=now, last_fault=now)


def on_xid(h: GpuHealth, xid: int, cls: XidClass, now: float) -> GpuHealth:
    if cls is XidClass.RESET_GPU:
        return _worse(h, State.RESET_REQUIRED, f"XID {xid}: the GPU needs a reset", now)
    if cls is XidClass.REBOOT_NODE:
        return _worse(h, State.REBOOT_REQUIRED, f"XID {xid}: the node needs a reboot", now)
    return h


def on_lost(h: GpuHealth, why: str, now: float) -> GpuHealth:
    return _worse(h, State.LOST, f"NVML: {why}", now)


def on_hang(h: GpuHealth, deadline_s: float, now: float) -> GpuHealth:
    return _worse(h, State.UNRESPONSIVE, f"an NVML call did not return within {deadline_s:g}s", now)


def after_sample(h: GpuHealth, now: float) -> GpuHealth:
    """A reading succeeded. A GPU that was lost was reset (NVML sees it again); one
    that hung answers again. Faults found by XID are not cleared by a reading."""
    if h.state is State.LOST:
        return GpuHealth(State.HEALTHY, "readable again after it was lost (reset)", since=now)
    if h.state is State.UNRESPONSIVE:
        return GpuHealth(State.HEALTHY, "NVML answers again", since=now)
    return h


def after_reset(h: GpuHealth, now: float) -> GpuHealth:
    """The GPU was reset: every fault but a reboot-class one is gone."""
    if h.state in (State.HEALTHY, State.REBOOT_REQUIRED):
        return h
    return GpuHealth(State.HEALTHY, "GPU reset", since=now)


def after_clean_period(h: GpuHealth, clean_period_s: float, now: float) -> GpuHealth:
    """A reset-class fault clears after `clean_period_s` without a repeat (0: never)."""
    if (
        h.state is State.RESET_REQUIRED
        and clean_period_s > 0
        and now - h.last_fault >= clean_period_s
    ):
        return GpuHealth(
            State.HEALTHY, f"no new fault for {clean_period_s:g}s (clean period)", since=now
        )
    return h
