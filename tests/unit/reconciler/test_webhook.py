"""Push webhooks: GitHub's HMAC signature and GitLab's token, and what an
authentic delivery may trigger."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from controller.kube.client import RESOURCES
from controller.kube.clock import FakeClock
from controller.reconciler.spec import ANNOTATION_REQUESTED
from controller.reconciler.webhook import (
    BODY_WINDOW_S,
    Deliveries,
    WebhookResponse,
    handle_push,
    verify,
)
from tests.unit.kube.fakes import FakeKube

SECRET = b"topsecret"
BODY = b'{"ref":"refs/heads/main"}'
GOOD = "sha256=" + hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()


def test_github_signature() -> None:
    assert verify({"X-Hub-Signature-256": GOOD}, BODY, SECRET) is None
    assert verify({"x-hub-signature-256": GOOD}, BODY, SECRET) is None  # any header case


@pytest.mark.parametrize(
    ("headers", "body", "secret", "why"),
    [
        ({"X-Hub-Signature-256": GOOD}, BODY + b" ", SECRET, "does not match"),
        ({"X-Hub-Signature-256": GOOD}, BODY, b"other", "does not match"),
        ({"X-Hub-Signature-256": GOOD.replace("sha256=", "sha1=")}, BODY, SECRET, "does not"),
        ({"X-Gitlab-Token": "wrong"}, BODY, SECRET, "X-Gitlab-Token is wrong"),
        ({}, BODY, SECRET, "no X-Hub-Signature-256"),
        ({"X-Hub-Signature-256": GOOD}, BODY, b"", "no webhook secret"),
    ],
)
def test_rejected(headers: dict[str, str], body: bytes, secret: bytes, why: str) -> None:
    problem = verify(headers, body, secret)
    assert problem is not None and why in problem


def test_gitlab_token() -> None:
    assert verify({"X-Gitlab-Token": "topsecret"}, BODY, SECRET) is None


# handle_push: what a signed delivery may trigger.

_URL = "https://github.com/acme/policies.git"


def _kube() -> FakeKube:
    kube = FakeKube()
    kube.create(
        {
            "apiVersion": "policy.ai.operator/v1",
            "kind": "PolicySource",
            "metadata": {"name": "main"},
            "spec": {"url": _URL},
        },
        field_manager="t",
    )
    return kube


def _push(
    kube: FakeKube,
    path: str,
    payload: dict[str, Any],
    clock: FakeClock | None = None,
    **headers: str,
) -> WebhookResponse:
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    return handle_push(
        kube,
        path=path,
        headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": sig, **headers},
        body=body,
        secret=SECRET,
        clock=clock or FakeClock(),
        deliveries=_DELIVERIES,
    )


_DELIVERIES = Deliveries()


@pytest.fixture(autouse=True)
def _fresh_deliveries() -> None:
    """Each test a receiver of its own: one test's accepted body is not another's
    replay."""
    global _DELIVERIES
    _DELIVERIES = Deliveries()


def _requested(kube: FakeKube) -> bool:
    obj = kube.get(RESOURCES["PolicySource"], "main") or {}
    return ANNOTATION_REQUESTED in (obj["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    "url",
    [
        _URL,
        "git@github.com:acme/policies.git",
        "ssh://git@github.com:22/acme/policies",
        "https://github.com/Acme/Policies/",
    ],
)
def test_a_push_to_the_sources_repository_requests_a_reconcile(url: str) -> None:
    kube = _kube()
    r = _push(kube, "/hook/main", {"repository": {"clone_url": url}})
    assert (r.status, r.result) == (202, "accepted")
    assert _requested(kube)


def test_the_signed_body_must_name_the_sources_repository() -> None:
    """The HMAC covers the body, not the path: a delivery signed for one repository
    must not trigger a source of another."""
    kube = _kube()
    other = _push(kube, "/hook/main", {"repository": {"clone_url": "https://github.com/x/y"}})
    assert (other.status, other.result) == (403, "rejected")
    assert "not for PolicySource main's repository" in other.message
    none = _push(kube, "/hook/main", {"ref": "refs/heads/main"})
    assert none.status == 403 and "names no repository" in none.message
    assert not _requested(kube)


@pytest.mark.parametrize("path", ["/hook/main/status", "/hook/Main", "/hook/", "/hook/a..b"])
def test_a_path_that_is_no_object_name_is_refused_before_the_api_server(path: str) -> None:
    kube = _kube()
    kube.down = True  # any API call would raise
    r = _push(kube, path, {"repository": {"clone_url": _URL}})
    assert (r.status, r.result) == (404, "unknown_source")
    assert "is not a PolicySource name" in r.message


def test_a_replayed_delivery_is_not_acted_on_twice() -> None:
    kube = _kube()
    payload = {"repository": {"clone_url": _URL}}
    first = _push(kube, "/hook/main", payload, **{"X-GitHub-Delivery": "d-1"})
    assert first.status == 202
    writes = len(kube.writes)
    again = _push(kube, "/hook/main", payload, **{"X-GitHub-Delivery": "d-1"})
    assert (again.status, again.result) == (200, "ignored")
    assert len(kube.writes) == writes


def test_a_captured_delivery_sent_again_under_fresh_ids_is_not_acted_on_again() -> None:
    """Found by a review: replays were told apart by the delivery id, a header the
    signature does not cover; each replay under a new id was an API write and a fetch."""
    kube, clock = _kube(), FakeClock()
    payload = {"repository": {"clone_url": _URL}, "after": "1" * 40}
    first = _push(kube, "/hook/main", payload, clock, **{"X-GitHub-Delivery": "d-1"})
    assert first.status == 202
    writes = len(kube.writes)
    for i in range(2, 6):
        again = _push(kube, "/hook/main", payload, clock, **{"X-GitHub-Delivery": f"d-{i}"})
        assert (again.status, again.result) == (200, "ignored")
    assert len(kube.writes) == writes
    later = _push(kube, "/hook/main", {**payload, "after": "2" * 40}, clock)  # the next push
    assert later.status == 202
    # A GitLab body names no time: a branch rolled back and pushed forward again sends
    # the same bytes. Past the window it is a push again, not a replay.
    clock.advance(BODY_WINDOW_S)
    assert _push(kube, "/hook/main", payload, clock, **{"X-GitHub-Delivery": "d-9"}).status == 202


def test_deliveries_remember_the_latest_ids_only() -> None:
    d = Deliveries(size=2)
    for i in "abc":
        d.add(i)
    assert [d.seen(i) for i in "abc"] == [False, True, True]


def test_a_signed_body_nested_too_deep_to_read_is_refused_as_not_json() -> None:
    """Found by a review: json.loads raised RecursionError, which reached the
    server's catch-all: a 500 and a traceback in the log instead of a 400."""
    body = b"[" * 100_000 + b"]" * 100_000
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    r = handle_push(
        _kube(),
        path="/hook/main",
        headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": sig},
        body=body,
        secret=SECRET,
        clock=FakeClock(),
        deliveries=Deliveries(),
    )
    assert (r.status, r.message) == (400, "the body is not JSON")
