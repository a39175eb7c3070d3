"""The agent's `/metrics`: a `Snapshot` in the Prometheus text format (0.0.4), with
dcgm-exporter's metric names, types, help text and labels.

Why not prometheus_client's `generate_latest`: it appends `_total` to every counter
(the OpenMetrics rule), and dcgm-exporter's counters carry no suffix
(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`): rules and dashboards written for DCGM would
not find them. The format is small; `promtool check metrics` checks our output in the
tests. Not importing prometheus_client also keeps the agent small (it costs ~12 MiB
of the 50 MiB budget).

A scrape only reads the last snapshot: it never calls NVML, so it is fast and a hung
GPU cannot hang it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from controller.agent.agent import GpuView, Snapshot
from controller.agent.fields import DRIVER_VERSION_LABEL, FIELDS
from controller.agent.health import State
from controller.nodehealth import FATAL_XIDS

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _value(v: float) -> str:
    """A sample value as the text format spells it (`+Inf`, `-Inf`, `NaN`, integers
    without a fraction)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _escape_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in pairs) + "}"


def gpu_labels(
    g: GpuView, s: Snapshot, hostname_label: str, *, owner: bool = True
) -> list[tuple[str, str]]:
    """dcgm-exporter's labels, in its order; `pod`, `namespace` and `container` only
    when a container holds the GPU (absent, not empty, otherwise)."""
    i = g.identity
    pairs = [
        ("gpu", str(i.index)),
        ("UUID", i.uuid),
        ("pci_bus_id", i.pci_bus_id),
        ("device", f"nvidia{i.minor}"),
        ("modelName", i.model_name),
        (hostname_label, s.node),
        (DRIVER_VERSION_LABEL, s.driver_version),
    ]
    if owner and g.owner is not None:
        pairs += [
            ("container", g.owner.container),
            ("namespace", g.owner.namespace),
            ("pod", g.owner.pod),
        ]
    return pairs


def _family(name: str, kind: str, help_: str, lines: list[str]) -> Iterator[str]:
    if lines:
        yield f"# HELP {name} {_escape_help(help_)}\n"
        yield f"# TYPE {name} {kind}\n"
        yield from lines


def _lines(s: Snapshot, hostname_label: str) -> Iterator[str]:
    readable = [(g, _labels(gpu_labels(g, s, hostname_label))) for g in s.gpus if g.sample]
    for f in FIELDS:
        if f.name == "DCGM_FI_DEV_XID_ERRORS":
            lines = [f"{f.name}{lab} {g.last_xid}\n" for g, lab in readable]
        else:
            lines = [
                f"{f.name}{lab} {_value(g.sample[f.name])}\n"
                for g, lab in readable
                if g.sample is not None and f.name in g.sample
            ]
        yield from _family(f.name, f.kind, f.help, lines)
    xid_lines, totals, xid_owners, xid_times = [], [], [], []
    for g in s.gpus:
        base = gpu_labels(g, s, hostname_label)
        fixed = gpu_labels(g, s, hostname_label, owner=False)
        # The fatal XIDs from 0, so that the first one is an increase: a series that
        # appears at 1 gives `increase()` one sample, and the chart's alert never fired.
        counts = {**dict.fromkeys(FATAL_XIDS, 0), **g.xids}
        for xid, n in sorted(counts.items()):
            xid_lines.append(
                f"DCGM_EXP_XID_ERRORS_COUNT{_labels([*base, ('xid', str(xid))])} {n}\n"
            )
            totals.append(
                f"gangops_gpu_xid_errors_total{_labels([*fixed, ('xid', str(xid))])} {n}\n"
            )
        for xid, at in sorted(g.xid_times.items()):
            # labels that name the GPU whatever its index or holder
            pairs = [(hostname_label, s.node), ("UUID", g.identity.uuid), ("xid", str(xid))]
            xid_times.append(
                f"gangops_gpu_xid_last_timestamp_seconds{_labels(pairs)} {_value(at)}\n"
            )
            o = g.xid_owners.get(xid)
            if o is not None:  # the pod this XID last hit: at this XID's time
                who = [("container", o.container), ("namespace", o.namespace), ("pod", o.pod)]
                xid_owners.append(
                    f"gangops_gpu_xid_owner_timestamp_seconds{_labels([*pairs, *who])}"
                    f" {_value(at)}\n"
                )
    yield from _family(
        "DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs during last window", xid_lines
    )
    # DCGM's count takes its pod labels from the GPU's holder at each scrape: when a
    # fatal XID ends the pod before the next scrape, the count first shows on a new
    # series (no pod) already at 1, and `increase()` sees nothing. The alert reads this
    # count, which has no pod labels, and the pod from the owner series beside it.
    yield from _family(
        "gangops_gpu_xid_errors_total",
        "counter",
        "XIDs since the agent started, by XID (the fatal ones from 0); no pod labels, so a"
        " pod ending never starts a new series (see gangops_gpu_xid_owner_timestamp_seconds).",
        totals,
    )
    yield from _family(
        "gangops_gpu_xid_last_timestamp_seconds",
        "gauge",
        "Unix time of the last XID of this number on the GPU.",
        xid_times,
    )
    yield from _family(
        "gangops_gpu_xid_owner_timestamp_seconds",
        "gauge",
        "Unix time of the last XID of this number on the GPU that this container was hit by:"
        " the one holding the GPU then, or, for a repeat within 6 minutes that found none"
        " (the pod has ended), the one the XID before it hit; gone 6 minutes after it. The"
        " last XID hit this container only while this equals"
        " gangops_gpu_xid_last_timestamp_seconds.",
        xid_owners,
    )
    host = _labels([(hostname_label, s.node)])
    yield from _family(
        "gangops_nvml_up",
        "gauge",
        "1 when NVML answers on this node, 0 while it is unusable (driver not loaded, library"
        " missing); every GPU's values are withdrawn while it is 0.",
        [f"gangops_nvml_up{host} {1 if s.nvml_up else 0}\n"],
    )
    health, states = [], []
    for g in s.gpus:
        base = gpu_labels(g, s, hostname_label, owner=False)
        health.append(f"gangops_gpu_healthy{_labels(base)} {1 if g.health.healthy else 0}\n")
        for state in State:
            value = 1 if g.health.state is state else 0
            states.append(
                f"gangops_gpu_health_state{_labels([*base, ('state', state.value)])} {value}\n"
            )
    yield from _family(
        "gangops_gpu_healthy",
        "gauge",
        "1 when the GPU may be scheduled on; 0 after a reset- or reboot-class XID, when NVML"
        " reports it lost, or when a call to it hangs.",
        health,
    )
    yield from _family(
        "gangops_gpu_health_state",
        "gauge",
        "The GPU's health state (one series per state; the current one is 1).",
        states,
    )
    errors = []
    for (where, err), n in sorted(s.errors.items()):
        lab = _labels([(hostname_label, s.node), ("target", where), ("error", err)])
        errors.append(f"gangops_agent_nvml_errors_total{lab} {n}\n")
    yield from _family(
        "gangops_agent_nvml_errors_total",
        "counter",
        "Failed calls since the agent started, by target (a GPU index, nvml, xid or"
        " pod-resources) and NVML error (deadline_exceeded: no answer within the deadline).",
        errors,
    )
    yield from _family(
        "gangops_agent_ticks_total",
        "counter",
        "Sampling rounds since the agent started.",
        [f"gangops_agent_ticks_total{host} {s.ticks}\n"],
    )


def render(s: Snapshot, *, hostname_label: str = "Hostname") -> bytes:
    """The exposition of one snapshot."""
    return "".join(_lines(s, hostname_label)).encode()
