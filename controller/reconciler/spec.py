"""A PolicySource, read: the custom resource's spec as a typed, defaulted value.

The CRD's schema (generated from schemas/policysource.schema.json) already
rejects malformed specs and fills defaults on the API server; this module
turns the raw dict into a frozen value the reconciler can rely on, applying
the same defaults for objects the API server never saw (unit tests, plans).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from controller.policy.sources import outside_repository
from controller.reconciler.git import GitRef

__all__ = [
    "ANNOTATION_REQUESTED",
    "MAX_TIMEOUT_S",
    "MIN_INTERVAL_S",
    "MIN_TIMEOUT_S",
    "PolicySourceSpec",
    "parse_duration",
    "revision_string",
]

ANNOTATION_REQUESTED = "gangops.ai/reconcile-requested-at"
"""Set (to any new value, usually a timestamp) to make the controller fetch and
reconcile at once; the value handled last is echoed in status.lastHandledReconcileAt."""

MIN_INTERVAL_S = 10.0
"""The shortest poll period: below it a source polls its Git server and writes its
status in a loop (`interval: 0s` made ~6 reconciles a second). The push webhook
is the way to react at once."""
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 600.0
"""The bounds of a Git operation's timeout: long enough for a large clone, short
enough that a remote that never answers is given up on (and said so) within
minutes, not an hour."""

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration such as `1m`, `90s` or `1h30m`."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration (examples: 30s, 1m, 1h30m)")
    return total


def revision_string(ref: GitRef, sha: str) -> str:
    """`<ref>@sha1:<commit>`, the form Flux uses."""
    return f"{ref.name}@sha1:{sha}" if not ref.commit else f"sha1:{sha}"


@dataclass(frozen=True)
class PolicySourceSpec:
    """`spec` of a PolicySource, with every default applied."""

    url: str
    ref: GitRef
    path: str = "."
    interval_s: float = 60.0
    timeout_s: float = 60.0
    secret_name: str | None = None
    suspend: bool = False
    prune: bool = True
    prune_namespaces: bool = False
    allow_recreate: bool = False

    @classmethod
    def parse(cls, spec: dict[str, Any]) -> PolicySourceSpec:
        """From the raw `spec`; raises ValueError on what the schema would have refused."""
        ref = spec.get("ref") or {}
        interval_s = parse_duration(str(spec.get("interval") or "1m"))
        if interval_s < MIN_INTERVAL_S:
            raise ValueError(
                f"interval {spec.get('interval')!r} is shorter than {MIN_INTERVAL_S:g}s "
                "(use the push webhook to reconcile at once)"
            )
        path = str(spec.get("path") or ".")
        if (why := outside_repository(path)) is not None:
            raise ValueError(why)
        timeout_s = parse_duration(str(spec.get("timeout") or "60s"))
        if not MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(
                f"timeout {spec.get('timeout')!r} is not between {MIN_TIMEOUT_S:g}s and "
                f"{MAX_TIMEOUT_S / 60:g}m"
            )
        return cls(
            url=str(spec["url"]),
            ref=GitRef(branch=ref.get("branch"), tag=ref.get("tag"), commit=ref.get("commit")),
            path=path,
            interval_s=interval_s,
            timeout_s=timeout_s,
            secret_name=(spec.get("secretRef") or {}).get("name"),
            suspend=bool(spec.get("suspend", False)),
            prune=bool(spec.get("prune", True)),
            prune_namespaces=bool(spec.get("pruneNamespaces", False)),
            allow_recreate=bool(spec.get("allowRecreate", False)),
        )
