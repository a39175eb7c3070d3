"""Push webhook authentication: GitHub's HMAC signature and GitLab's token."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from controller.reconciler.webhook import verify

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
