"""`gangops dev-cluster up | down | env`: the local control plane from a shell.

The launcher (`controller.devcluster.launcher`) is what tests and benchmarks
use directly; this module gives people the same cluster for the demo and for
poking around with kubectl: `up` in one shell, `env` and `down` from any other.
It only registers the subcommand; the `gangops` entry point owns the parser.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from controller.clusterspec import ClusterSpec, ClusterSpecError, load_cluster
from controller.devcluster.launcher import (
    DEFAULT_CLUSTER_FILE,
    USERS,
    Build,
    DevCluster,
    DevClusterError,
    Options,
    State,
    ensure_binaries,
    is_running,
    read_state,
    start,
    stop_from_state,
)
from controller.devcluster.prometheus import Prometheus, start_for_cluster
from controller.devcluster.telemetry import TelemetryOptions, start_agents
from controller.progress import BuildProgress

__all__ = ["add_subcommand", "default_state_file"]

_DESCRIPTION = """\
Run a real Kubernetes control plane on this machine, without Docker: etcd,
kube-apiserver and kube-controller-manager (built once from Go modules by
clusters/local/build.sh and cached under ~/.cache/gangops), plus a fake kubelet
that registers the GPU nodes of a cluster description and runs the pods bound
to them. Everything listens on free 127.0.0.1 ports and lives in a temporary
directory.

  build  build the binaries (once, cached) and print where they are
  up     start a cluster (see `up --help`)
  env    print `export KUBECONFIG=...` for the running cluster:
           eval "$(gangops dev-cluster env)"
  down   stop the running cluster and delete its directory

The cluster is recorded in a state file (--state) so `env` and `down` work
from any shell. The fake kubelet's pod annotations (gangops.ai/fake-exit,
gangops.ai/fake-duration-seconds, gangops.ai/fake-exit-code) are described
in clusters/local/README.md.
"""

_UP_DESCRIPTION = """\
Start the local control plane and wait until it is ready: the API server
answers /readyz, the controller manager is healthy, and every fake GPU node is
Ready and schedulable. Prints `export KUBECONFIG=...` on stdout (progress goes
to stderr).

By default `up` stays in the foreground and stops the cluster on Ctrl-C (or
when `gangops dev-cluster down` is run elsewhere). With --detach it returns
once the cluster is ready and leaves it running until `down`:
  eval "$(gangops dev-cluster up --detach)"

