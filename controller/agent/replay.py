"""Replayed GPUs: the `Nvml` Protocol over recorded telemetry, with scripted faults.

The dev cluster, the tests, the demo and the benchmarks run the real agent over
these GPUs. Utilisation and memory follow real per-container series (the format of
`../shared/telemetry/genai2026/`: `pod_gpu_duty_cycle.csv` and
`pod_gpu_memory_used_bytes.csv`, both `container,timestamp,value`), assigned to the
GPUs in the order of their container ids (GPU i plays container `(offset + i) mod n`),
played `speed` times faster than recorded from the moment the agent starts, and
looped. When the agent knows which GPUs pods hold (pod-resources), a GPU no pod
holds is idle: 0 % and no memory used. The other fields are derived from
utilisation (temperature, power, clocks) so they move together plausibly.

A scenario file (YAML) adds faults at given seconds after the start::

    events:
      - {at: 5,  gpu: 3, kind: xid, xid: 79}              # an XID error
      - {at: 10, gpu: 2, kind: hang, seconds: 30}         # calls block (no seconds: forever)
      - {at: 12, gpu: 1, kind: lost}                      # NVML_ERROR_GPU_IS_LOST from now on
      - {at: 40, gpu: 1, kind: reset, seconds: 2}         # lost for 2 s, then back and clean
      - {at: 0,  gpu: 0, kind: memory-ramp, mib-per-second: 50, to-mib: 40000}   # a leak
      - {at: 0,  gpu: 1, kind: memory-ramp, mib-per-second: 50, seconds: 60}  # freed after 60 s
      - {at: 20, gpu: 4, kind: error, error: unknown, seconds: 3}  # any NVML error code
      - {at: 30, kind: driver-unloaded, seconds: 5}       # NVML down for every GPU

`at` and `seconds` are wall-clock seconds of the agent (not replayed time), counted
from its start, or, with a start file (`--scenario-start-file`), from the moment that
file is first seen to exist (looked for every half second): `touch FILE` sets the
faults off when a demo or a test is ready for them, however long it took to get
there. With many fake nodes in one process (`--fake-nodes`), `node: NAME` limits an
event to one node; an event without it applies to every node. Errors
are the exceptions pynvml raises (`pynvml.NVMLError` subclasses), so the agent
handles them exactly as on a real node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pynvml

from controller.agent.nvml import GpuIdentity, Sample, XidEvent, nvml_error
from controller.agent.podresources import fake_gpu_uuid
from controller.datasets import TELEMETRY_ENV, telemetry_dir
from controller.telemetry_data import DUTY_FILE, MEMORY_FILE, Recording, load_events, load_recording

__all__ = [
    "DUTY_FILE",
    "MEMORY_FILE",
    "TELEMETRY_ENV",
    "Recording",
    "Replay",
    "Scenario",
    "ScenarioError",
    "fake_gpu_uuid",
    "load_recording",
    "load_scenario",
    "telemetry_dir",
]

_MIB = 1024 * 1024
_RESERVED_MIB = 512.0


# -- scenarios

_KINDS = {"xid", "hang", "lost", "reset", "memory-ramp", "error", "driver-unloaded"}


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with file:line."""


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    gpu: int | None = None
    seconds: float | None = None
    xid: int = 0
    error: int = 0
    mib_per_second: float = 0.0
    to_mib: float | None = None
    node: str | None = None
    """Only on this node (several nodes served by one process); None: every node."""


@dataclass(frozen=True)
class Scenario:
    events: tuple[Event, ...] = ()
    start_file: Path | None = None
    """The events' clock starts when this file exists; None: at the agent's start."""

    def for_node(self, node: str) -> Scenario:
        """The events for one node: those naming it, and those naming none."""
        return replace(self, events=tuple(e for e in self.events if e.node in (None, node)))


def _error_code(name: str) -> int:
    attr = "NVML_ERROR_" + name.strip().upper().replace("-", "_")
    code = getattr(pynvml, attr, None)
    if not isinstance(code, int):
        known = sorted(n[11:].lower() for n in dir(pynvml) if n.startswith("NVML_ERROR_"))
        raise ValueError(f"unknown NVML error {name!r}; one of {', '.join(known)}")
    return code


