"""A project's recent use of GPUs, from Prometheus: for reviewers and auto-approval.

The scheduler exports `gangops_gpus_allocated{project,user,kind}` (gang/metrics);
Prometheus keeps its history. Two instant queries per project, over the last
14 days at 10-minute resolution: the average and the peak of the GPUs the
project's admitted gangs held. Where Prometheus is not configured or does not
answer, the body says so and auto-approval rules with `minUsage` do not match.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["PrometheusUsage", "Usage"]

log = logging.getLogger(__name__)

WINDOW = "14d"
STEP = "10m"


@dataclass(frozen=True)
class Usage:
    average: float
    peak: float


def _get(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        body: bytes = r.read()
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
            doc = json.loads(self.fetch(url, self.timeout_s))
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("usage query failed url=%s error=%r", self.url, str(e))
            return None
        result = (doc.get("data") or {}).get("result") if doc.get("status") == "success" else None
        if not result:
            return None
        return float(result[0]["value"][1])

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
