"""Alertmanager's webhook payload (version 4) read into alerts, and what is refused."""

from __future__ import annotations

import json
import re

import pytest

from controller.alerts.payload import PayloadError, parse, parse_time
from tests.unit.alerts.builders import LEAK, STARTS, alert, payload


def test_a_delivery_reads_into_alerts_with_node_gpu_pod_and_instance_key() -> None:
    [a] = parse(payload(alert(LEAK, node="n7", gpu=3, fp="abc", pod=("team-a", "train-0"))))
    assert (a.name, a.status, a.node, a.gpu, a.pod) == (
        LEAK,
        "firing",
        "n7",
        3,
        ("team-a", "train-0"),
    )
    assert a.key == f"abc@{STARTS}"
    assert a.ends_at is None  # Go's zero time: still firing


@pytest.mark.parametrize(
    ("node", "pod", "want_node", "want_pod"),
    [
        ("gpu-7.zone-a", ("team-a", "train-0"), "gpu-7.zone-a", ("team-a", "train-0")),
        ("../namespaces/kube-system/secrets/x", ("team-a", "t"), None, ("team-a", "t")),
        ("n1/status", ("kube-system/secrets", "x"), None, None),
        ("N1", ("team-a", "../x"), None, None),
        ("n" * 254, ("a.b", "t"), None, None),
    ],
)
def test_only_object_names_name_a_node_or_a_pod(
    node: str, pod: tuple[str, str], want_node: str | None, want_pod: tuple[str, str] | None
) -> None:
    """Label values go into the API's URL paths: one that is not a Node, namespace or
    Pod name names nothing (found by a review: they went in unescaped)."""
    [a] = parse(payload(alert(LEAK, node=node, gpu=3, fp="abc", pod=pod)))
    assert (a.node, a.pod) == (want_node, want_pod)


def test_times_with_nanoseconds_and_offsets() -> None:
    assert parse_time("2027-01-15T08:00:00Z") == 1_800_000_000.0
    assert parse_time("2027-01-15T08:00:00.123456789Z") == pytest.approx(1_800_000_000.123456)
    assert parse_time("2027-01-15T09:00:00+01:00") == 1_800_000_000.0
    # found with the API v2's times (milliseconds, the alert's offset): the offset's
    # digits were read as more of the fraction, and the offset was lost
    assert parse_time("2027-01-15T09:00:00.123+01:00") == pytest.approx(1_800_000_000.123)
    assert parse_time("2027-01-15T06:00:00.123456789-02:00") == pytest.approx(1_800_000_000.123456)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{", "not JSON"),
        (b"[]", "not a JSON object"),
        (json.dumps({"version": "3", "alerts": []}).encode(), "version '3'"),
        (json.dumps({"version": "4"}).encode(), "no alerts list"),
        (json.dumps({"version": "4", "alerts": [1]}).encode(), "alerts[0] is not an object"),
        (
            json.dumps({"version": "4", "alerts": [{"labels": {"a": 1}}]}).encode(),
            "labels is not an object of strings",
        ),
        (
            json.dumps(
                {"version": "4", "alerts": [{"labels": {}, "status": "firing",
                 "fingerprint": "f", "startsAt": "yesterday"}]}
            ).encode(),
            "not RFC 3339",
        ),
        (
            json.dumps(
                {"version": "4", "alerts": [{"labels": {}, "status": "firing",
                 "fingerprint": "f", "startsAt": STARTS}]}
            ).encode(),
            "no alertname",
        ),
    ],
)  # fmt: skip
def test_a_malformed_payload_is_refused_saying_why(body: bytes, why: str) -> None:
    with pytest.raises(PayloadError, match=re.escape(why)):
        parse(body)
