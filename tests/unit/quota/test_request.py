"""A QuotaRequest, read: the spec, the branch names, the backoff, and the CLI's object."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest

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
    [("gpu", "0", "must be positive"), ("gpu", "1.5", "whole GPUs"), ("memory", "lots", "amount")],
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
    assert backoff_s(20) == 300


def test_for_takes_minutes_hours_and_days() -> None:
    assert parse_for("90m") == dt.timedelta(minutes=90)
    assert parse_for("1d12h") == dt.timedelta(hours=36)
    with pytest.raises(ValueError, match="not a duration"):
        parse_for("soon")
