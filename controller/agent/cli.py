"""`gangops agent`: the node agent's command line and process (see `_DESCRIPTION`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from controller.agent import health
from controller.agent.agent import Agent, AgentConfig, Owner, OwnersReader, Snapshot
from controller.agent.exposition import CONTENT_TYPE, render
from controller.agent.nvml import Nvml, PynvmlBackend
from controller.cliargs import positive_seconds
from controller.httpserver import (
    HttpServer,
    Limits,
    Request,
    Response,
    Route,
    ServerError,
    address_arg,
    text,
)

if TYPE_CHECKING:
    from controller.agent.replay import Scenario

__all__ = ["add_subcommand"]

log = logging.getLogger(__name__)

EXIT_OK, EXIT_USAGE = 0, 2

_DESCRIPTION = """\
The node agent: runs on every GPU node (a DaemonSet) and serves the GPUs'
telemetry on /metrics with dcgm-exporter's metric names, types, units and
labels, so dashboards and rules written for DCGM work unchanged.

Every --interval seconds it reads each GPU through NVML, every call under
--deadline: a GPU that is lost, hangs or fails has its series withdrawn in the
same round (never a frozen value) and gangops_gpu_healthy 0; NVML itself down
sets gangops_nvml_up 0 and NVML is initialised again every 5 s. XID errors arrive
through NVML's event loop within a second as DCGM_EXP_XID_ERRORS_COUNT{xid=...},
gangops_gpu_xid_errors_total{xid=...} (no pod labels, so a pod the XID ends
starts no new series; gangops_gpu_xid_owner_timestamp_seconds names the pod it
hit) and DCGM_FI_DEV_XID_ERRORS; each XID's class (see --xid-class) decides the
GPU's health, which is also published on the Node (condition GPUProblem and
the annotation gangops.ai/unhealthy-gpus) so the scheduler can leave a bad GPU
alone without Prometheus. GPUs are attributed to containers through the
kubelet's pod-resources API: pod, namespace and container labels, absent for a
GPU no container holds.

Without a GPU, --replay DIR plays recorded telemetry on fake GPUs (files
pod_gpu_duty_cycle.csv and pod_gpu_memory_used_bytes.csv, columns
container,timestamp,value; GPU i plays the i-th container id) and --scenario
FILE adds scripted faults (documented in controller/agent/replay.py and
docs/agent.md).

endpoints:
  /metrics   the exposition (a scrape never calls NVML)
  /healthz   200 while the sampling loop runs
  /readyz    200 once NVML answers and a first round is done
