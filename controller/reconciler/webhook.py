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

The signature covers the body, not the URL, so the body must name what is
authorised: a push is accepted for `/hook/<name>` only when the repository
the signed payload names (GitHub's `repository.clone_url` and siblings,
GitLab's `project.git_http_url` and siblings) is the PolicySource's
`spec.url`. One signed delivery cannot trigger every source, and the name is
checked to be an object name before it reaches the API server. Deliveries
carry an id (`X-GitHub-Delivery`, `X-Gitlab-Event-UUID`); an id already
accepted by this replica is not acted on again (`Deliveries`). A GitLab
token is the secret itself, not a signature: anyone who sees one request can
forge others, so prefer GitHub-style signatures where the forge offers them
(docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from controller.kube.client import RESOURCES, ApiError, KubeApi
from controller.kube.clock import Clock
from controller.reconciler.spec import ANNOTATION_REQUESTED

__all__ = [
    "BODY_WINDOW_S",
    "PATH_PREFIX",
    "Deliveries",
    "WebhookResponse",
    "handle_push",
    "repository_key",
    "verify",
]

log = logging.getLogger(__name__)

PATH_PREFIX = "/hook/"
_SOURCE = RESOURCES["PolicySource"]
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""An object name (DNS-1123 subdomain), at most 253 characters."""
_URL_FIELDS = {
    "repository": ("clone_url", "ssh_url", "git_url", "html_url", "url", "git_http_url",
                   "git_ssh_url", "homepage"),
    "project": ("git_http_url", "git_ssh_url", "http_url", "ssh_url", "web_url"),
}  # fmt: skip
"""Where GitHub and GitLab push payloads name the repository."""


BODY_WINDOW_S = 600.0
"""How long an accepted body is a replay when it comes again under another delivery id.
Not for ever: a GitLab push body names no time, so a branch rolled back and pushed
forward again sends the same bytes (and waits at most for the next poll)."""


class Deliveries:
    """What this replica accepted: delivery ids, the latest `size` of them, and
    bodies, for `BODY_WINDOW_S`."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._ids: OrderedDict[str, float | None] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, delivery: str, *, now: float | None = None) -> bool:
        """Whether `delivery` was accepted (a body key: within `BODY_WINDOW_S` of `now`)."""
        with self._lock:
            if delivery not in self._ids:
                return False
            at = self._ids[delivery]
            return at is None or now is None or now - at < BODY_WINDOW_S

    def add(self, delivery: str, *, at: float | None = None) -> None:
        with self._lock:
            self._ids.pop(delivery, None)
            self._ids[delivery] = at
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)


def repository_key(url: str) -> str:
    """A repository URL reduced to what identifies it, so that the https, ssh and
    scp-like spellings of one repository compare equal: `host/path` without
    user, port, trailing slash or `.git`, in lower case (file:// keeps its path)."""
    u = url.strip().lower()
    scheme = re.match(r"^[a-z][a-z0-9+.-]*://", u)
    if scheme is not None and scheme.group(0) == "file://":
        return u[len("file://") :].rstrip("/").removesuffix(".git")
    if scheme is not None:
        authority, _, path = u[scheme.end() :].partition("/")
        host = authority.rpartition("@")[2]
        host = host if host.startswith("[") else host.partition(":")[0]
    else:
        authority, _, path = u.partition(":")
        host = authority.rpartition("@")[2]
    return f"{host}/{path.strip('/').removesuffix('.git').rstrip('/')}"


def _named_repositories(payload: Any) -> Iterator[str]:
    if not isinstance(payload, dict):
        return
    for key, fields in _URL_FIELDS.items():
        section = payload.get(key)
        if isinstance(section, dict):
            for f in fields:
                value = section.get(f)
                if isinstance(value, str) and value:
                    yield value


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
    kube: KubeApi,
    *,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    secret: bytes,
    clock: Clock,
    deliveries: Deliveries,
) -> WebhookResponse:
    """Authenticate a webhook for `/hook/<name>` and request a reconcile of `<name>`
    if the signed payload is a push to that PolicySource's repository."""
    name = path.removeprefix(PATH_PREFIX)
    if len(name) > 253 or not _NAME.match(name):
        return WebhookResponse(404, f"{name[:80]!r} is not a PolicySource name", "unknown_source")
    problem = verify(headers, body, secret)
    if problem is not None:
        log.warning("webhook rejected source=%s reason=%r", name, problem)
        return WebhookResponse(401, problem, "rejected")
    if not _is_push(headers):
        return WebhookResponse(200, "not a push event; nothing to do", "ignored")
    h = {k.lower(): v for k, v in headers.items()}
    delivery = h.get("x-github-delivery") or h.get("x-gitlab-event-uuid") or ""
    # The delivery id is a header the signature does not cover: a captured delivery
    # sent again under fresh ids would each be a fetch. The body is what is signed.
    signed = f"{name}/sha256:{hashlib.sha256(body or b'').hexdigest()}"
    now = clock.now().timestamp()
    if delivery and deliveries.seen(delivery):
        return WebhookResponse(200, f"delivery {delivery[:80]} was already handled", "ignored")
    if deliveries.seen(signed, now=now):
        return WebhookResponse(
            200, f"the same push was handled within {BODY_WINDOW_S / 60:g} minutes", "ignored"
        )
    try:
        payload = json.loads(body or b"{}")
    except (ValueError, RecursionError):  # RecursionError: nested too deep to read
        return WebhookResponse(400, "the body is not JSON", "rejected")
    try:
        source = kube.get(_SOURCE, name)
    except ApiError as e:
        log.warning("webhook could not read source=%s error=%r", name, str(e))
        return WebhookResponse(503, "could not read the PolicySource; retry", "failed")
    if source is None:
        return WebhookResponse(404, f"no PolicySource {name!r}", "unknown_source")
    url = str((source.get("spec") or {}).get("url") or "")
    named = list(_named_repositories(payload))
    if not any(repository_key(u) == repository_key(url) for u in named):
        log.warning("webhook rejected source=%s reason=repository pushed=%r", name, named[:1])
        return WebhookResponse(
            403,
            f"the push is for {named[0][:200]!r}, not for PolicySource {name}'s repository"
            if named
            else "the payload names no repository (repository.clone_url or project.git_http_url)",
            "rejected",
        )
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
    if delivery:
        deliveries.add(delivery)
    deliveries.add(signed, at=now)
    log.info("webhook accepted source=%s requested_at=%s", name, stamp)
    return WebhookResponse(202, f"reconcile of {name} requested", "accepted")
