"""Alertmanager's webhook receiver: `POST /alertmanager` on `gangops run`'s webhook
address, beside `/hook/<policysource>`.

It checks who is calling, as Alertmanager's `http_config` can prove it: a bearer
token (`authorization: {credentials_file: ...}`) or basic auth (`basic_auth:
{username, password_file}`), each compared in constant time with what the
controller read from its files (a mounted Secret). Without either configured every
request is refused: an open receiver would let anyone cordon the cluster. The body
limit is the server's (`Limits.max_body_bytes`, refused with 413 before it is read).

It acts on nothing: a valid payload's alerts go into the `Inbox` and the answer is
200 at once; the actor (controller/alerts/actor.py) drains the inbox. A full inbox,
or a replica that is not the leader, answers 503, which Alertmanager retries.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from controller.alerts.metrics import AlertMetrics
from controller.alerts.payload import Alert, PayloadError, parse
from controller.httpserver import Request, Response, text
from controller.secretfile import SecretFile

__all__ = ["PATH", "CredentialFiles", "Credentials", "Inbox", "Received", "Receiver"]

log = logging.getLogger(__name__)

PATH = "/alertmanager"


@dataclass(frozen=True)
class Credentials:
    """What a caller must present; empty: nothing is accepted."""

    token: bytes = b""
    username: bytes = b""
    password: bytes = b""

    @property
    def configured(self) -> bool:
        return bool(self.token or self.password)

    def check(self, headers: Mapping[str, str]) -> str | None:
        """None when the request's Authorization header is accepted, else why not."""
        if not self.configured:
            return "the controller has no Alertmanager credentials configured"
        auth = headers.get("authorization", "")
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and self.token:
            if hmac.compare_digest(value.strip().encode(), self.token):
                return None
            return "the bearer token is wrong"
        if scheme.lower() == "basic" and self.password:
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return "the basic credentials are not base64"
            ok_user = hmac.compare_digest(user, self.username)
            if hmac.compare_digest(password, self.password) and ok_user:
                return None
            return "the basic credentials are wrong"
        return "no accepted Authorization header (Bearer or Basic)"


def _basic_auth(path: str, raw: bytes) -> tuple[bytes, bytes]:
    user, sep, password = raw.strip().partition(b":")
    if not sep or not user or not password:
        raise ValueError(f"{path}: expected one line user:password")
    return user, password


class CredentialFiles:
    """The bearer token from `token_file`, `user:password` from `basic_auth_file`
    (whitespace around either dropped), each read again when its file changes (a
    rotated Secret is honoured at once, as Alertmanager reads its own
    `credentials_file` on each delivery). Raises OSError or ValueError when a file
    cannot be read at start; later, an unreadable file keeps its last value."""

    def __init__(self, *, token_file: str | None, basic_auth_file: str | None) -> None:
        self._token = SecretFile(token_file, bytes.strip) if token_file else None
        self._basic = (
            SecretFile(basic_auth_file, partial(_basic_auth, basic_auth_file))
            if basic_auth_file
            else None
        )

    def current(self) -> Credentials:
        token = self._token.get() if self._token else b""
        user, password = self._basic.get() if self._basic else (b"", b"")
        return Credentials(token, user, password)

    def check(self, headers: Mapping[str, str]) -> str | None:
        """`Credentials.check` with the files as they are now."""
        return self.current().check(headers)


@dataclass(frozen=True)
class Received:
    """An alert with when it arrived (monotonic seconds)."""

    alert: Alert
    at: float


class Inbox:
    """The alerts received and not yet acted on: bounded, thread-safe."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._items: deque[Received] = deque()
        self._cond = threading.Condition()

    def put(self, alerts: list[Alert], at: float) -> bool:
        """Queue `alerts`; False (nothing queued) when they do not fit."""
        with self._cond:
            if len(self._items) + len(alerts) > self._capacity:
                return False
            self._items.extend(Received(a, at) for a in alerts)
            self._cond.notify()
            return True

    def put_back(self, items: Sequence[Received]) -> None:
        """Queue again, first and in their order, alerts taken that could not be
        acted on (they were accepted: the capacity does not refuse them)."""
        with self._cond:
            self._items.extendleft(reversed(items))
            self._cond.notify()

    def take(self, timeout_s: float, limit: int = 5000) -> list[Received]:
        """Up to `limit` alerts, waiting at most `timeout_s` for the first."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout_s)
            out: list[Received] = []
            while self._items and len(out) < limit:
                out.append(self._items.popleft())
            return out

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)


class Receiver:
    """The `/alertmanager` route."""

    def __init__(
        self,
        credentials: Credentials | CredentialFiles,
        inbox: Inbox,
        metrics: AlertMetrics,
        *,
        accepting: Callable[[], bool],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = credentials
        self._inbox = inbox
        self._metrics = metrics
        self._accepting = accepting
        self._monotonic = monotonic

    def __call__(self, request: Request) -> Response:
        m = self._metrics.deliveries
        if request.path != PATH:
            return text(404, "not found")
        if request.method != "POST":
            return text(405, "POST an Alertmanager webhook payload")
        problem = self._credentials.check(request.headers)
        if problem is not None:
            m.labels("unauthorized").inc()
            log.warning("alertmanager delivery refused reason=%r", problem)
            return text(401, problem)
        if not self._accepting():
            m.labels("not_leader").inc()
            return text(503, "this replica is not the leader; retry")
        try:
            alerts = parse(request.body)
        except PayloadError as e:
            m.labels("invalid").inc()
            return text(400, str(e))
        if not self._inbox.put(alerts, self._monotonic()):
            m.labels("queue_full").inc()
            return text(503, "too many alerts waiting; retry")
        m.labels("accepted").inc()
        self._metrics.queued.set(len(self._inbox))
        return text(200, f"{len(alerts)} alerts queued")
