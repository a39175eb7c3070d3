"""The agent driven by the scripted fake (replayed GPUs with a scenario): readings,
pod attribution, XIDs, lost and hung GPUs, NVML down, every NVML error code."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from controller.agent.agent import Agent, AgentConfig, Owner
from controller.agent.exposition import render
from controller.agent.health import State
from controller.agent.node import node_patch
from controller.agent.nvml import ErrorClass, classify, nvml_error
from controller.agent.replay import Event, Replay, Scenario, load_recording
from controller.gang.view import node_of
from controller.nodehealth import UNHEALTHY_ANNOTATION

from .conftest import Clock


def _agent(
    clock: Clock,
    rec: Path | None,
    events: list[Event] = (),  # type: ignore[assignment]
    *,
    gpus: int = 3,
    owners: dict[str, Owner] | None = None,
    deadline_s: float = 2.0,
    real_time: bool = False,
) -> tuple[Agent, Replay]:
    replay = Replay(
        node="node-a",
        gpus=gpus,
        memory_mib=49152,
        recording=load_recording(rec) if rec else None,
        scenario=Scenario(tuple(events)),
        clock=time.monotonic if real_time else clock,
    )
    reader = (lambda: owners) if owners is not None else None
    agent = Agent(
        replay,
        AgentConfig(node="node-a", deadline_s=deadline_s, reinit_s=5.0, clean_period_s=600),
        owners=reader,
        on_held=replay.set_held if owners is not None else None,
        clock=time.monotonic if real_time else clock,
    )
    return agent, replay


def _gpu(agent: Agent, index: int):  # type: ignore[no-untyped-def]
    return agent.snapshot().gpus[index]


def test_readings_follow_the_recording_in_container_order(
    clock: Clock, recording_dir: Path
) -> None:
    agent, _ = _agent(clock, recording_dir)
    agent.tick()
    assert agent.ready()
    utils = [g.sample["DCGM_FI_DEV_GPU_UTIL"] for g in agent.snapshot().gpus]  # type: ignore[index]
    assert utils == [40.0, 70.0, 5.0]  # aaa, bbb, ccc
    g0 = _gpu(agent, 0).sample
    assert g0["DCGM_FI_DEV_FB_USED"] == 10 * 1024
    assert (
        g0["DCGM_FI_DEV_FB_USED"] + g0["DCGM_FI_DEV_FB_FREE"] + g0["DCGM_FI_DEV_FB_RESERVED"]
        == 49152
    )


def test_only_gpus_a_pod_holds_play_their_series_and_carry_its_labels(
    clock: Clock, recording_dir: Path
) -> None:
    from controller.agent.replay import fake_gpu_uuid

    owner = Owner("nlp", "bert-worker-0", "trainer")
    agent, _ = _agent(clock, recording_dir, owners={fake_gpu_uuid("node-a", 1): owner})
    agent.tick()
    g0, g1, _g2 = agent.snapshot().gpus
    assert g1.owner == owner and g1.sample["DCGM_FI_DEV_GPU_UTIL"] == 70.0  # type: ignore[index]
    assert g0.owner is None and g0.sample["DCGM_FI_DEV_GPU_UTIL"] == 0.0  # type: ignore[index]
    assert g0.sample["DCGM_FI_DEV_FB_USED"] == 0.0  # type: ignore[index]


def test_a_scenario_with_a_start_file_waits_for_it(clock: Clock, tmp_path: Path) -> None:
    start = tmp_path / "go"
    replay = Replay(
        node="node-a", gpus=3, clock=clock,
        scenario=Scenario((Event(at=2, kind="xid", gpu=1, xid=48),), start_file=start),
    )  # fmt: skip
    clock.t += 60  # long past `at`, but the file is not there: nothing happens
    assert replay.wait_xids(0) == []
    start.touch()
    clock.t += 1  # seen at once; the XID is due 2 s later
    assert replay.wait_xids(0) == []
    clock.t += 1.9
    assert replay.wait_xids(0) == []
    clock.t += 0.2
    assert [x.xid for x in replay.wait_xids(0)] == [48]


def test_an_xid_is_counted_and_decides_health_by_its_class(clock: Clock) -> None:
    events = [Event(at=1, kind="xid", gpu=1, xid=48), Event(at=1, kind="xid", gpu=2, xid=13)]
    agent, _ = _agent(clock, None, events)
    agent.tick()
    clock.t += 1
    assert agent.poll_xids(0) == 2
    g1, g2 = agent.snapshot().gpus[1:]
    assert (g1.last_xid, dict(g1.xids), g1.health.state) == (48, {48: 1}, State.RESET_REQUIRED)
    assert (g2.last_xid, dict(g2.xids), g2.health.state) == (13, {13: 1}, State.HEALTHY)
    # the clean period brings it back, with a reason
    clock.t += 600
    agent.tick()
    assert _gpu(agent, 1).health.state is State.HEALTHY
    assert "clean period" in _gpu(agent, 1).health.reason


def test_a_lost_gpu_is_withdrawn_at_once_and_healthy_again_after_a_reset(clock: Clock) -> None:
    events = [Event(at=1, kind="lost", gpu=0), Event(at=5, kind="reset", gpu=0, seconds=2)]
    agent, _ = _agent(clock, None, events)
    agent.tick()
    assert _gpu(agent, 0).sample is not None
    clock.t += 1
    agent.tick()
    g0 = _gpu(agent, 0)
    assert g0.sample is None and g0.health.state is State.LOST
    assert _gpu(agent, 1).sample is not None  # the others go on
    clock.t += 7  # reset at 5 s, back at 7 s
    agent.tick()
    assert _gpu(agent, 0).health.state is State.HEALTHY
    assert _gpu(agent, 0).sample is not None


def test_a_hung_call_withdraws_that_gpu_within_the_deadline_and_never_waits_on_it_again() -> None:
    deadline = 0.3
    agent, _ = _agent(
        Clock(),
        None,
        [Event(at=0.3, kind="hang", gpu=1, seconds=1.8)],
        deadline_s=deadline,
        real_time=True,
    )
    agent.tick()
    time.sleep(0.35)
    t0 = time.monotonic()
    agent.tick()
    first = time.monotonic() - t0
    g1 = _gpu(agent, 1)
    assert g1.sample is None and g1.health.state is State.UNRESPONSIVE
    assert _gpu(agent, 0).sample is not None and _gpu(agent, 2).sample is not None
    assert first < deadline + 0.5
    t1 = time.monotonic()
    agent.tick()  # the lane is still busy: skipped, not waited on
    assert time.monotonic() - t1 < 0.2
    assert _gpu(agent, 1).sample is None
    time.sleep(1.6)
    agent.tick()
    assert _gpu(agent, 1).health.state is State.HEALTHY
    assert agent.snapshot().errors[("1", "deadline_exceeded")] >= 1


def test_nvml_down_withdraws_everything_and_nvml_is_initialised_again(clock: Clock) -> None:
    agent, _ = _agent(clock, None, [Event(at=1, kind="driver-unloaded", seconds=3)])
    agent.tick()
    clock.t += 1
    agent.tick()
    s = agent.snapshot()
    assert not s.nvml_up and all(g.sample is None for g in s.gpus)
    assert not agent.ready()
    clock.t += 2  # driver back at 4 s, but the next attempt is 5 s after the failure
    agent.tick()
    assert not agent.snapshot().nvml_up
    clock.t += 3
    agent.tick()
    assert agent.snapshot().nvml_up and all(g.sample is not None for g in agent.snapshot().gpus)


def test_nvml_absent_at_start_is_retried() -> None:
    clock = Clock()
    agent, _ = _agent(clock, None, [Event(at=0, kind="driver-unloaded", seconds=4)])
    agent.tick()
    assert not agent.snapshot().nvml_up and agent.snapshot().gpus == ()
    clock.t += 5
    agent.tick()
    assert agent.snapshot().nvml_up and len(agent.snapshot().gpus) == 3


_CODES = sorted(
    {getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_ERROR_")}
    - {pynvml.NVML_ERROR_NOT_SUPPORTED}
)


@pytest.mark.parametrize("code", _CODES)
def test_every_nvml_error_withdraws_the_values_and_never_raises(clock: Clock, code: int) -> None:
    agent, _ = _agent(clock, None, [Event(at=1, kind="error", gpu=0, error=code, seconds=1)])
    agent.tick()
    clock.t += 1
    agent.tick()  # must not raise
    s = agent.snapshot()
    cls = classify(nvml_error(code))
    if cls is ErrorClass.NVML_DOWN:
        assert not s.nvml_up
    else:
        assert s.gpus[0].sample is None
        assert s.gpus[1].sample is not None
        want = State.LOST if cls is ErrorClass.GPU_LOST else State.HEALTHY
        assert s.gpus[0].health.state is want
    assert sum(s.errors.values()) >= 1


def test_stale_readings_are_never_served(clock: Clock) -> None:
    agent, _ = _agent(clock, None)
    agent.tick()
    snap = agent.snapshot()
    assert all(g.sample for g in snap.fresh(clock.t + 2).gpus)
    assert all(g.sample is None for g in snap.fresh(clock.t + 10).gpus)


def test_a_memory_ramp_leaks(clock: Clock, recording_dir: Path) -> None:
    agent, _ = _agent(
        clock, recording_dir, [Event(at=0, kind="memory-ramp", gpu=2, mib_per_second=100)]
    )
    agent.tick()
    before = _gpu(agent, 2).sample["DCGM_FI_DEV_FB_USED"]  # type: ignore[index]
    clock.t += 10
    agent.tick()
    assert _gpu(agent, 2).sample["DCGM_FI_DEV_FB_USED"] == before + 1000  # type: ignore[index]


def test_a_memory_ramp_with_seconds_is_freed_after_them(clock: Clock, recording_dir: Path) -> None:
    ramp = Event(at=0, kind="memory-ramp", gpu=2, mib_per_second=100, seconds=20)
    agent, _ = _agent(clock, recording_dir, [ramp])
    agent.tick()
    before = _gpu(agent, 2).sample["DCGM_FI_DEV_FB_USED"]  # type: ignore[index]
    clock.t += 10
    agent.tick()
    assert _gpu(agent, 2).sample["DCGM_FI_DEV_FB_USED"] == before + 1000  # type: ignore[index]
    clock.t += 10
    agent.tick()
    assert _gpu(agent, 2).sample["DCGM_FI_DEV_FB_USED"] == before  # type: ignore[index]


def test_pod_resources_failing_keeps_owners_for_a_while_then_drops_them(clock: Clock) -> None:
    from controller.agent.replay import fake_gpu_uuid

    calls = {"fail": False}
    owner = Owner("ns", "p", "c")

    def reader() -> dict[str, Owner]:
        if calls["fail"]:
            raise OSError("socket gone")
        return {fake_gpu_uuid("node-a", 0): owner}

    replay = Replay(node="node-a", gpus=1, clock=clock)
    agent = Agent(replay, AgentConfig(node="node-a", owners_ttl_s=30), owners=reader, clock=clock)
    agent.tick()
    assert _gpu(agent, 0).owner == owner
    calls["fail"] = True
    clock.t += 10
    agent.tick()
    assert _gpu(agent, 0).owner == owner
    assert agent.snapshot().errors[("pod-resources", "oserror")] == 1
    clock.t += 30
    agent.tick()
    assert _gpu(agent, 0).owner is None


def test_a_gpu_lost_before_the_agent_starts_is_out_of_service(clock: Clock) -> None:
    """NVML counts it but cannot read its identity (found by a review: it was left
    out, so the node reported every GPU healthy and the GPU went back into service
    on every agent restart). Once readable, it is identified and back."""
    replay = Replay(
        node="n1", gpus=4, clock=clock, scenario=Scenario((Event(at=0, kind="lost", gpu=3),))
    )
    agent = Agent(replay, AgentConfig(node="n1"), clock=clock)
    for _ in range(3):
        agent.tick()
        clock.t += 1
    s = agent.snapshot()
    assert [(g.identity.index, g.health.state) for g in s.unhealthy] == [(3, State.LOST)]
    assert len(s.gpus) == 4


class _XidWaitFails(Replay):
    calls = 0

    def wait_xids(self, timeout_s: float) -> list[Any]:
        type(self).calls += 1
        raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)  # nvmlEventSetWait's documented error


def test_the_xid_loop_waits_when_waiting_for_xids_fails_at_once() -> None:
    """Found by a review: it spun, a core's worth of calls."""
    _XidWaitFails.calls = 0
    agent = Agent(_XidWaitFails(node="n1", gpus=2), AgentConfig(node="n1"))
    stop = threading.Event()
    agent.start(stop)
    time.sleep(0.6)
    stop.set()
    assert _XidWaitFails.calls <= 5, f"{_XidWaitFails.calls} calls to wait_xids in 0.6 s"


