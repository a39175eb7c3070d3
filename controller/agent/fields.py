"""The metrics the node agent exports, named, typed and described as dcgm-exporter
describes them (its `etc/default-counters.csv`), so dashboards and alert rules
written for DCGM work unchanged.

`FIELDS` lists every default counter NVML can provide; `NOT_FROM_NVML` the default
counters it cannot, with the reason. A parity test reads dcgm-exporter's file and
checks that every enabled counter is in exactly one of the two, with the same type
and help text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FIELDS", "FIELDS_BY_NAME", "NOT_FROM_NVML", "Field"]


@dataclass(frozen=True)
class Field:
    """One exported DCGM field."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    """dcgm-exporter's help text, units included, byte for byte."""


FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    Field(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    Field(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    Field(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers"
        " and data payloads - in bytes per second.",
    ),
    Field(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers"
        " and data payloads - in bytes per second.",
    ),
)

FIELDS_BY_NAME = {f.name: f for f in FIELDS}

NOT_FROM_NVML: dict[str, str] = {
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (
        "NVML's NVLink utilization counters are deprecated and must be configured per"
        " link; DCGM reads NVLink traffic through its own profiling module"
    ),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "a vGPU guest's licence state; not a bare-metal GPU's",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "a DCGM profiling (DCP) metric; NVML has no equivalent",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "a DCGM profiling (DCP) metric; NVML has no equivalent",
    "DCGM_FI_PROF_DRAM_ACTIVE": "a DCGM profiling (DCP) metric; NVML has no equivalent",
}
"""Default dcgm-exporter counters the agent does not export, and why."""

DRIVER_VERSION_LABEL = "DCGM_FI_DRIVER_VERSION"
"""dcgm-exporter's one default `label` field: the driver version, on every series."""
