"""The policy custom resources as one more policy source.

ClusterPolicy, PriorityTier and Project objects applied by Argo CD, Flux or
kubectl are read as the policy files they hold (`<kind>/<name>.yaml`, pure
`cr_source`), and together form one policy set whose revision is a digest of
their names and generations (`build_crs`). `CrSource` reconciles them through
the reconciler's one apply path, under the source name `CR_SOURCE`; each
custom resource's status says how its set fared. Mixing them with
PolicySources is refused (MixedSources), in both directions.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from controller.kube.client import FIELD_MANAGER
from controller.kube.informer import Informer
from controller.policy.build import Built, build
from controller.policy.compiler import ANNOTATION_SOURCE
from controller.policy.loader import Source
from controller.reconciler.apply import LABEL_SOURCE, Ref, SyncOptions, SyncResult
from controller.reconciler.metrics import ReconcilerMetrics
from controller.reconciler.report import Reporter
from controller.reconciler.status import STALLING, diagnostics_text

__all__ = [
    "CR_SOURCE",
    "POLICY_KINDS",
    "CrSource",
    "build_crs",
    "cr_path",
    "cr_revision",
    "cr_source",
    "mixed_sources",
]

log = logging.getLogger(__name__)

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
    return Source(path=cr_path(obj), size=len(data), read=lambda: data)


def cr_path(obj: Obj) -> str:
    """The file a policy custom resource is read as (`cr_source`): `<kind>/<name>.yaml`,
    as compiled objects name it in their source-file annotation."""
    return f"{obj['kind'].lower()}/{obj['metadata']['name']}.yaml"


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


_ROOT = "custom resources"
"""The set's root, and the source file of what is made of the set as a whole (the
scheduler's policy ConfigMap)."""


def build_crs(crs: Sequence[Obj], *, system_namespace: str) -> tuple[str, Built]:
    """The custom resources' policy set, validated and compiled, and its revision."""
    sources = [cr_source(o) for o in crs]
    revision = cr_revision(crs, sources)
    built = build(
        sources,
        root=_ROOT,
        resolve=lambda _: None,
        revision=revision,
        system_namespace=system_namespace,
    )
    return revision, built


class _Informers(Protocol):
    """What `CrSource` reads of the reconciler: its informers, settings and metrics."""

    @property
    def policy_crs(self) -> Mapping[str, Informer]: ...
    @property
    def sources(self) -> Informer: ...
    @property
    def managed(self) -> Mapping[str, Informer]: ...
    @property
    def settings(self) -> Any: ...
    @property
    def metrics(self) -> ReconcilerMetrics: ...


Apply = Callable[[list[Obj], Iterable[Ref], SyncOptions], SyncResult]


def _applied_by_us(obj: Obj) -> bool:
    """Whether the reconciler's field manager applied `obj` (server-side apply)."""
    return any(
        e.get("manager") == FIELD_MANAGER and e.get("operation") == "Apply"
        for e in obj["metadata"].get("managedFields") or ()
    )


def _source_of(obj: Obj) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(LABEL_SOURCE)


class CrSource:
    """The policy custom resources, reconciled as one policy set."""

    def __init__(
        self,
        informers: _Informers,
        *,
        apply: Apply,
        report: Reporter,
        max_diagnostics: int,
        corrected: Callable[[SyncResult], None] = lambda result: None,
    ) -> None:
        self._informers = informers
        self._apply_revision = apply
        self._report = report
        self._max_diagnostics = max_diagnostics
        self._corrected = corrected
        """Told of a sync that wrote while the revision applied was unchanged: drift
        corrected (the reconciler slows a fight over an object, as for a PolicySource)."""
        self._applied: str | None = None
        """The revision last applied in full."""
        self._good: list[Obj] | None = None
        """Its objects: while a newer set is refused as a whole, what drifts is put
        back from them. Held in memory only: custom resources keep no history, so
        after a restart there is none until a set is applied again."""

    def reconcile(self) -> tuple[bool, str] | None:
        """Reconcile the policy custom resources as one policy set; each CR's status says
        how its set fared, and so does the result: (ok, reason). Nothing happens (None)
        while there are none."""
        crs = [o for inf in self._informers.policy_crs.values() for o in inf.items()]
        if not crs:
            return None
        crs.sort(key=lambda o: (POLICY_KINDS.index(o["kind"]), o["metadata"]["name"]))
        ok, reason, message = self._apply(crs)
        for obj in crs:
            self._report.cr_status(obj, ok=ok, reason=reason, message=message)
        return ok, reason

    def _apply(self, crs: list[Obj]) -> tuple[bool, str, str]:
        """Build and apply the custom resources' policy set: (ok, reason, message)."""
        sources = self._informers.sources.items()
        # A PolicySource named CR_SOURCE is refused, never applied: it mixes nothing.
        if names := [n for o in sources if (n := o["metadata"]["name"]) != CR_SOURCE]:
            text = mixed_sources("PolicySources", names, besides="policy custom resources")
            return False, "MixedSources", text
        revision, built = build_crs(crs, system_namespace=self._informers.settings.system_namespace)
        # What this source applied, as the API server says (managedFields): unlike
        # a Git source it records no inventory, and its label alone is anyone's to
        # copy (`kubectl get -o yaml`): an object made so is not pruned.
        labelled = [o for inf in self._informers.managed.values() for o in inf.items()]
        inventory = {
            Ref.of(o) for o in labelled if _source_of(o) == CR_SOURCE and _applied_by_us(o)
        }
        present = {cr_path(o) for o in crs}
        if built.objects is None:
            self._keep_good(inventory, present)
            return False, "ValidationFailed", diagnostics_text(built.errors, self._max_diagnostics)
        synced = self._apply_revision(built.objects, inventory, SyncOptions(source=CR_SOURCE))
        ok, reason = synced.ok, synced.reason
        if synced.writes and revision == self._applied:
            self._corrected(synced)
        if ok:
            self._applied, self._good = revision, built.objects
        elif reason in STALLING:  # refused as a whole: nothing of it applied
            self._keep_good(inventory, present)
        counted = "applied" if synced.writes else ("unchanged" if ok else "stalled")
        self._informers.metrics.reconciles.labels(CR_SOURCE, counted).inc()
        log.info(
            "reconciled source=%s result=%s reason=%s changes=%r",
            CR_SOURCE, "ok" if ok else "refused", reason, synced.summary(),
        )  # fmt: skip
        return ok, reason, f"Applied revision: {revision}" if ok else synced.message

    def _keep_good(self, inventory: set[Ref], present: set[str]) -> None:
        """While the newest set is refused as a whole (invalid, or refused by the
        dry-run), keep the cluster equal to the last set applied, as a PolicySource
        keeps its last good revision: what drifted (a ResourceQuota deleted or
        raised by hand) is applied again from it, and nothing is pruned. Unlike a
        revision's files, each custom resource goes on its own: what was made from
        one that is gone (`present` names those left, as `cr_path` files) is not
        made again, so one team's refused edit does not undo another's deletion."""
        if self._good is None:
            return
        kept = [
            o
            for o in self._good
            if (o["metadata"].get("annotations") or {}).get(ANNOTATION_SOURCE, "")
            in present | {_ROOT}
        ]
        options = SyncOptions(source=CR_SOURCE, prune=False, prune_namespaces=False)
        result = self._apply_revision(kept, inventory, options)
        if result.writes:
            log.info(
                "drift corrected from the applied set source=%s revision=%s changes=%r",
                CR_SOURCE, self._applied, result.summary(),
            )  # fmt: skip
            self._corrected(result)
