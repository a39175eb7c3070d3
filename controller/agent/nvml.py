"""The agent's one seam to the GPUs: the `Nvml` Protocol, and its real implementation
over NVIDIA's nvidia-ml-py (`pynvml`).

Methods raise `pynvml.NVMLError` (or a subclass) as NVML reports it; the agent above
classifies the errors (`classify`), runs every call under a deadline and never lets
one take it down. The replay backend (`replay.py`) implements the same Protocol, so
the agent code that runs on a real node is the code the tests drive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

import pynvml

__all__ = [
    "ErrorClass",
    "GpuIdentity",
    "Nvml",
    "PynvmlBackend",
    "Sample",
    "XidEvent",
    "classify",
    "nvml_error",
]

T = TypeVar("T")

Sample = dict[str, float]
"""One reading of one GPU: DCGM field name (`fields.FIELDS`) -> value, in DCGM's units.
A field the GPU does not support is absent."""


@dataclass(frozen=True)
class GpuIdentity:
    """What the labels of a GPU's series say about it."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    minor: int
    """The device minor number: `device` is `nvidia<minor>`, as in dcgm-exporter."""


@dataclass(frozen=True)
class XidEvent:
    """An XID error NVML reported for one GPU."""

    uuid: str
    xid: int


class Nvml(Protocol):
    """What the agent asks of NVML. Implementations may block (a hung driver does):
    the agent calls them under a deadline."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def identity(self, index: int) -> GpuIdentity: ...
    def sample(self, index: int) -> Sample: ...
    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        """XID errors since the last call, waiting up to `timeout_s` for the first."""
        ...


class ErrorClass(Enum):
    """What an NVML error means for the agent."""

    GPU_LOST = "gpu_lost"
    """This GPU is gone (fell off the bus, needs a reset): withdraw it, mark unhealthy."""
    NVML_DOWN = "nvml_down"
    """NVML itself is unusable (driver not loaded, library missing, not initialised,
    version mismatch): withdraw every GPU, `gangops_nvml_up 0`, initialise again later."""
    TRANSIENT = "transient"
    """Anything else (timeout, unknown, no permission...): withdraw this GPU's values
    for this round and count the error; health is unchanged."""


_LOST = {
    pynvml.NVML_ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_GPU_NOT_FOUND,
    pynvml.NVML_ERROR_RESET_REQUIRED,
}
_DOWN = {
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
}


def classify(error: BaseException) -> ErrorClass:
    """The class of an NVML error (see `ErrorClass`)."""
    code = getattr(error, "value", None)
    if code in _LOST:
        return ErrorClass.GPU_LOST
    if code in _DOWN:
        return ErrorClass.NVML_DOWN
    return ErrorClass.TRANSIENT


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception pynvml raises for `code` (its subclass for that code)."""
    return pynvml.NVMLError(code)


