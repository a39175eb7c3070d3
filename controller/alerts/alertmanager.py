"""Which alerts Alertmanager still holds, from its API v2: asked before an alert lapses.

With the policy's `resolveTimeoutSeconds`, an alert Alertmanager has not sent again
for that long lapses (its resolve taken as lost). But Alertmanager sends nothing for
an alert that is silenced or inhibited, and the fault behind it may well persist.
With `gangops run --alertmanager-url`, the actor asks `GET /api/v2/alerts` (active,
silenced, inhibited and unprocessed alike; resolved ones it does not list) before
an entry lapses, and an instance Alertmanager still holds does not.

An instance is its fingerprint and its `startsAt`. The webhook writes `startsAt` to
the nanosecond, the API to the millisecond (both in the offset the alert came
with), so an instance is matched by its fingerprint and its start to within a
millisecond, not by the text of its key. A later instance of the same alert (one
that resolved and fired again while silenced: Alertmanager sent neither) holds
the entry too: its fault is back.

An Alertmanager that has just started holds its silences (from disk) but no
alerts until Prometheus sends them again, within a minute or two: its answer is
taken as whole only once it has run `SETTLE_S` (`/api/v2/status`' `uptime`, read
against gangops' clock: keep the clocks in step, as Kubernetes needs anyway).
The question is answered within `TIMEOUT_S` of wall time, whatever the server
does, on a thread of its own: the actor's thread waits no longer.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from controller import httpread
from controller.alerts.payload import parse_time

__all__ = [
    "SETTLE_S",
    "AlertmanagerApi",
    "AlertmanagerError",
    "HeldAlert",
    "Holdings",
    "parse_alerts",
    "parse_started",
]

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
"""The whole answer within this long: the actor's thread waits for it."""
SETTLE_S = 300.0
"""How long a started Alertmanager takes to hold every alert again: Prometheus sends
firing alerts again every minute (`--rules.alert.resend-delay`), with slack."""
ANSWER_LIMIT = 16 * 1024 * 1024
"""About 1 KiB an alert: some 16,000 alerts of the names asked about."""
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
"""An alert name as the ClusterPolicy's schema allows it: nothing to escape in a regex."""


class AlertmanagerError(Exception):
    """Alertmanager could not be asked, or did not answer with API v2's alerts."""


@dataclass(frozen=True)
class HeldAlert:
    """One alert Alertmanager holds."""

    fingerprint: str
    starts_at: float
    """Epoch seconds, to the millisecond."""
    state: str
    """`active`, `suppressed` (silenced or inhibited) or `unprocessed`."""
    silenced_by: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()


class Holdings:
    """The alerts Alertmanager held when asked, by instance."""

    def __init__(self, alerts: Iterable[HeldAlert] = (), *, started_at: float = 0.0) -> None:
        self.started_at = started_at
        """When that Alertmanager started (epoch seconds; 0: long ago)."""
        self._by_fingerprint: dict[str, list[HeldAlert]] = {}
        for a in alerts:
            self._by_fingerprint.setdefault(a.fingerprint, []).append(a)

    def settled(self, now: float) -> bool:
        """Whether it has run long enough to hold every alert Prometheus fires."""
        return now - self.started_at >= SETTLE_S

    def get(self, key: str) -> HeldAlert | None:
        """The alert of instance `key` (`fingerprint@startsAt`, as `Alert.key`
        writes it), or of a later instance of the same alert; None when
        Alertmanager holds neither."""
        fingerprint, _, starts = key.rpartition("@")
        try:
            t = parse_time(starts)
        except ValueError:
            return None
        later = [a for a in self._by_fingerprint.get(fingerprint, ()) if a.starts_at > t - 0.001]
        return min(later, key=lambda a: a.starts_at, default=None)


