"""`gangops run`: the controller process.

One process holds every long-running part:

- the policy reconciler: every PolicySource (a Git repository, or the policy
  kinds as custom resources) compiled and applied as PriorityClasses,
  Namespaces, ResourceQuotas, LimitRanges and the scheduling-policy ConfigMap;
- the TrainingJob controller and gang scheduler (unless `--no-scheduler`):
  it places each TrainingJob's workers all or nothing, and restarts, resizes,
  preempts and rolls back gangs;
- the webhook server (Git pushes: `POST /hook/<policysource>`; Alertmanager:
  `POST /alertmanager`, whose alerts the leader turns into the ClusterPolicy's
  alert actions, docs/alerts.md);
- the metrics and health server (`/metrics`, `/healthz`, `/readyz`).

Before any of it starts, `run` checks that the API server answers and that
the system namespace and the CRDs are there (`gangops install-crds` puts them
there), and exits with status 2 and what to do if not, instead of waiting
silently. Replicas elect a leader through a `coordination.k8s.io` Lease; only
the leader reconciles and schedules, and its client is fenced by the elector,
so a replica whose Lease lapsed cannot write even from a thread still in
flight. A leader that loses the Lease exits (status 1), as
controller-runtime's managers do: the restart rejoins the election as a
candidate with clean state. Every replica serves Git webhooks (they only
annotate the PolicySource) and metrics; Alertmanager's deliveries are taken by
the leader only (a candidate answers 503, which Alertmanager retries).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import FrameType

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller.alerts.actor import ActorSettings, AlertActor
from controller.alerts.alertmanager import AlertmanagerApi
from controller.alerts.metrics import AlertMetrics
from controller.alerts.receiver import PATH as ALERTMANAGER_PATH
from controller.alerts.receiver import CredentialFiles, Inbox, Receiver
from controller.cliargs import (
    http_url,
    non_negative_count,
    non_negative_seconds,
    positive_seconds,
)
from controller.gang.controller import GangController, GangSettings
from controller.gang.lifecycle import MESSAGE_REFRESH_S
from controller.gang.metrics import GangMetrics
from controller.gang.telemetry import PrometheusTelemetry, TelemetryMetrics
from controller.gang.view import node_of, node_ready
from controller.gang.workload import WINDOW_PODS
from controller.httpserver import (
    HttpServer,
    Limits,
    Request,
    Response,
    ServerError,
    address_arg,
    text,
)
from controller.kube.client import RESOURCES, ApiError, Kube, KubeApi, connect
from controller.kube.clock import SystemClock
from controller.kube.leader import ElectionSettings, LeaseElector
from controller.quota.controller import QuotaController, QuotaSettings
from controller.quota.usage import PrometheusUsage
from controller.reconciler.controller import Reconciler, ReconcilerSettings
from controller.reconciler.metrics import ReconcilerMetrics
from controller.reconciler.webhook import PATH_PREFIX, Deliveries, handle_push
from controller.scheduler.cycle import GROW_INTERVAL_S
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE, POLICY_CONFIGMAP, POLICY_KEY
from controller.secretfile import SecretFile
from controller.sim.whatif import quota_what_if, recent_workload

__all__ = ["accepts_alerts", "add_subcommand"]


log = logging.getLogger("gangops.run")

_WEBHOOK_LIMITS = Limits(max_body_bytes=1024 * 1024)
"""Push payloads are a few KiB (GitHub lists at most 20 commits), an Alertmanager
delivery about 1 KiB per alert (its webhook_config `max_alerts` keeps one below the
limit); a larger body is refused with 413 before it is read."""
_METRICS_LIMITS = Limits(max_body_bytes=4096)
"""Scrapes and probes are GETs; no body is needed."""

_DESCRIPTION = """\
Run the controller: reconcile every PolicySource into the cluster (PriorityClasses,
Namespaces, ResourceQuotas, the scheduling policy), run the TrainingJob controller
and gang scheduler (--no-scheduler turns it off), serve Git push webhooks, metrics
and health. Credentials: --kubeconfig, else $KUBECONFIG, else the in-cluster
service account, else ~/.kube/config.

Needs what `gangops install-crds` installs: the CRDs and the system namespace
(--system-namespace). Without them, or without an API server, `run` exits at
once with status 2 and says what is missing.

endpoints:
  METRICS_ADDR  /metrics (Prometheus), /healthz, /readyz
  WEBHOOK_ADDR  POST /hook/<policysource>  (GitHub X-Hub-Signature-256 or GitLab
                X-Gitlab-Token, checked against the secret in --webhook-secret-file)
                POST /alertmanager  (Alertmanager's webhook, version 4; a bearer token
                from --alertmanager-token-file or basic auth from
                --alertmanager-basic-auth-file; without either, refused)

