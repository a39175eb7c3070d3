"""The one doubling wait every retry loop uses."""

from __future__ import annotations

from controller.backoff import doubled


def test_the_wait_doubles_to_its_cap_and_stays_there_after_any_number_of_failures() -> None:
    assert [doubled(2.0, n, 300.0) for n in (0, 1, 2, 3, 9, 10)] == [2, 2, 4, 8, 300, 300]
    # Found by a review: 2 ** 1024 is past a float; a gang whose pods never start is
    # rolled back for ever, and at its 1,025th rollback every step crashed.
    assert doubled(5.0, 1025, 300.0) == doubled(5.0, 10**9, 300.0) == 300.0
