"""The simulator's figures, drawn with matplotlib (the optional extra `plot`).

`write_figures` draws what a scheduling paper shows of the compared
schedulers, one PNG each, every scheduler in the same colour throughout:

- with departures: `utilization.png` (GPUs allocated over time),
  `queueing_delay_cdf.png` (share of jobs started within a delay, log time),
  `project_share.png` (GPUs each project holds over time under gangops,
  stacked) and `comparison.png` (gangops against each baseline: utilisation
  and delay percentiles); with `--telemetry` or `--faults`, `telemetry.png`
  (jobs placed on GPUs out of service, GPU-time lost, share of held GPU-time
  idle);
- arrivals-only: `allocation.png` (GPUs allocated as the arrived demand
  grows) and `comparison.png` (allocation at 100 % arrived demand, and
  fragmentation).

Only this module imports matplotlib, and only when it draws: the controller
runs without it, and `gangops simulate --report` without it still writes
report.json and says how to get the figures (`PlotUnavailable`). Figures use
matplotlib's object API (a `Figure` on the Agg canvas), never pyplot, so
there is no global state and no GUI backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.sim.run import SchedulerRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["DPI", "PlotUnavailable", "write_figures"]

DPI = 100
"""Pixels per inch of the PNGs (figures are 9 x 5 inches, the comparison 12 x 5)."""
_SIZE = (9.0, 5.0)
_WIDE = (12.0, 5.0)

_TIME_TICKS = (
    (1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"),
    (6 * 3600, "6 h"), (86400, "1 d"), (7 * 86400, "1 wk"),
)  # fmt: skip


class PlotUnavailable(Exception):
    """matplotlib is not installed; the message says how to install it."""


def write_figures(
    out_dir: Path,
    runs: Sequence[SchedulerRun],
    results: Mapping[str, Mapping[str, Any]],
) -> list[Path]:
    """Draw the figures of `runs` (whose report figures are `results`) as
    PNGs under `out_dir`; returns the files written. Series are those of each
    scheduler's first run (the first seed)."""
    try:
        import matplotlib  # noqa: F401  (is it there at all)
    except ImportError:
        raise PlotUnavailable(
            "the figures need matplotlib: pip install 'gangops[plot]' (or make venv)"
        ) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    colours = {r.name: f"C{i % 10}" for i, r in enumerate(runs)}
    drawings: list[tuple[str, Figure]]
    if any(r.runs[0].alloc_curve for r in runs):
        drawings = [
            ("allocation.png", _allocation(runs, results, colours)),
            ("comparison.png", _comparison_arrivals(results, colours)),
        ]
    else:
        drawings = [
            ("utilization.png", _utilisation(runs, colours)),
            ("queueing_delay_cdf.png", _delay_cdf(runs, results, colours)),
            ("project_share.png", _project_share(runs)),
            ("comparison.png", _comparison(results, colours)),
        ]
        if any(r.runs[0].idle_gpu_seconds is not None or r.runs[0].on_unhealthy for r in runs):
            drawings.append(("telemetry.png", _telemetry(runs, results, colours)))
    written = []
    for name, fig in drawings:
        path = out_dir / name
        fig.savefig(path, dpi=DPI)
        written.append(path)
    return written


def _figure(size: tuple[float, float] = _SIZE) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _duration(seconds: float) -> str:
    """A delay for people: "7 s", "4.2 min", "1.5 h"."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _time_unit(seconds: float) -> tuple[float, str]:
    """(divisor, unit) for a time axis spanning `seconds`."""
    if seconds >= 2 * 3600:
        return 3600.0, "hours"
    if seconds >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _log_time_ticks(ax: Axes, axis: str, low: float, high: float) -> None:
    """Ticks in people's units (1 s, 10 s, 1 min, ...) on a log time axis."""
    from matplotlib.ticker import NullFormatter

    ticks = [(v, label) for v, label in _TIME_TICKS if low <= v <= high]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks([v for v, _ in ticks], labels=[label for _, label in ticks])
    target.set_minor_formatter(NullFormatter())


