"""Benchmark of one controller step at 5,000 nodes: the snapshot kept across steps
against the snapshot built anew (issue 16, "the snapshot must be incremental").

A `GangController` over `FakeKube` (no API server, writes not executed: the step's
CPU alone), 5,000 8-GPU nodes in racks of 32, 4,000 running gangs of 8 one-GPU pods
(32,000 pods, one node each), `QUEUED` queued gangs of 8 that fit on the free
nodes; preemption off, so that the step is reading the cluster, not a victim
search. Between two steps a few things change, as under a steady load: one running
gang finishes (its job and pods deleted), a queued one is admitted on the node it
left (its record written, its pods bound), and an idle node is relabelled. The
steps alternate between the controller's `SnapshotCache` and `build_snapshot` from
scratch, on the same controller and the same stream of changes, so both sides see
the same cluster and the machine's load moves both alike. Figures: per side the
median CPU time (`time.process_time`) of the snapshot phase and of the whole step,
and the ratios (from scratch / kept).

Threshold: the snapshot phase at least `SNAPSHOT_RATIO_MIN` times cheaper kept
than from scratch. Measured 2026-12-03 on the 2-core development machine
(shared with two other sessions and a CI run), `.venv/bin/python -m tests.perf
step`, three runs at load 2.8-3.1: 7.56x, 7.70x, 7.55x (the whole step 2.30-2.37x);
4.0x with the collector off, 4.2-4.7x at 500-1,000 nodes (docs/performance.md).
On 2026-12-04 (quiet machine), `python -m tests.perf step` alone and after
`scheduler` in one process: 3.27x and 3.28x (the whole step 1.41x and 1.47x).
Until the benchmark collected garbage before each step, the whole step failed
after `scheduler` (0.69-0.71x: the full collections fell on the kept side).
The threshold, 2x, is under the smallest of those, so load alone does not
fail it; the whole step is held to 1x (kept no slower).

The same cluster with `ONE_POD` queued one-pod gangs instead (1, 2 and 4 GPUs,
issue 17: the controller places them for the recent jobs' typical requests,
`workload.Workload`), stepping alternately with the fragmentation model and
best-fit (`fragmentation_window` 0): the step's CPU with the model over the step's
CPU without. The issue allows 10 % (`ONE_POD_RATIO_MAX`). Measured 2026-12-06 on
the 2-core development machine (load about 1, a build running beside it), a
throwaway script with the same steps: 50 gangs 1.02x, 1.03x, 1.04x, 1.10x, 1.15x
(median of 5-10 steps a side); 500 gangs 0.79x (best-fit passes over every open
node for each gang, the model keeps a ranking across a step's placements). With
the scores kept in the model by node state across steps, this benchmark (quiet
machine): 1.06x, 1.00x, 0.99x, 1.02x, 1.03x, 0.96x.

Run: `make bench` (or `.venv/bin/python -m tests.perf step`).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from typing import Any

from controller.gang.controller import GangController
from controller.gang.record import Admission
from controller.gang.workload import Workload
from controller.kube.clock import FakeClock
from controller.scheduler.policy import POLICY_CONFIGMAP, POLICY_KEY
from controller.scheduler.types import Placement, PodPlacement
from tests.perf.harness import Result
from tests.unit.gang.builders import job, node, pod
from tests.unit.kube.fakes import FakeKube
from tests.unit.scheduler.builders import policy_doc

NODES = 5_000
RUNNING = 4_000
QUEUED = 50
PAIRS = 5
"""Measured steps per side (after one of each to warm up)."""
SNAPSHOT_RATIO_MIN = 2.0
ONE_POD = 50
"""Queued one-pod gangs in the second measurement."""
ONE_POD_RATIO_MAX = 1.10

Obj = dict[str, Any]
ADMITTED_AT = 1735689000.0
"""Shortly before the fake clock's now: recent admissions."""


def _admitted(name: str, on: str) -> list[Obj]:
    """A running job of 8 one-GPU workers on node `on`, and its pods."""
    adm = Admission(
        "Admitted", 1, Placement(tuple(PodPlacement(on, (d,)) for d in range(8))), ADMITTED_AT
    )
    out = [job(name, 8, adm=adm, phase="Running")]
    for rank in range(8):
        p = pod(name, rank, node=on)
        p["metadata"]["resourceVersion"] = "1"
        out.append(p)
    return out


