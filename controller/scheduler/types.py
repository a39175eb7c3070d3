"""Values the scheduling core works on: nodes, gangs, placements, decisions.

GPU amounts inside the core are in milli-GPUs (1000 = one whole GPU), so a
pod that asks for a share of one GPU (`gpu_milli < 1000`, as in the openb
traces) and a pod that asks for eight whole GPUs are counted on one scale.
Everything is frozen; the mutable state of a cycle lives in `snapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, NewType

__all__ = [
    "MILLI",
    "Admit",
    "Decision",
    "Gang",
    "JobId",
    "NamespaceQuota",
    "Node",
    "Pending",
    "Placement",
    "PodPlacement",
    "PodShape",
    "Preempt",
    "QuotaHold",
    "QuotaLimit",
    "Requirement",
    "Resize",
    "Running",
    "Taint",
    "Toleration",
    "format_gpus",
    "namespace_of",
]

MILLI = 1000


def format_gpus(milli: int) -> str:
    """Milli-GPUs as the GPU count a user reads (`1.5`, `8`)."""
    return f"{milli / MILLI:g}"


JobId = NewType("JobId", str)
"""`namespace/name` of a TrainingJob (or a trace pod's name in the simulator)."""


def namespace_of(job: JobId) -> str | None:
    """The namespace of a TrainingJob's id (None for a simulator's trace pod)."""
    ns, sep, _ = job.partition("/")
    return ns if sep else None


@dataclass(frozen=True)
class NamespaceQuota:
    """What the API server's ResourceQuotas let the pods of one namespace request
    in all: for each resource the tightest `hard` of its quotas (None: not
    limited). The API server refuses a pod past any of them, so a gang whose
    pods would not all fit is not admitted."""

    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory: int | None = None
    """Bytes."""
    pods: int | None = None

    def hard(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The limits in the order of `Usage`: GPUs (milli), CPU (milli), memory, pods."""
        return (self.gpu_milli, self.cpu_milli, self.memory, self.pods)


@dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Toleration:
    """A pod toleration; `operator` Exists ignores the value, an empty key matches all."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration covers `taint`."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True)
class Requirement:
    """A node selector requirement (`matchExpressions` of required node affinity)."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when a node with `labels` satisfies this requirement."""
        value = labels.get(self.key)
        op = self.operator
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op == "In":
            return value in self.values
        if op == "NotIn":
            return value not in self.values
        if value is None or not self.values:
            return False
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return number > bound if op == "Gt" else number < bound


@dataclass(frozen=True)
class Node:
    """A GPU node as the scheduler sees it."""

    name: str
    gpus: int
    """Whole GPUs (`nvidia.com/gpu` allocatable)."""
    cpu_milli: int = 0
    """Allocatable CPU in millicores; 0 means "not tracked"."""
    memory: int = 0
    """Allocatable memory in bytes; 0 means "not tracked"."""
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    """False when the node is not Ready, cordoned, or tainted by an alert action."""
    unhealthy: frozenset[int] = frozenset()
    """Indices of GPUs out of service (the node agent's annotation, or telemetry): the
    node offers `gpus - bad_gpus`. Which physical GPU a pod gets is the device
    plugin's choice, so the core counts them, conservatively: they are assumed to be
    among the free ones whenever they can be."""
    gpu_capacity: int = 0
    """GPUs installed (`nvidia.com/gpu` capacity); 0 when the Node does not say."""

    @property
    def out_of_service(self) -> frozenset[int]:
        """The `unhealthy` indices that name a GPU of this node: below its capacity,
        or below `gpus` when the capacity is not known."""
        installed = self.gpu_capacity or self.gpus
        return frozenset(i for i in self.unhealthy if 0 <= i < installed)

    @property
    def bad_gpus(self) -> int:
        """How many of `gpus` are held back: the node offers at most its allocatable
        and at most its capacity less the GPUs out of service. The device plugin
        already leaves a GPU it finds unhealthy out of allocatable (not out of
        capacity), and the agent reports the same GPU by index; subtracting it from
        allocatable again would take it out twice. Without a capacity, the indices
        below `gpus` are held back, as each may be one the plugin still offers."""
        bad = len(self.out_of_service)
        if not self.gpu_capacity:
            return bad
        return max(0, self.gpus - max(0, self.gpu_capacity - bad))


@dataclass(frozen=True)
class PodShape:
    """What each worker pod of a gang needs, and where it may run."""

    gpus: int = 1
    """Whole GPUs per pod; with `gpu_milli < 1000` it must be 1 (a shared GPU)."""
    gpu_milli: int = MILLI
    """Share of each GPU; less than 1000 only for single-GPU pods sharing a device."""
    cpu_milli: int = 0
    memory: int = 0
    gpu_models: frozenset[str] = frozenset()
    """Acceptable GPU models (empty: any)."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Required node labels (key, value), from nodeSelector."""
    affinity: tuple[tuple[Requirement, ...], ...] = ()
    """Required node affinity: any one term, each term all its requirements."""
    tolerations: tuple[Toleration, ...] = ()

    @property
    def shared(self) -> bool:
        """True for a pod asking for a share of one GPU."""
        return self.gpu_milli < MILLI

    @property
    def gpu_total(self) -> int:
        """Milli-GPUs one pod takes."""
        return self.gpu_milli if self.shared else self.gpus * MILLI

    def constraint_key(self) -> tuple[object, ...]:
        """What decides which nodes a pod may use at all (for caching): its GPU
        count too, since a node with fewer GPUs can never hold it."""
        return (self.gpus, self.gpu_models, self.node_selector, self.affinity, self.tolerations)


@dataclass(frozen=True)
class Gang:
    """A job's request: `workers` identical pods, placed all-or-nothing."""

    id: JobId
    project: str
    user: str
    tier: str
    priority: int
    """The tier's value; higher runs first."""
    created: float
    """Submission time, seconds on the caller's clock (ordering within a tier)."""
    workers: int
    pod: PodShape = PodShape()
    preemptible: bool = False
    """Whether the tier allows preempting this job."""
    may_preempt: bool = True
    """False for tiers with `preemptionPolicy: Never`."""
    min_workers: int | None = None
    """Elastic floor in workers: reclaiming may shrink a running gang to this;
    `None` means it never shrinks."""
    max_workers: int | None = None
    """Elastic ceiling in workers: idle GPUs may grow a running gang to this;
    `None` means it never grows."""
    base_workers: int | None = None
    """For a running gang resized away from its submitted size: that size
    (workers above it are elastic, and reclaimed first). `None`: `workers`."""
    expected_duration: float | None = None
    """Known runtime (simulator traces); lets a job backfill reserved GPUs if it ends first."""

    @property
    def gpu_total(self) -> int:
        """Milli-GPUs the whole gang takes."""
        return self.workers * self.pod.gpu_total

    @property
    def submitted_workers(self) -> int:
        """The size the gang was submitted with (its gangSize, in workers)."""
        return self.base_workers if self.base_workers is not None else self.workers

    def resized(self, workers: int) -> Gang:
        """This gang at another size (remembering the submitted one)."""
        return replace(self, workers=workers, base_workers=self.submitted_workers)


@dataclass(frozen=True)
class PodPlacement:
    """One worker pod on one node, on given GPU devices."""

    node: str
    devices: tuple[int, ...]
    """GPU indices on the node (one index for a shared GPU)."""


@dataclass(frozen=True)
class Placement:
    """Where every worker of a gang goes."""

    pods: tuple[PodPlacement, ...]

    def nodes(self) -> dict[str, int]:
        """Workers per node."""
        out: dict[str, int] = {}
        for p in self.pods:
            out[p.node] = out.get(p.node, 0) + 1
        return out


@dataclass(frozen=True)
class Running:
    """An admitted gang and where it runs."""

    gang: Gang
    placement: Placement
    started: float
    """When it was admitted (its pods may still be starting)."""


@dataclass(frozen=True)
class Admit:
    """Admit a gang and bind its pods as placed."""

    gang: Gang
    placement: Placement
    borrowed_milli: int
    """How much of it is above the project's guarantee (reclaimable)."""


@dataclass(frozen=True)
class Preempt:
    """Evict whole victim gangs, or shrink elastic ones, so that `gang` fits;
    `gang` keeps a nomination on `placement` until the GPUs are released."""

    gang: Gang
    victims: tuple[JobId, ...]
    placement: Placement
    reason: str
    shrinks: tuple[tuple[JobId, int], ...] = ()
    """Elastic gangs shrunk instead of evicted: (job, workers it keeps; the
    first ones of its placement)."""


@dataclass(frozen=True)
class Resize:
    """Grow a running elastic gang onto idle GPUs: `gang` at its new size and
    `placement`, the whole new placement (its current workers first)."""

    gang: Gang
    placement: Placement
    reason: str
    borrowed_milli: int


QuotaLimit = Literal["namespace", "project", "user", "guarantee", "lending"]
"""The limit that holds a gang back on quota, in the order the cycle asks them: its
namespace's ResourceQuota, its project's max, its user's max, its project's guarantee
(borrowing disabled), then the lending forecast (the idle guarantee it would borrow
is forecast to be wanted back by its owner)."""


@dataclass(frozen=True)
class QuotaHold:
    """Why a gang may not start now on quota (`cycle.quota`, or the lending forecast),
    in words and as data: what reads a decision (`explain`, the demand the controller
    forecasts) switches on `limit` instead of asking the limits again, which is a
    second copy of the decision that drifts from the first."""

    limit: QuotaLimit
    reason: str
    """In words a user can act on (`Pending.reason`)."""
    bound: int
    """The limit in milli-GPUs: the max or guarantee, or what may be lent now. 0 for a
    namespace's ResourceQuota, which may bind on CPU, memory or pods (`reason` says
    which)."""
    over: int
    """Milli-GPUs that must be given back, or the limit raised by, for the gang to
    start (as the cycle saw it when it decided). 0 for a namespace's ResourceQuota."""


@dataclass(frozen=True)
class Pending:
    """The gang waits; `reason` says why in words a user can act on."""

    gang: Gang
    reason: str
    code: Literal["Quota", "Capacity", "Refused", "Reserved"]
    """Refused: cannot run under the current policy at all (tier not allowed,
    bigger than the job limit); Quota and Capacity: waits for usage to fall;
    Reserved: the free GPUs are held for a gang ahead of it."""
    held: QuotaHold | None = None
    """Quota: the limit that holds it (its `reason` is this decision's); else None."""


Decision = Admit | Preempt | Pending
