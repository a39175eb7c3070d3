"""The gang wing's command, `gangops explain NAMESPACE/NAME`: a dry-run step on the
live cluster, for one job.

It reads what the scheduler reads (nodes, every pod, every TrainingJob, the
compiled policy through `SchedulingPolicy.from_configmap`) and runs the same
`lifecycle.decide` (plan, snapshot, cycle), writing nothing, and prints
`controller.scheduler.explain.explain`'s account of the job: its place in the
queue, what blocks it, what would have to change.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from controller.cliargs import http_url, non_negative_count
from controller.gang.lifecycle import decide
from controller.gang.record import format_time, parse_time
from controller.gang.view import JobView, container_defaults, job_views, namespace_quotas
from controller.gang.workload import WINDOW_PODS, Workload
from controller.kube.client import RESOURCES, ApiError, KubeApi
from controller.kube.clock import Clock, SystemClock
from controller.nodehealth import OUT_OF_SERVICE_ANNOTATION
from controller.policy.validate import check_scheduling_policy
from controller.scheduler.explain import explain
from controller.scheduler.policy import (
    DEFAULT_SYSTEM_NAMESPACE,
    POLICY_CONFIGMAP,
    SchedulingPolicy,
    UnreadablePolicy,
)
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.telemetry import Telemetry
from controller.scheduler.types import JobId

__all__ = ["add_subcommand", "explain_job"]


class ExplainError(Exception):
    """The job or the policy cannot be read; the message says which."""


def explain_job(
    kube: KubeApi,
    job: str,
    *,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
    node_selector: str | None = None,
    clock: Clock | None = None,
    telemetry: Telemetry | None = None,
    fragmentation_window: int = WINDOW_PODS,
) -> str:
    """The explanation of `job` (`namespace/name`) as of now; with `telemetry`, what it
    said and how old it is, the GPUs it takes out, and whether the job's GPUs idle."""
    namespace, _, name = job.partition("/")
    if not namespace or not name:
        raise ExplainError(f"{job!r}: expected NAMESPACE/NAME")
    obj = kube.get(RESOURCES["TrainingJob"], name, namespace)
    if obj is None:
        raise ExplainError(f"TrainingJob {job} not found")
    cm = kube.get(RESOURCES["ConfigMap"], POLICY_CONFIGMAP, system_namespace)
    if cm is None:
        raise ExplainError(
            f"no scheduling policy: ConfigMap {system_namespace}/{POLICY_CONFIGMAP} is missing "
            "(is the policy reconciler running?)"
        )
    try:
        policy = SchedulingPolicy.from_configmap(cm, check=check_scheduling_policy)
    except UnreadablePolicy as e:
        raise ExplainError(f"the scheduling policy is unreadable: {e}") from None
    now = (clock or SystemClock()).now().timestamp()
    nodes, _ = kube.list(RESOURCES["Node"], label_selector=node_selector)
    pods, _ = kube.list(RESOURCES["Pod"])
    jobs, _ = kube.list(RESOURCES["TrainingJob"])
    quotas, _ = kube.list(RESOURCES["ResourceQuota"])
    limits, _ = kube.list(RESOURCES["LimitRange"])
    views = job_views(jobs, pods, policy, defaults=container_defaults(limits))
    mine = next((v for v in views if v.id == job), None)
    phase = (obj.get("status") or {}).get("phase")
    if mine is not None and mine.error is not None:
        return f"{job} cannot be scheduled as written: {mine.error}.\n"
    if phase in ("Succeeded", "Failed"):
        return f"{job} has finished: {phase} ({(obj.get('status') or {}).get('message', '')}).\n"
    todo, snap, result = decide(
        views, {n["metadata"]["name"]: n for n in nodes}, pods, policy, now=now,
        telemetry=telemetry, quotas=namespace_quotas(quotas),
        workload=Workload(fragmentation_window),
    )  # fmt: skip
    text = explain(JobId(job), result=result, snap=snap, policy=policy)
    text += _health_lines(snap)
    text += _alert_lines(nodes)
    text += _quota_request_line((obj.get("status") or {}).get("quotaRequest"))
    if telemetry is not None:
        text += _telemetry_lines(telemetry, mine, now)
    if JobId(job) in todo.backing_off:
        until = parse_time((obj.get("status") or {}).get("notBefore")) or now
        text = (
            f"{job} is backing off until {format_time(until)} "
            f"({(obj.get('status') or {}).get('message', '')}).\n"
        )
    return text


