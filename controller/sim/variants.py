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
- `gpuspec33`: a seeded third of the GPU pods accept one GPU model only.
  Each such pod gets the model of a GPU drawn uniformly among the GPUs of
  the nodes that could hold it when empty (GPU count, CPU and memory), so
  constrained demand follows the supply of each model; names and times stay.

`VARIANTS` names them; `make_variant` builds one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from controller.scheduler.types import Node, PodShape
from controller.sim.traces import TraceError, TraceJob

__all__ = ["VARIANTS", "make_variant"]

MULTI_GPU_SHARE = 0.5
"""`multigpu50`: the multi-GPU pods' share of the GPU demand (milli-GPUs asked for)."""
SPEC_SHARE = 1 / 3

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
    found: dict[tuple[int, int, int], list[Node]] = {}
    for i in sorted(rng.sample(gpu, round(SPEC_SHARE * len(gpu)))):
        pod = jobs[i].pod
        if pod.gpu_models:
            continue
        key = (pod.gpus, pod.cpu_milli, pod.memory)
        if key not in found:
            found[key] = [n for n in nodes if n.gpu_model and _fits_empty(n, pod)]
        hosts = found[key]
        if not hosts:
            continue
        (node,) = rng.choices(hosts, weights=[n.gpus for n in hosts])
        jobs[i] = replace(jobs[i], pod=replace(pod, gpu_models=frozenset({node.gpu_model})))


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