def test_a_slow_pod_resources_answer_does_not_withdraw_every_gpu_from_scrapes(
    clock: Clock,
) -> None:
    """Samples were stamped with the round's start, before a pod-resources read of up
    to the 2 s deadline, so with a slow kubelet every GPU's values aged out of
    scrapes about a third of the time (found by a review)."""
    scrapes: list[Any] = []
    holder: dict[str, Agent] = {}

    def reader() -> dict[str, Any]:
        # the kubelet answers, within the 2 s deadline, but after 1.9 s
        if scrapes or "agent" not in holder or holder["agent"].snapshot().ticks == 0:
            clock.t += 1.9
        else:
            clock.t += 1.2
            scrapes.append(holder["agent"].snapshot().fresh(clock.t))  # Prometheus scrapes
            clock.t += 0.7
        return {}

    replay = Replay(node="n1", gpus=2, clock=clock)
    agent = Agent(
        replay, AgentConfig(node="n1", interval_s=1.0, deadline_s=2.0), owners=reader, clock=clock
    )
    holder["agent"] = agent
    agent.tick()  # took 1.9 s: the loop starts the next round at once
    agent.tick()  # a scrape lands 1.2 s into it
    assert scrapes, "no scrape happened"
    assert all(g.sample is not None for g in scrapes[0].gpus), [
        (g.identity.index, g.sampled_at) for g in scrapes[0].gpus
    ]


