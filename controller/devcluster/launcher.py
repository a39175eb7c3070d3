"""Start and stop a real Kubernetes control plane on loopback, for tests, the demo and benchmarks.

gangops must be tested against the real API server (admission, quota,
immutability, CEL, watch semantics, RBAC), and this machine has no container
engine, so the upstream binaries built from Go modules by
`clusters/local/build.sh` run here as plain processes: etcd, kube-apiserver,
kube-controller-manager, optionally kube-scheduler, and the fake kubelet that
registers the cluster description's GPU nodes, runs the pods bound to them, and
serves each node's kubelet pod-resources API on a unix socket
(`DevCluster.pod_resources_socket`).

Each cluster gets free loopback ports, a fresh data directory, its own CA and
keys, an admin kubeconfig and four ordinary users (`alice`, `bob`, `carol`,
`frank`: `USERS`). Components
run in their own process groups and are stopped in reverse order; a cluster
owned by this process also dies with it (an `atexit` hook, and on Linux a
parent-death signal set in each child), so an interrupted test run leaves no
orphans. A state file lets another shell find (`env`) and stop (`down`) a
cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NotRequired, TypedDict

from controller.clusterspec import ClusterSpec
from controller.devcluster.nodes import node_manifests
from controller.devcluster.pki import Pki, PkiError, Subject, create_pki
from controller.progress import Steps, progress, steps

__all__ = [
    "ADMISSION_PLUGINS",
    "BIN_DIR_ENV",
    "CLUSTERS_LOCAL",
    "CONTROLLERS",
    "DEFAULT_CLUSTER_FILE",
    "USERS",
    "Build",
    "DevCluster",
    "DevClusterError",
    "Options",
    "Timings",
    "ensure_binaries",
    "is_running",
    "read_state",
    "start",
    "stop_from_state",
]

log = logging.getLogger(__name__)

CLUSTERS_LOCAL = Path(__file__).resolve().parents[2] / "clusters" / "local"
"""The Go module that builds the binaries, and the default cluster description."""
DEFAULT_CLUSTER_FILE = CLUSTERS_LOCAL / "cluster.yaml"
BIN_DIR_ENV = "GANGOPS_K8S_BIN_DIR"
"""Use the binaries in this directory instead of building them (e.g. a CI cache)."""

USERS = ("alice", "bob", "carol", "frank")
"""Ordinary users: authenticated, in no group but system:authenticated, allowed nothing by RBAC.
They are members of the example policies' projects (alice and bob: nlp, carol: vision,
frank: research), so the demo submits jobs as each of them."""

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service: first address of SERVICE_CIDR

ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "RuntimeClass",
    "MutatingAdmissionWebhook",
    "MutatingAdmissionPolicy",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
)
"""kube-apiserver admission plugins, as on a kubeadm cluster (the API server's defaults,
listed so a reader knows what is enforced), plus MutatingAdmissionPolicy."""

BETA_APIS = {
    "feature_gates": "MutatingAdmissionPolicy=true",
    "runtime_config": "admissionregistration.k8s.io/v1beta1=true",
}
"""Beta APIs turned on: MutatingAdmissionPolicy (beta since Kubernetes 1.34, off by
default), so the TrainingJob user label can be filled in as on clusters that
enable it."""

DISABLED_ADMISSION_PLUGINS = ("TaintNodesByCondition",)
"""Default plugins turned off. TaintNodesByCondition taints every new Node not-ready until
the node lifecycle controller sees it Ready, which guards against kubelets that register
before they are ready. The fake kubelet registers its nodes Ready already, so the plugin
would only cost one more write per node (a third of the time to register 1,000 nodes);
nodes that later become NotReady are still tainted, by the node lifecycle controller."""

CONTROLLERS = (
    "resourcequota-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
)
"""kube-controller-manager controllers: those gangops relies on (quota status, namespace
deletion, owner-reference garbage collection, service accounts and their tokens), and
those that make nodes behave (Ready/NotReady taints, eviction, orphaned pods). Workload
controllers (Deployment, Job, ...) are left out: gangops creates its pods itself."""

_MAX_SOCKET_PATH = 107
"""The longest path, in bytes, a unix socket can be bound to on Linux (sun_path is 108
bytes, NUL included)."""

_POD_RESOURCES_DIR = "pod-resources"
"""Under the data directory: the fake kubelet's pod-resources sockets, `<node>.sock`."""

