"""Server-side apply on the wire: the request `Kube.apply` sends, at the HTTP seam
(a fake `ApiClient.call_api`), because the content type, the field manager and
the dry-run flag are the contract with the API server."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from controller.kube.client import RESOURCES, ApiError, Kube, NotLeaderError, connect


class _Response:
    def __init__(self, body: Any) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


class FakeApiClient:
    """Records each call; answers with the body it was sent."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def call_api(self, path: str, method: str, **kw: Any) -> _Response:
        self.calls.append({"path": path, "method": method, **kw})
        return _Response(kw.get("body"))


QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "gangops-quota", "namespace": "nlp"},
    "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry run"])
def test_apply_sends_an_apply_patch_with_its_field_manager(dry_run: bool) -> None:
    api = FakeApiClient()
    out = Kube(api, timeout_s=7).apply(QUOTA, field_manager="gangops", dry_run=dry_run)
    (call,) = api.calls
    assert (call["method"], call["path"]) == (
        "PATCH",
        "/api/v1/namespaces/nlp/resourcequotas/gangops-quota",
    )
    assert call["header_params"]["Content-Type"] == "application/apply-patch+yaml"
    query = call["query_params"]
    assert ("fieldManager", "gangops") in query and ("force", "true") in query
    assert (("dryRun", "All") in query) is dry_run
    assert call["body"] == QUOTA and out == QUOTA


def test_apply_without_a_field_manager_sends_nothing() -> None:
    api = FakeApiClient()
    with pytest.raises(ValueError, match="field manager"):
        Kube(api).apply(QUOTA, field_manager="")
    assert api.calls == []


class _Raw:
    def __init__(self, data: bytes | Exception) -> None:
        self._data = data

    @property
    def data(self) -> bytes:
        if isinstance(self._data, Exception):
            raise self._data
        return self._data

    def release_conn(self) -> None:
        pass


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead"), "Unreachable"),
        (b"<html>502</html>", "BadResponse"),
        (b"\xff\xfe", "BadResponse"),
    ],
)
def test_an_answer_cut_short_or_not_json_is_an_api_error(answer: Any, reason: str) -> None:
    """Every caller handles ApiError; these escaped as urllib3 or JSON errors (found by
    a review: the node agent's publisher thread ended on one)."""

    class Api:
        def call_api(self, path: str, method: str, **kw: Any) -> _Raw:
            return _Raw(answer)

    with pytest.raises(ApiError) as e:
        Kube(Api()).get(RESOURCES["Node"], "n1")  # type: ignore[arg-type]
    assert (e.value.status, e.value.reason) == (0, reason)


class _Refusal:
    """What urllib3 hands the client for a refused request."""

    def __init__(self, status: int, body: Any, headers: dict[str, str]) -> None:
        self.status, self.reason = status, "Too Many Requests"
        self.data = json.dumps(body).encode() if body is not None else b""
        self._headers = urllib3.HTTPHeaderDict(headers)

    def getheaders(self) -> Any:
        return self._headers


class _Refusing:
    def __init__(self, refusal: _Refusal) -> None:
        self._refusal = refusal

    def call_api(self, path: str, method: str, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        raise ApiException(http_resp=self._refusal)


def _status(retry: Any) -> dict[str, Any]:
    return {"kind": "Status", "reason": "TooManyRequests", "message": "slow down",
            "details": {"retryAfterSeconds": retry}}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "headers", "wait"),
    [
        (_status(3), {"Retry-After": "7"}, 3.0),  # the Status' own figure first
        (_status(0), {"retry-after": "7"}, 7.0),  # 0: none said; the header, any case
        (None, {"Retry-After": "7"}, 7.0),
        (None, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),  # a date: not read
        (None, {"Retry-After": "0"}, None),
        (None, {"Retry-After": "-5"}, None),
        (None, {"Retry-After": "\u00b2"}, None),  # a digit to str.isdigit, not to int()
        (_status(True), {}, None),
        (_status(10**9), {}, 300.0),  # at most RETRY_AFTER_MAX_S
        # found by a review: int() refused it, a ValueError in place of the ApiError
        (None, {"Retry-After": "9" * 4301}, 300.0),
        (None, {}, None),
    ],
)
def test_a_refusal_says_how_long_to_wait(body: Any, headers: dict[str, str], wait: Any) -> None:
    with pytest.raises(ApiError) as refused:
        Kube(_Refusing(_Refusal(429, body, headers))).get(RESOURCES["ConfigMap"], "a", "ns")
    assert refused.value.status == 429 and refused.value.retry_after == wait


