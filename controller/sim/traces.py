"""Trace and cluster loaders: the public GPU traces and gangops' own CSV.

Every loader returns the same two things, whatever the source: `Node`s for
the scheduling core and `TraceJob`s (a gang, its submission time and how long
it runs). Formats are recognised by their CSV header:

- openb pod lists (Alibaba cluster-trace-gpu-v2023, the FGD paper):
  `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time]`; the short public variant
  without times arrives in file order and never leaves;
- the openb node list: `sn,cpu_milli,memory_mib,gpu,model`;
- Tiresias jobs: `job_id,num_gpu,submit_time,...,duration,...` (one 1-GPU
  worker per GPU) and its cluster file `num_switch,num_node_p_switch,
  num_gpu_p_node,...`;
- gangops' CSV (see `GANGOPS_COLUMNS` and docs/simulator.md).

The public traces are not part of the repository: `trace_path` finds them in
`$GANGOPS_TRACES`, else `../shared/traces` next to the checkout.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from controller.clusterspec import (
    LABEL_RACK,
    LABEL_ZONE,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_NODES_PER_POOL,
    load_cluster,
)
from controller.datasets import TRACES_ENV, traces_dir
from controller.scheduler.types import MILLI, Node, PodShape

__all__ = [
    "GANGOPS_COLUMNS",
    "TRACES_ENV",
    "TraceError",
    "TraceJob",
    "load_cluster_file",
    "load_trace",
    "trace_path",
    "traces_dir",
]

MIB = 1 << 20

GANGOPS_COLUMNS = (
    "job_id", "submit_time", "duration", "gang_size", "min_gpu", "max_gpu",
    "gpus_per_worker", "gpu_milli", "tier", "project", "user",
)  # fmt: skip
"""gangops' trace columns; `job_id`, `submit_time`, `duration`, `gang_size` are required."""


class TraceError(ValueError):
    """A trace or cluster file that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: a gang of identical worker pods."""

    id: str
    submit: float
    """Seconds from the start of the trace."""
    duration: float | None
    """Seconds it runs once started; None: it never leaves (arrivals-only traces)."""
    workers: int
    pod: PodShape
    min_workers: int | None = None
    max_workers: int | None = None
    tier: str | None = None
    project: str | None = None
    user: str | None = None

    @property
    def gpu_milli(self) -> int:
        """Milli-GPUs of the whole gang."""
        return self.workers * self.pod.gpu_total


def trace_path(relative: str) -> Path | None:
    """`relative` (e.g. `openb/openb_pod_list_default.csv`) under `traces_dir()`, if present."""
    p = traces_dir() / relative
    return p if p.is_file() else None


def _rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            try:
                header = [h.strip() for h in reader.fieldnames or []]
                reader.fieldnames = header
                rows = [(reader.line_num, row) for row in reader]
            except csv.Error as e:  # a NUL byte, an unclosed quote at the end
                raise TraceError(f"{path}:{reader.line_num}: not CSV: {e}") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise TraceError(
            f"{path}: not a trace: byte 0x{e.object[e.start]:02x} at offset {e.start} is not "
            "UTF-8 text (a trace is a CSV file)"
        ) from None
    return header, rows


MAX_VALUE = 2**53
"""The largest number a trace may hold: times, sizes and amounts are exact below it."""


