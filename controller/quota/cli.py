"""`gangops quota request`: ask for more quota; gangops opens the pull request.

Creates a QuotaRequest in the given namespace (one of the project's),
labelled with the caller's user name as the API server authenticates it (a
SelfSubjectReview): the admission policy refuses any other name, so the
label is never free text. `--wait` follows the request until it is Pending
(prints the pull request's URL), Ready, or Rejected.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import secrets
import sys
import time
from typing import Any

from controller.jobs.spec import LABEL_USER
from controller.kube.client import FIELD_MANAGER, RESOURCES, ApiError, connect
from controller.quota.request import QuotaRequestSpec

__all__ = ["add_subcommand", "parse_for", "request_object"]

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
_DURATION = re.compile(r"([0-9]+)(m|h|d)")
_UNIT = {"m": 60, "h": 3600, "d": 86400}
_LONGEST_S = 3650 * 86400
"""The longest `--for`: ten years is no temporary grant, and a date far enough out
cannot be written at all."""


def parse_for(text: str) -> dt.timedelta:
    """`--for`: minutes, hours or days (`90m`, `8h`, `7d`, `1d12h`)."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration (examples: 90m, 8h, 7d)")
    seconds = sum(int(n) * _UNIT[u] for n, u in parts)
    if seconds > _LONGEST_S:
        raise ValueError(f"{text!r} is longer than {_LONGEST_S // 86400}d")
    return dt.timedelta(seconds=seconds)


def request_object(
    *,
    name: str,
    namespace: str,
    requester: str,
    project: str,
    resource: str,
    amount: str,
    reason: str,
    user: str | None = None,
    expires_at: dt.datetime | None = None,
    training_job: str | None = None,
) -> dict[str, Any]:
    """The QuotaRequest to create."""
    spec: dict[str, Any] = {
        "project": project,
        "resource": resource,
        "amount": int(amount) if resource == "gpu" else amount,
        "reason": reason,
    }
    if user:
        spec["user"] = user
    if expires_at:
        spec["expiresAt"] = expires_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if training_job:
        spec["trainingJob"] = training_job
    obj = {
        "apiVersion": "ai.operator/v1",
        "kind": "QuotaRequest",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_USER: requester}},
        "spec": spec,
    }
    QuotaRequestSpec.parse(obj)  # what the schema would refuse, refused here with its reason
    return obj


def _request(args: argparse.Namespace) -> int:
    if args.amount is None:
        print("gangops quota request: give --amount (or --gpu N)", file=sys.stderr)
        return EXIT_USAGE
    expires = None
    if args.duration:
        try:
            expires = dt.datetime.now(dt.UTC) + parse_for(args.duration)
        except ValueError as e:
            print(f"gangops quota request: --for: {e}", file=sys.stderr)
            return EXIT_USAGE
    try:
        kube = connect(args.kubeconfig)
        review = kube.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
                "metadata": {},
            },
            field_manager=FIELD_MANAGER,
        )
        requester = str(review["status"]["userInfo"]["username"])
        name = args.name or f"{args.project}-{args.resource}-{secrets.token_hex(3)}"
        obj = request_object(
            name=name,
            namespace=args.namespace or args.project,
            requester=requester,
            project=args.project,
            resource=args.resource,
            amount=args.amount,
            reason=args.reason,
            user=args.user,
            expires_at=expires,
            training_job=args.job,
        )
        kube.create(obj, field_manager="gangops-cli")
    except ValueError as e:
        print(f"gangops quota request: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (ApiError, OSError) as e:
        print(f"gangops quota request: {e}", file=sys.stderr)
        return EXIT_REFUSED
    meta = obj["metadata"]
    print(f"quotarequest {meta['namespace']}/{meta['name']} created (requester {requester})")
    if not args.wait:
        return EXIT_OK
    deadline = time.monotonic() + args.timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            live = kube.get(RESOURCES["QuotaRequest"], meta["name"], meta["namespace"]) or {}
        except ApiError as e:
            if not e.transient:
                print(
                    f"gangops quota request: the request is made, but its state cannot be"
                    f" read: {e}",
                    file=sys.stderr,
                )
                return EXIT_REFUSED
            print(f"gangops quota request: {e}; retrying", file=sys.stderr)
            time.sleep(1.0)
            continue
        status = live.get("status") or {}
        line = f"{status.get('state', 'New')}: {status.get('message', 'waiting for gangops')}"
        if line != last:
            print(line)
            last = line
        if status.get("state") in ("Pending", "Ready", "Rejected"):
            return EXIT_REFUSED if status["state"] == "Rejected" else EXIT_OK
        time.sleep(0.5)
    print(f"gangops quota request: no answer within {args.timeout:g}s", file=sys.stderr)
    return EXIT_REFUSED


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gangops quota`."""
    q = subparsers.add_parser(
        "quota",
        help="ask for more quota (becomes a pull request on the policy repository)",
        description="Quota requests: the merge of the pull request gangops opens is the approval.",
    )
    qs = q.add_subparsers(dest="quota_command", metavar="COMMAND", required=True)
    r = qs.add_parser(
        "request",
        help="request more of a project's (or your own) max",
        description="Create a QuotaRequest; gangops opens (or updates) the pull request "
        "raising the max on the policy repository that defines the project.",
    )
    r.add_argument("--project", required=True, help="the Project")
    r.add_argument("--resource", choices=("gpu", "cpu", "memory"), default="gpu")
    r.add_argument("--amount", help="how much more: GPUs, or a quantity (64, 512Gi)")
    r.add_argument(
        "--gpu",
        dest="amount",
        metavar="N",
        help="shorthand for --resource gpu --amount N",
    )
    r.add_argument("--user", help="raise your own max in the project instead of the project's")
    r.add_argument("--reason", required=True, help="why (shown to the reviewers)")
    r.add_argument("--for", dest="duration", help="a temporary grant, for 90m, 8h, 7d ...")
    r.add_argument("--job", help="the TrainingJob waiting for this quota (its status links the PR)")
    r.add_argument("-n", "--namespace", help="one of the project's namespaces (default: PROJECT)")
    r.add_argument("--name", help="the QuotaRequest's name (default: generated)")
    r.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    r.add_argument("--wait", action="store_true", help="wait for the pull request's URL")
    r.add_argument("--timeout", type=float, default=60.0, help="for --wait (default 60 s)")
    r.set_defaults(func=_request)