WATCH_CACHE_DISABLED = "podtemplates"
"""A built-in resource whose watches the API server serves straight from etcd instead of
its watch cache, so a test can show a real etcd compaction turning into 410 Gone."""

_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "fake-kubelet",
    "kubectl",
)
_STATE_VERSION = 1


class DevClusterError(RuntimeError):
    """The local control plane could not be built or started; the message says why."""


# --------------------------------------------------------------------------- build


@dataclass(frozen=True)
class Build:
    """Where the binaries are, and what getting them cost."""

    bin_dir: Path
    seconds: float
    built: int
    """Binaries compiled by this call (0 when all came from the cache)."""


def ensure_binaries(
    progress: Callable[[str], None] | None = None, *, progress_every_s: int = 15
) -> Build:
    """Build the control plane's binaries once (cached by version; see clusters/local/build.sh).

    `progress` receives each line the build prints; by default they are logged.
    """
    t0 = time.monotonic()
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        bin_dir = Path(override)
        missing = [c for c in _BINARIES if not (bin_dir / c).is_file()]
        if missing:
            raise DevClusterError(f"{BIN_DIR_ENV}={override} lacks {', '.join(missing)}")
        return Build(bin_dir=bin_dir, seconds=0.0, built=0)
    script = CLUSTERS_LOCAL / "build.sh"
    if not script.is_file():
        raise DevClusterError(
            f"{script} not found: the local control plane is built from a gangops source"
            f" checkout (or set {BIN_DIR_ENV} to a directory holding the binaries)"
        )
    emit = progress or (lambda line: log.info("build %s", line))
    lines: list[str] = []
    with subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "GANGOPS_BUILD_PROGRESS_S": str(progress_every_s)},
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if lines:  # one line behind: the last one is the result, not progress
                emit(lines[-1])
            lines.append(raw.rstrip("\n"))
    code = proc.returncode
    if code != 0 or not lines:
        if lines:
            emit(lines[-1])
        tail = "\n".join(lines[-15:])
        raise DevClusterError(f"{script} failed with exit code {code}:\n{tail}")
    built = sum(1 for line in lines if line.startswith("build.sh: built "))
    return Build(bin_dir=Path(lines[-1]), seconds=time.monotonic() - t0, built=built)


# ------------------------------------------------------------------- processes


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (Linux); None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def _proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, to tell a PID from its reuse."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _alive(pid: int, start_time: int | None) -> bool:
    """Whether the process `pid` started at `start_time` still runs (zombies do not)."""
    if start_time is not None and Path("/proc/self").exists():
        fields = _proc_stat(pid)
        return fields is not None and fields[0] != "Z" and int(fields[19]) == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parent_death_hook() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive SIGKILL when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def launch(
    name: str, argv: Sequence[str], *, log_file: Path, cwd: Path, tie_to_process: bool
) -> Component:
    """Start one process the way every component of a dev cluster is started: stdout and
    stderr appended to `log_file`, its own process group (a terminal's Ctrl-C reaches
    the launcher only), and, with `tie_to_process`, killed when the launcher dies."""
    with log_file.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_parent_death_hook() if tie_to_process else None,
        )
    return Component(name, popen.pid, _proc_start_time(popen.pid), log_file, popen)


class ComponentState(TypedDict):
    name: str
    pid: int
    start_time: int | None
    log: str