def _event(raw: Any) -> Event:
    if not isinstance(raw, dict):
        raise ValueError("an event is a mapping with at least `at` and `kind`")
    kind = str(raw.get("kind", ""))
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(sorted(_KINDS))}, got {kind!r}")
    gpu = raw.get("gpu")
    if kind != "driver-unloaded" and not isinstance(gpu, int):
        raise ValueError(f"a {kind} event needs `gpu: INDEX`")
    at = float(raw.get("at", 0))
    seconds = raw.get("seconds")
    if kind == "xid" and not isinstance(raw.get("xid"), int):
        raise ValueError("an xid event needs `xid: NUMBER`")
    if kind == "memory-ramp" and "mib-per-second" not in raw:
        raise ValueError("a memory-ramp event needs `mib-per-second`")
    return Event(
        at=at,
        kind=kind,
        gpu=gpu if isinstance(gpu, int) else None,
        seconds=float(seconds) if seconds is not None else (2.0 if kind == "reset" else None),
        xid=int(raw.get("xid", 0)),
        error=_error_code(str(raw.get("error", "unknown"))) if kind == "error" else 0,
        mib_per_second=float(raw.get("mib-per-second", 0)),
        to_mib=float(raw["to-mib"]) if raw.get("to-mib") is not None else None,
        node=str(raw["node"]) if raw.get("node") is not None else None,
    )


def load_scenario(path: str | Path, *, start_file: Path | None = None) -> Scenario:
    """Parse a scenario file; ScenarioError with file:line for any bad event. With
    `start_file`, the events' clock starts when that file exists."""
    p = Path(path)
    events = []
    for line, raw in load_events(p, ScenarioError):
        try:
            events.append(_event(raw))
        except (ValueError, TypeError) as e:
            raise ScenarioError(f"{p}:{line}: {e}") from None
    return Scenario(tuple(sorted(events, key=lambda e: e.at)), start_file)


# -- the backend

START_CHECK_S = 0.5
"""How often a scenario waiting for its start file looks for it."""


@dataclass
class _Gpu:
    identity: GpuIdentity
    series: int
    energy_mj: float = 0.0
    energy_at: float | None = None
    lost: bool = False
    hang_until: float | None = None
    error: int = 0
    error_until: float | None = None
    ramps: list[Event] = field(default_factory=list)