With leader election (the default) replicas share a Lease; only the holder
writes, and a holder that loses it exits with status 1 to be restarted.
"""


def accepts_alerts(actor: AlertActor | None, elector: LeaseElector | None) -> bool:
    """Whether this replica takes Alertmanager's deliveries: it runs the actor and
    still leads (its fence up). Otherwise its 503 has Alertmanager retry, and the
    alerts reach the leader; accepted, they would wait for a term that is over."""
    return actor is not None and (elector is None or elector.is_leader())


def _preflight(kube: Kube, *, system_namespace: str, scheduler: bool) -> str | None:
    """Why the controller cannot work on this cluster, or None: the API server does not
    answer, or the system namespace or a CRD `run` watches is missing. A check this
    identity may not make (403) is passed over: RBAC is the installer's business."""
    crds = ["policysources.policy.ai.operator"]
    if scheduler:
        crds.append("trainingjobs.ai.operator")
    checks = [("Namespace", system_namespace), *(("CustomResourceDefinition", c) for c in crds)]
    for kind, name in checks:
        try:
            found = kube.get(RESOURCES[kind], name)
        except ApiError as e:
            if e.status == 403:
                log.warning("preflight skipped kind=%s name=%s reason=forbidden", kind, name)
                continue
            return f"the API server at {kube.server} did not answer: {e}"
        if found is not None:
            continue
        if kind == "Namespace":
            return (
                f'the system namespace "{name}" does not exist: `gangops install-crds` creates'
                f" it (or `kubectl create namespace {name}`), or pass --system-namespace"
            )
        return f"the CRD {name} is not installed: run `gangops install-crds` first"
    return None


