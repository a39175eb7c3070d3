"""The policy custom resources as one more policy source. Pure.

ClusterPolicy, PriorityTier and Project objects applied by Argo CD, Flux or
kubectl are read as the policy files they hold (`<kind>/<name>.yaml`), and
together form one policy set whose revision is a digest of their names and
generations. They are applied under the source name `CR_SOURCE`; mixing
them with PolicySources is refused (MixedSources), in both directions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from controller.policy.loader import Source

__all__ = ["CR_SOURCE", "POLICY_KINDS", "cr_revision", "cr_source", "mixed_sources"]

Obj = dict[str, Any]

POLICY_KINDS = ("ClusterPolicy", "PriorityTier", "Project")
CR_SOURCE = "gangops-policy-crs"
"""The source name (and `gangops.ai/policysource` label) of the policy custom resources;
no PolicySource may have this name."""


def cr_source(obj: Obj) -> Source:
    """A policy custom resource as a policy file (`<kind>/<name>.yaml`), holding what a
    policy file holds: apiVersion, kind, name, labels, annotations and spec."""
    meta = obj["metadata"]
    doc = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            "name": meta["name"],
            **{k: dict(meta[k]) for k in ("labels", "annotations") if meta.get(k)},
        },
        "spec": obj.get("spec", {}),
    }
    annotations = doc["metadata"].get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        doc["metadata"].pop("annotations", None)
    data = json.dumps(doc, indent=2).encode()
    path = f"{obj['kind'].lower()}/{meta['name']}.yaml"
    return Source(path=path, size=len(data), read=lambda: data)


def cr_revision(crs: Sequence[Obj], sources: Sequence[Source]) -> str:
    """`crs@sha1:<digest>` of each custom resource's file name and generation."""
    digest = hashlib.sha1(
        "".join(
            f"{s.path}@{o['metadata'].get('generation')};"
            for s, o in zip(sources, crs, strict=True)
        ).encode()
    ).hexdigest()
    return f"crs@sha1:{digest}"


def mixed_sources(present: str, names: Iterable[str], *, besides: str) -> str:
    """Why two kinds of source are refused: `present` (naming up to five of
    `names`) exist `besides` the other kind."""
    listed = sorted(names)
    more = f" (and {len(listed) - 5} more)" if len(listed) > 5 else ""
    return (
        f"{present} exist ({', '.join(listed[:5])}{more}) as well as {besides}: use one "
        "kind of source; delete the custom resources or the PolicySources"
    )