@dataclass
class Component:
    """One running process of the cluster; it leads its own process group."""

    name: str
    pid: int
    start_time: int | None
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _alive(self.pid, self.start_time)

    def signal(self, sig: signal.Signals) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> bool:
        """Wait until the process has exited; False on timeout."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, grace: float) -> None:
        """SIGTERM the process group, then SIGKILL it after `grace` seconds."""
        self.signal(signal.SIGTERM)
        if not self.wait(grace):
            log.warning("component did not stop in %.0fs; killing component=%s", grace, self.name)
            self.signal(signal.SIGKILL)
            self.wait(5.0)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def to_state(self) -> ComponentState:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_time": self.start_time,
            "log": str(self.log),
        }


def _free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (held together so the kernel cannot repeat one)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------- state file


class State(TypedDict):
    """What `down` and `env` need to find a cluster started by another process."""

    version: int
    owner: ComponentState | None
    """The foreground `up` process that owns the cluster, or None when detached."""
    data_dir: str
    remove_data_dir: bool
    server: str
    etcd: str
    kubeconfig: str
    users: dict[str, str]
    components: list[ComponentState]
    ready: bool
    prometheus_url: NotRequired[str]
    """The Prometheus started beside the cluster (`up --prometheus`), if any."""


def read_state(path: Path) -> State | None:
    """The cluster recorded in `path`, or None if there is none."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise DevClusterError(f"{path}: unreadable dev-cluster state: {e}") from None
    if not isinstance(raw, dict) or raw.get("version") != _STATE_VERSION:
        raise DevClusterError(f"{path}: not a dev-cluster state file of version {_STATE_VERSION}")
    state: State = raw  # type: ignore[assignment]
    return state


def is_running(state: State) -> bool:
    """Whether any process of the recorded cluster is still running."""
    return any(_alive(c["pid"], c["start_time"]) for c in state["components"])