def _utilisation(runs: Sequence[SchedulerRun], colours: Mapping[str, str]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    end = max((r.runs[0].util_series[-1][0] for r in runs if r.runs[0].util_series), default=0)
    div, unit = _time_unit(end)
    for r in runs:
        first = r.runs[0]
        ax.plot(
            [t / div for t, _ in first.util_series],
            [100 * u for _, u in first.util_series],
            color=colours[r.name],
            linewidth=1.5,
            label=f"{r.name} (mean {100 * first.utilization:.1f} %)",
        )
    ax.set_ylim(0, 100)
    ax.set_xlim(left=0)
    ax.set_xlabel(f"time since the first arrival ({unit})")
    ax.set_ylabel("GPUs allocated (% of capacity)")
    ax.set_title("GPU utilisation over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    return fig


def _delay_cdf(
    runs: Sequence[SchedulerRun],
    results: Mapping[str, Mapping[str, Any]],
    colours: Mapping[str, str],
) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    ax.set_xscale("log")
    longest = 1.0
    for r in runs:
        first = r.runs[0]
        delays = sorted(max(1.0, d) for d in first.delays)
        f = results[r.name]
        if not delays:
            ax.plot([], [], color=colours[r.name], label=f"{r.name} (no job started)")
            continue
        longest = max(longest, delays[-1])
        shares = [100 * (i + 1) / first.jobs for i in range(len(delays))]
        ax.step(
            [1.0, *delays],
            [0.0, *shares],
            where="post",
            color=colours[r.name],
            linewidth=1.5,
            label=f"{r.name} (p50 {_duration(f['queueing_delay_p50'])},"
            f" p99 {_duration(f['queueing_delay_p99'])})",
        )
    high = longest * 2
    ax.set_xlim(1, high)
    _log_time_ticks(ax, "x", 1, high)
    ax.set_ylim(0, 100)
    ax.set_xlabel("queueing delay, submission to first start (log scale; under 1 s drawn at 1 s)")
    ax.set_ylabel("jobs started within the delay (% of all jobs)")
    ax.set_title("Queueing delay CDF")
    ax.grid(alpha=0.3, which="major")
    ax.legend(loc="lower right")
    return fig


def _project_share(runs: Sequence[SchedulerRun]) -> Figure:
    run = next((r for r in runs if r.name == "gangops"), runs[0])
    first = run.runs[0]
    series = first.project_series
    used = {p for _, shares in series for p, s in shares.items() if s > 0}
    projects = sorted(used, key=lambda p: (-first.guarantees.get(p, 0.0), p))
    fig = _figure()
    ax = fig.add_subplot()
    div, unit = _time_unit(series[-1][0] if series else 0.0)

    def label(p: str) -> str:
        g = first.guarantees.get(p)
        return f"{p} (guaranteed {100 * g:.0f} %)" if g else f"{p} (no guarantee)"

    if projects:
        ax.stackplot(
            [t / div for t, _ in series],
            [[100 * shares.get(p, 0.0) for _, shares in series] for p in projects],
            labels=[label(p) for p in projects],
            colors=[f"C{i % 10}" for i in range(len(projects))],
            alpha=0.85,
        )
        fig.legend(loc="outside right upper", title="project")
    ax.set_ylim(0, 100)
    ax.set_xlim(left=0)
    ax.set_xlabel(f"time since the first arrival ({unit})")
    ax.set_ylabel("GPUs held (% of capacity)")
    ax.set_title(f"GPU share per project over time ({run.name})")
    ax.grid(alpha=0.3)
    return fig


def _bars(
    ax: Axes,
    groups: Sequence[str],
    values: Mapping[str, Sequence[float]],
    colours: Mapping[str, str],
    label: Callable[[float], str],
    *,
    floor: float = 0.0,
) -> None:
    """Grouped bars: one group per entry of `groups`, one bar per scheduler in
    each, labelled with `label(value)`; bars are drawn at least `floor` high
    (a log axis has no zero)."""
    width = 0.8 / max(1, len(values))
    for k, (name, vs) in enumerate(values.items()):
        xs = [g - 0.4 + width * (k + 0.5) for g in range(len(groups))]
        bars = ax.bar(xs, [max(floor, v) for v in vs], width, color=colours[name], label=name)
        ax.bar_label(bars, labels=[label(v) for v in vs], fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)), labels=list(groups))
    ax.grid(alpha=0.3, axis="y")


def _title(results: Mapping[str, Any]) -> str:
    return "gangops against each baseline" if "gangops" in results else "schedulers compared"


def _comparison(results: Mapping[str, Mapping[str, Any]], colours: Mapping[str, str]) -> Figure:
    fig = _figure(_WIDE)
    util, delay = fig.subplots(1, 2, width_ratios=(2, 3))
    _bars(
        util,
        ("whole run", "while jobs arrive"),
        {n: [100 * f["utilization"], 100 * f["utilization_arrivals"]] for n, f in results.items()},
        colours,
        lambda v: f"{v:.1f}",
    )
    util.set_ylim(0, 110)
    util.set_ylabel("GPU utilisation (% of capacity)")
    util.set_title("Utilisation")
    keys = ("queueing_delay_p50", "queueing_delay_p95", "queueing_delay_p99")
    delay.set_yscale("log")
    _bars(
        delay,
        ("p50", "p95", "p99"),
        {n: [f[k] for k in keys] for n, f in results.items()},
        colours,
        _duration,
        floor=1.0,
    )
    longest = max([1.0, *(f[k] for f in results.values() for k in keys)])
    delay.set_ylim(1, longest * 4)
    _log_time_ticks(delay, "y", 1, longest * 4)
    delay.set_ylabel("queueing delay (log scale; under 1 s drawn at 1 s)")
    delay.set_title("Queueing delay percentiles")
    handles, labels = util.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    fig.suptitle(_title(results))
    return fig


