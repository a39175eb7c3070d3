"""The `/alertmanager` route: who may post, what is refused, and that it only queues."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from controller.alerts.metrics import AlertMetrics
from controller.alerts.receiver import PATH, CredentialFiles, Credentials, Inbox, Receiver
from controller.httpserver import Request
from tests.unit.alerts.builders import alert, payload

TOKEN = Credentials(token=b"s3cret")
BASIC = Credentials(username=b"am", password=b"pw")


def post(r: Receiver, body: bytes, auth: str = "Bearer s3cret", path: str = PATH) -> int:
    headers = {"authorization": auth} if auth else {}
    status, _, _ = r(Request("POST", path, headers, body))
    return status


def receiver(
    creds: Credentials | CredentialFiles = TOKEN, *, leader: bool = True, capacity: int = 10
) -> Receiver:
    return Receiver(creds, Inbox(capacity), AlertMetrics(), accepting=lambda: leader)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("creds", "auth", "want"),
    [
        (TOKEN, "Bearer s3cret", 200),
        (TOKEN, "bearer s3cret", 200),
        (TOKEN, "Bearer wrong", 401),
        (TOKEN, "", 401),
        (TOKEN, basic("am", "s3cret"), 401),  # a token is not a basic password
        (BASIC, basic("am", "pw"), 200),
        (BASIC, basic("am", "nope"), 401),
        (BASIC, basic("other", "pw"), 401),
        (BASIC, "Basic !!!", 401),
        (BASIC, "Bearer pw", 401),
        (Credentials(), "Bearer ", 401),  # nothing configured: nothing accepted
        (Credentials(), "", 401),
    ],
)
def test_who_may_post(creds: Credentials, auth: str, want: int) -> None:
    assert post(receiver(creds), payload(alert()), auth) == want


def test_a_delivery_is_queued_and_acted_on_by_no_one_here() -> None:
    inbox = Inbox()
    r = Receiver(TOKEN, inbox, AlertMetrics(), accepting=lambda: True)
    assert post(r, payload(alert(fp="a"), alert(fp="b"))) == 200
    assert [i.alert.fingerprint for i in inbox.take(0)] == ["a", "b"]


def test_refusals() -> None:
    assert post(receiver(), b"{") == 400
    assert post(receiver(leader=False), payload(alert())) == 503
    assert post(receiver(capacity=1), payload(alert(fp="a"), alert(fp="b"))) == 503
    assert post(receiver(), payload(alert()), path="/alertmanager/x") == 404
    status, _, _ = receiver()(Request("GET", PATH, {"authorization": "Bearer s3cret"}, b""))
    assert status == 405


def test_credentials_are_read_from_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "basic").write_text("am:pw\n")
    got = CredentialFiles(
        token_file=str(tmp_path / "token"), basic_auth_file=str(tmp_path / "basic")
    )
    assert got.current() == Credentials(b"s3cret", b"am", b"pw")
    (tmp_path / "bad").write_text("no-colon\n")
    with pytest.raises(ValueError, match="user:password"):
        CredentialFiles(token_file=None, basic_auth_file=str(tmp_path / "bad"))


def test_a_rotated_token_is_honoured_at_once(tmp_path: Path) -> None:
    """The kubelet swaps a mounted Secret in place, and Alertmanager reads its
    credentials_file on each delivery (found by a review: the token was read once,
    and every delivery after a rotation got 401 until a restart; Alertmanager does
    not retry a 4xx). An unreadable file keeps the last token."""
    token = tmp_path / "token"
    token.write_text("old-token\n")
    r = receiver(CredentialFiles(token_file=str(token), basic_auth_file=None))
    assert post(r, payload(alert(fp="a")), "Bearer old-token") == 200
    swapped = tmp_path / "new"
    swapped.write_text("new-token\n")
    swapped.replace(token)  # as the kubelet's link swap: a new file
    assert post(r, payload(alert(fp="b")), "Bearer new-token") == 200
    assert post(r, payload(alert(fp="c")), "Bearer old-token") == 401
    token.unlink()
    assert post(r, payload(alert(fp="d")), "Bearer new-token") == 200


def test_a_body_nested_too_deep_is_a_400() -> None:
    """json.loads raises RecursionError, not ValueError (found by a review: a 500
    with a traceback in the log)."""
    assert post(receiver(), b"[" * 200_000) == 400