def _write_state(path: Path, state: State) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def stop_from_state(path: Path, *, grace: float = 10.0) -> bool:
    """Stop the cluster recorded in `path` (from any process) and remove its state.

    Returns False if no cluster was recorded there.
    """
    state = read_state(path)
    if state is None:
        return False
    owner = state["owner"]
    if (
        owner is not None
        and _alive(owner["pid"], owner["start_time"])
        and owner["pid"] != os.getpid()
    ):
        # A foreground `up`: ask it to stop its cluster itself, in order.
        log.info("asking the foreground dev-cluster process to stop pid=%d", owner["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner["pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace * 3
        while path.exists() and _alive(owner["pid"], owner["start_time"]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
    components = [
        Component(name=c["name"], pid=c["pid"], start_time=c["start_time"], log=Path(c["log"]))
        for c in state["components"]
    ]
    for c in reversed(components):
        c.stop(grace)
    if state["remove_data_dir"]:
        shutil.rmtree(state["data_dir"], ignore_errors=True)
    path.unlink(missing_ok=True)
    return True


# ------------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Options:
    """How to start a cluster."""

    cluster: ClusterSpec
    """The fake GPU nodes to register (`clusters/local/cluster.yaml` by default)."""
    data_dir: Path
    """Fresh directory for etcd's data, certificates, kubeconfigs and logs."""
    bin_dir: Path
    """Where `ensure_binaries` put the binaries."""
    kube_scheduler: bool = False
    """Also run the default kube-scheduler (the peer in performance comparisons)."""
    tie_to_process: bool = True
    """Stop the cluster when this Python process exits or dies. False leaves it running
    (`up --detach`); then only `stop_from_state` stops it."""
    state_file: Path | None = None
    """Record the cluster here for `env` and `down` from other shells."""
    remove_data_dir: bool = False
    """Delete `data_dir` entirely on stop (otherwise logs are kept, etcd data removed)."""
    timeout_s: float = 120.0
    """Give up if the cluster is not ready after this many seconds."""
    progress: bool = False
    """Show on stderr what starting waits for, then the fake nodes Ready as they
    come (`controller.progress`; `dev-cluster up` does, tests and benchmarks do not)."""
    ready_later: bool = False
    """The caller starts more beside the control plane (Prometheus, node agents): the
    state file says ready only once it calls `DevCluster.mark_ready`, so `env` does not
    hand out a cluster still starting."""


@dataclass(frozen=True)
class Timings:
    """How long starting took, in seconds."""

    control_plane_s: float
    """From start to kube-apiserver's /readyz answering ok."""
    nodes_s: float
    """From the API server being ready to every fake node Ready and schedulable."""
    ready_s: float
    """From start to the whole cluster ready (the figure to compare with the 15 s target)."""


@dataclass
class DevCluster:
    """A running local control plane. Create it with `start`."""

    options: Options
    server: str
    """The API server's URL, https://127.0.0.1:<port>."""
    etcd_url: str
    """etcd's client URL (plain HTTP on loopback), for tests that act on storage directly."""
    kubeconfig: Path
    """Admin credentials (group system:masters)."""
    user_kubeconfigs: Mapping[str, Path]
    """Kubeconfigs of the ordinary users in `USERS`."""
    pki: Pki
    node_names: tuple[str, ...]
    component_kubeconfigs: Mapping[str, Path]
    """Kubeconfigs of the control-plane components and the fake kubelet, by component."""
    components: list[Component] = field(default_factory=list)
    timings: Timings | None = None
    """Set once the cluster is ready (always, when `start` returns it)."""
    prometheus_url: str | None = None
    """The Prometheus beside the cluster (`prometheus.start_for_cluster`), if any."""
    ready: bool = False
    """What the state file says: the control plane is up and, with `ready_later`,
    the caller has started what it runs beside it (`mark_ready`)."""
    _stopped: bool = field(default=False, init=False, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.options.data_dir

    @property
    def log_dir(self) -> Path:
        return self.options.data_dir / "logs"

    def pod_resources_socket(self, node: str) -> Path:
        """The unix socket on which the fake kubelet serves `node`'s kubelet pod-resources
        API (v1; `controller.agent.podresources.PodResourcesClient` reads it): what
        /var/lib/kubelet/pod-resources/kubelet.sock is on a real node. Raises ValueError
        if the cluster has no such node."""
        if node not in self.node_names:
            raise ValueError(f"the dev cluster has no node {node!r}")
        return _pod_resources_socket(self.options.data_dir, node)

    @property
    def pod_resources_dir(self) -> Path:
        """The directory of every node's pod-resources socket (`<node>.sock`)."""
        return self.options.data_dir / _POD_RESOURCES_DIR

    @property
    def prometheus_targets_file(self) -> Path:
        """The file_sd file (`data_dir/prometheus/targets.json`) listing what the
        cluster's Prometheus scrapes (`controller.devcluster.prometheus`): a JSON list of
        `{"targets": ["127.0.0.1:PORT"], "labels": {"node": NAME}}` (plus
        `__metrics_path__` where one process serves many nodes, as `gangops agent
        --fake-nodes ... --targets-file` writes), written whole by whoever starts the
        node agents (`prometheus.write_targets`, `agent.fleet.Fleet.write_targets`)."""
        return self.options.data_dir / "prometheus" / "targets.json"

    def add_component(self, component: Component) -> None:
        """Own a process started beside the cluster (Prometheus, node agents): it is
        stopped with the cluster, before the control plane, recorded in the state file
        for `down`, and checked by `check_alive`."""
        self.components.append(component)
        self._save_state()

    def check_alive(self) -> None:
        """Raise DevClusterError, with the end of its log, if a component has exited."""
        for c in self.components:
            if not c.alive():
                tail = c.log_tail()
                error = _PortTaken if "address already in use" in tail else DevClusterError
                raise error(f"{c.name} exited unexpectedly; the end of {c.log}:\n{tail}")

    def stop(self, *, grace: float = 10.0, keep_logs: bool = False) -> None:
        """Stop every component (reverse start order) and clean up; safe to call twice.

        `keep_logs` keeps the data directory (less etcd's data) even if the options say
        to remove it: a cluster that failed to start is stopped so, for its logs."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        t0 = time.monotonic()
        for c in reversed(self.components):
            c.stop(grace)
        if self.options.remove_data_dir and not keep_logs:
            shutil.rmtree(self.options.data_dir, ignore_errors=True)
        else:
            shutil.rmtree(self.options.data_dir / "etcd", ignore_errors=True)
        if self.options.state_file is not None:
            with contextlib.suppress(DevClusterError):
                state = read_state(self.options.state_file)
                if state is not None and state["data_dir"] == str(self.options.data_dir):
                    self.options.state_file.unlink(missing_ok=True)
        log.info("dev-cluster stopped elapsed_s=%.1f", time.monotonic() - t0)

    def start_kube_scheduler(
        self, *, qps: float = 50.0, burst: int = 100, port: int | None = None
    ) -> Component:
        """Start a default kube-scheduler beside the cluster, its client limited to `qps`
        requests per second with bursts of `burst` (its defaults, 50 and 100, unless
        told otherwise; upstream's scheduler_perf raises both to 5,000). The limits go
        in its configuration file (`clientConnection`), the command-line flags for them
        being deprecated. Stop it with `stop_component`, or with the cluster. Returns
        once its /healthz answers, which may be before it has synced its informers."""
        if port is None:
            port = _free_ports(1)[0]
        name = f"kube-scheduler-qps{qps:g}-burst{burst}"
        config = self.options.data_dir / "scheduler" / f"{name}.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.component_kubeconfigs["kube-scheduler"]
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
                    "leaderElection": {"leaderElect": False},
                }
            ),
            encoding="utf-8",
        )
        c = launch(
            name,
            [
                str(self.options.bin_dir / "kube-scheduler"),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.options.data_dir / 'scheduler'}",
                "--profiling=false",
            ],
            log_file=self.log_dir / f"{name}.log",
            cwd=self.options.data_dir,
            tie_to_process=self.options.tie_to_process,
        )
        self.components.append(c)
        self._save_state()
        log.info("started component=%s pid=%d log=%s", name, c.pid, c.log)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # a health probe of our own process on loopback
        deadline = time.monotonic() + self.options.timeout_s
        while self._get(f"https://127.0.0.1:{port}/healthz", insecure)[0] != 200:
            if not c.alive():
                raise DevClusterError(f"{name} exited; the end of {c.log}:\n{c.log_tail()}")
            if time.monotonic() > deadline:
                raise DevClusterError(f"timed out waiting for {name} /healthz; see {c.log}")
            time.sleep(0.2)
        return c

    def stop_component(self, component: Component, *, grace: float = 10.0) -> None:
        """Stop one component before the cluster (a kube-scheduler between two runs of
        a benchmark) and forget it, so `check_alive` does not report it."""
        component.stop(grace)
        self.components.remove(component)
        self._save_state()

    # -- internals

    def _state(self, *, ready: bool) -> State:
        owner: ComponentState | None = None
        if self.options.tie_to_process:
            pid = os.getpid()
            owner = {"name": "owner", "pid": pid, "start_time": _proc_start_time(pid), "log": ""}
        state: State = {
            "version": _STATE_VERSION,
            "owner": owner,
            "data_dir": str(self.options.data_dir),
            "remove_data_dir": self.options.remove_data_dir,
            "server": self.server,
            "etcd": self.etcd_url,
            "kubeconfig": str(self.kubeconfig),
            "users": {u: str(p) for u, p in self.user_kubeconfigs.items()},
            "components": [c.to_state() for c in self.components],
            "ready": ready,
        }
        if self.prometheus_url is not None:
            state["prometheus_url"] = self.prometheus_url
        return state

    def _save_state(self) -> None:
        if self.options.state_file is not None:
            _write_state(self.options.state_file, self._state(ready=self.ready))

    def mark_ready(self) -> None:
        """Say in the state file that the cluster is ready (`Options.ready_later`)."""
        self.ready = True
        self._save_state()

    def _spawn(self, name: str, args: Sequence[str]) -> Component:
        c = launch(
            name,
            [str(self.options.bin_dir / name), *args],
            log_file=self.log_dir / f"{name}.log",
            cwd=self.options.data_dir,
            tie_to_process=self.options.tie_to_process,
        )
        self.components.append(c)
        self._save_state()
        log.info("started component=%s pid=%d log=%s", name, c.pid, c.log)
        return c

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        admin = self.pki.clients["admin"]
        ctx.load_cert_chain(str(admin.cert), str(admin.key))
        return ctx

    def _get(self, url: str, ctx: ssl.SSLContext | None) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read()
        except (urllib.error.URLError, OSError):
            return 0, b""

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float, period: float) -> None:
        while True:
            self.check_alive()
            if ready():
                return
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"timed out waiting for {what} after {self.options.timeout_s:.0f}s;"
                    f" component logs are in {self.log_dir}"
                )
            time.sleep(period)

    def _nodes_ready(self, ctx: ssl.SSLContext) -> int | None:
        """How many of the fake nodes are Ready and schedulable; None if the list failed."""
        code, body = self._get(f"{self.server}/api/v1/nodes", ctx)
        if code != 200:
            return None
        want = set(self.node_names)
        ready = 0
        for item in json.loads(body)["items"]:
            if item["metadata"]["name"] not in want:
                continue
            conds = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
            taints = {t["key"] for t in item["spec"].get("taints", [])}
            if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                ready += 1
        return ready


def _kubeconfig(path: Path, *, server: str, ca: Path, user: str, cert: Path, key: Path) -> Path:
    """Write a kubeconfig (JSON-quoted scalars are valid YAML) for one user."""
    q = json.dumps
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: gangops-dev\n  cluster:\n    server: {q(server)}\n"
        f"    certificate-authority: {q(str(ca))}\n"
        "users:\n"
        f"- name: {q(user)}\n  user:\n    client-certificate: {q(str(cert))}\n"
        f"    client-key: {q(str(key))}\n"
        "contexts:\n"
        f"- name: gangops-dev\n  context:\n    cluster: gangops-dev\n    user: {q(user)}\n"
        "current-context: gangops-dev\n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


class _Ports(NamedTuple):
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


class _PortTaken(DevClusterError):
    """A port found free was taken by another process before a component bound it."""


def start(options: Options) -> DevCluster:
    """Start a cluster and return once it is ready; raise DevClusterError (after
    stopping whatever was started) if it cannot start."""
    try:
        return _start(options)
    except _PortTaken as e:
        log.warning("a port was taken meanwhile; starting again on other ports error=%r", str(e))
    return _start(options)


def _pod_resources_socket(data_dir: Path, node: str) -> Path:
    return data_dir / _POD_RESOURCES_DIR / f"{node}.sock"


def _check_socket_paths(options: Options) -> None:
    """Fail before starting anything if a node's pod-resources socket path is too long."""
    for node in options.cluster.nodes():
        path = _pod_resources_socket(options.data_dir, node.name)
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise DevClusterError(
                f"the pod-resources socket {path} would be {len(os.fsencode(path))} bytes"
                f" long, more than the {_MAX_SOCKET_PATH} a unix socket path allows;"
                " choose a shorter data directory"
            )


def _start(options: Options) -> DevCluster:
    _check_socket_paths(options)
    t0 = time.monotonic()
    deadline = t0 + options.timeout_s
    data = options.data_dir
    for sub in ("etcd", "logs", "apiserver", "controller-manager", "scheduler"):
        (data / sub).mkdir(parents=True, exist_ok=True)
    ports = _Ports(*_free_ports(len(_Ports._fields)))
    server = f"https://127.0.0.1:{ports.apiserver}"
    try:
        pki = create_pki(
            data / "pki",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", SERVICE_IP],
            clients={
                "admin": Subject("admin", ("system:masters",)),
                "kube-controller-manager": Subject("system:kube-controller-manager"),
                "kube-scheduler": Subject("system:kube-scheduler"),
                # One identity serves every fake node, so it cannot be a node identity
                # (system:node:<name>), which the Node authorizer limits to its own node.
                "fake-kubelet": Subject("gangops:fake-kubelet", ("system:masters",)),
                **{u: Subject(u) for u in USERS},
            },
        )
    except PkiError as e:
        raise DevClusterError(str(e)) from None
    kubeconfigs = {
        name: _kubeconfig(
            data / f"{name}.kubeconfig",
            server=server,
            ca=pki.ca.cert,
            user=name,
            cert=cred.cert,
            key=cred.key,
        )
        for name, cred in pki.clients.items()
    }
    manifests = node_manifests(options.cluster)
    (data / "nodes.json").write_text(json.dumps(manifests), encoding="utf-8")
    cluster = DevCluster(
        options=options,
        server=server,
        etcd_url=f"http://127.0.0.1:{ports.etcd}",
        kubeconfig=kubeconfigs["admin"],
        user_kubeconfigs={u: kubeconfigs[u] for u in USERS},
        pki=pki,
        node_names=tuple(m["metadata"]["name"] for m in manifests),
        component_kubeconfigs={n: p for n, p in kubeconfigs.items() if n not in USERS},
    )
    if options.tie_to_process:
        atexit.register(cluster.stop)
    try:
        with steps("dev-cluster up", enabled=options.progress) as phase:
            _start_components(cluster, ports, t0, deadline, phase)
    except BaseException:
        cluster.stop(grace=3.0, keep_logs=True)
        raise
    cluster.ready = not options.ready_later
    cluster._save_state()
    return cluster


def _start_components(
    cluster: DevCluster,
    ports: _Ports,
    t0: float,
    deadline: float,
    phase: Steps,
) -> None:
    def wait(what: str, ready: Callable[[], bool], period: float) -> None:
        phase.step(f"waiting for {what}")
        cluster._wait(what, ready, deadline, period)

    data = cluster.data_dir
    pki = cluster.pki
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    cluster._spawn(
        "etcd",
        [
            "--name=gangops-dev",
            f"--data-dir={data / 'etcd'}",
            f"--listen-client-urls={cluster.etcd_url}",
            f"--advertise-client-urls={cluster.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=gangops-dev={peer}",
            "--unsafe-no-fsync",  # a throwaway cluster: durability is not worth the latency
            "--log-level=warn",
        ],
    )
    cluster._spawn(
        "kube-apiserver",
        [
            f"--etcd-servers={cluster.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--cert-dir={data / 'apiserver'}",
            f"--tls-cert-file={pki.serving.cert}",
            f"--tls-private-key-file={pki.serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
            f"--feature-gates={BETA_APIS['feature_gates']}",
            f"--runtime-config={BETA_APIS['runtime_config']}",
            f"--watch-cache-sizes={WATCH_CACHE_DISABLED}#0",
            "--allow-privileged=true",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            "--profiling=false",
        ],
    )
    ctx = cluster._ssl()
    wait(
        "kube-apiserver /readyz",
        lambda: cluster._get(f"{cluster.server}/readyz", ctx)[0] == 200,
        0.1,
    )
    control_plane_s = time.monotonic() - t0
    api_ready = time.monotonic()
    log.info("kube-apiserver ready server=%s elapsed_s=%.1f", cluster.server, control_plane_s)

    kubeconfigs = cluster.component_kubeconfigs
    cluster._spawn(
        "kube-controller-manager",
        [
            f"--kubeconfig={kubeconfigs['kube-controller-manager']}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.controller_manager}",
            f"--cert-dir={data / 'controller-manager'}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--cluster-name=gangops-dev",
            "--profiling=false",
        ],
    )
    if cluster.options.kube_scheduler:
        cluster.start_kube_scheduler(port=ports.scheduler)
    ready_file = data / "fake-kubelet.ready"
    cluster._spawn(
        "fake-kubelet",
        [
            f"--kubeconfig={kubeconfigs['fake-kubelet']}",
            f"--nodes={data / 'nodes.json'}",
            f"--ready-file={ready_file}",
            f"--pod-resources-dir={data / _POD_RESOURCES_DIR}",
        ],
    )
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # a health probe of our own process on loopback
    wait(
        "kube-controller-manager /healthz",
        lambda: (
            cluster._get(f"https://127.0.0.1:{ports.controller_manager}/healthz", insecure)[0]
            == 200
        ),
        0.2,
    )
    wait(
        "ServiceAccount default/default (the serviceaccount controller is running)",
        lambda: (
            cluster._get(
                f"{cluster.server}/api/v1/namespaces/default/serviceaccounts/default", ctx
            )[0]
            == 200
        ),
        0.2,
    )
    nodes = len(cluster.node_names)
    poll = max(0.25, nodes / 1000)  # a node list is ~3 KiB per node: poll a big cluster less often
    show = cluster.options.progress
    with progress(nodes, "fake nodes Ready", unit="nodes", enabled=show) as bar:

        def all_ready() -> bool:
            ready = cluster._nodes_ready(ctx)
            if ready is not None:
                bar.set(ready)
            return ready == nodes

        def registered() -> bool:
            if show:
                all_ready()  # registering is most of the wait on a big cluster: count it too
            return ready_file.exists()

        wait("the fake kubelet to register its nodes", registered, poll if show else 0.1)
        what = f"{nodes} fake nodes to be Ready and schedulable"
        cluster._wait(what, all_ready, deadline, poll)  # the bar shows this wait
    now = time.monotonic()
    cluster.timings = Timings(
        control_plane_s=control_plane_s, nodes_s=now - api_ready, ready_s=now - t0
    )
    log.info(
        "dev-cluster ready nodes=%d ready_s=%.1f control_plane_s=%.1f nodes_s=%.1f",
        len(cluster.node_names),
        cluster.timings.ready_s,
        control_plane_s,
        cluster.timings.nodes_s,
    )