def _ids(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AlertmanagerError(f"{where} is not a list of strings")
    return tuple(value)


def _held(raw: Any, i: int) -> HeldAlert:
    if not isinstance(raw, dict):
        raise AlertmanagerError(f"alerts[{i}] is not an object")
    fingerprint, starts, status = raw.get("fingerprint"), raw.get("startsAt"), raw.get("status")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise AlertmanagerError(f"alerts[{i}].fingerprint is missing")
    if not isinstance(starts, str):
        raise AlertmanagerError(f"alerts[{i}].startsAt is missing")
    try:
        t = parse_time(starts)
    except ValueError:
        raise AlertmanagerError(f"alerts[{i}].startsAt is not RFC 3339: {starts!r}") from None
    if not isinstance(status, dict) or not isinstance(status.get("state"), str):
        raise AlertmanagerError(f"alerts[{i}].status.state is missing")
    return HeldAlert(
        fingerprint,
        t,
        status["state"],
        _ids(status.get("silencedBy"), f"alerts[{i}].status.silencedBy"),
        _ids(status.get("inhibitedBy"), f"alerts[{i}].status.inhibitedBy"),
    )


def _json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise AlertmanagerError(f"{what} is not JSON: {e}") from None


def parse_alerts(body: bytes, *, started_at: float = 0.0) -> Holdings:
    """The answer of `GET /api/v2/alerts` (a list of gettableAlert), from an
    Alertmanager started at `started_at`; raises `AlertmanagerError` saying what is
    wrong."""
    doc = _json(body, "the answer")
    if not isinstance(doc, list):
        raise AlertmanagerError("the answer is not a list of alerts")
    return Holdings((_held(a, i) for i, a in enumerate(doc)), started_at=started_at)


def parse_started(body: bytes) -> float:
    """When Alertmanager started, from the answer of `GET /api/v2/status` (its
    `uptime`, an RFC 3339 time); raises `AlertmanagerError`."""
    doc = _json(body, "the status")
    uptime = doc.get("uptime") if isinstance(doc, dict) else None
    if not isinstance(uptime, str):
        raise AlertmanagerError("the status has no uptime")
    try:
        return parse_time(uptime)
    except ValueError:
        raise AlertmanagerError(f"the status' uptime is not RFC 3339: {uptime!r}") from None


Fetch = Callable[[str, float], tuple[int, bytes]]
"""The HTTP seam: (url, timeout_s) -> (status, body); raises urllib's errors."""


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    return httpread.get(url, timeout_s=timeout_s, limit_bytes=ANSWER_LIMIT)


@dataclass(frozen=True)
class AlertmanagerApi:
    """Alertmanager's API v2 at `url` (http(s)://HOST[:PORT][/PATH])."""

    url: str
    timeout_s: float = TIMEOUT_S
    fetch: Fetch = _get
    _asking: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)
    """Held while a question is out (its thread may outlive `timeout_s`)."""

    def query(self, names: Iterable[str] = ()) -> str:
        """The request's URL: every alert it holds in any state, of the alert
        `names` only where each is a plain alert name (a matcher `alertname=~`)."""
        params = [(k, "true") for k in ("active", "silenced", "inhibited", "unprocessed")]
        wanted = sorted(set(names))
        if wanted and all(_NAME.fullmatch(n) for n in wanted):
            params.append(("filter", f'alertname=~"{"|".join(wanted)}"'))
        return f"{self._api}/alerts?{urllib.parse.urlencode(params)}"

    @property
    def _api(self) -> str:
        return f"{self.url.rstrip('/')}/api/v2"

    def holdings(self, names: Collection[str] = ()) -> Holdings:
        """The alerts Alertmanager holds (of `names`, where given), and when it
        started; raises `AlertmanagerError` where it cannot be asked, its answer
        cannot be read, or it does not answer within `timeout_s` of wall time (a
        server that trickles its answer, or a Service of several addresses that do
        not answer, each given the socket's timeout). A question still unanswered
        from before is not asked again beside it."""
        if not self._asking.acquire(blocking=False):
            raise AlertmanagerError(f"still no answer to the question asked before ({self.url})")
        answer: list[Holdings | AlertmanagerError] = []

        deadline = time.monotonic() + self.timeout_s

        def ask() -> None:
            try:
                answer.append(self._ask(names, deadline))
            except AlertmanagerError as e:
                answer.append(e)
            except Exception as e:  # a defect here: said as what it is, not as a timeout
                log.exception("asking Alertmanager failed url=%s", self.url)
                answer.append(AlertmanagerError(f"{type(e).__name__}: {e}"))
            finally:
                self._asking.release()

        worker = threading.Thread(target=ask, name="alertmanager-query", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if not answer:
            raise AlertmanagerError(f"no answer within {self.timeout_s:g} s")
        if isinstance(answer[0], AlertmanagerError):
            raise answer[0]
        return answer[0]

    def _ask(self, names: Collection[str], deadline: float) -> Holdings:
        started = parse_started(self._read(f"{self._api}/status", deadline))
        return parse_alerts(self._read(self.query(names), deadline), started_at=started)

    def _read(self, url: str, deadline: float) -> bytes:
        """One GET, given what is left of the question's time."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise AlertmanagerError(f"no answer within {self.timeout_s:g} s")
        try:
            status, body = self.fetch(url, left)
        except (OSError, ValueError, http.client.HTTPException) as e:
            # OSError: URLError, refused, timed out; ValueError: BodyTooLarge
            raise AlertmanagerError(f"{type(e).__name__}: {e}") from None
        if status != 200:
            text = body[:200].decode("utf-8", "replace").strip()
            raise AlertmanagerError(f"HTTP {status}: {text}")
        return body