class _Renumbered(Replay):
    """With `gone = j`, NVML lists one GPU fewer and numbers the rest anew: what was
    index j+1 is index j (a GPU fell off the bus; the driver was reloaded). Scenario
    events name the GPUs by their first numbering."""

    gone: int | None = None

    def _real(self, index: int) -> int:
        return index + 1 if self.gone is not None and index >= self.gone else index

    def device_count(self) -> int:
        return super().device_count() - (self.gone is not None)

    def identity(self, index: int) -> Any:
        return replace(super().identity(self._real(index)), index=index)

    def sample(self, index: int) -> Any:
        return super().sample(self._real(index))


def _published(agent: Agent) -> list[tuple[int, str, State]]:
    return [(g.identity.index, g.identity.uuid, g.health.state) for g in agent.snapshot().gpus]


def _driver_reloaded_without_gpu_1(
    clock: Clock, events: tuple[Event, ...], owners: dict[int, Owner] | None = None
) -> tuple[Agent, _Renumbered, list[str]]:
    """Three GPUs; `events` play (from 0.5 s), the driver is unloaded at 1 s, and NVML
    comes back at 7.1 s listing GPUs 0 and 2 (at 0 and 1) only."""
    unloaded = Event(at=1, kind="driver-unloaded", seconds=2)
    scenario = Scenario(tuple(sorted((*events, unloaded), key=lambda e: e.at)))
    replay = _Renumbered(node="n1", gpus=3, clock=clock, scenario=scenario)
    uuids = [replay.identity(i).uuid for i in range(3)]
    agent = Agent(
        replay,
        AgentConfig(node="n1", reinit_s=5.0),
        owners=lambda: {uuids[i]: o for i, o in (owners or {}).items()},
        clock=clock,
    )
    agent.tick()
    clock.t += 0.6
    agent.poll_xids(0.0)
    agent.tick()
    clock.t += 0.5
    agent.tick()  # NVML down
    assert not agent.snapshot().nvml_up
    replay.gone = 1
    clock.t += 6
    agent.tick()  # NVML back with two GPUs
    assert agent.snapshot().nvml_up
    return agent, replay, uuids