def _run(args: argparse.Namespace) -> int:
    clock = SystemClock()
    if args.leader_elect and not (
        args.retry_period < args.renew_deadline <= args.lease_duration - 1
    ):
        print(
            "gangops run: need --retry-period < --renew-deadline, and --renew-deadline at"
            " least 1 s under --lease-duration (the gap, up to 30 s, is each Lease"
            " request's timeout);"
            f" got {args.retry_period:g} s, {args.renew_deadline:g} s,"
            f" {args.lease_duration:g} s",
            file=sys.stderr,
        )
        return 2
    try:
        kube = connect(args.kubeconfig)
    except ApiError as e:
        print(f"gangops run: {e}", file=sys.stderr)
        return 2
    problem = _preflight(kube, system_namespace=args.system_namespace, scheduler=args.scheduler)
    if problem:
        log.error("cannot start: %s", problem)
        print(f"gangops run: {problem}", file=sys.stderr)
        return 2
    metrics = ReconcilerMetrics()
    try:
        secret = (
            SecretFile(args.webhook_secret_file, bytes.strip) if args.webhook_secret_file else None
        )
    except OSError as e:
        print(f"gangops run: --webhook-secret-file: {e}", file=sys.stderr)
        return 2
    try:
        credentials = CredentialFiles(
            token_file=args.alertmanager_token_file,
            basic_auth_file=args.alertmanager_basic_auth_file,
        )
    except (OSError, ValueError) as e:
        print(f"gangops run: Alertmanager credentials: {e}", file=sys.stderr)
        return 2
    identity = args.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    settings = ReconcilerSettings(
        cache_dir=Path(args.cache_dir),
        system_namespace=args.system_namespace,
        source_selector=args.source_selector,
    )
    gang_settings = GangSettings(
        system_namespace=args.system_namespace,
        job_selector=args.job_selector,
        node_selector=args.node_selector,
        grow_interval_s=args.grow_interval,
        message_refresh_s=args.message_refresh,
        forecast_horizon_s=args.forecast_horizon,
        fragmentation_window=args.fragmentation_window,
    )
    gang_metrics = GangMetrics(metrics.registry)
    telemetry = None
    if args.scheduler and args.prometheus_url:
        telemetry = PrometheusTelemetry(
            args.prometheus_url,
            interval_s=args.telemetry_interval,
            metrics=TelemetryMetrics(metrics.registry),
        ).start()
        log.info(
            "telemetry from Prometheus url=%s interval_s=%g",
            args.prometheus_url,
            args.telemetry_interval,
        )
    if args.alertmanager_url:
        log.info("alerts lapse only once Alertmanager no longer holds them url=%s",
                 args.alertmanager_url)  # fmt: skip
    stop = threading.Event()
    exit_code = 0
    reconciler: Reconciler | None = None
    scheduler: GangController | None = None
    alert_actor: AlertActor | None = None
    alert_metrics = AlertMetrics(metrics.registry)
    inbox = Inbox()
    quota: QuotaController | None = None
    elector: LeaseElector | None = None

    def start_leading() -> None:
        nonlocal reconciler
        log.info("leading identity=%s", identity)
        metrics.leader.set(1)
        fenced = kube.fenced(elector.is_leader) if elector is not None else kube
        reconciler = Reconciler(fenced, settings=settings, clock=clock, metrics=metrics)
        reconciler.start()
        nonlocal alert_actor
        alert_actor = AlertActor(
            fenced,
            inbox=inbox,
            clock=clock,
            metrics=alert_metrics,
            settings=ActorSettings(args.system_namespace, tick_s=args.alert_tick),
            alertmanager=AlertmanagerApi(args.alertmanager_url) if args.alertmanager_url else None,
        )
        alert_actor.start()
        if args.scheduler:
            nonlocal scheduler
            scheduler = GangController(
                fenced,
                settings=gang_settings,
                clock=clock,
                metrics=gang_metrics,
                telemetry=telemetry.current if telemetry is not None else None,
            )
            scheduler.start()
        if args.quota_requests:
            nonlocal quota
            quota = QuotaController(
                fenced,
                QuotaSettings(
                    cache_dir=Path(args.cache_dir), system_namespace=args.system_namespace
                ),
                clock=clock,
                fence=elector.is_leader if elector is not None else None,
            )
            quota.what_if = cluster_what_if(fenced, system_namespace=args.system_namespace)
            if args.prometheus_url:
                usage = PrometheusUsage(args.prometheus_url)
                quota.usage, quota.usage_fraction = usage.markdown, usage.fraction
            quota.start()

    def stop_leading() -> None:
        nonlocal exit_code
        metrics.leader.set(0)
        if not stop.is_set():
            log.error(
                "lost the leader lease; exiting to rejoin as a candidate identity=%s", identity
            )
            exit_code = 1
            stop.set()

    def ready() -> bool:
        if elector is not None and not elector.is_leader():
            return True  # a candidate is ready to serve webhooks and to take over
        return (
            reconciler is not None
            and reconciler.ready()
            and (scheduler is None or scheduler.ready())
            and (alert_actor is None or alert_actor.ready())
        )

    def health(request: Request) -> Response:
        if request.path == "/readyz":
            return text(200, "ok") if ready() else text(503, "informers not synced")
        return text(200, "ok")

    def scrape(request: Request) -> Response:
        return 200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry)

    deliveries = Deliveries()

    def hook(request: Request) -> Response:
        if request.method != "POST":
            return text(405, "POST a push event")
        r = handle_push(
            kube,
            path=request.path,
            headers=request.headers,
            body=request.body,
            secret=secret.get() if secret is not None else b"",
            clock=clock,
            deliveries=deliveries,
        )
        metrics.webhooks.labels(r.result).inc()
        return text(r.status, r.message)

    alertmanager = Receiver(
        credentials,
        inbox,
        alert_metrics,
        accepting=lambda: accepts_alerts(alert_actor, elector),
        monotonic=clock.monotonic,
    )

    metrics_routes = {"/metrics": scrape, "/healthz": health, "/readyz": health}
    try:
        servers = [
            HttpServer(args.metrics_addr, metrics_routes, limits=_METRICS_LIMITS, name="metrics")
        ]
        if args.webhook_addr:
            servers.append(
                HttpServer(
                    args.webhook_addr,
                    {PATH_PREFIX: hook, ALERTMANAGER_PATH: alertmanager},
                    limits=_WEBHOOK_LIMITS,
                    name="webhook",
                )
            )
    except ServerError as e:
        log.error("cannot serve: %s", e)
        return 2
    for server in servers:
        server.start()

    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only note the signal: the handler runs on the main thread between two of its
        # bytecodes, and taking a lock there (Event.set, a log write) can deadlock with
        # the same lock held by the code it interrupted (`stop.wait()` itself).
        received.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if args.leader_elect:
        election = ElectionSettings(
            name=args.lease_name,
            namespace=args.lease_namespace or args.system_namespace,
            lease_duration_s=args.lease_duration,
            renew_deadline_s=args.renew_deadline,
            retry_period_s=args.retry_period,
        )
        elector = LeaseElector(
            kube.with_timeout(election.request_timeout_s),
            identity=identity,
            settings=election,
            clock=clock,
        )
        campaign = threading.Thread(
            target=elector.run,
            args=(stop,),
            kwargs={"on_started": start_leading, "on_stopped": stop_leading},
            name="leader-election",
            daemon=True,
        )
        campaign.start()
    else:
        start_leading()
    while not (received or stop.is_set()):
        time.sleep(0.2)  # no lock held here, so a signal handler can always run
    stop.set()
    if received:
        names = ",".join(signal.Signals(n).name for n in received)
        log.info("signal received signal=%s; shutting down", names)

    def shut_down() -> None:
        if elector is not None:
            campaign.join(10)
        if scheduler is not None:
            scheduler.stop()
        if alert_actor is not None:
            alert_actor.stop()
        if quota is not None:
            quota.stop()
        if reconciler is not None:
            reconciler.stop()
        for server in servers:
            server.stop()
        # Python joins every non-daemon thread at exit (a reconcile's pool worker still
        # in a Git fetch or an API call): wait for them here, within the deadline.
        for t in threading.enumerate():
            if t is not threading.current_thread() and t is not main and not t.daemon:
                t.join()

    # A graceful stop has a deadline, as a pod's termination grace period does: a
    # writer or a fetch stuck in a retry must not keep the process alive after SIGTERM.
    main = threading.current_thread()
    closer = threading.Thread(target=shut_down, name="shutdown", daemon=True)
    closer.start()
    closer.join(_SHUTDOWN_DEADLINE_S)
    if closer.is_alive():
        busy = [t.name for t in threading.enumerate() if not t.daemon and t is not main]
        log.error(
            "shutdown did not finish within %gs; exiting anyway exit_code=%d threads=%s",
            _SHUTDOWN_DEADLINE_S,
            exit_code or 1,
            ",".join(busy) or "-",
        )
        logging.shutdown()
        os._exit(exit_code or 1)  # the busy threads would be joined at exit, forever
    log.info("stopped exit_code=%d", exit_code)
    return exit_code