Credentials: an admin kubeconfig (group system:masters) and four ordinary users,
alice, bob, carol and frank (members of the example policies' projects), whom RBAC
allows nothing until a RoleBinding says otherwise
(`gangops dev-cluster env --user alice`).
"""


def default_state_file() -> Path:
    """Where the running cluster is recorded: $XDG_STATE_HOME/gangops/dev-cluster.json."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gangops" / "dev-cluster.json"


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `dev-cluster` and its actions; each sets `func(args) -> exit code`."""
    parser = subparsers.add_parser(
        "dev-cluster",
        help="run a local Kubernetes control plane with fake GPU nodes (up, down, env)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="dev_cluster_action", metavar="ACTION", required=True)

    up = actions.add_parser(
        "up",
        help="start a cluster and wait until it is ready",
        description=_UP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument(
        "--cluster",
        type=Path,
        default=DEFAULT_CLUSTER_FILE,
        metavar="FILE",
        help="cluster description whose GPU nodes are registered"
        " (default: clusters/local/cluster.yaml)",
    )
    up.add_argument(
        "--detach",
        action="store_true",
        help="return once ready and leave the cluster running until `down`",
    )
    up.add_argument(
        "--kube-scheduler",
        action="store_true",
        help="also run the default kube-scheduler (off: gangops schedules its own pods)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up if not ready after this long (default: 120; the build comes first"
        " and is not counted)",
    )
    up.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show on stderr what starting waits for and the nodes Ready as they come: a bar on"
        " a terminal, a line now and then otherwise (default on)",
    )
    up.add_argument(
        "--prometheus",
        action="store_true",
        help="also run a real Prometheus (Debian package `prometheus`) on a free loopback"
        " port with the chart's GPU recording rules, scraping the node agents listed in"
        " DATA_DIR/prometheus/targets.json (a file_sd file); prints"
        " `export GANGOPS_PROMETHEUS_URL=...` too",
    )
    up.add_argument(
        "--prometheus-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="Prometheus' scrape and rule-evaluation interval (default: 1; production uses 15)",
    )
    up.add_argument(
        "--telemetry",
        action="store_true",
        help="GPU telemetry for the fake nodes: node agents (`gangops agent --fake-nodes`)"
        " replaying recorded GPU telemetry on each node's GPUs, following the pods the fake"
        " kubelet gives them and publishing GPU health on the Nodes, scraped by the real"
        " Prometheus (implies --prometheus)",
    )
    up.add_argument(
        "--telemetry-dir",
        type=Path,
        metavar="DIR",
        help="the recording to replay (pod_gpu_duty_cycle.csv, pod_gpu_memory_used_bytes.csv;"
        " default $GANGOPS_TELEMETRY, else ../shared/telemetry/genai2026)",
    )
    up.add_argument(
        "--telemetry-speed",
        type=float,
        default=60.0,
        metavar="FACTOR",
        help="replay this many times faster than recorded (default 60: a minute a second)",
    )
    up.add_argument(
        "--telemetry-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the agents' sampling interval (default 1; 5 for 1,000 nodes, where one round"
        " of 8,000 GPUs takes about a second on a 2-core machine)",
    )
    up.add_argument(
        "--scenario",
        type=Path,
        metavar="FILE",
        help="scripted GPU faults for the agents (docs/agent.md; `node:` picks a node)",
    )
    up.add_argument(
        "--scenario-start-file",
        type=Path,
        metavar="FILE",
        help="with --scenario: the faults' `at` seconds count from when FILE exists (`touch"
        " FILE`), not from the agents' start; make demo sets its fault off this way",
    )
    _state_argument(up)
    up.set_defaults(func=_up)

    build = actions.add_parser(
        "build",
        help="build the control plane's binaries (once; cached) and print where they are",
        description="Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler,"
        " kubectl and the fake kubelet from Go modules (clusters/local/build.sh), once:"
        " they are cached under ~/.cache/gangops, keyed by go.mod, go.sum and their"
        " sources. The first build takes minutes; progress goes to stderr (a bar per"
        " binary on a terminal), the binaries' directory to stdout.",
    )
    build.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the build's progress on stderr (default on)",
    )
    build.set_defaults(func=_build)

    down = actions.add_parser(
        "down",
        help="stop the running cluster and delete its directory",
        description="Stop the cluster recorded in the state file (started by `up` in any"
        " shell, foreground or detached) and delete its directory. Does nothing, and"
        " succeeds, if no cluster is running.",
    )
    _state_argument(down)
    down.set_defaults(func=_down)

    env = actions.add_parser(
        "env",
        help="print `export KUBECONFIG=...` for the running cluster",
        description='Print shell code pointing kubectl at the running cluster: eval "$(gangops'
        ' dev-cluster env)" (and GANGOPS_PROMETHEUS_URL at its Prometheus, if `up` started'
        " one). Fails if no cluster is running.",
    )
    env.add_argument(
        "--user",
        choices=("admin", *USERS),
        default="admin",
        help="whose credentials: admin (default) or an ordinary user",
    )
    _state_argument(env)
    env.set_defaults(func=_env)


def _state_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        type=Path,
        default=default_state_file(),
        metavar="FILE",
        help="state file recording the running cluster (default: %(default)s)",
    )


def _err(message: str) -> None:
    print(f"gangops dev-cluster: {message}", file=sys.stderr)


def _read_state(path: Path) -> State | None:
    try:
        return read_state(path)
    except DevClusterError as e:
        _err(str(e))
        return None


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop the cluster like Ctrl-C does."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _up(args: argparse.Namespace) -> int:
    if args.scenario_start_file and not args.scenario:
        _err("--scenario-start-file needs --scenario")
        return 2
    try:
        spec = load_cluster(args.cluster)
    except ClusterSpecError as e:
        _err(str(e))
        return 2
    state_file: Path = args.state
    try:  # before anything starts: a state file that cannot be written is a usage error
        state_file.parent.mkdir(parents=True, exist_ok=True)
        lock = open(state_file.with_name(state_file.name + ".lock"), "a")  # noqa: SIM115
    except OSError as e:
        _err(f"--state {state_file}: cannot write there: {e.strerror or e}")
        return 2
    with lock:
        # Held until the cluster is recorded ready (for a foreground `up`, its whole
        # life): two `up` at once on one state file both started, and `down` found
        # only the second.
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _err(f"another `dev-cluster up` is starting a cluster on {state_file}")
            return 1
        return _up_locked(args, spec, state_file)


def _up_locked(args: argparse.Namespace, spec: ClusterSpec, state_file: Path) -> int:
    if state_file.exists():
        state = _read_state(state_file)
        if state is None:
            return 1
        if is_running(state):
            _err(
                f"a cluster is already running (state {state_file}, server {state['server']});"
                " use it, or stop it with `gangops dev-cluster down`"
            )
            return 1
        stop_from_state(state_file)  # stale: its processes are gone; clean up after it
    try:
        build = _build_binaries(show=args.progress)
    except DevClusterError as e:
        _err(str(e))
        return 1
    if build.built:
        print(
            f"gangops dev-cluster: built {build.built} binaries in {build.seconds:.0f}s",
            file=sys.stderr,
        )
    options = Options(
        cluster=spec,
        data_dir=Path(tempfile.mkdtemp(prefix="gangops-dev-cluster-")),
        bin_dir=build.bin_dir,
        kube_scheduler=args.kube_scheduler,
        tie_to_process=not args.detach,
        state_file=state_file,
        remove_data_dir=True,
        timeout_s=args.timeout,
        progress=args.progress,
        ready_later=bool(args.prometheus or args.telemetry),
    )
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGHUP, _raise_stop)
    try:
        telemetry = (
            TelemetryOptions(
                replay_dir=args.telemetry_dir,
                scenario=args.scenario,
                scenario_start_file=args.scenario_start_file,
                speed=args.telemetry_speed,
                interval_s=args.telemetry_interval,
                scrape_interval_s=args.prometheus_interval,
            )
            if args.telemetry
            else None
        )
        return _run(
            options,
            detach=args.detach,
            prometheus_interval_s=args.prometheus_interval
            if args.prometheus or args.telemetry
            else None,
            telemetry=telemetry,
        )
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run(
    options: Options,
    *,
    detach: bool,
    prometheus_interval_s: float | None,
    telemetry: TelemetryOptions | None = None,
) -> int:
    try:
        cluster = start(options)
    except DevClusterError as e:
        _err(f"the cluster did not start: {e}")
        return 1
    except (KeyboardInterrupt, _Stop):
        # stopped with its logs kept, as after a failure: nothing to look into here,
        # and the directory holds the cluster's keys
        shutil.rmtree(options.data_dir, ignore_errors=True)
        _err("interrupted while starting; stopped")
        return 130
    prom: Prometheus | None = None
    if prometheus_interval_s is not None:
        try:
            prom = start_for_cluster(cluster, scrape_interval_s=prometheus_interval_s)
            if telemetry is not None:
                start_agents(cluster, telemetry)
        except DevClusterError as e:
            _err(f"Prometheus or the node agents did not start (the cluster is stopped): {e}")
            cluster.stop(grace=3.0)
            return 1
        except (KeyboardInterrupt, _Stop):
            _err("interrupted while starting Prometheus; stopped")
            cluster.stop(grace=3.0)
            return 130
        cluster.mark_ready()
    try:
        # The summary tells the caller the cluster is ready, and a Ctrl-C may
        # follow at once: from here on an interrupt stops the cluster cleanly.
        _summary(cluster, prom, detach=detach)
        if detach:
            return 0
        while True:
            time.sleep(1.0)
            cluster.check_alive()
    except (KeyboardInterrupt, _Stop):
        _err("stopping")
        code = 0
    except DevClusterError as e:
        _err(str(e))
        code = 1
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
    cluster.stop()
    return code


def _summary(cluster: DevCluster, prom: Prometheus | None, *, detach: bool) -> None:
    t = cluster.timings
    assert t is not None
    gpus = cluster.options.cluster.total_gpus
    users = ", ".join(f"{u}: {p}" for u, p in cluster.user_kubeconfigs.items())
    how = (
        "Stop it with `gangops dev-cluster down`."
        if detach
        else "Stop it with Ctrl-C, or `gangops dev-cluster down` from another shell."
    )
    print(
        f"gangops dev-cluster: ready in {t.ready_s:.1f}s (API server {t.control_plane_s:.1f}s;"
        f" {len(cluster.node_names)} fake GPU nodes, {gpus} nvidia.com/gpu, Ready"
        f" {t.nodes_s:.1f}s after the API server)\n"
        f"  server      {cluster.server}\n"
        f"  kubeconfig  {cluster.kubeconfig}\n"
        f"  users       {users}\n"
        f"  kubectl     {cluster.options.bin_dir / 'kubectl'} (the cluster's own version)\n"
        f"  logs        {cluster.log_dir}\n"
        + (
            f"  prometheus  {prom.url} (every {prom.config.scrape_interval_s:g}s; targets:"
            f" {cluster.prometheus_targets_file})\n"
            + (
                f"  agents      {len(json.loads(cluster.prometheus_targets_file.read_text()))}"
                f" nodes' GPUs replayed (log {cluster.log_dir / 'gangops-agent.log'})\n"
                if cluster.prometheus_targets_file.exists()
                else ""
            )
            if prom is not None
            else ""
        )
        + how,
        file=sys.stderr,
    )
    if prom is not None:
        print(f"export GANGOPS_PROMETHEUS_URL={shlex.quote(prom.url)}")
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}", flush=True)


def _build_binaries(*, show: bool) -> Build:
    """Build (or find) the binaries, showing the build: a bar per binary on a terminal,
    build.sh's own lines otherwise, only errors without `show`."""
    bars = BuildProgress()
    emit = bars.line if show else (lambda line: None)
    try:
        return ensure_binaries(progress=emit, progress_every_s=1 if bars.terminal else 15)
    finally:
        bars.close()


def _build(args: argparse.Namespace) -> int:
    try:
        build = _build_binaries(show=args.progress)
    except DevClusterError as e:
        _err(str(e))
        return 1
    _err(f"binaries in {build.bin_dir} ({build.built} built in {build.seconds:.0f}s)")
    print(build.bin_dir)
    return 0


def _down(args: argparse.Namespace) -> int:
    try:
        stopped = stop_from_state(args.state)
    except DevClusterError as e:
        _err(str(e))
        return 1
    _err("cluster stopped" if stopped else f"no cluster is running (no state in {args.state})")
    return 0


def _env(args: argparse.Namespace) -> int:
    state = _read_state(args.state)
    if state is None:
        _err(f"no cluster is running (no state in {args.state}); start one with `up`")
        return 1
    if not is_running(state) or not state["ready"]:
        _err(f"the cluster recorded in {args.state} is not running or not ready")
        return 1
    path = state["kubeconfig"] if args.user == "admin" else state["users"][args.user]
    if "prometheus_url" in state:
        print(f"export GANGOPS_PROMETHEUS_URL={shlex.quote(state['prometheus_url'])}")
    print(f"export KUBECONFIG={shlex.quote(str(path))}")
    return 0