def error_name(error: BaseException) -> str:
    """A short, stable name for a metric label: `gpu_is_lost`, `timeout`, ..."""
    code = getattr(error, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == code:
            return name[len("NVML_ERROR_") :].lower()
    return type(error).__name__.lower()


class PynvmlBackend:
    """The real NVML, through nvidia-ml-py. Each reading NVML does not support on a
    GPU (`NVML_ERROR_NOT_SUPPORTED`) leaves that field out; any other error is raised."""

    def __init__(self) -> None:
        self._handles: dict[int, Any] = {}
        self._events: Any = None
        self._lock = threading.Lock()

    def init(self) -> None:
        pynvml.nvmlInit()
        self._handles = {}
        self._events = None

    def shutdown(self) -> None:
        try:
            if self._events is not None:
                pynvml.nvmlEventSetFree(self._events)
        finally:
            self._events = None
            pynvml.nvmlShutdown()

    def driver_version(self) -> str:
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def _handle(self, index: int) -> Any:
        with self._lock:
            h = self._handles.get(index)
            if h is None:
                h = self._handles[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
            return h

    def identity(self, index: int) -> GpuIdentity:
        h = self._handle(index)
        return GpuIdentity(
            index=index,
            uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
            pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(h).busId),
            model_name=_text(pynvml.nvmlDeviceGetName(h)),
            minor=int(pynvml.nvmlDeviceGetMinorNumber(h)),
        )

    def sample(self, index: int) -> Sample:
        h = self._handle(index)
        out: Sample = {}

        def put(name: str, read: Callable[[], float]) -> None:
            try:
                out[name] = float(read())
            except pynvml.NVMLError as e:
                if getattr(e, "value", None) != pynvml.NVML_ERROR_NOT_SUPPORTED:
                    raise

        util = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            out["DCGM_FI_DEV_GPU_UTIL"] = float(util.gpu)
            out["DCGM_FI_DEV_MEM_COPY_UTIL"] = float(util.memory)
        mem = _optional(lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2))
        if mem is None:
            mem = _optional(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            mib = 1024 * 1024
            out["DCGM_FI_DEV_FB_USED"] = float(mem.used // mib)
            out["DCGM_FI_DEV_FB_FREE"] = float(mem.free // mib)
            out["DCGM_FI_DEV_FB_RESERVED"] = float(getattr(mem, "reserved", 0) // mib)
        put("DCGM_FI_DEV_GPU_TEMP", lambda: pynvml.nvmlDeviceGetTemperature(h, 0))
        put("DCGM_FI_DEV_MEMORY_TEMP", lambda: _field(h, pynvml.NVML_FI_DEV_MEMORY_TEMP))
        put("DCGM_FI_DEV_POWER_USAGE", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        put(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
        )
        put("DCGM_FI_DEV_SM_CLOCK", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
        put(
            "DCGM_FI_DEV_MEM_CLOCK", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        )
        put("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h))
        put("DCGM_FI_DEV_ENC_UTIL", lambda: pynvml.nvmlDeviceGetEncoderUtilization(h)[0])
        put("DCGM_FI_DEV_DEC_UTIL", lambda: pynvml.nvmlDeviceGetDecoderUtilization(h)[0])
        kib = 1024.0  # NVML reports PCIe throughput in KB/s
        put(
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) * kib,
        )
        put(
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) * kib,
        )
        rows = _optional(lambda: pynvml.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            corr, unc, _pending, failed = rows
            out["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] = float(corr)
            out["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] = float(unc)
            out["DCGM_FI_DEV_ROW_REMAP_FAILURE"] = float(failed)
        return out

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        if self._events is None:
            events = pynvml.nvmlEventSetCreate()
            try:
                for index in range(self.device_count()):
                    try:
                        pynvml.nvmlDeviceRegisterEvents(
                            self._handle(index), pynvml.nvmlEventTypeXidCriticalError, events
                        )
                    except pynvml.NVMLError as e:
                        # a GPU that does not report XIDs, or is lost (the sampling
                        # round says so), leaves the others' events on
                        if getattr(e, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED:
                            continue
                        if classify(e) is not ErrorClass.GPU_LOST:
                            raise
            except BaseException:
                pynvml.nvmlEventSetFree(events)
                raise
            self._events = events
        out: list[XidEvent] = []
        wait_ms = int(timeout_s * 1000)
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(self._events, wait_ms)
            except pynvml.NVMLError as e:
                if getattr(e, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                    return out
                raise
            if data.eventType == pynvml.nvmlEventTypeXidCriticalError:
                uuid = _text(pynvml.nvmlDeviceGetUUID(data.device))
                out.append(XidEvent(uuid=uuid, xid=int(data.eventData)))
            wait_ms = 0  # drain what is already queued, then return


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_ABSENT = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
"""What an optional reading may fail with: not on this GPU, or not in this driver
(pynvml raises FUNCTION_NOT_FOUND for a symbol an older driver lacks, such as
`nvmlDeviceGetMemoryInfo_v2`; elsewhere that code means NVML is unusable)."""


def _optional(read: Callable[[], T]) -> T | None:
    """`read()`, or None where this GPU or driver does not offer it."""
    try:
        return read()
    except pynvml.NVMLError as e:
        if getattr(e, "value", None) in _ABSENT:
            return None
        raise


def _field(handle: Any, field_id: int) -> float:
    """One NVML field value (`nvmlDeviceGetFieldValues`), raising its own error code."""
    (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        raise nvml_error(value.nvmlReturn)
    kinds = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    }
    return float(getattr(value.value, kinds.get(value.valueType, "uiVal")))