class Replay:
    """`Nvml` over a `Recording` (or idle GPUs when there is none) and a `Scenario`."""

    def __init__(
        self,
        *,
        node: str,
        gpus: int = 8,
        memory_mib: float = 49152.0,
        model: str = "NVIDIA L40S",
        recording: Recording | None = None,
        scenario: Scenario = Scenario(),
        speed: float = 1.0,
        offset: int = 0,
        clock: Callable[[], float] = time.monotonic,
        driver_version: str = "570.172.08",
    ) -> None:
        self._clock = clock
        self._t0 = clock()
        self._recording = recording
        self._speed = speed
        self._memory_mib = memory_mib
        self._driver = driver_version
        self._lock = threading.Lock()
        n = len(recording.containers) if recording else 1
        self._gpus = [
            _Gpu(
                GpuIdentity(
                    index=i,
                    uuid=fake_gpu_uuid(node, i),
                    pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                    model_name=model,
                    minor=i,
                ),
                series=(offset + i) % n,
            )
            for i in range(gpus)
        ]
        self._pending = list(scenario.events)
        self._start_file = scenario.start_file
        """Until this file exists, no event is due; then their `at` count from there."""
        self._start_checked = float("-inf")
        self._xids: list[XidEvent] = []
        self._xid_ready = threading.Condition(self._lock)
        self._down_until: float | None = None
        self._down = False
        self._held: set[str] | None = None

    # -- what the scenario does, applied lazily at each call

    def _advance(self) -> float:
        """Apply the events that are due; the elapsed seconds. Holds the lock."""
        now = self._clock() - self._t0
        if self._start_file is not None and now - self._start_checked >= START_CHECK_S:
            self._start_checked = now
            if self._start_file.exists():  # the scenario starts now
                self._pending = [replace(e, at=e.at + now) for e in self._pending]
                self._start_file = None
        while self._start_file is None and self._pending and self._pending[0].at <= now:
            self._apply(self._pending.pop(0))
        if self._down and self._down_until is not None and now >= self._down_until:
            self._down = False
        for g in self._gpus:
            if g.error and g.error_until is not None and now >= g.error_until:
                g.error = 0
            if (
                g.lost
                and g.hang_until is None
                and g.error_until is not None
                and now >= g.error_until
            ):
                g.lost, g.error_until = False, None
        return now

    def _apply(self, e: Event) -> None:
        if e.kind == "driver-unloaded":
            self._down = True
            self._down_until = e.at + e.seconds if e.seconds is not None else None
            return
        assert e.gpu is not None
        if not 0 <= e.gpu < len(self._gpus):
            return
        g = self._gpus[e.gpu]
        if e.kind == "xid":
            self._xids.append(XidEvent(g.identity.uuid, e.xid))
            self._xid_ready.notify_all()
        elif e.kind == "hang":
            g.hang_until = e.at + e.seconds if e.seconds is not None else float("inf")
        elif e.kind == "lost":
            g.lost, g.error_until = True, None
        elif e.kind == "reset":
            # a reset: the GPU drops off for `seconds`, then comes back clean
            g.lost, g.error_until = True, e.at + (e.seconds or 0.0)
            g.ramps.clear()
            g.hang_until = None
        elif e.kind == "error":
            g.error = e.error
            g.error_until = e.at + e.seconds if e.seconds is not None else None
        elif e.kind == "memory-ramp":
            g.ramps.append(e)

    def _gpu(self, index: int) -> _Gpu:
        """The GPU, after the scenario's faults for it (may block or raise)."""
        with self._lock:
            self._advance()
            if self._down:
                raise nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
            if not 0 <= index < len(self._gpus):
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            g = self._gpus[index]
            hang_until = g.hang_until
        if hang_until is not None:
            while self._clock() - self._t0 < hang_until:
                time.sleep(0.02)
            with self._lock:
                if g.hang_until == hang_until:
                    g.hang_until = None
        if g.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if g.error:
            raise nvml_error(g.error)
        return g

    # -- the Nvml Protocol

    def init(self) -> None:
        with self._lock:
            self._advance()
            if self._down:
                raise nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def shutdown(self) -> None:
        pass

    def driver_version(self) -> str:
        self.init()
        return self._driver

    def device_count(self) -> int:
        self.init()
        return len(self._gpus)

    def identity(self, index: int) -> GpuIdentity:
        return self._gpu(index).identity

    def set_held(self, uuids: Iterable[str] | None) -> None:
        """The GPUs pods hold (None: unknown, every GPU plays its series)."""
        with self._lock:
            self._held = set(uuids) if uuids is not None else None

    def sample(self, index: int) -> Sample:
        g = self._gpu(index)
        with self._lock:
            now = self._advance()
            held = self._held is None or g.identity.uuid in self._held
        util, used_mib = 0.0, 0.0
        if self._recording is not None and held:
            container = self._recording.containers[g.series]
            t = now * self._speed
            duty = self._recording.duty.get(container)
            mem = self._recording.memory.get(container)
            util = min(100.0, max(0.0, duty.at(t))) if duty else 0.0
            used_mib = mem.at(t) / _MIB if mem else 0.0
        for r in g.ramps:
            if r.seconds is not None and now >= r.at + r.seconds:
                continue  # the leaking process ended: its memory is freed
            used_mib += r.mib_per_second * max(0.0, now - r.at)
            if r.to_mib is not None:
                used_mib = min(used_mib, r.to_mib)
        usable = self._memory_mib - _RESERVED_MIB
        used_mib = float(int(min(max(used_mib, 0.0), usable)))
        power_w = 60.0 + 2.4 * util
        with self._lock:
            if g.energy_at is not None:
                g.energy_mj += power_w * 1000.0 * max(0.0, now - g.energy_at)
            g.energy_at = now
            energy = g.energy_mj
        return {
            "DCGM_FI_DEV_GPU_UTIL": float(round(util)),
            "DCGM_FI_DEV_MEM_COPY_UTIL": float(round(util * 0.4)),
            "DCGM_FI_DEV_ENC_UTIL": 0.0,
            "DCGM_FI_DEV_DEC_UTIL": 0.0,
            "DCGM_FI_DEV_FB_USED": used_mib,
            "DCGM_FI_DEV_FB_FREE": float(int(usable - used_mib)),
            "DCGM_FI_DEV_FB_RESERVED": _RESERVED_MIB,
            "DCGM_FI_DEV_GPU_TEMP": float(round(32 + 0.4 * util)),
            "DCGM_FI_DEV_MEMORY_TEMP": float(round(36 + 0.3 * util)),
            "DCGM_FI_DEV_POWER_USAGE": round(power_w, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(int(energy)),
            "DCGM_FI_DEV_SM_CLOCK": 2520.0 if util > 0 else 210.0,
            "DCGM_FI_DEV_MEM_CLOCK": 9001.0,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
            "DCGM_FI_PROF_PCIE_TX_BYTES": float(int(util * 1.0e8)),
            "DCGM_FI_PROF_PCIE_RX_BYTES": float(int(util * 2.0e8)),
        }

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                self._advance()
                if self._down:
                    raise nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
                if self._xids:
                    out, self._xids = self._xids, []
                    return out
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                # wake for the next scripted event, or at the deadline
                self._xid_ready.wait(timeout=min(left, 0.05))
