"""Seeded variants of a pod trace: the workload shapes FGD's paper reports.

Weng et al. (ATC 2023) evaluate FGD on the openb default trace and on
variants of it; their variant files are not redistributed with the default
trace, so these are built here from the default trace, seeded, as the paper
describes them. Every variant keeps the trace's pods with no GPU as they are:

- `multigpu50`: multi-GPU pods (2 or more whole GPUs) raised to 50 % of the
  GPU demand. The trace's pods stay, and copies of its multi-GPU pods,
  drawn uniformly (shape, times and all, each under a new name), are added
  until the multi-GPU pods ask for half of all the GPUs asked for, so the
  2/4/8-GPU mix and its CPU and memory stay the trace's. This is how the
  published `openb_pod_list_multigpu50.csv` is made (its first 8,152 pods
  are the default trace's, then 909 multi-GPU ones); an earlier version
  here turned single-GPU pods into multi-GPU ones until half of the GPU
  *pods* were, which asked for 3.9x the cluster.
- `gpushare100`: every GPU pod a fractional share of one GPU. Each pod
  asking for whole GPUs takes the shape of a shared pod of the trace drawn
  uniformly (share, CPU and memory together); names and times stay.
- `gpuspec33`: a seeded third of the GPU pods accept only some GPU models.
  Each such pod gets one of the GPU-model lists of the published
  `openb_pod_list_gpuspec33.csv` (`SPEC_MIX`), drawn in the proportions
  that file has them, among the lists with a node that could hold the pod
  when empty (GPU count, CPU and memory); names and times stay. The
  published file is the default trace with such lists added, and they are
  not in proportion to the supply of each model: T4 pods alone ask for
  more T4 GPUs than the cluster has. An earlier version here drew one model
  in proportion to its supply, a far easier workload (FGD's published
  87.84 % against 93.70 % for the same placement there).

`VARIANTS` names them; `make_variant` builds one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from controller.scheduler.types import Node, PodShape
from controller.sim.traces import TraceError, TraceJob

__all__ = ["SPEC_MIX", "VARIANTS", "make_variant"]

MULTI_GPU_SHARE = 0.5
"""`multigpu50`: the multi-GPU pods' share of the GPU demand (milli-GPUs asked for)."""
SPEC_SHARE = 1 / 3
"""`gpuspec33`: the share of the GPU pods restricted to some GPU models."""
SPEC_MIX: tuple[tuple[frozenset[str], int], ...] = tuple(
    (frozenset(models.split("|")), pods)
    for models, pods in (
        ("T4", 1291),
        ("G2", 331),
        ("P100", 279),
        ("V100M16|V100M32", 163),
        ("P100|V100M16|V100M32", 103),
        ("G3", 86),
        ("G2|P100|T4|V100M16|V100M32", 39),
        ("P100|T4|V100M16|V100M32", 33),
        ("A10|G2|T4|V100M16|V100M32", 24),
        ("V100M32", 20),
        ("A10|T4", 6),
        ("P100|V100M16", 4),
        ("A10|G2|P100|T4|V100M16|V100M32", 3),
        ("T4|V100M16|V100M32", 3),
        ("V100M16", 3),
    )
)
"""`gpuspec33`: the GPU-model lists of FGD's published `openb_pod_list_gpuspec33.csv`
(alibaba/clusterdata, cluster-trace-gpu-v2023) and how many of its pods carry each,
counted from the file (2026-12-05): 2,388 of its 7,064 GPU pods carry a list, 1,291
of them T4 alone (the cluster has 842 T4 GPUs); `V100M16|V100M32|V100M32`, as 22 pods
write it, is counted with `V100M16|V100M32`."""

VARIANTS = ("multigpu50", "gpushare100", "gpuspec33")


def _multigpu(jobs: list[TraceJob], gpu: list[int], rng: random.Random) -> None:
    donors = [jobs[i] for i in gpu if jobs[i].pod.gpus > 1]
    total = sum(jobs[i].gpu_milli for i in gpu)
    multi = sum(j.gpu_milli for j in donors)
    if multi < MULTI_GPU_SHARE * total and not donors:
        raise TraceError("variant multigpu50: the trace has no multi-GPU pod to copy")
    n = 0
    while multi < MULTI_GPU_SHARE * total:
        n += 1
        copy = rng.choice(donors)
        jobs.append(replace(copy, id=f"{copy.id}-multigpu-{n}"))
        multi += copy.gpu_milli
        total += copy.gpu_milli


def _gpushare(jobs: list[TraceJob], gpu: list[int], rng: random.Random) -> None:
    donors = [jobs[i].pod for i in gpu if jobs[i].pod.shared]
    whole = [i for i in gpu if not jobs[i].pod.shared]
    if whole and not donors:
        raise TraceError("variant gpushare100: the trace has no shared-GPU pod to copy")
    for i in whole:
        jobs[i] = replace(jobs[i], pod=rng.choice(donors))


def _fits_empty(node: Node, pod: PodShape) -> bool:
    return (
        node.gpus >= pod.gpus
        and (not node.cpu_milli or node.cpu_milli >= pod.cpu_milli)
        and (not node.memory or node.memory >= pod.memory)
    )


def _gpuspec(
    jobs: list[TraceJob], gpu: list[int], rng: random.Random, nodes: Sequence[Node]
) -> None:
    found: dict[tuple[int, int, int], tuple[list[frozenset[str]], list[int]]] = {}
    for i in sorted(rng.sample(gpu, round(SPEC_SHARE * len(gpu)))):
        pod = jobs[i].pod
        if pod.gpu_models:
            continue
        key = (pod.gpus, pod.cpu_milli, pod.memory)
        if key not in found:
            models = {n.gpu_model for n in nodes if n.gpu_model and _fits_empty(n, pod)}
            mix = [(spec, pods) for spec, pods in SPEC_MIX if spec & models]
            found[key] = ([spec for spec, _ in mix], [pods for _, pods in mix])
        specs, weights = found[key]
        if not specs:
            continue
        (spec,) = rng.choices(specs, weights=weights)
        jobs[i] = replace(jobs[i], pod=replace(pod, gpu_models=spec))


def make_variant(
    jobs: Sequence[TraceJob], name: str, *, seed: int, nodes: Sequence[Node]
) -> list[TraceJob]:
    """`jobs` reshaped as variant `name` (one of `VARIANTS`), drawn with `seed`."""
    if name not in VARIANTS:
        raise TraceError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    rng = random.Random(f"{name}:{seed}")
    out = list(jobs)
    gpu = [i for i, j in enumerate(out) if j.pod.gpus > 0]
    if name == "multigpu50":
        _multigpu(out, gpu, rng)
    elif name == "gpushare100":
        _gpushare(out, gpu, rng)
    else:
        _gpuspec(out, gpu, rng, nodes)
    return out