"""


def _xid_class(v: str) -> tuple[int, health.XidClass]:
    try:
        return health.parse_xid_class(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gangops agent`."""
    p = subparsers.add_parser(
        "agent",
        help="the node agent: GPU telemetry (NVML, DCGM-compatible metrics) and GPU health",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen",
        type=address_arg,
        default=":9400",
        help="metrics and health address (default :9400, dcgm-exporter's port)",
    )
    p.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="this node's name: the Hostname label and the Node health is published on "
        "(default: $NODE_NAME, else the host name)",
    )
    p.add_argument(
        "--interval",
        type=positive_seconds,
        default=1.0,
        help="seconds between readings (default 1)",
    )
    p.add_argument(
        "--deadline",
        type=positive_seconds,
        default=2.0,
        help="seconds one NVML call may take before its GPU counts as hung (default 2)",
    )
    p.add_argument(
        "--hostname-label",
        choices=["Hostname", "hostname"],
        default="Hostname",
        help="the host label's name: dcgm-exporter up to 4.5.x emits Hostname, newer "
        "versions hostname (default Hostname)",
    )
    p.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="the kubelet's pod-resources socket ('' disables pod labels; default %(default)s)",
    )
    p.add_argument(
        "--publish-node",
        choices=["auto", "on", "off"],
        default="auto",
        help="publish GPU health on the Node (needs patch on nodes and nodes/status); "
        "auto: when API credentials are found (in-cluster, --kubeconfig, $KUBECONFIG)",
    )
    p.add_argument(
        "--kubeconfig", help="kubeconfig for publishing health (default: $KUBECONFIG, in-cluster)"
    )
    p.add_argument(
        "--clean-period",
        type=float,
        default=600.0,
        help="seconds without a repeat after which a reset-class XID stops keeping a GPU "
        "unhealthy (0: only a GPU reset clears it; default 600)",
    )
    p.add_argument(
        "--xid-class",
        type=_xid_class,
        action="append",
        default=[],
        metavar="XID=CLASS",
        help="override an XID's class: ignore, restart-app (the GPU stays healthy), "
        "reset-gpu or reboot-node (it does not); repeatable, e.g. --xid-class 31=reset-gpu",
    )
    r = p.add_argument_group("replayed GPUs (no NVML)")
    r.add_argument("--replay", metavar="DIR", help="play recorded telemetry from DIR on fake GPUs")
    r.add_argument("--gpus", type=int, default=8, help="fake GPUs (default 8)")
    r.add_argument(
        "--gpu-memory-mib", type=float, default=49152.0, help="memory per fake GPU (default 49152)"
    )
    r.add_argument(
        "--gpu-model", default="NVIDIA L40S", help="the fake GPUs' modelName (default %(default)s)"
    )
    r.add_argument(
        "--speed",
        type=positive_seconds,
        default=1.0,
        help="play the recording this many times faster (default 1)",
    )
    r.add_argument(
        "--replay-offset",
        type=int,
        default=0,
        help="GPU i plays container (offset + i) mod n (default 0)",
    )
    r.add_argument(
        "--scenario", metavar="FILE", help="scripted faults on the fake GPUs (implies fake GPUs)"
    )
    r.add_argument(
        "--scenario-start-file",
        type=Path,
        metavar="FILE",
        help="with --scenario: the faults' `at` seconds count from when FILE exists (`touch"
        " FILE`), not from the agent's start",
    )
    f = p.add_argument_group("many fake nodes in one process (the dev cluster)")
    f.add_argument(
        "--fake-nodes",
        metavar="FILE",
        help="a JSON list of v1 Node manifests: run one agent per GPU node in it, each over "
        "replayed GPUs (GPUs from capacity, model and memory from the nvidia.com/gpu.* "
        "labels), served at /nodes/<name>/metrics",
    )
    f.add_argument(
        "--targets-file",
        metavar="FILE",
        help="with --fake-nodes: write Prometheus file_sd targets for the nodes here",
    )
    f.add_argument(
        "--pod-resources-dir",
        metavar="DIR",
        help="with --fake-nodes: each node's pod-resources socket is DIR/<node>.sock",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=_main)


def _scenario(args: argparse.Namespace) -> Scenario:
    """The scripted faults of `--scenario` (none without it), held back until
    `--scenario-start-file` exists when that is given."""
    from controller.agent.replay import Scenario, load_scenario

    if not args.scenario:
        return Scenario()
    return load_scenario(args.scenario, start_file=args.scenario_start_file)


def _backend(args: argparse.Namespace) -> tuple[Nvml, Any]:
    """The NVML implementation, and the replay's `set_held` hook (None on real GPUs)."""
    if not args.replay and not args.scenario:
        return PynvmlBackend(), None
    from controller.agent.replay import Replay, load_recording

    recording = load_recording(args.replay) if args.replay else None
    scenario = _scenario(args)
    replay = Replay(
        node=args.node,
        gpus=args.gpus,
        memory_mib=args.gpu_memory_mib,
        model=args.gpu_model,
        recording=recording,
        scenario=scenario,
        speed=args.speed,
        offset=args.replay_offset,
    )
    return replay, replay.set_held


