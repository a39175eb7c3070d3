"""PolicySource specs (defaults, durations, revisions) and kstatus conditions."""

from __future__ import annotations

import datetime as dt

import pytest

from controller.reconciler.git import GitRef
from controller.reconciler.spec import PolicySourceSpec, parse_duration, revision_string
from controller.reconciler.status import conditions


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60), ("30s", 30), ("1h30m", 5400), ("1.5s", 1.5), ("250ms", 0.25)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "m", "1d", "1m 2s", "-1s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_spec_defaults() -> None:
    spec = PolicySourceSpec.parse({"url": "https://example.com/p.git"})
    assert spec.ref == GitRef() and spec.ref.name == "main"
    assert (spec.path, spec.interval_s, spec.timeout_s) == (".", 60, 60)
    assert spec.prune and not spec.prune_namespaces and not spec.allow_recreate
    assert not spec.suspend and spec.secret_name is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("interval", "0s", "interval '0s' is shorter than 10s"),
        ("interval", "9.5s", "interval '9.5s' is shorter than 10s"),
        ("timeout", "1h", "timeout '1h' is not between 1s and 10m"),
        ("timeout", "500ms", "timeout '500ms' is not between 1s and 10m"),
        ("path", "../policies", "path '../policies' leaves the repository"),
        ("path", "/policies/../..", "it is '..' from its top"),
    ],
)
def test_intervals_that_spin_and_timeouts_that_block_are_refused(
    field: str, value: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PolicySourceSpec.parse({"url": "https://example.com/p.git", field: value})
    ok = PolicySourceSpec.parse({"url": "u", "interval": "10s", "timeout": "10m", "path": "a..b/"})
    assert (ok.interval_s, ok.timeout_s, ok.path) == (10.0, 600.0, "a..b/")
    # written before the CRD refused '..': still read, as the root it names
    assert PolicySourceSpec.parse({"url": "u", "path": "policies/../teams"}).path


def test_ref_precedence_and_revision_strings() -> None:
    ref = GitRef(branch="main", tag="v1", commit="a" * 40)
    assert ref.refspecs() == [] and ref.describe() == f"commit {'a' * 40}"
    assert revision_string(GitRef(tag="v1"), "abc") == "v1@sha1:abc"
    assert revision_string(GitRef(), "abc") == "main@sha1:abc"
    assert GitRef(tag="v1").refspecs() == ["refs/tags/v1", "refs/tags/v1^{}"]


T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def test_ready_only_when_true_and_abnormal_conditions_only_while_true() -> None:
    ok = conditions(
        [], ready=True, reason="ReconciliationSucceeded", message="m", generation=3, now=T0
    )
    assert [c["type"] for c in ok] == ["Ready"]
    assert ok[0] == {
        "type": "Ready",
        "status": "True",
        "observedGeneration": 3,
        "reason": "ReconciliationSucceeded",
        "message": "m",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    stalled = conditions(
        ok, ready=False, reason="ValidationFailed", message="x", generation=3, now=T1, stalled=True
    )
    assert [(c["type"], c["status"]) for c in stalled] == [("Ready", "False"), ("Stalled", "True")]
    assert stalled[0]["lastTransitionTime"] == "2025-01-01T00:05:00Z"


def test_transition_time_moves_only_when_the_status_does() -> None:
    first = conditions([], ready=True, reason="A", message="a", generation=1, now=T0)
    again = conditions(first, ready=True, reason="A", message="a2", generation=2, now=T1)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert conditions(first, ready=True, reason="A", message="a", generation=1, now=T1) == first
