"""`gangops simulate`: replay a trace through every scheduler and compare.

It only registers the subcommand; the `gangops` entry point owns the parser.
Inputs that a user gets wrong (a missing trace, an unknown format, invalid
policies) are reported in one line with what to do, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from controller.cliargs import (
    non_negative_count,
    non_negative_number,
    positive_count,
    positive_number,
)
from controller.clusterspec import ClusterSpecError
from controller.scheduler.policy import SchedulingPolicy
from controller.sim.faults import FaultError
from controller.sim.generator import generate, to_csv
from controller.sim.plot import PlotUnavailable, write_figures
from controller.sim.report import figures, format_table, write_report
from controller.sim.run import Experiment, Interrupted, policy_doc, run, run_jobs
from controller.sim.schedulers import SCHEDULERS
from controller.sim.tenants import SESSION_MEAN, PolicyError
from controller.sim.traces import TRACES_ENV, TraceError, load_cluster_file, traces_dir
from controller.sim.variants import VARIANTS

__all__ = ["add_subcommand"]

_DESCRIPTION = f"""\
A discrete-event simulation of arrivals, starts, completions and preemptions
that drives the real scheduling core with a virtual clock, and the baselines
{", ".join(SCHEDULERS[1:])} in the same framework, on the same workload.

Inputs: --cluster is a clusters/<name>/cluster.yaml, the openb node list or
a Tiresias cluster CSV; --trace an openb pod list (full or the short
name,cpu_milli,memory_mib,num_gpu,gpu_milli variant), a Tiresias job CSV or
gangops' CSV (docs/simulator.md); or --generate N for a seeded synthetic
workload. A path that does not exist is also looked up under the public
traces directory (${TRACES_ENV}, default ../shared/traces).

Modes: with departures (default), jobs run for their trace durations;
--arrivals-only is the FGD fragmentation experiment (jobs never leave;
reports GPUs allocated when arrived demand reaches 100 % of capacity).
"""

_EPILOG = """\
examples:
  gangops simulate --cluster openb/openb_node_list_gpu_node.csv \\
      --trace openb/openb_pod_list_default.csv --arrivals-only --seeds 3 \\
      --scheduler gangops bestfit random --report out/fgd
  gangops simulate --cluster clusters/local/cluster.yaml --policies policies \\
      --generate 400 --scheduler gangops static --report out/demo