def owners_reader(socket_path: str) -> OwnersReader:
    """GPU owners from the kubelet's pod-resources API at `socket_path`."""
    from controller.agent.podresources import PodResourcesClient

    client = PodResourcesClient(socket_path)

    def read() -> Mapping[str, Owner]:
        return {
            uuid: Owner(o.namespace, o.pod, o.container)
            for uuid, o in client.list_devices().items()
        }

    return read


def _kube_for_publishing(args: argparse.Namespace) -> Any:
    """An API client when GPU health is to be published on the Nodes, else None."""
    want = args.publish_node
    if want == "off":
        return None
    has_credentials = bool(
        args.kubeconfig or os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST")
    )
    if want == "auto" and not has_credentials:
        log.info(
            "not publishing GPU health on the Node: no API credentials"
            " (--publish-node on to insist)"
        )
        return None
    from controller.kube.client import ApiError, connect

    try:
        return connect(args.kubeconfig, pool_size=4)
    except ApiError as e:  # credentials missing or unreadable: a usage error
        raise ValueError(f"cannot publish GPU health on the Node: {e.message}") from None


def _publisher(args: argparse.Namespace) -> Any:
    kube = _kube_for_publishing(args)
    if kube is None:
        return None
    from controller.agent.node import NodePublisher

    return NodePublisher(kube, args.node).start()


def _main(args: argparse.Namespace) -> int:
    if args.scenario_start_file and not args.scenario:
        print("gangops agent: --scenario-start-file needs --scenario", file=sys.stderr)
        return EXIT_USAGE
    if args.fake_nodes:
        return _main_fleet(args)
    try:
        publisher = _publisher(args)
        nvml, on_held = _backend(args)
    except ValueError as e:
        print(f"gangops agent: {e}", file=sys.stderr)
        return EXIT_USAGE
    config = AgentConfig(
        node=args.node,
        interval_s=args.interval,
        deadline_s=args.deadline,
        clean_period_s=args.clean_period,
        xid_overrides=dict(args.xid_class),
    )
    owners = None
    if args.pod_resources_socket:
        if not Path(args.pod_resources_socket).exists():
            log.warning(
                "no pod-resources socket at %s yet: GPUs carry no pod labels until it appears",
                args.pod_resources_socket,
            )
        owners = owners_reader(args.pod_resources_socket)
    agent = Agent(
        nvml,
        config,
        owners=owners,
        on_held=on_held,
        on_change=publisher.offer if publisher is not None else None,
    )

    cache: list[tuple[Snapshot, bytes]] = []

    def scrape(request: Request) -> Response:
        # a snapshot changes once a round: render it once, unless readings went stale
        snap = agent.snapshot().fresh(time.monotonic())
        if not cache or cache[0][0] is not snap:
            cache[:] = [(snap, render(snap, hostname_label=args.hostname_label))]
        return 200, CONTENT_TYPE, cache[0][1]

    def health_route(request: Request) -> Response:
        if request.path == "/readyz":
            return text(200, "ok") if agent.ready() else text(503, "NVML not answering yet")
        stalled = time.monotonic() - agent.last_tick > 3 * (args.interval + args.deadline)
        return text(503, "sampling loop stalled") if stalled else text(200, "ok")

    server = _serve(
        args.listen,
        {"/metrics": scrape, "/healthz": health_route, "/readyz": health_route},
        name="agent",
        max_connections=64,
        threads=2,
    )
    if server is None:
        return EXIT_USAGE

    stop = threading.Event()
    received = _note_signals()

    agent.start(stop, on_tick=publisher.offer if publisher is not None else None)
    log.info(
        "agent started node=%s listen=%s:%d interval=%gs deadline=%gs backend=%s",
        args.node,
        server.host,
        server.port,
        args.interval,
        args.deadline,
        "replay" if on_held is not None else "nvml",
    )
    _wait_for_signal(received)
    stop.set()
    server.stop()
    if publisher is not None:
        publisher.stop()
    return EXIT_OK


