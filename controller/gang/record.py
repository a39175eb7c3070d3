"""The scheduler's decision, as recorded on the TrainingJob before anything else happens.

A decision is written into the job's `status.admission` before any pod is
created, bound or evicted, so the record — not the process's memory — is
the truth: a controller restarted after a crash at any point reads the
records back and finishes or rolls back each one. Two states:

- `Admitted`: the gang owns `pods` (node and GPU devices per worker) for
  attempt `attempt`; worker pods are named after the attempt, so a pod is
  never created twice and a later attempt never collides with an old one;
- `Nominated`: the gang preempted `victims` (each with the attempt that was
  evicted) and elastic gangs it `shrinks` (each with the attempt shrunk and
  the workers it keeps), and holds `pods` until their GPUs are free.

A resized elastic gang gets a new `Admitted` record: the next attempt, at its
new size.

A record also keeps what it admitted (`shape`: the tier, the gang's size and each
worker's requests, as the job's spec writes them), so a spec edited afterwards is
told from the one that was admitted: the owner may edit a running job, and its
pods keep what they were created with whatever the spec says now. Only the spec
is compared, not what the policies make of it: a new policy (another default
tier, other default requests) changes what every job's spec means at once, and
restarts none.

The rest of the status the controller keeps (`attempts`, `restarts`,
`rollbacks`, `notBefore`, `preemptedAt`, `shrunkAt`) is read here too. Pure: dicts in,
values out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.jobs.spec import JobSpec
from controller.scheduler.types import MILLI, JobId, Placement, PodPlacement

__all__ = ["Admission", "Shape", "format_time", "parse_time", "status_number"]


def format_time(seconds: float) -> str:
    """Epoch seconds as an RFC 3339 timestamp with microseconds (UTC)."""
    t = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(raw: object) -> float | None:
    """An RFC 3339 timestamp as epoch seconds, or None."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def status_number(status: Mapping[str, Any], key: str) -> int:
    """An integer status field (0 when absent or malformed)."""
    value = status.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Shape:
    """What a record admitted, as the job's spec wrote it (`status.admission.shape`):
    its tier (`spec.priority`; '' when unset, the project's default), its gangSize in
    workers, and what each worker's template asks for itself (no LimitRange
    defaults)."""

    tier: str
    workers: int
    gpus: int
    gpu_milli: int
    cpu_milli: int
    memory: int

    @classmethod
    def of(cls, spec: JobSpec) -> Shape:
        cpu, memory = spec.asked
        return cls(
            spec.tier or "", spec.workers, spec.gpus_per_worker, spec.pod.gpu_milli, cpu, memory
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "workers": self.workers,
            "gpusPerWorker": self.gpus,
            "gpuMilli": self.gpu_milli,
            "cpuMilli": self.cpu_milli,
            "memoryBytes": self.memory,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Shape:
        return cls(
            str(raw["tier"]),
            int(raw["workers"]),
            int(raw["gpusPerWorker"]),
            int(raw["gpuMilli"]),
            int(raw["cpuMilli"]),
            int(raw["memoryBytes"]),
        )

    def differs(self, other: Shape) -> str:
        """What changed from this shape to `other`, in words ('' when nothing)."""

        def said(k: str, value: object) -> object:
            return "(the project's default)" if k == "tier" and not value else value

        return ", ".join(
            f"{label} {said(k, getattr(self, k))} -> {said(k, getattr(other, k))}"
            for k, label in _SHAPE_WORDS.items()
            if getattr(self, k) != getattr(other, k)
        )


_SHAPE_WORDS = {
    "tier": "tier",
    "workers": "gangSize (workers)",
    "gpus": "GPUs per worker",
    "gpu_milli": "GPU share (milli)",
    "cpu_milli": "CPU (milli)",
    "memory": "memory (bytes)",
}


def _shape(raw: object) -> Shape | None:
    """A record's shape; None when absent or malformed (the record is still read)."""
    if not isinstance(raw, Mapping):
        return None
    try:
        return Shape.from_dict(raw)
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Admission:
    """One recorded decision (`status.admission`)."""

    state: Literal["Admitted", "Nominated"]
    attempt: int
    """The gang attempt this decision is for (worker pods are `<job>-<attempt>-<rank>`)."""
    placement: Placement
    at: float
    """When the decision was made (epoch seconds): gang timeouts count from here."""
    borrowed_milli: int = 0
    victims: tuple[tuple[JobId, int], ...] = ()
    """For a nomination: each evicted job and the attempt it was evicted from."""
    shrinks: tuple[tuple[JobId, int, int], ...] = ()
    """For a nomination: each elastic job shrunk, the attempt shrunk, and the
    workers it keeps (the first ones of its placement)."""
    shape: Shape | None = None
    """What was admitted (None in records written before it was kept)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON written into `status.admission`."""
        out: dict[str, Any] = {
            "state": self.state,
            "attempt": self.attempt,
            "decidedAt": format_time(self.at),
            "pods": [{"node": p.node, "devices": list(p.devices)} for p in self.placement.pods],
            "borrowedGPUs": self.borrowed_milli / MILLI,
        }
        if self.victims:
            out["victims"] = [{"job": j, "attempt": a} for j, a in self.victims]
        if self.shrinks:
            out["shrinks"] = [{"job": j, "attempt": a, "workers": w} for j, a, w in self.shrinks]
        if self.shape is not None:
            out["shape"] = self.shape.to_dict()
        return out

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Admission | None:
        """The record in a job's status, or None (also for a malformed one)."""
        raw = status.get("admission")
        if not isinstance(raw, Mapping):
            return None
        try:
            state = raw["state"]
            if state not in ("Admitted", "Nominated"):
                return None
            at = parse_time(raw["decidedAt"])
            if at is None:
                return None
            pods = tuple(
                PodPlacement(str(p["node"]), tuple(int(d) for d in p["devices"]))
                for p in raw["pods"]
            )
            victims = tuple(
                (JobId(str(v["job"])), int(v["attempt"])) for v in raw.get("victims", ())
            )
            shrinks = tuple(
                (JobId(str(v["job"])), int(v["attempt"]), int(v["workers"]))
                for v in raw.get("shrinks", ())
            )
            return cls(
                state=state,
                attempt=int(raw["attempt"]),
                placement=Placement(pods),
                at=at,
                borrowed_milli=int(float(raw.get("borrowedGPUs", 0)) * MILLI),
                victims=victims,
                shrinks=shrinks,
                shape=_shape(raw.get("shape")),
            )
        except (KeyError, TypeError, ValueError):
            return None
