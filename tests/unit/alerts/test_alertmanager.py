"""Alertmanager's API v2 alerts list (`GET /api/v2/alerts`) read into what it holds, the
request on the wire, and what is refused."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.parse
from dataclasses import replace
from typing import Any

import pytest

from controller.alerts.alertmanager import (
    SETTLE_S,
    AlertmanagerApi,
    AlertmanagerError,
    parse_alerts,
)
from controller.alerts.metrics import AlertMetrics
from controller.alerts.payload import parse_time
from controller.httpread import BodyTooLarge
from tests.unit.alerts.builders import LEAK, STARTS, XID, FakeAlertmanager, alert, held

LEAKING = alert(LEAK, fp="a1b2c3d4e5f60718")


def body(*alerts: Any) -> bytes:
    return json.dumps(list(alerts)).encode()


def test_an_instance_is_found_by_its_fingerprint_and_its_start_to_the_millisecond() -> None:
    """The API writes startsAt to the millisecond, the webhook (the entry's key) to the
    nanosecond: the text of the key never matches, the instant does."""
    holdings = parse_alerts(body(held(LEAKING, silenced_by=("s-1",))))
    a = holdings.get(LEAKING.key)
    assert a is not None and (a.state, a.silenced_by) == ("suppressed", ("s-1",))
    shifted = "2027-01-15T08:59:30.123+01:00"  # the same instant in another offset
    assert parse_alerts(body(held(LEAKING, starts=shifted))).get(LEAKING.key) is not None


@pytest.mark.parametrize(
    "key",
    [
        f"another@{STARTS}",  # another alert
        "a1b2c3d4e5f60718@2027-01-15T07:59:30.124456789Z",  # the same alert, a later instance
        "a1b2c3d4e5f60718@not-a-time",
    ],
)
def test_another_alert_or_an_instance_after_the_one_held_is_not_held(key: str) -> None:
    assert parse_alerts(body(held(LEAKING))).get(key) is None


def test_a_later_instance_of_the_alert_holds_the_entry_of_an_earlier_one() -> None:
    """Found by a review: under a silence the fault cleared and came back, a new
    instance Alertmanager sent neither the resolve nor the firing of; matched by its
    exact start only, the entry lapsed and the GPU went back into service."""
    again = replace(LEAKING, starts_at="2027-01-15T08:20:00.000Z")
    holdings = parse_alerts(body(held(again, silenced_by=("s-1",))))
    a = holdings.get(LEAKING.key)
    assert a is not None and a.silenced_by == ("s-1",)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"<html>", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'{"alerts": []}', "not a list of alerts"),
        (body(1), "alerts[0] is not an object"),
        (body({"startsAt": STARTS, "status": {"state": "active"}}), "fingerprint is missing"),
        (body({"fingerprint": "f", "status": {"state": "active"}}), "startsAt is missing"),
        (body({"fingerprint": "f", "startsAt": "yesterday", "status": {"state": "active"}}),
         "startsAt is not RFC 3339"),
        (body({"fingerprint": "f", "startsAt": STARTS}), "status.state is missing"),
        (body({"fingerprint": "f", "startsAt": STARTS, "status": {"state": "suppressed",
               "silencedBy": "s-1"}}), "silencedBy is not a list of strings"),
    ],
)  # fmt: skip
def test_an_answer_that_is_not_the_alerts_list_is_refused_saying_why(
    answer: bytes, why: str
) -> None:
    with pytest.raises(AlertmanagerError, match=re.escape(why)):
        parse_alerts(answer)


def test_the_request_asks_for_alerts_in_every_state_of_the_names_given() -> None:
    fake = FakeAlertmanager()
    fake.holds = [held(LEAKING)]
    api = AlertmanagerApi("http://am.monitoring:9093/prefix/", fetch=fake)
    assert api.holdings([XID, LEAK]).get(LEAKING.key) is not None
    [url] = fake.asked
    parts = urllib.parse.urlsplit(url)
    assert (parts.netloc, parts.path) == ("am.monitoring:9093", "/prefix/api/v2/alerts")
    assert urllib.parse.parse_qs(parts.query) == {
        "active": ["true"], "silenced": ["true"], "inhibited": ["true"], "unprocessed": ["true"],
        "filter": [f'alertname=~"{XID}|{LEAK}"'],
    }  # fmt: skip
    # a name that is not a plain alert name would need escaping: every alert is asked for
    assert "filter" not in api.query(['Gangops"X']) and "filter" not in api.query([])


@pytest.mark.parametrize(
    ("error", "answer", "why"),
    [
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), None, "refused"),
        (TimeoutError("answer not read whole in time"), None, "in time"),
        (BodyTooLarge("answer longer than 16777216 bytes"), None, "longer than"),
        (None, (503, b"not ready\n"), "HTTP 503: not ready"),
        (None, (200, b"<html>"), "not JSON"),
    ],
)
def test_an_alertmanager_that_cannot_be_asked_raises_one_error(
    error: Exception | None, answer: tuple[int, bytes] | None, why: str
) -> None:
    fake = FakeAlertmanager()
    fake.error, fake.answer = error, answer
    with pytest.raises(AlertmanagerError, match=re.escape(why)):
        AlertmanagerApi("http://am:9093", fetch=fake).holdings([LEAK])


def test_a_slow_answer_is_given_up_on_the_wall_clock_and_not_asked_again_beside() -> None:
    """Found by a review: the timeout was per socket operation, and a server that
    trickled its answer (or a Service of several addresses that do not answer) held
    the actor's thread for 44 s while a new fault on another node waited."""
    release = threading.Event()

    def trickling(url: str, timeout_s: float) -> tuple[int, bytes]:
        release.wait(10)
        if url.endswith("/status"):
            return 200, b'{"uptime": "2027-01-01T00:00:00Z"}'
        return 200, b"[]"

    api = AlertmanagerApi("http://am:9093", timeout_s=0.2, fetch=trickling)
    t0 = time.monotonic()
    with pytest.raises(AlertmanagerError, match=re.escape("no answer within 0.2 s")):
        api.holdings([LEAK])
    with pytest.raises(AlertmanagerError, match="still no answer to the question asked before"):
        api.holdings([LEAK])
    assert time.monotonic() - t0 < 2
    release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the first question ends; the next is asked
        try:
            api.holdings([LEAK])
            break
        except AlertmanagerError:
            time.sleep(0.05)
    else:
        raise AssertionError("never asked again")


def test_the_answer_says_when_alertmanager_started() -> None:
    fake = FakeAlertmanager()
    fake.uptime = "2027-01-15T08:00:00.000Z"
    holdings = AlertmanagerApi("http://am:9093", fetch=fake).holdings([LEAK])
    started = parse_time(fake.uptime)
    assert holdings.started_at == started
    assert not holdings.settled(started + SETTLE_S - 1) and holdings.settled(started + SETTLE_S)


def test_both_requests_share_the_questions_time() -> None:
    """Found by a review: the status and the alerts were each given the whole timeout,
    so a question outlived its wait, and the next tick found it still out."""
    given: list[float] = []
    fake = FakeAlertmanager()

    def slow(url: str, timeout_s: float) -> tuple[int, bytes]:
        given.append(timeout_s)
        time.sleep(0.3)
        return fake(url, timeout_s)

    AlertmanagerApi("http://am:9093", timeout_s=2.0, fetch=slow).holdings([LEAK])
    assert len(given) == 2 and given[0] <= 2.0 and given[1] <= 2.0 - 0.3


def test_a_defect_while_asking_is_said_as_what_it_is_not_as_a_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(url: str, timeout_s: float) -> tuple[int, bytes]:
        raise KeyError("uptime")

    with pytest.raises(AlertmanagerError, match="KeyError: 'uptime'"):
        AlertmanagerApi("http://am:9093", fetch=broken).holdings([LEAK])
    assert any("asking Alertmanager failed" in r.getMessage() for r in caplog.records)


def test_the_query_counts_exist_from_the_start() -> None:
    """Found by the alerts dashboard's integration test: a counter no one had
    incremented had no series, so its panel (and an alert on `increase(...) > 0`)
    showed nothing."""
    registry = AlertMetrics().registry
    for result in ("ok", "failed"):
        value = registry.get_sample_value("gangops_alertmanager_queries_total", {"result": result})
        assert value == 0.0, result
