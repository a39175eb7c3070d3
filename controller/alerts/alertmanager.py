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
millisecond, not by the text of its key.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from controller import httpread
from controller.alerts.payload import parse_time

__all__ = ["AlertmanagerApi", "AlertmanagerError", "HeldAlert", "Holdings", "parse_alerts"]

TIMEOUT_S = 5.0
"""The whole answer within this long: the actor's thread waits for it."""
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

    def __init__(self, alerts: Iterable[HeldAlert] = ()) -> None:
        self.alerts = tuple(alerts)
        self._by_fingerprint: dict[str, list[HeldAlert]] = {}
        for a in self.alerts:
            self._by_fingerprint.setdefault(a.fingerprint, []).append(a)

    def get(self, key: str) -> HeldAlert | None:
        """The alert of instance `key` (`fingerprint@startsAt`, as `Alert.key`
        writes it), or None when Alertmanager does not hold it."""
        fingerprint, _, starts = key.rpartition("@")
        try:
            t = parse_time(starts)
        except ValueError:
            return None
        for a in self._by_fingerprint.get(fingerprint, ()):
            if abs(a.starts_at - t) < 0.001:
                return a
        return None


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


def parse_alerts(body: bytes) -> Holdings:
    """The answer of `GET /api/v2/alerts` (a list of gettableAlert); raises
    `AlertmanagerError` saying what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise AlertmanagerError(f"the answer is not JSON: {e}") from None
    if not isinstance(doc, list):
        raise AlertmanagerError("the answer is not a list of alerts")
    return Holdings(_held(a, i) for i, a in enumerate(doc))


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

    def query(self, names: Iterable[str] = ()) -> str:
        """The request's URL: every alert it holds in any state, of the alert
        `names` only where each is a plain alert name (a matcher `alertname=~`)."""
        params = [(k, "true") for k in ("active", "silenced", "inhibited", "unprocessed")]
        wanted = sorted(set(names))
        if wanted and all(_NAME.fullmatch(n) for n in wanted):
            params.append(("filter", f'alertname=~"{"|".join(wanted)}"'))
        return f"{self.url.rstrip('/')}/api/v2/alerts?{urllib.parse.urlencode(params)}"

    def holdings(self, names: Collection[str] = ()) -> Holdings:
        """The alerts Alertmanager holds (of `names`, where given); raises
        `AlertmanagerError` where it cannot be asked or its answer cannot be read."""
        try:
            status, body = self.fetch(self.query(names), self.timeout_s)
        except (OSError, ValueError, http.client.HTTPException) as e:
            # OSError: URLError, refused, timed out; ValueError: BodyTooLarge
            raise AlertmanagerError(f"{type(e).__name__}: {e}") from None
        if status != 200:
            text = body[:200].decode("utf-8", "replace").strip()
            raise AlertmanagerError(f"HTTP {status}: {text}")
        return parse_alerts(body)
