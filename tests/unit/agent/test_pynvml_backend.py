"""The pynvml backend with pynvml's functions faked (the seam NVML is reached
through): one lost GPU, or a function an older driver lacks, costs only what it
must."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from controller.agent import nvml as nvml_mod
from controller.agent.agent import Agent, AgentConfig
from controller.agent.nvml import PynvmlBackend

from .conftest import Clock


def _fake_pynvml(monkeypatch: pytest.MonkeyPatch, *, lost: set[int] = frozenset(),
                 memory_v2: bool = True) -> dict[str, int]:  # fmt: skip
    p = nvml_mod.pynvml
    seen = {"event_sets": 0, "freed": 0, "waits": 0}

    def err(code: int) -> pynvml.NVMLError:
        return pynvml.NVMLError(code)

    def handle(i: int) -> int:
        if i in lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def memory(h: int, version: Any = None) -> Any:
        if version is not None and not memory_v2:
            # pynvml: _nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2") on an older driver
            raise err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(used=1 << 30, free=1 << 30, total=2 << 30, reserved=0)

    def not_supported(*a: Any, **k: Any) -> Any:
        raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def event_set() -> object:
        seen["event_sets"] += 1
        return object()

    def register(h: int, kind: int, s: object) -> None:
        if h in lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)

    def wait(s: object, ms: int) -> Any:
        seen["waits"] += 1
        if seen["waits"] == 1:
            return SimpleNamespace(
                eventType=pynvml.nvmlEventTypeXidCriticalError, device=0, eventData=79
            )
        raise err(pynvml.NVML_ERROR_TIMEOUT)

    def free(s: object) -> None:
        seen["freed"] += 1

    fns = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "470.223.02",
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:0{h}:00.0"),
        "nvmlDeviceGetName": lambda h: "Tesla V100",
        "nvmlDeviceGetMinorNumber": lambda h: h,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=50, memory=10),
        "nvmlDeviceGetMemoryInfo": memory,
        "nvmlDeviceGetTemperature": lambda h, s: 40,
        "nvmlDeviceGetFieldValues": not_supported,
        "nvmlDeviceGetPowerUsage": lambda h: 100000,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: 1,
        "nvmlDeviceGetClockInfo": lambda h, c: 1000,
        "nvmlDeviceGetPcieReplayCounter": lambda h: 0,
        "nvmlDeviceGetEncoderUtilization": lambda h: (0, 0),
        "nvmlDeviceGetDecoderUtilization": lambda h: (0, 0),
        "nvmlDeviceGetPcieThroughput": lambda h, c: 0,
        "nvmlDeviceGetRemappedRows": not_supported,
        "nvmlEventSetCreate": event_set,
        "nvmlDeviceRegisterEvents": register,
        "nvmlEventSetWait_v2": wait,
        "nvmlEventSetFree": free,
    }
    for name, fn in fns.items():
        monkeypatch.setattr(p, name, fn)
    return seen


def test_one_lost_gpu_does_not_stop_xid_events_of_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a review: registering the lost GPU raised, so no XID of any GPU was
    ever seen, and each poll leaked an event set."""
    seen = _fake_pynvml(monkeypatch, lost={1})
    nv = PynvmlBackend()
    nv.init()
    got = []
    for _ in range(3):
        try:
            got += nv.wait_xids(0)
        except pynvml.NVMLError as e:
            got.append(e)
    assert [x for x in got if not isinstance(x, Exception)], f"GPU 0's XID 79 never came: {got}"
    assert seen["event_sets"] - seen["freed"] <= 1, f"{seen['event_sets']} event sets created"


def test_a_driver_without_memory_info_v2_still_exports_its_gpus(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    """pynvml raises FUNCTION_NOT_FOUND for a symbol the driver lacks (found by a
    review: that read as NVML down, and every GPU was withdrawn each round)."""
    _fake_pynvml(monkeypatch, memory_v2=False)
    agent = Agent(PynvmlBackend(), AgentConfig(node="n1"), clock=clock)
    agent.tick()
    s = agent.snapshot()
    assert s.nvml_up and len(s.gpus) == 2, (s.nvml_up, s.errors)
    assert all(g.sample for g in s.gpus), s.errors