def test_gpus_renumbered_by_nvml_keep_their_own_uuid_state_and_pod(clock: Clock) -> None:
    """Found by a review: after NVML came back with GPU 1 gone, index 1 (now the GPU
    that was 2) was published under GPU 1's UUID, without its pod, and GPU 2's XIDs
    and health stayed with the wrong entry. Entries follow their UUID."""
    agent, _, uuids = _driver_reloaded_without_gpu_1(
        clock,
        (Event(at=0.5, kind="xid", gpu=2, xid=48),),
        owners={2: Owner("ns", "pod-on-2", "c")},
    )
    s = agent.snapshot()
    assert [(g.identity.index, g.identity.uuid) for g in s.gpus] == [(0, uuids[0]), (1, uuids[2])]
    moved = s.gpus[1]
    assert moved.owner == Owner("ns", "pod-on-2", "c") and moved.sample is not None
    assert moved.xids == {48: 1} and moved.health.state is State.RESET_REQUIRED
    assert s.gpus[0].xids == {} and s.gpus[0].health.state is State.HEALTHY


@pytest.mark.parametrize("fault", ["error", "reset"])
def test_an_index_whose_identity_cannot_be_read_after_a_reinit_is_not_the_gpu_that_was_there(
    clock: Clock, fault: str
) -> None:
    """Found by a review of cce141a: NVML came back without GPU 1, and the identity of
    index 1 (now GPU 2) could not be read in that round (an NVML error, or the GPU
    lost for a moment). The entry of GPU 1 stayed at index 1, marked identified, so
    it was never read again: GPU 2's readings went out for good under GPU 1's UUID
    and pod, and GPU 2's XIDs (matched by UUID) were dropped, a fatal one included.
    Now the index is unidentified until read, as at start, and the GPU read there
    gets its own UUID, pod, health and XID counts back."""
    at_reinit = Event(at=7.0, kind=fault, gpu=2, seconds=0.5, error=pynvml.NVML_ERROR_UNKNOWN)
    agent, _, uuids = _driver_reloaded_without_gpu_1(
        clock,
        (
            Event(at=0.5, kind="xid", gpu=2, xid=13),
            at_reinit,
            Event(at=9, kind="xid", gpu=2, xid=79),
        ),
        owners={1: Owner("ns", "pod-on-1", "c"), 2: Owner("ns", "pod-on-2", "c")},
    )
    # index 1 unread: out of service under its index (no UUID) only when it is lost,
    # as at start; GPU 1 and GPU 2 are healthy and at no index read: not published
    unread = [(1, "", State.LOST)] if fault == "reset" else []
    assert _published(agent) == [(0, uuids[0], State.HEALTHY), *unread]
    clock.t += 1
    agent.tick()  # index 1 answers: GPU 2
    s = agent.snapshot()
    assert _published(agent) == [(0, uuids[0], State.HEALTHY), (1, uuids[2], State.HEALTHY)]
    assert s.gpus[1].owner == Owner("ns", "pod-on-2", "c") and s.gpus[1].sample is not None
    assert s.gpus[1].xids == {13: 1}
    clock.t += 1
    assert agent.poll_xids(0.0) == 1  # XID 79 on GPU 2: found by its UUID
    s = agent.snapshot()
    assert _published(agent) == [(0, uuids[0], State.HEALTHY), (1, uuids[2], State.REBOOT_REQUIRED)]
    assert s.gpus[1].xids == {13: 1, 79: 1}