def _quota_request_line(qr: object) -> str:
    """The QuotaRequest the job waits for (mirrored on its status by the quota loop)."""
    if not isinstance(qr, dict) or not qr.get("name"):
        return ""
    url = f": {qr['url']}" if qr.get("url") else ""
    return (
        f"Quota request: {qr['name']} is {qr.get('state', 'new')}{url} ({qr.get('message', '')}).\n"
    )


def _health_lines(snap: Snapshot) -> str:
    """GPUs out of service on the nodes the scheduler sees (never offered)."""
    # every GPU out of service, including one the device plugin already left out of
    # allocatable (then none of the node's allocatable is held back: `ns.bad` is 0)
    bad = [(ns.name, sorted(ns.node.out_of_service)) for ns in snap.nodes if ns.node.out_of_service]
    if not bad:
        return ""
    listed = "; ".join(f"{n}: GPU {', '.join(map(str, gpus))}" for n, gpus in bad)
    return (
        "GPUs out of service (never offered until the node agent says they are"
        f" healthy): {listed}.\n"
    )


def _alert_lines(nodes: list[dict[str, Any]]) -> str:
    """Nodes and GPUs an alert action holds out of service, why and until when."""
    held = []
    for n in nodes:
        annotations = n["metadata"].get("annotations") or {}
        why = str(annotations.get(OUT_OF_SERVICE_ANNOTATION) or "").strip()
        if why:
            held.append(f"{n['metadata']['name']}: {why}")
    if not held:
        return ""
    return "Held out of service by alert actions: " + "; ".join(held) + ".\n"


def _telemetry_lines(t: Telemetry, view: JobView | None, now: float) -> str:
    lines = [t.describe(now).capitalize() + "."]
    if view is not None and t.fresh(t.usage, now):
        usages = [
            t.pods.get((str(p["metadata"].get("namespace", "")), str(p["metadata"]["name"])))
            for p in view.pods
        ]
        known = [u for u in usages if u is not None]
        if known:
            avg = sum(u.avg_5m for u in known) / len(known)
            idle = " (idle: these GPUs are held and unused)" if avg < 5 else ""
            lines.append(
                f"Its GPUs over the last 5 minutes: {avg:.0f} % utilised on average"
                f" across {len(known)} pods{idle}."
            )
    return "\n".join(lines) + "\n"


def _explain(args: argparse.Namespace) -> int:
    from controller.kube.client import connect

    telemetry = None
    if args.prometheus_url:
        from controller.gang.telemetry import PrometheusTelemetry

        telemetry = PrometheusTelemetry(args.prometheus_url).refresh()
    try:
        text = explain_job(
            connect(args.kubeconfig),
            args.job,
            system_namespace=args.system_namespace,
            node_selector=args.node_selector,
            telemetry=telemetry,
            fragmentation_window=args.fragmentation_window,
        )
    except (ExplainError, ApiError) as e:
        print(f"gangops explain: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gangops explain`."""
    p = subparsers.add_parser(
        "explain",
        help="say why a TrainingJob waits (a dry-run scheduling cycle on the live cluster)",
        description="Run the scheduler's cycle on the live cluster without writing anything and "
        "print, for one TrainingJob, its position in the queue, what blocks it and what would "
        "have to change. Exit 1 if the job or the policy cannot be read.",
    )
    p.add_argument("job", metavar="NAMESPACE/NAME")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ...)")
    p.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        help="namespace of the scheduling-policy ConfigMap (default %(default)s)",
    )
    p.add_argument("--node-selector", help="the nodes the scheduler places on (as for run)")
    p.add_argument(
        "--fragmentation-window",
        type=non_negative_count,
        default=WINDOW_PODS,
        metavar="PODS",
        help="as for run: the recent pods whose typical requests one-pod jobs are placed"
        " for (default %(default)d; 0: best-fit)",
    )
    p.add_argument(
        "--prometheus-url",
        default=os.environ.get("GANGOPS_PROMETHEUS_URL") or None,
        type=http_url,
        help="read telemetry as the scheduler does (GPU health, utilisation; default:"
        " $GANGOPS_PROMETHEUS_URL)",
    )
    p.set_defaults(func=_explain)
