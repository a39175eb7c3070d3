"""Git push webhooks: a push to the policy repository is applied in seconds, not at the
next poll.

A forge posts to `/hook/<policysource-name>`. The request is authenticated
the way the forge signs it: GitHub's `X-Hub-Signature-256` (HMAC-SHA256 of
the body with the shared secret, compared in constant time) or GitLab's
`X-Gitlab-Token` (the secret itself). An authentic push sets the
`gangops.ai/reconcile-requested-at` annotation on the PolicySource, the same
thing a person does by hand; whichever replica holds the leader Lease sees it
through its watch and fetches at once. So any replica may take the webhook,
and the annotation leaves a trace of the request on the object.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from controller.kube.client import RESOURCES, ApiError, Kube
from controller.kube.clock import Clock
from controller.reconciler.spec import ANNOTATION_REQUESTED

__all__ = ["PATH_PREFIX", "WebhookResponse", "handle_push", "verify"]

log = logging.getLogger(__name__)

PATH_PREFIX = "/hook/"
_SOURCE = RESOURCES["PolicySource"]


@dataclass(frozen=True)
class WebhookResponse:
    """What to answer the forge."""

    status: int
    message: str
    result: str
    """For the metric: accepted, ignored, rejected or unknown_source."""


def verify(headers: Mapping[str, str], body: bytes, secret: bytes) -> str | None:
    """None if the request is signed with `secret`, else why not. Header names are
    matched case-insensitively."""
    h = {k.lower(): v for k, v in headers.items()}
    if not secret:
        return "the controller has no webhook secret configured"
    signature = h.get("x-hub-signature-256")
    if signature is not None:
        want = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        if hmac.compare_digest(signature.strip().encode(), want.encode()):
            return None
        return "X-Hub-Signature-256 does not match the body"
    token = h.get("x-gitlab-token")
    if token is not None:
        if hmac.compare_digest(token.encode(), secret):
            return None
        return "X-Gitlab-Token is wrong"
    return "no X-Hub-Signature-256 or X-Gitlab-Token header"


def _is_push(headers: Mapping[str, str]) -> bool:
    h = {k.lower(): v for k, v in headers.items()}
    event = h.get("x-github-event") or h.get("x-gitlab-event") or ""
    return event in ("push", "Push Hook", "Tag Push Hook")


def handle_push(
    kube: Kube,
    *,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    secret: bytes,
    clock: Clock,
) -> WebhookResponse:
    """Authenticate a webhook for `/hook/<name>` and request a reconcile of `<name>`."""
    name = path.removeprefix(PATH_PREFIX).strip("/")
    problem = verify(headers, body, secret)
    if problem is not None:
        log.warning("webhook rejected source=%s reason=%r", name, problem)
        return WebhookResponse(401, problem, "rejected")
    if not _is_push(headers):
        return WebhookResponse(200, "not a push event; nothing to do", "ignored")
    try:
        json.loads(body or b"{}")
    except ValueError:
        return WebhookResponse(400, "the body is not JSON", "rejected")
    stamp = clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        kube.merge_patch(
            _SOURCE,
            name,
            {"metadata": {"annotations": {ANNOTATION_REQUESTED: stamp}}},
            field_manager="gangops-webhook",
        )
    except ApiError as e:
        if e.status == 404:
            return WebhookResponse(404, f"no PolicySource {name!r}", "unknown_source")
        log.warning("webhook could not annotate source=%s error=%r", name, str(e))
        return WebhookResponse(503, "could not request a reconcile; retry", "failed")
    log.info("webhook accepted source=%s requested_at=%s", name, stamp)
    return WebhookResponse(202, f"reconcile of {name} requested", "accepted")