def test_a_gpu_that_needs_a_reboot_stays_out_of_service_after_it_falls_off_and_the_driver_reloads(
    clock: Clock,
) -> None:
    """Found by a review of cce141a: GPU 1 raised XID 79 (the node needs a reboot) and
    fell off the bus; the driver was reloaded and NVML listed GPUs 0 and 2 only. GPU 1
    was dropped with its state: the Node said GPUsHealthy, and its health series and
    XID counter went. It stays out under its own UUID, numbered past the GPUs NVML
    lists (not at an index one of them has), and is not read."""
    agent, _, uuids = _driver_reloaded_without_gpu_1(
        clock, (Event(at=0.5, kind="xid", gpu=1, xid=79),)
    )
    errors = dict(agent.snapshot().errors)
    for _ in range(3):
        clock.t += 1
        agent.tick()
    s = agent.snapshot()
    assert _published(agent) == [
        (0, uuids[0], State.HEALTHY),
        (1, uuids[2], State.HEALTHY),
        (2, uuids[1], State.REBOOT_REQUIRED),
    ]
    assert s.gpus[2].xids == {79: 1} and s.gpus[2].sample is None
    assert s.errors == errors  # never read (index 2 is no GPU NVML lists)
    annotation, status, reason, message = node_patch(s)
    assert (annotation, status, reason) == ("2", "True", "UnhealthyGPUs")
    assert uuids[1] in message and "reboot_required" in message
    text = render(s).decode()
    assert [
        line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if f'UUID="{uuids[1]}"' in line
        and (line.startswith(("gangops_gpu_healthy{", "DCGM_EXP_XID_ERRORS_COUNT{")))
        and ('xid="79"' in line or "xid=" not in line)
    ] == ["1", "0"]  # DCGM_EXP_XID_ERRORS_COUNT{xid="79"} 1, gangops_gpu_healthy 0