"""


def _resolve(value: str, what: str) -> Path:
    p = Path(value)
    if p.exists():
        return p
    alt = traces_dir() / value
    if alt.exists():
        return alt
    raise TraceError(
        f"{what} {value!r} not found (also looked in {traces_dir()}); the public traces are "
        f"not part of the repository: get them (see docs/simulator.md) and set {TRACES_ENV}"
    )


def _unwritable(args: argparse.Namespace) -> str | None:
    """Why `--report` or `--save-trace` cannot be written, or None: asked before a
    run that may take minutes, whose results would be lost at its end."""
    if args.report:
        report = Path(args.report)
        if report.exists() and not report.is_dir():
            return f"--report {report}: not a directory (it names the directory to write)"
        try:
            report.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return f"--report {report}: {e.strerror or e}"
    if args.save_trace:
        trace = Path(args.save_trace)
        if trace.is_dir() or not trace.parent.is_dir():
            return f"--save-trace {trace}: not a file in an existing directory"
    return None


def _simulate(args: argparse.Namespace) -> int:
    unknown = [s for s in args.scheduler if s not in SCHEDULERS]
    if unknown:
        print(f"gangops simulate: unknown scheduler(s) {', '.join(unknown)}; known: "
              f"{', '.join(SCHEDULERS)}", file=sys.stderr)  # fmt: skip
        return 2
    if (args.trace is None) == (args.generate is None):
        print("gangops simulate: give exactly one of --trace FILE and --generate N",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.variant and args.trace is None:
        print("gangops simulate: --variant reshapes a --trace", file=sys.stderr)
        return 2
    if args.repeat > 1 and (args.load is None or args.arrivals_only):
        # it was ignored without a word: the figures were one pass's
        print("gangops simulate: --repeat K replays the trace with departures at a --load",
              file=sys.stderr)  # fmt: skip
        return 2
    unwritable = _unwritable(args)
    if unwritable:  # found before the run, not after it is lost
        print(f"gangops simulate: {unwritable}", file=sys.stderr)
        return 2
    saved: str | None = None
    """The generated trace's file, once written."""
    try:
        exp = Experiment(
            cluster=_resolve(args.cluster, "cluster"),
            trace=_resolve(args.trace, "trace") if args.trace else Path("<generated>"),
            policies=Path(args.policies) if args.policies else None,
            schedulers=tuple(dict.fromkeys(args.scheduler)),
            arrivals_only=args.arrivals_only,
            seed=args.seed,
            seeds=args.seeds,
            tune=args.tune,
            order=args.order,
            load=args.load,
            tick=args.tick,
            limit=args.limit,
            max_duration=args.max_duration,
            repeat=args.repeat,
            session_mean=args.session_mean,
            telemetry=Path(args.telemetry) if args.telemetry else None,
            faults=Path(args.faults) if args.faults else None,
            use_telemetry=not args.no_telemetry,
            variant=args.variant,
        )
        if args.generate is not None:
            nodes = load_cluster_file(exp.cluster)
            gpus = sum(n.gpus for n in nodes)
            doc = policy_doc(exp, gpus)
            policy = SchedulingPolicy.from_dict(doc)
            load = args.load or 0.9
            jobs = generate(
                jobs=args.generate, capacity_gpus=gpus, policy=policy, seed=args.seed, load=load
            )
            if args.save_trace:
                try:
                    Path(args.save_trace).write_text(to_csv(jobs), encoding="utf-8")
                except OSError as e:
                    print(f"gangops simulate: --save-trace: {e}", file=sys.stderr)
                    return 1
                saved = args.save_trace
            inputs: dict[str, Any] = {
                "cluster": str(exp.cluster),
                "nodes": len(nodes),
                "gpus": gpus,
                "trace": f"generated ({args.generate} jobs, seed {args.seed}, load {load})",
                "jobs": len(jobs),
                "mode": "arrivals-only" if exp.arrivals_only else "departures",
            }
            runs = run_jobs(exp, nodes, jobs, doc, show_progress=args.progress, summary=inputs)
        else:
            runs, inputs = run(exp, show_progress=args.progress)
    except (TraceError, PolicyError, ClusterSpecError, FaultError) as e:
        print(f"gangops simulate: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:  # what finished is shown, not lost with the rest
        if e.finished:
            if e.summary is not None:
                _heading(e.summary)
            finished = {r.name: figures(r) for r in e.finished}
            sys.stdout.write(format_table(finished, arrivals_only=exp.arrivals_only))
        wrote = f"the generated trace is in {saved}, nothing else" if saved else "nothing"
        print(
            f"gangops simulate: interrupted; not finished: {', '.join(e.unfinished)}"
            f" ({wrote} written)",
            file=sys.stderr,
        )
        return 128 + signal.SIGINT
    inputs["settings"] = {  # what ran, so a report.json can be run again
        k: getattr(args, k)
        for k in ("seed", "seeds", "tune", "order", "load", "repeat", "max_duration", "tick",
                  "session_mean", "limit", "variant")
    }  # fmt: skip
    inputs["telemetry"] = {
        "recording": args.telemetry,
        "faults": args.faults,
        "used_by_gangops": not args.no_telemetry and bool(args.telemetry or args.faults),
    }
    results = {r.name: figures(r) for r in runs}
    _heading(inputs)
    sys.stdout.write(format_table(results, arrivals_only=exp.arrivals_only))
    if args.report:
        try:
            print(f"wrote {write_report(Path(args.report), results, inputs)}")
            for p in write_figures(Path(args.report), runs, results):
                print(f"wrote {p}")
        except PlotUnavailable as e:
            print(f"gangops simulate: no figures: {e}", file=sys.stderr)
        except OSError as e:
            print(f"gangops simulate: --report: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
    return 0


def _heading(inputs: dict[str, Any]) -> None:
    print(f"{inputs['mode']}: {inputs['jobs']} jobs on {inputs['nodes']} nodes "
          f"({inputs['gpus']} GPUs), {inputs['trace']}")  # fmt: skip


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `simulate`; it sets `func(args) -> exit code`."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate schedulers on a GPU trace and compare them",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster description")
    p.add_argument("--trace", metavar="FILE", help="trace file")
    p.add_argument("--generate", type=positive_count, metavar="N", help="simulate N generated jobs")
    p.add_argument("--save-trace", metavar="FILE", help="with --generate: write the jobs as CSV")
    p.add_argument("--policies", metavar="DIR", help="policy set (default: one open project)")
    p.add_argument(
        "--scheduler",
        nargs="+",
        default=list(SCHEDULERS),
        metavar="NAME",
        help=f"schedulers to compare (default all: {' '.join(SCHEDULERS)})",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        help="write report.json and PNG figures here (figures need matplotlib: gangops[plot])",
    )
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    p.add_argument(
        "--variant",
        choices=VARIANTS,
        help="reshape --trace as one of FGD's workload variants, drawn with --seed "
        "(docs/simulator.md, Variants)",
    )
    p.add_argument("--arrivals-only", action="store_true", help="FGD's experiment: never leave")
    p.add_argument("--seed", type=int, default=42, help="first random seed (default 42)")
    p.add_argument(
        "--seeds",
        type=positive_count,
        default=1,
        help="arrivals-only: seeds averaged, 1 or more (default 1)",
    )
    p.add_argument(
        "--tune",
        type=non_negative_number,
        default=1.3,
        help="arrivals-only: inflate the trace to this x capacity by resampling; 0 or at "
        "most the trace's own demand: as is (default 1.3)",
    )
    p.add_argument(
        "--order",
        choices=("shuffled", "trace"),
        default="shuffled",
        help="arrivals-only: shuffled per seed like FGD's artifact (default), or file order",
    )
    p.add_argument(
        "--load",
        type=positive_number,
        help="with departures: re-time arrivals so the offered load is this x capacity (> 0)",
    )
    p.add_argument(
        "--max-duration",
        type=non_negative_number,
        metavar="SECONDS",
        help="with departures: cap job durations (censored trace tails), 0 or more",
    )
    p.add_argument(
        "--repeat",
        type=positive_count,
        default=1,
        metavar="K",
        help="with departures and --load: replay K shuffled passes of the trace as one "
        "stationary stream (Poisson arrivals), for a steady state instead of a burst",
    )
    p.add_argument(
        "--session-mean",
        type=positive_number,
        default=SESSION_MEAN,
        metavar="N",
        help="traces without tenants: mean number of consecutive jobs one project submits, "
        f"> 0 (default {SESSION_MEAN})",
    )
    p.add_argument(
        "--telemetry",
        metavar="DIR",
        help="with departures: replay this recorded GPU telemetry on the jobs "
        "(format of ../shared/telemetry/genai2026/; docs/simulator.md)",
    )
    p.add_argument(
        "--faults", metavar="FILE", help="with departures: scripted GPU faults (YAML, docs)"
    )
    p.add_argument(
        "--no-telemetry",
        action="store_true",
        help="gangops schedules by requests alone; the telemetry and faults are still measured",
    )
    p.add_argument(
        "--tick",
        type=non_negative_number,
        default=10.0,
        metavar="SECONDS",
        help="seconds between cycles; 0: a cycle at every event (default 10)",
    )
    p.add_argument(
        "--limit",
        type=non_negative_count,
        metavar="N",
        help="only the first N jobs of the trace (0 or more)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="progress on stderr: a bar on a terminal, a line now and then otherwise (default on)",
    )
    p.set_defaults(func=_simulate)