def _telemetry(
    runs: Sequence[SchedulerRun],
    results: Mapping[str, Mapping[str, Any]],
    colours: Mapping[str, str],
) -> Figure:
    fig = _figure(_WIDE)
    bad, lost, idle = fig.subplots(1, 3)
    names = list(results)
    for ax, key, title, scale, fmt in (
        (bad, "jobs_on_unhealthy_gpus", "Jobs placed on GPUs out of service", 1.0, "{:.0f}"),
        (lost, "lost_gpu_seconds", "GPU-hours lost (preempted or on a bad GPU)", 3600.0,
         "{:.3g}"),
    ):  # fmt: skip
        vals = [float(results[n].get(key) or 0.0) / scale for n in names]
        bars = ax.bar(names, vals, color=[colours[n] for n in names])
        ax.bar_label(bars, labels=[fmt.format(v) for v in vals], fontsize=8, padding=2)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(axis="x", labelrotation=30)
    shares = []
    for r in runs:
        rr = r.runs[0]
        allocated = rr.utilization * rr.capacity_milli / 1000 * rr.makespan  # GPU-seconds
        shares.append(100 * (rr.idle_gpu_seconds or 0.0) / allocated if allocated else 0.0)
    bars = idle.bar(names, shares, color=[colours[n] for n in names])
    idle.bar_label(bars, labels=[f"{v:.1f}" for v in shares], fontsize=8, padding=2)
    idle.set_ylim(0, 110)
    idle.set_title("Held GPU-time idle (replayed use < 5 %), %", fontsize=10)
    idle.grid(alpha=0.3, axis="y")
    idle.tick_params(axis="x", labelrotation=30)
    fig.suptitle("Telemetry and faults: what happened on the GPUs")
    return fig


def _allocation(
    runs: Sequence[SchedulerRun],
    results: Mapping[str, Mapping[str, Any]],
    colours: Mapping[str, str],
) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    right = 100.0
    for r in runs:
        curve = r.runs[0].alloc_curve
        right = max(right, *(100 * a for a, _ in curve))
        at_full = results[r.name].get("gpu_allocation_at_full_arrival")
        ax.plot(
            [100 * a for a, _ in curve],
            [100 * u for _, u in curve],
            color=colours[r.name],
            linewidth=1.5,
            label=r.name if at_full is None else f"{r.name} ({at_full:.1f} % at 100 %)",
        )
    ax.plot([0, 100], [0, 100], color="grey", linestyle="--", linewidth=1, label="every job placed")
    ax.axvline(100, color="grey", linestyle=":", linewidth=1)
    ax.set_xlim(0, right)
    ax.set_ylim(0, 100)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPUs allocated (% of capacity)")
    ax.set_title("GPU allocation as arrivals grow (jobs never leave; first seed)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return fig


def _comparison_arrivals(
    results: Mapping[str, Mapping[str, Any]], colours: Mapping[str, str]
) -> Figure:
    fig = _figure(_WIDE)
    alloc, frag = fig.subplots(1, 2)
    _bars(
        alloc,
        ("when arrived demand reaches 100 % of capacity",),
        {n: [f.get("gpu_allocation_at_full_arrival") or 0.0] for n, f in results.items()},
        colours,
        lambda v: f"{v:.1f}",
    )
    alloc.set_ylim(0, 110)
    alloc.set_ylabel("GPUs allocated (% of capacity)")
    alloc.set_title("GPU allocation")
    _bars(
        frag,
        ("when arrived demand passes 100 % of capacity",),
        {n: [100 * f["fragmentation"]] for n, f in results.items()},
        colours,
        lambda v: f"{v:.1f}",
    )
    frag.set_ylim(0, 110)
    frag.set_ylabel("fragmented free GPUs (% of free GPUs)")
    frag.set_title("Fragmentation (free GPUs on nodes where no typical request fits)")
    handles, labels = alloc.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    fig.suptitle(f"{_title(results)} (mean over seeds; jobs never leave)")
    return fig