_SHUTDOWN_DEADLINE_S = 20.0
"""How long a graceful stop may take (within Kubernetes' default 30 s grace period)."""


def cluster_what_if(
    kube: KubeApi, *, system_namespace: str
) -> Callable[[str, str, Fraction], str | None]:
    """The quota pull request's simulator what-if on the cluster's recent workload:
    its TrainingJobs, Ready nodes and compiled policy, replayed by `sim.whatif`."""

    def what_if(project: str, resource: str, delta: Fraction) -> str | None:
        if resource != "gpu":
            return None
        try:
            cm = kube.get(RESOURCES["ConfigMap"], POLICY_CONFIGMAP, system_namespace)
            if cm is None:
                return None
            doc = json.loads(cm["data"][POLICY_KEY])
            jobs, _ = kube.list(RESOURCES["TrainingJob"])
            nodes, _ = kube.list(RESOURCES["Node"])
            trace = recent_workload(jobs, doc, now=time.time())
            ready = [node_of(n) for n in nodes if node_ready(n)]
            return quota_what_if(trace, ready, doc, project=project, delta_gpus=int(delta))
        except (ApiError, KeyError, ValueError) as e:
            log.warning("what-if not computed project=%s error=%r", project, str(e))
            return None

    return what_if


def _default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "gangops" / "reconciler")


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gangops run`."""
    p = subparsers.add_parser(
        "run",
        help="run the controller (reconciler, webhooks, metrics, leader election)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ...)")
    p.add_argument(
        "--system-namespace",
        default=os.environ.get("POD_NAMESPACE", DEFAULT_SYSTEM_NAMESPACE),
        help="the controller's namespace: policy ConfigMap, Git secrets, the Lease "
        f"(default: $POD_NAMESPACE, else {DEFAULT_SYSTEM_NAMESPACE})",
    )
    p.add_argument(
        "--metrics-addr",
        default=":8080",
        type=address_arg,
        help="metrics and health, HOST:PORT or :PORT (default :8080)",
    )
    p.add_argument(
        "--webhook-addr",
        default=":9292",
        type=lambda v: address_arg(v) if v else v,
        help="Git push webhooks and Alertmanager, HOST:PORT or :PORT; '' disables (default :9292)",
    )
    p.add_argument(
        "--webhook-secret-file",
        help="file holding the shared webhook secret (GitHub HMAC key / GitLab token)",
    )
    p.add_argument(
        "--alertmanager-token-file",
        help="file holding the bearer token Alertmanager sends to POST /alertmanager"
        " (its http_config authorization credentials_file)",
    )
    p.add_argument(
        "--alertmanager-basic-auth-file",
        help="file holding user:password Alertmanager sends to POST /alertmanager"
        " (its http_config basic_auth)",
    )
    p.add_argument(
        "--alert-tick",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often alert actions look for due work: restarts after their grace"
        " period, undo after the cool-down (default %(default)g)",
    )
    p.add_argument(
        "--alertmanager-url",
        type=http_url,
        metavar="URL",
        help="Alertmanager's API, e.g. http://alertmanager-operated.monitoring.svc:9093: with"
        " the policy's alertActions.resolveTimeoutSeconds, an alert not sent again for that"
        " long is taken as resolved and its action undone, but a silenced or inhibited alert"
        " is not sent either; with this, Alertmanager is asked first (GET /api/v2/alerts,"
        " at most once a tick), and an alert it still holds, silenced or not, is kept."
        " Where it cannot be asked, alerts lapse as without it (with a warning and"
        ' gangops_alertmanager_queries_total{result="failed"}) (default: not asked)',
    )
    p.add_argument("--cache-dir", default=_default_cache(), help="Git caches (default %(default)s)")
    p.add_argument(
        "--source-selector",
        help="reconcile only PolicySources matching this label selector (sharding)",
    )
    p.add_argument(
        "--scheduler",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the TrainingJob controller and gang scheduler (default on)",
    )
    p.add_argument(
        "--quota-requests",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="turn QuotaRequests into pull requests on the policy repositories of the"
        " PolicySources with spec.forge (docs/quota-requests.md; default on)",
    )
    p.add_argument(
        "--prometheus-url",
        default=os.environ.get("GANGOPS_PROMETHEUS_URL") or None,
        type=http_url,
        help="Prometheus scraping the node agents: the scheduler reads GPU health,"
        " utilisation and memory from it in the background (at most three queries a"
        " round) for friendly reclamation and demand forecasts; without it, or while it is"
        " unreachable, scheduling goes by requests (and the agents' Node annotations)"
        " (default: $GANGOPS_PROMETHEUS_URL)",
    )
    p.add_argument(
        "--forecast-horizon",
        type=non_negative_seconds,
        default=0.0,
        metavar="SECONDS",
        help="lend by forecast: keep each project's idle guarantee from borrowers when its"
        " demand (an hour's sliding window) is forecast to ask for it within this many"
        " seconds, e.g. 600 (default 0: off, idle guarantees are lent as they idle)",
    )
    p.add_argument(
        "--telemetry-interval",
        type=positive_seconds,
        default=15.0,
        metavar="SECONDS",
        help="how often the telemetry is read from Prometheus (default 15)",
    )
    p.add_argument(
        "--fragmentation-window",
        type=non_negative_count,
        default=WINDOW_PODS,
        metavar="PODS",
        help="place each one-pod job where it fragments the free GPUs least for the"
        " typical requests (FGD) of the most recent jobs, this many pods' worth; larger"
        " jobs are packed by topology either way (default %(default)d; 0: best-fit)",
    )
    p.add_argument("--job-selector", help="schedule only TrainingJobs matching this label selector")
    p.add_argument("--node-selector", help="place gangs only on nodes matching this selector")
    p.add_argument(
        "--grow-interval",
        type=non_negative_seconds,
        default=GROW_INTERVAL_S,
        metavar="SECONDS",
        help="least time between two growths of one elastic job; each restarts it "
        "from its checkpoint (default %(default)g)",
    )
    p.add_argument(
        "--message-refresh",
        type=non_negative_seconds,
        default=MESSAGE_REFRESH_S,
        metavar="SECONDS",
        help="least time between two writes of a waiting job's message that differ only "
        "in its figures (GPUs free, left outside the reserve): those change with every "
        "admission and release, and each rewrite is a status write per waiting job; a "
        "new phase, reason, wording or spec is written at once, and so are a Quota "
        "reason's figures "
        "(default %(default)g; 0: every change)",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader among replicas through a Lease (default on)",
    )
    p.add_argument("--lease-name", default="gangops-controller", help="the Lease's name")
    p.add_argument("--lease-namespace", help="the Lease's namespace (default: system namespace)")
    p.add_argument("--identity", help="this replica's name in the Lease (default host_random)")
    p.add_argument(
        "--lease-duration",
        type=positive_seconds,
        default=15.0,
        metavar="SECONDS",
        help="how long a Lease not renewed stays the holder's (default %(default)g)",
    )
    p.add_argument(
        "--renew-deadline",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="the leader stops leading when it has not renewed for this long; at least 1 s"
        " shorter than --lease-duration: the gap, up to 30 s, is each Lease request's timeout"
        " (default %(default)g)",
    )
    p.add_argument(
        "--retry-period",
        type=positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="how often the Lease is renewed or tried; shorter than --renew-deadline"
        " (default %(default)g)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=_run)