def _int(
    path: Path,
    line: int,
    row: Mapping[str, str],
    key: str,
    default: int | None = None,
    *,
    minimum: int = 0,
    maximum: int = MAX_VALUE,
) -> int:
    raw = (row.get(key) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise TraceError(f"{path}:{line}: column {key!r} is empty; expected an integer")
    # Digits only (a whole number may be written `2.0`): `int(float(...))` read
    # 2.9 as 2, -0.5 as 0 and 1e1 as 10 without a word, and `int` alone takes `1_0`.
    whole = _WHOLE.fullmatch(raw)
    value = int(whole[1]) if whole else None
    if value is None or not minimum <= value <= maximum:
        raise TraceError(
            f"{path}:{line}: column {key!r}: expected a whole number from {minimum} to "
            f"{maximum}, found {_shown(raw)!r}"
        )
    return value


def _seconds(
    path: Path, line: int, row: Mapping[str, str], key: str, default: float | None = None
) -> float:
    """A time in seconds: a decimal number from 0 to MAX_VALUE (gangops' own CSV, whose
    generated times have a fraction)."""
    raw = (row.get(key) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise TraceError(f"{path}:{line}: column {key!r} is empty; expected seconds")
    value = float(raw) if _DECIMAL.fullmatch(raw) else None
    if value is None or value > MAX_VALUE:
        raise TraceError(
            f"{path}:{line}: column {key!r}: expected seconds from 0 to {MAX_VALUE} "
            f"(a decimal number), found {_shown(raw)!r}"
        )
    return value


_WHOLE = re.compile(r"([0-9]+)(?:\.0*)?")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def _shown(raw: str) -> str:
    return raw if len(raw) <= 40 else raw[:37] + "..."


def _name(path: Path, line: int, row: Mapping[str, str], key: str) -> str:
    """The text of column `key`, which names a job or a node and must not be empty
    (a short row leaves it missing)."""
    name = (row.get(key) or "").strip()
    if not name:
        raise TraceError(f"{path}:{line}: column {key!r} is empty; expected a name")
    return name


def _unique(path: Path, key: str, names: Iterable[tuple[int, str]]) -> None:
    """Refuse a name seen twice: a job arriving twice would leak its first copy's
    GPUs, a node listed twice would count twice in the capacity."""
    seen: dict[str, int] = {}
    for line, name in names:
        first = seen.setdefault(name, line)
        if first != line:
            raise TraceError(f"{path}:{line}: {key} {name!r} repeats line {first}")


def _openb_pods(
    path: Path, header: list[str], rows: list[tuple[int, dict[str, str]]]
) -> list[TraceJob]:
    timed = "creation_time" in header
    jobs = []
    names = []
    for i, (line, row) in enumerate(rows):
        gpus = _int(path, line, row, "num_gpu")
        milli = _int(path, line, row, "gpu_milli", 0)
        if gpus < 0 or milli < 0 or (gpus > 1 and 0 < milli < MILLI):
            raise TraceError(
                f"{path}:{line}: num_gpu={gpus}, gpu_milli={milli}: a GPU share "
                "(gpu_milli < 1000) is only valid with num_gpu 1"
            )
        spec = (row.get("gpu_spec") or "").strip()
        pod = PodShape(
            gpus=gpus,
            gpu_milli=milli if gpus == 1 and 0 < milli < MILLI else MILLI,
            cpu_milli=_int(path, line, row, "cpu_milli", 0),
            memory=_int(path, line, row, "memory_mib", 0) * MIB,
            gpu_models=frozenset(m for m in spec.split("|") if m),
        )
        submit: float = float(i)
        duration: float | None = None
        if timed:
            submit = float(_int(path, line, row, "creation_time", 0))
            end = (row.get("deletion_time") or "").strip()
            if end:
                duration = max(1.0, float(_int(path, line, row, "deletion_time")) - submit)
        name = (row.get("name") or "").strip() or f"pod-{i}"
        names.append((line, name))
        jobs.append(TraceJob(name, submit, duration, 1, pod))
    _unique(path, "name", names)
    return jobs


def _tiresias(path: Path, rows: list[tuple[int, dict[str, str]]]) -> list[TraceJob]:
    jobs = []
    names = []
    for line, row in rows:
        name = _name(path, line, row, "job_id")
        names.append((line, name))
        gpus = _int(path, line, row, "num_gpu")
        if gpus < 1:
            raise TraceError(f"{path}:{line}: num_gpu must be at least 1, found {gpus}")
        jobs.append(
            TraceJob(
                id=f"job-{name}",
                submit=float(_int(path, line, row, "submit_time")),
                duration=float(max(1, _int(path, line, row, "duration"))),
                workers=gpus,
                pod=PodShape(gpus=1),
            )
        )
    _unique(path, "job_id", names)
    return jobs


def _gangops(path: Path, rows: list[tuple[int, dict[str, str]]]) -> list[TraceJob]:
    jobs = []
    names = []
    for line, row in rows:
        name = _name(path, line, row, "job_id")
        names.append((line, name))
        size = _int(path, line, row, "gang_size")
        per = _int(path, line, row, "gpus_per_worker", 1)
        milli = _int(path, line, row, "gpu_milli", MILLI, minimum=1, maximum=MILLI)
        if size < 1 or per < 1 or size % per:
            raise TraceError(
                f"{path}:{line}: gang_size {size} must be a positive multiple of "
                f"gpus_per_worker {per}"
            )
        if milli < MILLI and size != 1:
            raise TraceError(f"{path}:{line}: gpu_milli < 1000 needs gang_size 1")
        low = _int(path, line, row, "min_gpu", size, minimum=1)
        high = _int(path, line, row, "max_gpu", size)
        if not low <= size <= high:
            raise TraceError(f"{path}:{line}: expected min_gpu <= gang_size <= max_gpu")
        if low % per or high % per:
            raise TraceError(
                f"{path}:{line}: min_gpu {low} and max_gpu {high} must be multiples of "
                f"gpus_per_worker {per} (an elastic job grows and shrinks by whole workers)"
            )
        duration = (row.get("duration") or "").strip()
        jobs.append(
            TraceJob(
                id=name,
                submit=_seconds(path, line, row, "submit_time"),
                duration=_seconds(path, line, row, "duration") if duration else None,
                workers=size // per,
                pod=PodShape(gpus=per, gpu_milli=milli),
                min_workers=None if low == size else low // per,
                max_workers=None if high == size else high // per,
                tier=(row.get("tier") or "").strip() or None,
                project=(row.get("project") or "").strip() or None,
                user=(row.get("user") or "").strip() or None,
            )
        )
    _unique(path, "job_id", names)
    return jobs


def load_trace(path: Path) -> list[TraceJob]:
    """The jobs of a trace file, sorted by submission time (stable)."""
    header, rows = _rows(path)
    cols = set(header)
    if {"num_gpu", "gpu_milli", "cpu_milli"} <= cols:
        jobs = _openb_pods(path, header, rows)
    elif {"job_id", "num_gpu", "submit_time", "duration"} <= cols:
        jobs = _tiresias(path, rows)
    elif {"job_id", "submit_time", "gang_size"} <= cols:
        jobs = _gangops(path, rows)
    else:
        raise TraceError(
            f"{path}: unknown trace format (header {','.join(header)!r}); expected an openb "
            "pod list, a Tiresias job list, or gangops' CSV with columns "
            + ",".join(GANGOPS_COLUMNS)
        )
    return sorted(jobs, key=lambda j: j.submit)


def _openb_nodes(path: Path, rows: list[tuple[int, dict[str, str]]]) -> list[Node]:
    nodes: list[Node] = []
    names: list[tuple[int, str]] = []
    gpus = 0
    for line, row in rows:
        if len(nodes) == MAX_NODES_PER_POOL:
            raise TraceError(f"{path}:{line}: more than {MAX_NODES_PER_POOL} nodes")
        name = _name(path, line, row, "sn")
        names.append((line, name))
        node = Node(
            name=name,
            gpus=_int(path, line, row, "gpu", maximum=MAX_GPUS_PER_NODE),
            cpu_milli=_int(path, line, row, "cpu_milli", 0),
            memory=_int(path, line, row, "memory_mib", 0) * MIB,
            gpu_model=(row.get("model") or "").strip(),
        )
        gpus += node.gpus
        if gpus > MAX_GPUS:
            raise TraceError(f"{path}:{line}: more than {MAX_GPUS} GPUs in all")
        nodes.append(node)
    _unique(path, "sn", names)
    return nodes


def _tiresias_nodes(path: Path, rows: list[tuple[int, dict[str, str]]]) -> list[Node]:
    nodes: list[Node] = []
    first = 0  # switches of the rows above: each row adds its own, named on from there
    gpus = 0
    for line, row in rows:
        per_switch = _int(path, line, row, "num_node_p_switch")
        switches = _int(path, line, row, "num_switch")
        if len(nodes) + switches * per_switch > MAX_NODES_PER_POOL:
            raise TraceError(
                f"{path}:{line}: {switches} switches of {per_switch} nodes: more than "
                f"{MAX_NODES_PER_POOL} nodes in all"
            )
        per_node = _int(path, line, row, "num_gpu_p_node", maximum=MAX_GPUS_PER_NODE)
        gpus += switches * per_switch * per_node
        if gpus > MAX_GPUS:
            raise TraceError(
                f"{path}:{line}: {switches * per_switch} nodes of {per_node} GPUs: more than "
                f"{MAX_GPUS} GPUs in all"
            )
        for s in range(first, first + switches):
            for n in range(per_switch):
                nodes.append(
                    Node(
                        name=f"s{s}-n{n:02d}",
                        gpus=per_node,
                        cpu_milli=_int(path, line, row, "num_cpu_p_node", 0) * 1000,
                        memory=_int(path, line, row, "mem_p_node", 0) * (1 << 30),
                        labels={LABEL_RACK: f"switch-{s}", LABEL_ZONE: "zone"},
                    )
                )
        first += switches
    return nodes


def load_cluster_file(path: Path) -> list[Node]:
    """GPU nodes from `clusters/<name>/cluster.yaml`, the openb node list or a
    Tiresias cluster CSV; a cluster without a GPU is refused (every figure is a
    share of the GPUs)."""
    nodes = _cluster_nodes(path)
    if not any(n.gpus for n in nodes):
        raise TraceError(
            f"{path}: no GPU in the cluster ({len(nodes)} node(s), none with a GPU); "
            "a simulation needs at least one"
        )
    return nodes


def _cluster_nodes(path: Path) -> list[Node]:
    if path.suffix in (".yaml", ".yml"):
        spec = load_cluster(path)
        return [
            Node(
                name=n.name,
                gpus=n.gpus,
                cpu_milli=n.cpu_milli,
                memory=n.memory_bytes,
                gpu_model=n.gpu_model,
                labels=dict(n.labels),
            )
            for n in spec.nodes()
        ]
    header, rows = _rows(path)
    if {"sn", "gpu"} <= set(header):
        return _openb_nodes(path, rows)
    if {"num_switch", "num_node_p_switch", "num_gpu_p_node"} <= set(header):
        return _tiresias_nodes(path, rows)
    raise TraceError(
        f"{path}: unknown cluster format (header {','.join(header)!r}); expected a "
        "cluster.yaml, the openb node list (sn,cpu_milli,memory_mib,gpu,model) or a "
        "Tiresias cluster CSV (num_switch,num_node_p_switch,num_gpu_p_node,...)"
    )
