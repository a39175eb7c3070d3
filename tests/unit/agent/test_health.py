"""GPU health transitions, as a table: (state before, event) -> state after."""

from __future__ import annotations

import pytest

from controller.agent import health as h
from controller.agent.health import GpuHealth, State, XidClass

OK = GpuHealth()
RESET = GpuHealth(State.RESET_REQUIRED, "XID 48", since=10, last_fault=10)
REBOOT = GpuHealth(State.REBOOT_REQUIRED, "XID 79", since=10, last_fault=10)
LOST = GpuHealth(State.LOST, "NVML: GPU is lost", since=10, last_fault=10)
HUNG = GpuHealth(State.UNRESPONSIVE, "hang", since=10, last_fault=10)

ROWS = [
    # (name, before, step, after state)
    (
        "app xid keeps a healthy GPU",
        OK,
        lambda g: h.on_xid(g, 13, XidClass.RESTART_APP, 20),
        State.HEALTHY,
    ),
    ("ignored xid keeps it", OK, lambda g: h.on_xid(g, 45, XidClass.IGNORE, 20), State.HEALTHY),
    (
        "reset-class xid takes it out",
        OK,
        lambda g: h.on_xid(g, 48, XidClass.RESET_GPU, 20),
        State.RESET_REQUIRED,
    ),
    (
        "reboot-class xid takes it out",
        OK,
        lambda g: h.on_xid(g, 79, XidClass.REBOOT_NODE, 20),
        State.REBOOT_REQUIRED,
    ),
    (
        "reboot outranks reset",
        RESET,
        lambda g: h.on_xid(g, 79, XidClass.REBOOT_NODE, 20),
        State.REBOOT_REQUIRED,
    ),
    (
        "reset does not lower a reboot",
        REBOOT,
        lambda g: h.on_xid(g, 48, XidClass.RESET_GPU, 20),
        State.REBOOT_REQUIRED,
    ),
    ("lost", OK, lambda g: h.on_lost(g, "GPU is lost", 20), State.LOST),
    ("hang", OK, lambda g: h.on_hang(g, 2.0, 20), State.UNRESPONSIVE),
    ("a hang does not lower lost", LOST, lambda g: h.on_hang(g, 2.0, 20), State.LOST),
    ("readable after lost: it was reset", LOST, lambda g: h.after_sample(g, 20), State.HEALTHY),
    ("answers after a hang", HUNG, lambda g: h.after_sample(g, 20), State.HEALTHY),
    (
        "a reading does not clear an xid fault",
        RESET,
        lambda g: h.after_sample(g, 20),
        State.RESET_REQUIRED,
    ),
    (
        "a reading does not clear a reboot",
        REBOOT,
        lambda g: h.after_sample(g, 20),
        State.REBOOT_REQUIRED,
    ),
    ("reset clears a reset-class fault", RESET, lambda g: h.after_reset(g, 20), State.HEALTHY),
    (
        "reset does not clear a reboot",
        REBOOT,
        lambda g: h.after_reset(g, 20),
        State.REBOOT_REQUIRED,
    ),
    (
        "clean period not over",
        RESET,
        lambda g: h.after_clean_period(g, 600, 609),
        State.RESET_REQUIRED,
    ),
    ("clean period over", RESET, lambda g: h.after_clean_period(g, 600, 610), State.HEALTHY),
    (
        "clean period 0 never clears",
        RESET,
        lambda g: h.after_clean_period(g, 0, 10**9),
        State.RESET_REQUIRED,
    ),
    (
        "clean period never clears a reboot",
        REBOOT,
        lambda g: h.after_clean_period(g, 600, 10**9),
        State.REBOOT_REQUIRED,
    ),
    (
        "lost during reset-required: the reset",
        RESET,
        lambda g: h.after_sample(h.on_lost(g, "x", 20), 21),
        State.HEALTHY,
    ),
]


@pytest.mark.parametrize(
    ("before", "step", "after"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_transition(before: GpuHealth, step: object, after: State) -> None:
    new = step(before)  # type: ignore[operator]
    assert new.state is after
    if new.state is not before.state:
        assert new.reason, "every transition says why"


def test_a_repeated_fault_restarts_the_clean_period() -> None:
    g = h.on_xid(RESET, 48, XidClass.RESET_GPU, 500)
    assert g.since == 10 and g.last_fault == 500
    assert h.after_clean_period(g, 600, 700).state is State.RESET_REQUIRED
    assert h.after_clean_period(g, 600, 1100).state is State.HEALTHY


@pytest.mark.parametrize(
    ("xid", "cls"),
    [
        (13, XidClass.RESTART_APP),
        (31, XidClass.RESTART_APP),
        (48, XidClass.RESET_GPU),
        (79, XidClass.REBOOT_NODE),
        (63, XidClass.IGNORE),
        (12345, XidClass.RESTART_APP),
    ],
)
def test_xid_classes(xid: int, cls: XidClass) -> None:
    assert h.classify_xid(xid) is cls


def test_overrides_win_and_parse() -> None:
    assert h.parse_xid_class("31=reset-gpu") == (31, XidClass.RESET_GPU)
    assert h.classify_xid(31, {31: XidClass.RESET_GPU}) is XidClass.RESET_GPU
    with pytest.raises(ValueError, match="reset-gpu"):
        h.parse_xid_class("31=fatal")
    with pytest.raises(ValueError, match="XID=CLASS"):
        h.parse_xid_class("31")