def test_a_gpu_that_needs_a_reboot_keeps_it_and_its_xid_counts_when_nvml_lists_it_again(
    clock: Clock,
) -> None:
    """Found by a review of cce141a: GPU 1 raised XID 79, NVML lost it over one
    re-initialisation and listed it again over the next: it came back healthy, with
    no XIDs. A GPU that needs a reboot stays out until the agent starts again."""
    agent, replay, uuids = _driver_reloaded_without_gpu_1(
        clock,
        (
            Event(at=0.5, kind="xid", gpu=1, xid=79),
            Event(at=10, kind="driver-unloaded", seconds=2),
        ),
    )
    clock.t += 3
    agent.tick()  # NVML down again
    assert not agent.snapshot().nvml_up
    replay.gone = None
    clock.t += 6
    agent.tick()  # NVML back with the three GPUs
    s = agent.snapshot()
    assert _published(agent) == [
        (0, uuids[0], State.HEALTHY),
        (1, uuids[1], State.REBOOT_REQUIRED),
        (2, uuids[2], State.HEALTHY),
    ]
    assert s.gpus[1].xids == {79: 1} and s.gpus[1].sample is not None
    assert node_patch(s)[:2] == ("1", "True")


def _bad_gpus_the_scheduler_counts(annotation: str, gpus: int) -> int:
    node = {
        "metadata": {"name": "n1", "annotations": {UNHEALTHY_ANNOTATION: annotation}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return node_of(node).bad_gpus


@pytest.mark.parametrize("reinit", [False, True])
def test_a_gpu_that_needs_a_reboot_keeps_its_index_out_of_service_while_it_cannot_be_read(
    clock: Clock, reinit: bool
) -> None:
    """Found by a review of a1f8d53: after NVML was initialised again, a GPU that
    needed a reboot whose identity read then failed with an ordinary error (not lost,
    not hung) was `gone`, numbered past NVML's count, and the scheduler, which counts
    the indices the device plugin advertises, offered it again."""
    events = [
        Event(at=0.5, kind="xid", gpu=1, xid=79),
        Event(at=6.9, kind="error", gpu=1, error=pynvml.NVML_ERROR_UNKNOWN),
    ]
    if reinit:
        events.append(Event(at=1, kind="driver-unloaded", seconds=2))
    replay = Replay(
        node="n1", gpus=3, clock=clock, scenario=Scenario(tuple(sorted(events, key=lambda e: e.at)))
    )
    agent = Agent(replay, AgentConfig(node="n1", reinit_s=5.0), clock=clock)
    agent.tick()
    clock.t += 0.6
    agent.poll_xids(0.0)
    agent.tick()
    clock.t += 0.5
    agent.tick()
    clock.t += 6
    for _ in range(5):
        agent.tick()
        clock.t += 1
    s = agent.snapshot()
    assert s.nvml_up
    annotation = node_patch(s)[0]
    assert "1" in annotation.split(",")
    assert _bad_gpus_the_scheduler_counts(annotation, 3) == 1
