"""Kubernetes Events: what `kubectl describe` and `kubectl events` show a person.

The reconciler records an Event when something happens to a policy source
(a revision applied, a revision refused, a class recreated), never on a
reconcile that changed nothing, so an idle controller writes nothing.
Events of cluster-scoped objects go to the `default` namespace, as
client-go's recorder does.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Literal

from controller.kube.client import ApiError, KubeApi, NotLeaderError
from controller.kube.clock import Clock, SystemClock

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

_MAX_MESSAGE = 1024


class EventRecorder:
    """Writes core/v1 Events for one component; failures are logged, never raised."""

    def __init__(self, kube: KubeApi, *, component: str, clock: Clock | None = None) -> None:
        self._kube = kube
        self._component = component
        self._clock = clock or SystemClock()
        self._seq = itertools.count()
        """Added to each Event's name, so two Events about one object in one clock
        tick (an admission and its refusal) do not collide."""

    def record(
        self,
        obj: dict[str, Any],
        *,
        type: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Record an Event about `obj` (which must carry apiVersion, kind and metadata.uid)."""
        meta = obj["metadata"]
        now = self._clock.now()
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = meta.get("namespace") or "default"
        tick = f"{int(now.timestamp() * 1e9):x}{next(self._seq) % 4096:03x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{tick}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
                **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
            },
            "type": type,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._kube.create(event, field_manager=self._component)
        except (ApiError, NotLeaderError) as e:
            log.warning(
                "could not record event reason=%s object=%s error=%r", reason, meta["name"], str(e)
            )