def controller() -> GangController:
    """The controller with its caches filled; its writes go nowhere."""
    c = GangController(FakeKube(), clock=FakeClock())
    c._submit = lambda w, assume=None: True  # type: ignore[method-assign]
    c._clock.monotonic = time.process_time  # type: ignore[method-assign]
    doc = policy_doc(projects={"p": {"guaranteed": 10**6, "max": 10**6}}, preemption=False)
    c.config.assume(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": POLICY_CONFIGMAP,
                "namespace": c.settings.system_namespace,
                "resourceVersion": "1",
            },
            "data": {POLICY_KEY: json.dumps(doc)},
        }
    )
    for i in range(NODES):
        o = node(f"n{i}", 8, **{"topology.kubernetes.io/rack": f"r{i // 32}"})
        o["metadata"].update(uid=f"n{i}", resourceVersion="1")
        c.nodes.assume(o)
    for i in range(RUNNING):
        for o in _admitted(f"r{i}", f"n{i}"):
            (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
    for i in range(QUEUED + 2 * (PAIRS + 1)):
        c.jobs.assume(job(f"q{i}", 8))
    return c


def _churn(c: GangController, i: int) -> None:
    """Running gang r{i} finishes, queued gang q{i} is admitted on its node, and an
    idle node changes rack."""
    c.jobs.forget(f"r{i}", "p")
    for rank in range(8):
        c.pods.forget(f"r{i}-1-{rank}", "p")
    for o in _admitted(f"q{i}", f"n{i}"):
        o["metadata"]["resourceVersion"] = "2"
        (c.pods if o["kind"] == "Pod" else c.jobs).assume(o)
    o = c.nodes.get(f"n{RUNNING + i}")
    assert o is not None
    meta = o["metadata"]
    labels = {**meta["labels"], "topology.kubernetes.io/rack": f"moved{i}"}
    c.nodes.assume({**o, "metadata": {**meta, "labels": labels, "resourceVersion": f"{i + 2}"}})


def measure() -> dict[str, dict[str, float]]:
    """Median CPU seconds of the snapshot phase and of the step, per side."""
    c = controller()
    kept = c._snapshots
    times: dict[str, dict[str, list[float]]] = {
        side: {"snapshot": [], "step": []} for side in ("scratch", "kept")
    }
    for i in range(2 * (PAIRS + 1)):
        side = "kept" if i % 2 else "scratch"
        c._snapshots = kept if side == "kept" else None
        # Each step starts with the collector's counts at zero, so a full collection
        # that the steps before (or the benchmarks before, in `make bench`) made due
        # does not land on one side: the two sides alternate, and it did (whole step
        # 0.69-0.71x after `scheduler` in one process, 2.6x alone).
        gc.collect()
        t0 = time.process_time()
        result = c.step()
        took = time.process_time() - t0
        assert result is not None
        if i >= 2:
            times[side]["snapshot"].append(result.phase_seconds["snapshot"])
            times[side]["step"].append(took)
        _churn(c, i)
    return {
        side: {phase: statistics.median(v) for phase, v in phases.items()}
        for side, phases in times.items()
    }


def _one_pod(name: str, gpus: int) -> Obj:
    """A queued job of one worker of `gpus` GPUs (gangSize counts GPUs)."""
    o = job(name, gpus)
    (c,) = o["spec"]["template"]["spec"]["containers"]
    c["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return o


def measure_one_pod() -> dict[str, float]:
    """Median CPU seconds of a step over `ONE_POD` queued one-pod gangs, with the
    workload's fragmentation model and best-fit, alternating on one controller."""
    c = controller()
    for i in range(QUEUED + 2 * (PAIRS + 1)):
        c.jobs.forget(f"q{i}", "p")
    for i in range(ONE_POD):
        c.jobs.assume(_one_pod(f"s{i}", (1, 1, 1, 2, 4)[i % 5]))
    sides = {"model": Workload(), "best-fit": Workload(0)}
    times: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(4 * (PAIRS + 1)):
        side = "model" if i % 2 else "best-fit"
        c._workload = sides[side]
        gc.collect()
        t0 = time.process_time()
        result = c.step()
        took = time.process_time() - t0
        assert result is not None and len(result.decisions) == ONE_POD
        if i >= 2:
            times[side].append(took)
        _churn(c, i)
    return {side: statistics.median(v) for side, v in times.items()}


def run() -> list[Result]:
    m = measure()
    for side, phases in m.items():
        print(f"{side}: snapshot {phases['snapshot']:.4f} s, step {phases['step']:.4f} s (CPU)")
    snapshot_ratio = m["scratch"]["snapshot"] / m["kept"]["snapshot"]
    step_ratio = m["scratch"]["step"] / m["kept"]["step"]
    return [
        Result("step: snapshot kept, CPU", m["kept"]["snapshot"], "s", float("inf")),
        Result("step: snapshot from scratch, CPU", m["scratch"]["snapshot"], "s", float("inf")),
        Result("step: snapshot, scratch / kept", snapshot_ratio, "x", SNAPSHOT_RATIO_MIN, True),
        Result("step: whole step, scratch / kept", step_ratio, "x", 1.0, True),
        *run_one_pod(),
    ]


def run_one_pod() -> list[Result]:
    m = measure_one_pod()
    for side, took in m.items():
        print(f"{ONE_POD} one-pod gangs, {side}: step {took:.4f} s (CPU)")
    return [
        Result(
            "step: one-pod gangs, model / best-fit",
            m["model"] / m["best-fit"],
            "x",
            ONE_POD_RATIO_MAX,
        ),
    ]