def _serve(
    listen: str, routes: Mapping[str, Route], *, name: str, max_connections: int, threads: int
) -> HttpServer | None:
    """The agent's HTTP server, started (a scrape and the probes: tiny bodies); None,
    said in the log, when it cannot listen."""
    try:
        return HttpServer(
            listen,
            routes,
            limits=Limits(max_body_bytes=1024, max_connections=max_connections, threads=threads),
            name=name,
        ).start()
    except ServerError as e:
        log.error("cannot serve: %s", e)
        return None


def _note_signals() -> list[int]:
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)  # only note it (see controller.run)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return received


def _wait_for_signal(received: list[int]) -> None:
    while not received:
        time.sleep(0.2)
    log.info("stopping on signal %d", received[0])


def _main_fleet(args: argparse.Namespace) -> int:
    import json

    from controller.agent.fleet import Fleet, fleet_nodes
    from controller.agent.replay import load_recording

    try:
        manifests = json.loads(Path(args.fake_nodes).read_text())
        if not isinstance(manifests, list):
            raise ValueError(f"{args.fake_nodes}: expected a JSON list of Node manifests")
        nodes = fleet_nodes(manifests, default_memory_mib=args.gpu_memory_mib)
        recording = load_recording(args.replay) if args.replay else None
        scenario = _scenario(args)
    except (OSError, ValueError) as e:
        print(f"gangops agent: {e}", file=sys.stderr)
        return EXIT_USAGE
    pr_dir = args.pod_resources_dir

    def owners_for(node: str) -> OwnersReader | None:
        return owners_reader(str(Path(pr_dir) / f"{node}.sock")) if pr_dir else None

    publishers: dict[str, Any] = {}
    try:
        kube = _kube_for_publishing(args)
    except ValueError as e:
        print(f"gangops agent: {e}", file=sys.stderr)
        return EXIT_USAGE

    def publish(node: str) -> Callable[[Snapshot], None] | None:
        if kube is None:
            return None
        from controller.agent.node import NodePublisher

        publishers[node] = NodePublisher(kube, node).start()
        return publishers[node].offer  # type: ignore[no-any-return]

    fleet = Fleet(
        nodes,
        publish=publish,
        config=AgentConfig(
            node="",
            interval_s=args.interval,
            deadline_s=args.deadline,
            clean_period_s=args.clean_period,
            xid_overrides=dict(args.xid_class),
        ),
        recording=recording,
        scenario=scenario,
        speed=args.speed,
        owners_for=owners_for,
        hostname_label=args.hostname_label,
    )

    def health_route(request: Request) -> Response:
        if request.path == "/readyz":
            return text(200, "ok") if fleet.ready() else text(503, "not every node answers yet")
        stalled = (
            time.monotonic() - fleet.last_tick
            > 3 * (args.interval + args.deadline) + fleet.last_round_s
        )
        return text(503, "sampling loop stalled") if stalled else text(200, "ok")

    server = _serve(
        args.listen,
        {"/nodes/": fleet.route, "/healthz": health_route, "/readyz": health_route},
        name="agent-fleet",
        max_connections=256,
        threads=4,
    )
    if server is None:
        return EXIT_USAGE
    if args.targets_file:
        fleet.write_targets(Path(args.targets_file), server.host, server.port)
    stop = threading.Event()
    received = _note_signals()
    thread = threading.Thread(target=fleet.run, args=(stop,), name="fleet", daemon=True)
    thread.start()
    log.info(
        "agent fleet started nodes=%d gpus=%d listen=%s:%d interval=%gs",
        len(nodes),
        sum(n.gpus for n in nodes),
        server.host,
        server.port,
        args.interval,
    )
    _wait_for_signal(received)
    stop.set()
    server.stop()
    for p in publishers.values():
        p.stop()
    return EXIT_OK
