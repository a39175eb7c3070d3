"""A project's recent use of GPUs, from Prometheus: for reviewers and auto-approval.

The scheduler exports `gangops_gpus_allocated{project,user,kind}` (gang/metrics);
Prometheus keeps its history. Two instant queries per project, over the last
14 days at 10-minute resolution: the average and the peak of the GPUs the
project's admitted gangs held. Where Prometheus is not configured or does not
answer, the body says so and auto-approval rules with `minUsage` do not match.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from controller import httpread

__all__ = ["PrometheusUsage", "Usage"]

log = logging.getLogger(__name__)

WINDOW = "14d"
STEP = "10m"


@dataclass(frozen=True)
class Usage:
    average: float
    peak: float


ANSWER_LIMIT = 1024 * 1024
"""An instant query for one scalar answers in well under a KiB."""


class QueryFailed(Exception):
    """Prometheus answered, but not with a usable number."""


def _get(url: str, timeout_s: float) -> bytes:
    status, body = httpread.get(url, timeout_s=timeout_s, limit_bytes=ANSWER_LIMIT)
    if status >= 400:
        raise QueryFailed(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
    return body


@dataclass
class PrometheusUsage:
    url: str
    timeout_s: float = 5.0
    fetch: Callable[[str, float], bytes] = field(default=_get)
    """The HTTP seam (url, timeout) -> body; tests answer with recorded bodies."""

    def _scalar(self, query: str) -> float | None:
        url = f"{self.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            return _number(json.loads(self.fetch(url, self.timeout_s)))
        except (QueryFailed, OSError, ValueError, http.client.HTTPException) as e:
            # OSError: urllib's URLError and timeouts; ValueError: not JSON, or too long
            log.warning("usage query failed url=%s error=%r", self.url, str(e))
            return None

    def usage(self, project: str) -> Usage | None:
        """The project's average and peak GPUs held over the last 14 days."""
        series = f'sum(gangops_gpus_allocated{{project="{project}"}})'
        average = self._scalar(f"avg_over_time({series}[{WINDOW}:{STEP}])")
        peak = self._scalar(f"max_over_time({series}[{WINDOW}:{STEP}])")
        if average is None or peak is None:
            return None
        return Usage(average, peak)

    def markdown(self, project: str, max_gpus: float | None) -> str | None:
        """The usage as a sentence for the pull request, or None."""
        u = self.usage(project)
        if u is None:
            return None
        of = f" of its max {max_gpus:g}" if max_gpus else ""
        return (
            f"Over the last 14 days project `{project}` held {u.average:.1f} GPUs on average "
            f"and {u.peak:g} at the peak{of} (Prometheus: `gangops_gpus_allocated`)."
        )

    def fraction(self, project: str, max_gpus: float | None) -> float | None:
        """Average use over the window as a share of `max_gpus`."""
        u = self.usage(project)
        return None if u is None or not max_gpus else u.average / max_gpus


def _number(doc: object) -> float | None:
    """The value of an instant query's first sample; None where it has none (no
    series: the project held no GPU in the window)."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise QueryFailed(f"not a successful answer: {str(doc)[:200]}")
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise QueryFailed("no result in the answer")
    if not result:
        return None
    try:
        v = float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        raise QueryFailed(f"not a sample: {str(result[0])[:200]}") from None
    if math.isnan(v) or math.isinf(v):
        raise QueryFailed(f"not a number: {v}")
    return v