def test_a_request_that_times_out_is_sent_once(tmp_path: Any) -> None:
    """Found by a review: urllib3's default retries sent a request up to four times,
    each after a full timeout, below the fence: a write landed long after the fence
    let it through, and a Lease read answered three timeouts after it was asked.
    Here a server that accepts and never answers gets one request per call."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    config = tmp_path / "kubeconfig"
    port = server.getsockname()[1]
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    kube = connect(str(config)).with_timeout(0.3).fenced(lambda: True)
    t0 = time.monotonic()
    for call in (
        lambda: kube.get(RESOURCES["Lease"], "gangops", "sys"),
        lambda: kube.delete(RESOURCES["ConfigMap"], "x", namespace="sys"),
    ):
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == 0
    elapsed = time.monotonic() - t0
    server.close()
    for conn in accepted:
        conn.close()
    assert len(accepted) == 2, f"{len(accepted)} connections for 2 calls"
    assert elapsed < 1.5, f"2 calls of 0.3 s took {elapsed:.1f} s"


class DroppingApiClient(FakeApiClient):
    """Fails each call with the next of `errors` (None: answers)."""

    def __init__(self, *errors: Exception | None) -> None:
        super().__init__()
        self.errors = list(errors)

    def call_api(self, path: str, method: str, **kw: Any) -> _Response:
        self.calls.append({"path": path, "method": method, **kw})
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return _Response(kw.get("body"))


RESET = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104))
SEND_TIMED_OUT = urllib3.exceptions.ProtocolError("Connection aborted.", TimeoutError("timed out"))
REFUSED = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
TIMED_OUT = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "error", "sends"),
    [
        ("GET", RESET, 2),  # a pooled connection a load balancer forgot: sent again
        ("PUT", RESET, 2),
        ("DELETE", RESET, 2),
        ("PATCH", RESET, 1),  # not idempotent: it may have landed
        ("POST", RESET, 1),
        ("POST", REFUSED, 2),  # no connection: nothing was sent
        ("GET", TIMED_OUT, 1),  # may still land: never sent again
        ("DELETE", TIMED_OUT, 1),
        ("PUT", SEND_TIMED_OUT, 1),  # a send that timed out, which urllib3 calls aborted
    ],
)
def test_a_request_is_sent_again_only_where_its_connection_was_found_dead(
    method: str, error: Exception, sends: int
) -> None:
    """Found by a review of the fix that turned urllib3's retries off: the first GET,
    PUT or DELETE on a pooled connection that an idle-timeout load balancer had
    forgotten failed (a push webhook answered 503), where urllib3 had sent it again."""
    api = DroppingApiClient(error, None)
    kube = Kube(api)  # type: ignore[arg-type]
    try:
        kube._call(method, "/api/v1/namespaces/sys/configmaps/x")
        answered = True
    except ApiError as e:
        assert e.status == 0 and e.reason == "Unreachable"
        answered = False
    assert (len(api.calls), answered) == (sends, sends == 2)


class TlsResetApiClient(FakeApiClient):
    """Fails the first call as the kubernetes client does on an SSLError: rest.py
    raises an ApiException of status 0 with no body, and call_api, decoding that
    body, raises AttributeError from it."""

    def call_api(self, path: str, method: str, **kw: Any) -> _Response:
        self.calls.append({"path": path, "method": method, **kw})
        if len(self.calls) > 1:
            return _Response(kw.get("body"))
        try:
            raise ApiException(status=0, reason="SSLError\nEOF occurred in violation of protocol")
        except ApiException as e:
            e.body.decode("utf-8")  # type: ignore[attr-defined]
        raise AssertionError("unreachable")


@pytest.mark.parametrize(("method", "sends"), [("GET", 2), ("DELETE", 2), ("PATCH", 1)])
def test_a_tls_connection_reset_is_an_api_error_and_sent_again_where_idempotent(
    method: str, sends: int
) -> None:
    """Found checking the fix above on a real API server: a PATCH on a TLS connection
    a load balancer had reset escaped as AttributeError, the client's own defect."""
    api = TlsResetApiClient()
    try:
        Kube(api)._call(method, "/api/v1/namespaces/sys/configmaps/x")  # type: ignore[arg-type]
    except ApiError as e:
        assert (e.status, e.reason) == (0, "Unreachable") and "SSLError: EOF" in e.message
    assert len(api.calls) == sends


class NotUtf8ApiClient(FakeApiClient):
    """Answers 503 with a Latin-1 page, as a proxy in front of the API server may: the
    kubernetes client fails decoding the body of the ApiException it raises."""

    def call_api(self, path: str, method: str, **kw: Any) -> _Response:
        self.calls.append({"path": path, "method": method, **kw})
        e = ApiException(status=503, reason="Service Unavailable")
        e.body = "Service indisponible, réessayez".encode("latin-1")
        try:
            raise e
        except ApiException as raised:
            raised.body = raised.body.decode("utf-8")
        raise AssertionError("unreachable")


def test_a_refusal_whose_body_is_not_utf8_is_an_api_error() -> None:
    """Found by a review: the UnicodeDecodeError escaped `_call`, and the alert actor,
    taking it for a defect of its own, dropped a one-shot resolve."""
    with pytest.raises(ApiError) as refused:
        Kube(NotUtf8ApiClient())._call("GET", "/api/v1/nodes")  # type: ignore[arg-type]
    assert refused.value.status == 503 and refused.value.transient
    assert "Service indisponible, r\ufffd" in refused.value.message


def test_a_write_sent_again_passes_the_fence_again() -> None:
    fence = iter([True, False])
    api = DroppingApiClient(RESET, None)
    kube = Kube(api).fenced(lambda: next(fence))  # type: ignore[arg-type]
    with pytest.raises(NotLeaderError):
        kube._call("PUT", "/api/v1/namespaces/sys/configmaps/x", body={})
    assert len(api.calls) == 1
