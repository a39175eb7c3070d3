"""Telling a reconcile's outcome: the status written, the metrics, the log line, the Events.

`status` assembles what to write (pure); this writes it, only when it
changed, and `assume`s it into the informer, counts the outcome, logs one
line per reconcile and records an Event only when something happened (a
write, or a status newly refused).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from controller.kube.client import RESOURCES, ApiError, KubeApi
from controller.kube.clock import Clock
from controller.kube.events import EventRecorder
from controller.kube.informer import Informer
from controller.reconciler.apply import FIELD_MANAGER, Ref, SyncResult
from controller.reconciler.metrics import ReconcilerMetrics
from controller.reconciler.status import STALLING, kstatus, outcome, progressing, source_status

__all__ = ["Reporter"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_SOURCE = RESOURCES["PolicySource"]


class Reporter:
    """Writes the status of PolicySources and policy custom resources."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        sources: Informer,
        policy_crs: dict[str, Informer],
        metrics: ReconcilerMetrics,
        clock: Clock,
    ) -> None:
        self._kube = kube
        self._sources = sources
        self._policy_crs = policy_crs
        self.metrics = metrics
        self._clock = clock
        self._events = EventRecorder(kube, component="gangops", clock=clock)

    def progressing(self, obj: Obj, revision: str) -> None:
        """Say that `revision` is being applied."""
        self._write_status(obj, progressing(obj, revision, now=self._clock.now()))

    def finish(
        self,
        obj: Obj,
        *,
        inventory: Iterable[Ref],
        revision: str | None,
        reason: str,
        message: str,
        result: SyncResult | None = None,
    ) -> None:
        """Write the source's status, count the outcome, log it and tell it in Events."""
        name = obj["metadata"]["name"]
        refs = sorted(inventory, key=Ref.rank)
        ok = result is not None and result.ok
        status = source_status(
            obj, ok=ok, reason=reason, message=message, revision=revision,
            inventory=[r.entry() for r in refs],
            now=self._clock.now(),
        )  # fmt: skip
        changed = self._write_status(obj, status)
        counted = outcome(ok=ok, writes=result.writes if result else 0, reason=reason)
        self.metrics.reconciles.labels(name, counted).inc()
        self.metrics.stalled.labels(name).set(1 if reason in STALLING else 0)
        self.metrics.objects.labels(name).set(len(refs))
        if ok:
            assert revision is not None
            self.metrics.set_revision(name, revision)
            self.metrics.last_success.labels(name).set(self._clock.now().timestamp())
        log.info(
            "reconciled source=%s result=%s reason=%s revision=%s %s",
            name,
            counted,
            reason,
            revision or "-",
            f"changes={result.summary()!r}" if result else f"message={message!r}",
        )
        if result is not None and result.writes:
            for ref in result.recreated:
                text = f"{ref} deleted and recreated (value or preemptionPolicy changed)"
                self._event(obj, "Warning", "PriorityClassRecreated", text)
            verb = "ReconciliationSucceeded" if ok else reason
            self._event(obj, "Normal" if ok else "Warning", verb, f"{revision}: {result.summary()}")
        elif not ok and changed:
            self._event(obj, "Warning", reason, message)

    def _write_status(self, obj: Obj, status: Obj) -> bool:
        """Patch status if it differs; True if it was written."""
        if status == (obj.get("status") or {}):
            return False
        name = obj["metadata"]["name"]
        try:
            out = self._kube.merge_patch(
                _SOURCE,
                name,
                {"status": status},
                field_manager=FIELD_MANAGER,
                subresource="status",
            )
        except ApiError as e:
            log.warning("status write failed source=%s error=%r", name, str(e))
            return False
        self._sources.assume(out)
        obj["status"] = out.get("status", status)
        return True

    def _event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self._events.record(
            obj,
            type="Normal" if type_ == "Normal" else "Warning",
            reason=reason,
            message=message,
        )

    def cr_status(self, obj: Obj, *, ok: bool, reason: str, message: str) -> None:
        """Write a policy custom resource's status: how its policy set fared."""
        old = obj.get("status") or {}
        status = kstatus(obj, ok=ok, reason=reason, message=message, now=self._clock.now())
        if status == old:
            return
        try:
            out = self._kube.merge_patch(
                RESOURCES[obj["kind"]],
                obj["metadata"]["name"],
                {"status": status},
                field_manager=FIELD_MANAGER,
                subresource="status",
            )
        except ApiError as e:
            log.warning(
                "status write failed object=%s/%s error=%r",
                obj["kind"],
                obj["metadata"]["name"],
                str(e),
            )
            return
        self._policy_crs[obj["kind"]].assume(out)
