"""argparse types the commands share: a number of seconds, a number or a count, with
the error argparse prints for a value that is not one."""

from __future__ import annotations

import argparse
import math
import urllib.parse

__all__ = [
    "http_url",
    "non_negative_count",
    "non_negative_number",
    "non_negative_seconds",
    "positive_count",
    "positive_number",
    "positive_seconds",
]


def _finite(raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):  # nan, inf: no timer or factor takes them
        raise argparse.ArgumentTypeError(f"expected {what}, got {raw!r}")
    return value


def _positive(value: float, raw: str) -> float:
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {raw!r}")
    return value


def _non_negative(value: float, raw: str) -> float:
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {raw!r}")
    return value


def positive_seconds(raw: str) -> float:
    """A number of seconds, more than 0."""
    return _positive(_finite(raw, "a number of seconds"), raw)


def non_negative_seconds(raw: str) -> float:
    """A number of seconds, 0 or more."""
    return _non_negative(_finite(raw, "a number of seconds"), raw)


def positive_number(raw: str) -> float:
    """A finite number, more than 0 (a factor, a mean)."""
    return _positive(_finite(raw, "a number"), raw)


def non_negative_number(raw: str) -> float:
    """A finite number, 0 or more."""
    return _non_negative(_finite(raw, "a number"), raw)


def _count(raw: str, least: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {raw!r}")
    return value


def non_negative_count(raw: str) -> int:
    """A whole number, 0 or more."""
    return _count(raw, 0)


def positive_count(raw: str) -> int:
    """A whole number, 1 or more."""
    return _count(raw, 1)


def http_url(raw: str) -> str:
    """An http:// or https:// address with a host (Prometheus', Alertmanager's), as given."""
    parsed = urllib.parse.urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected http://HOST[:PORT][/PATH], got {raw!r}")
    if parsed.query or parsed.fragment or raw.endswith(("?", "#")):
        # the API's paths and queries are appended to it
        raise argparse.ArgumentTypeError(
            f"expected http://HOST[:PORT][/PATH], without ?query or #fragment, got {raw!r}"
        )
    return raw
