"""A QuotaRequest, read: the spec, the branch names, the backoff, and the CLI's object."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from typing import Any

import pytest

from controller import cli
from controller.kube.client import ApiError
from controller.quota import cli as quota_cli
from controller.quota.cli import parse_for, request_object
from controller.quota.request import QuotaRequestSpec, backoff_s, branch_name, revert_branch


def test_the_cli_builds_a_request_labelled_with_the_authenticated_requester() -> None:
    at = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
    obj = request_object(
        name="r1",
        namespace="nlp",
        requester="alice",
        project="nlp",
        resource="gpu",
        amount="8",
        reason="run",
        expires_at=at,
        training_job="bert",
    )
    assert obj["metadata"]["labels"] == {"ai.operator/user": "alice"}
    assert obj["spec"] == {
        "project": "nlp",
        "resource": "gpu",
        "amount": 8,
        "reason": "run",
        "expiresAt": "2026-12-03T12:00:00Z",
        "trainingJob": "bert",
    }
    spec = QuotaRequestSpec.parse(obj)
    assert (spec.requester, spec.amount, spec.expires_at, spec.key) == (
        "alice",
        Fraction(8),
        at,
        ("nlp", "", "gpu"),
    )


@pytest.mark.parametrize(
    ("resource", "amount", "message"),
    [
        ("gpu", "0", "must be positive"),
        ("gpu", "1.5", "whole GPUs"),
        ("memory", "lots", "amount"),
        # the schema's maximum holds for a number only (noticed by a review)
        ("gpu", "1e12", "at most 1000000 GPUs"),
    ],
)
def test_what_the_schema_refuses_is_refused_with_a_reason(
    resource: str, amount: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        obj = {
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"project": "p", "resource": resource, "amount": amount, "reason": "x"},
        }
        QuotaRequestSpec.parse(obj)


def test_branches_are_deterministic_and_ref_safe() -> None:
    assert branch_name("nlp", None, "gpu") == "gangops/quota/nlp/gpu"
    assert branch_name("nlp", "alice", "memory") == "gangops/quota/nlp/user-alice/memory"
    odd = branch_name("nlp", "Alice@Example.com", "gpu")
    assert odd.startswith("gangops/quota/nlp/user-alice-example.com-") and ":" not in odd
    assert odd == branch_name("nlp", "Alice@Example.com", "gpu")
    assert odd != branch_name("nlp", "alice@example.com", "gpu")
    assert revert_branch("nlp", "burst") == "gangops/quota-revert/nlp/burst"


def test_the_backoff_doubles_from_two_seconds_to_five_minutes() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff_s(20) == backoff_s(1025) == 300  # retried for days: no OverflowError


def test_for_takes_minutes_hours_and_days() -> None:
    assert parse_for("90m") == dt.timedelta(minutes=90)
    assert parse_for("1d12h") == dt.timedelta(hours=36)
    with pytest.raises(ValueError, match="not a duration"):
        parse_for("soon")


@pytest.mark.parametrize("text", ["3651d", "3000000d", "9999999999d", "999999999999h"])
def test_for_longer_than_ten_years_is_refused_not_overflowed(text: str) -> None:
    """Found by a review: a date out of datetime's range raised OverflowError, a
    traceback where the command promises a usage error."""
    with pytest.raises(ValueError, match="is longer than 3650d"):
        parse_for(text)
    assert parse_for("3650d") == dt.timedelta(days=3650)


class _FlakyKube:
    """Creates what it is given; reads answer 503 `failures` times, then `state`."""

    def __init__(self, failures: int, error: ApiError) -> None:
        self.failures, self.error = failures, error

    def create(self, obj: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
        if obj["kind"] == "SelfSubjectReview":
            return {"status": {"userInfo": {"username": "alice"}}}
        return obj

    def get(self, *args: Any) -> dict[str, Any]:
        if self.failures:
            self.failures -= 1
            raise self.error
        return {"status": {"state": "Pending", "message": "pull request opened"}}


@pytest.mark.parametrize(
    ("error", "code", "said"),
    [
        (ApiError(503, "ServiceUnavailable", "restarting"), 0, "pull request opened"),
        (ApiError(403, "Forbidden", "cannot get quotarequests"), 1, "the request is made"),
    ],
)
def test_waiting_rides_out_a_passing_api_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: ApiError,
    code: int,
    said: str,
) -> None:
    """Found by a review: one 503 while waiting raised a traceback after the request
    was made; it is retried until --timeout, and a refusal says the request exists."""
    monkeypatch.setattr(quota_cli, "connect", lambda kubeconfig=None: _FlakyKube(2, error))
    monkeypatch.setattr(quota_cli.time, "sleep", lambda s: None)
    argv = ["quota", "request", "--project", "nlp", "--reason", "r", "--gpu", "2", "--wait"]
    assert cli.main(argv) == code
    out = capsys.readouterr()
    assert said in out.out + out.err
