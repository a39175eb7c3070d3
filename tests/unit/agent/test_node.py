"""GPU health on the Node (one fake at the API seam: tests/unit/kube/fakes.FakeKube)."""

from __future__ import annotations

import time
from typing import Any

import urllib3

from controller.agent.agent import Agent, AgentConfig
from controller.agent.node import CONDITION, UNHEALTHY_ANNOTATION, NodePublisher, node_patch
from controller.agent.replay import Event, Replay, Scenario
from controller.kube.client import RESOURCES, ApiError, Kube
from tests.unit.kube.fakes import FakeKube

from .conftest import Clock


def _node(kube: FakeKube, name: str = "n1") -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
        field_manager="kubelet",
    )


def _snapshot(clock: Clock, events: tuple[Event, ...] = ()):  # type: ignore[no-untyped-def]
    agent = Agent(
        Replay(node="n1", gpus=4, clock=clock, scenario=Scenario(events)),
        AgentConfig(node="n1"),
        clock=clock,
    )
    agent.tick()
    clock.t += 1
    agent.poll_xids(0)
    agent.tick()
    return agent.snapshot()


def test_the_patch_says_which_gpus_and_why(clock: Clock) -> None:
    assert node_patch(_snapshot(Clock())) == ("", "False", "GPUsHealthy", "4 GPUs healthy")
    annotation, status, reason, message = node_patch(
        _snapshot(
            clock, (Event(at=0.5, kind="xid", gpu=3, xid=79), Event(at=0.5, kind="lost", gpu=1))
        )
    )
    assert (annotation, status, reason) == ("1,3", "True", "UnhealthyGPUs")
    assert "gpu 1" in message and "lost" in message and "XID 79" in message


def _wait(pred, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_published_on_change_beside_the_kubelets_conditions_and_again_after_an_outage(
    clock: Clock,
) -> None:
    kube = FakeKube()
    _node(kube)
    pub = NodePublisher(kube, "n1", resync_s=60).start()
    try:
        pub.offer(_snapshot(Clock()))
        _wait(lambda: pub.writes == 1)
        node = kube.get(RESOURCES["Node"], "n1")
        assert node is not None
        assert node["metadata"]["annotations"][UNHEALTHY_ANNOTATION] == ""
        conditions = {c["type"]: c for c in node["status"]["conditions"]}
        assert conditions["Ready"]["status"] == "True"
        assert conditions[CONDITION]["status"] == "False"
        # the API server is away when the GPU fails: written once it is back
        kube.down = True
        pub.offer(_snapshot(clock, (Event(at=0.5, kind="xid", gpu=2, xid=48),)))
        _wait(lambda: pub.failures >= 1)
        kube.down = False
        _wait(lambda: pub.writes == 2, timeout=10)
        node = kube.get(RESOURCES["Node"], "n1")
        assert node is not None
        assert node["metadata"]["annotations"][UNHEALTHY_ANNOTATION] == "2"
        cond = next(c for c in node["status"]["conditions"] if c["type"] == CONDITION)
        assert cond["status"] == "True" and "XID 48" in cond["message"]
    finally:
        pub.stop()


def test_an_unchanged_state_is_not_written_again_before_the_resync(clock: Clock) -> None:
    kube = FakeKube()
    _node(kube)
    pub = NodePublisher(kube, "n1", resync_s=60).start()
    try:
        snap = _snapshot(Clock())
        pub.offer(snap)
        _wait(lambda: pub.writes == 1)
        for _ in range(5):
            pub.offer(snap)
        time.sleep(0.3)
        assert pub.writes == 1
    finally:
        pub.stop()


def test_a_busy_api_server_is_written_to_after_the_wait_it_asks_for() -> None:
    """API Priority and Fairness' 429 says how long to wait (Retry-After): the
    publisher waits that long, not its own first second."""
    kube = FakeKube()
    _node(kube)
    real_patch, refused = kube.merge_patch, []

    def busy_once(*args: Any, **kwargs: Any) -> Any:
        if not refused:
            refused.append(time.monotonic())
            raise ApiError(429, "TooManyRequests", "too many", retry_after=2.0)
        return real_patch(*args, **kwargs)

    kube.merge_patch = busy_once  # type: ignore[method-assign]
    pub = NodePublisher(kube, "n1", resync_s=60).start()
    try:
        pub.offer(_snapshot(Clock()))
        _wait(lambda: pub.writes == 1, timeout=10)
        assert time.monotonic() - refused[0] >= 2.0  # not after the publisher's own 1 s
    finally:
        pub.stop()


def test_a_missing_node_is_not_created() -> None:
    kube = FakeKube()
    pub = NodePublisher(kube, "ghost", resync_s=60).start()
    try:
        pub.offer(_snapshot(Clock()))
        _wait(lambda: pub.failures >= 1)
        assert kube.get(RESOURCES["Node"], "ghost") is None
    finally:
        pub.stop()


class _CutResponse:
    def __init__(self, cut: bool) -> None:
        self.cut = cut

    @property
    def data(self) -> bytes:
        if self.cut:
            raise urllib3.exceptions.ProtocolError(
                "Connection broken: IncompleteRead(0 bytes read)"
            )
        return b"{}"

    def release_conn(self) -> None:
        pass


class _FirstAnswerCut:
    """An ApiClient whose first answer is cut off mid-body (an API server restarting)."""

    def __init__(self) -> None:
        self.calls = 0

    def call_api(self, *a: Any, **k: Any) -> _CutResponse:
        self.calls += 1
        return _CutResponse(cut=self.calls == 1)


def test_the_publisher_survives_an_answer_cut_off_mid_body(clock: Clock) -> None:
    """The real client turns it into an ApiError, which the publisher retries (found
    by a review: urllib3's ProtocolError ended the publisher's thread for good)."""
    pub = NodePublisher(Kube(_FirstAnswerCut()), "n1", resync_s=60).start()  # type: ignore[arg-type]
    try:
        agent = Agent(Replay(node="n1", gpus=2, clock=clock), AgentConfig(node="n1"), clock=clock)
        agent.tick()
        pub.offer(agent.snapshot())
        end = time.monotonic() + 10
        while pub.writes == 0 and time.monotonic() < end:
            time.sleep(0.05)
        assert (pub.writes, pub.failures) == (1, 1)
    finally:
        pub.stop()
