"""End-to-end gang scheduling on the local control plane (issue 5), beside kube-scheduler.

A second dev cluster with 500 fake 8-GPU nodes and the default kube-scheduler
is started; `gangops run` (a subprocess, as in production) schedules
TrainingJobs (gangs of 8 single-GPU workers) in two phases, and a pod watch in
this process notes when each worker is bound:

1. burst: every job created at once. Its rate (first creation to last
   binding) is the throughput figure; its p99 includes the time a job waits
   behind the burst (queueing), so it grows with the burst's size;
2. paced: jobs created one by one at half the burst's rate, so neither the
   GPUs nor the controller are ever short and nothing queues: its p99 is the
   latency the issue's "p99 creation-to-bound while capacity is free" means.

Then gangops runs beside another scheduler's pods: the ceiling's pods (below)
created again while its gangs run and none waits, gangops' own CPU the figure
(it watches them; it need not step for them). Then `gangops run` is stopped,
and kube-scheduler is measured twice, each time alone, on as many plain
single-GPU pods as the burst had (`schedulerName: default-scheduler`), created
at once and measured the same way: first at its default client limits
(`clientConnection.qps` 50, burst 100), then, the first run's pods deleted and
a fresh kube-scheduler started, with the limits raised to 5,000 / 5,000 as
upstream's scheduler_perf runs it, so that its client is not throttled either.
Only one scheduler runs at a time: no kube-scheduler during gangops' phases,
and no gangops during kube-scheduler's. The ratio of gangops' burst rate to
each is printed.

Before all of that, before gangops starts, the control plane's own ceiling is
measured: as many plain pods as the burst had, created by this process already
bound (`spec.nodeName` set, no scheduler involved) on nodes kept aside for
them, twice (the first run after start is the slower; the faster counts).
Nothing can bind pods faster on this control plane than it accepts and runs
pre-bound ones, so gangops' rate over this one says how much of the ceiling
the scheduler leaves unused. By default the phases hold at most 3,480 of the
4,000 GPUs at once, so capacity is free throughout (a larger burst is refused
when the phases would not fit).

Every timed phase is also measured in CPU (`tests.perf.cpu.CpuMeter`: each
process's user+system time from /proc, and the whole machine's busy time):
the core-seconds the API server, etcd, the controller manager, the fake
kubelet, the controller, kube-scheduler and this process spent, and what the
rest of the machine did meanwhile. When every core is busy in both phases, the
burst's rate over the ceiling's is about the ceiling's CPU per pod over the
burst's; that share, with and without the controller's own CPU, is printed.

Client QPS (stated with the figures): gangops' client has no client-side rate
limit (32 pooled connections, 16 job writers, 32 pod writers); kube-scheduler
runs once at its defaults (qps 50, burst 100) and once at qps 5,000 / burst
5,000. The jobs and plain pods are created by this process's client (16
threads) in every phase.

Run: `.venv/bin/python -m tests.perf.gang [--nodes N] [--jobs N] [--paced-jobs N]
[--pace PODS_PER_S]`; `make bench` calls `run()`.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from controller.devcluster import DevCluster, Options, ensure_binaries, start
from controller.jobs.admission import admission_objects
from controller.kube.client import RESOURCES, ApiError, Kube, connect
from controller.kube.crds import generate_crds, install
from controller.policy.validate import check_scheduling_policy, schema_dir
from controller.scheduler.policy import policy_configmap
from tests.perf.cpu import CpuMeter, Phase
from tests.perf.devcluster import thousand_node_cluster
from tests.perf.harness import Result, print_table

# Thresholds: the targets of issue 5 (>= 300 pods bound per second on 500 fake nodes,
# judged on the burst; p99 creation-to-bound under 2 s while capacity is free, judged
# on the paced phase: a burst's p99 is its own length, 2,000 pods at 300/s take 6.7 s).
# Measured on the reference machine (2 vCPUs shared with other work; API server, etcd,
# fake kubelet, the controller and this process all on them): see docs/scheduler.md
# for the figures. The burst's p99, the kube-scheduler figures and the ratio are
# reported, not judged.
PODS_PER_S_MIN = 300.0
P99_MAX_S = 2.0
# Issue 16's targets, judged on ratios measured in the same run (the machine's load
# moves every absolute figure): gangops' burst rate at least 1.5x kube-scheduler's with
# its client limits raised (equal settings: neither client throttled), and at least
# 85 % of the control plane's ceiling. Set from the targets, not from a measurement;
# the measured ratios and the command are in docs/performance.md.
EQUAL_SETTINGS_RATIO_MIN = 1.5
CEILING_SHARE_MIN = 0.85
# gangops' own CPU while another scheduler's 1,000 pods are created and start (the
# ceiling's pre-bound pods, gangops' 185 gangs running, none waiting): it watches them
# and need not step for them. Measured 2026-12-05 (`python -m tests.perf gang`, load
# 0.5-1.5): 1.06 core-s when each of their events woke a step, 0.32 since they do not
# (the watch alone); the threshold sits between the two.
BESIDE_CPU_MAX = 0.6

GPU = "nvidia.com/gpu"
TIER = "bench"
SYSTEM_NS = "gangops-system"


def _setup(kube: Kube, *, gpus: int, max_gpus: int | None = None) -> None:
    """CRDs, admission, namespaces, the bench tier, and a policy with one project
    `bench` guaranteed `gpus` GPUs (at most `max_gpus`, if given)."""
    install(kube, generate_crds(schema_dir()))
    for obj in admission_objects():
        kube.apply(obj, field_manager="bench")
    for ns in (SYSTEM_NS, "gangs", "paced", "plain", "plain-raised", "ceiling", "beside"):
        kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            field_manager="bench",
        )
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": TIER},
            "value": 1000,
        },
        field_manager="bench",
    )
    policy = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "SchedulingPolicy",
        "cluster": {
            "capacity": {},
            "reserve": {"gpu": 0, "tiers": []},
            "gang": {"timeoutSeconds": 300, "backoffLimit": 3},
            "preemption": {"enabled": False, "minRuntimeSeconds": 0, "maxPerHour": 0},
            "fairShare": {"enabled": True, "borrowing": True},
            "topology": {
                "levels": ["nvidia.com/gpu.clique", "topology.kubernetes.io/rack",
                           "topology.kubernetes.io/zone"]
            },
        },
        "tiers": [{"name": TIER, "value": 1000, "preemptible": True,
                   "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False}],
        "projects": [{
            "name": "bench", "namespaces": ["gangs", "paced"],
            "quota": {"guaranteed": {"gpu": gpus},
                      "max": {} if max_gpus is None else {"gpu": max_gpus}},
            "users": {"default": {"guaranteed": {}, "max": {}}, "members": []},
            "jobs": {"maxGPU": None, "tiers": [TIER], "defaultTier": TIER},
        }],
    }  # fmt: skip
    check_scheduling_policy(policy)
    kube.apply(
        policy_configmap(policy, SYSTEM_NS),
        field_manager="bench",
    )


class _BindWatch:
    """Notes when each pod of a namespace is first seen bound (monotonic seconds).
    A stream that ends (the API server ends watches when it likes) is resumed
    from a fresh list; pods found bound by that list are noted at that moment."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.bound: dict[str, tuple[float, dict[str, str]]] = {}
        self._kube = kube
        self._ns = namespace
        self._resp: Any = None
        self._closed = threading.Event()
        _, rv = kube.list(RESOURCES["Pod"], namespace=namespace)
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _see(self, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if name and name not in self.bound and obj.get("spec", {}).get("nodeName"):
            self.bound[name] = (time.monotonic(), obj["metadata"].get("labels") or {})

    def _run(self, rv: str) -> None:
        def opened(resp: Any) -> None:
            self._resp = resp

        while not self._closed.is_set():
            with contextlib.suppress(ApiError):
                for ev in self._kube.watch(
                    RESOURCES["Pod"], resource_version=rv, namespace=self._ns, on_open=opened
                ):
                    if ev["type"] != "ERROR":
                        self._see(ev["object"])
            if self._closed.is_set():
                return
            items, rv = self._kube.list(RESOURCES["Pod"], namespace=self._ns)
            for obj in items:
                self._see(obj)

    def wait(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while len(self.bound) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.bound) >= count

    def close(self) -> None:
        self._closed.set()
        if self._resp is not None:
            with contextlib.suppress(RuntimeError):  # the stream had already ended
                self._resp.shutdown()


def _create_all(
    kube: Kube, manifests: Sequence[dict[str, Any]], *, interval_s: float = 0.0
) -> dict[str, float]:
    """Create every object with 16 threads, all at once or one every `interval_s`;
    the monotonic time each create was sent."""
    sent: dict[str, float] = {}
    start = time.monotonic()

    def one(i: int, m: dict[str, Any]) -> None:
        delay = start + i * interval_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent[m["metadata"]["name"]] = time.monotonic()
        kube.create(m, field_manager="bench")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(len(manifests)), manifests))
    return sent


def _per_thousand(seconds: float, pods: int) -> float:
    return seconds * 1000 / pods


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _measure(
    kube: Kube,
    namespace: str,
    manifests: list[dict[str, Any]],
    pods: int,
    creator_of: Callable[[str, dict[str, str]], str],
    *,
    interval_s: float = 0.0,
) -> tuple[float, float]:
    watch = _BindWatch(kube, namespace)
    try:
        sent = _create_all(kube, manifests, interval_s=interval_s)
        if not watch.wait(pods, timeout_s=120):
            raise RuntimeError(f"only {len(watch.bound)} of {pods} pods bound in {namespace}")
    finally:
        watch.close()
    start = min(sent.values())
    end = max(t for t, _ in watch.bound.values())
    latencies = [t - sent[creator_of(name, labels)] for name, (t, labels) in watch.bound.items()]
    return pods / (end - start), _p99(latencies)


def _prebound(kube: Kube, namespace: str, pods: int, nodes: Sequence[str]) -> float:
    """Pods per second for `pods` plain pods created already bound, eight to each of
    `nodes` in turn (no scheduler involved): the control plane's ceiling."""
    manifests = [_plain(i, namespace, node=nodes[i // 8]) for i in range(pods)]
    rate, _ = _measure(kube, namespace, manifests, pods, lambda name, _: name)
    return rate


def _job(i: int, gang: int, namespace: str = "gangs") -> dict[str, Any]:
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {
            "name": f"j{i}", "namespace": namespace, "labels": {"ai.operator/user": "admin"}
        },
        "spec": {
            "gangSize": gang,
            "priority": TIER,
            "template": {"spec": {"containers": [
                {"name": "t", "image": "pause", "resources": {"limits": {GPU: 1}}}
            ]}},
        },
    }  # fmt: skip


def _plain(i: int, namespace: str = "plain", node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "t", "image": "pause", "resources": {"limits": {GPU: "1"}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": namespace},
        "spec": spec,
    }


def _controller(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "controller.cli", "run", "--kubeconfig", str(kubeconfig),
        "--no-leader-elect", "--webhook-addr", "", "--metrics-addr", "127.0.0.1:0",
        "--system-namespace", SYSTEM_NS, "--cache-dir", str(log.parent / "cache"),
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


RAISED_QPS = 5000.0
RAISED_BURST = 5000
"""kube-scheduler's client limits in its second run: upstream's scheduler_perf sets
both to 5,000, high enough that the client never waits."""


def _delete_all(kube: Kube, namespace: str, timeout_s: float = 120.0) -> None:
    """Delete every pod of `namespace` (16 threads) and wait until none is left (the
    fake kubelet confirms the deletions), so the GPUs they held are free again."""
    items, _ = kube.list(RESOURCES["Pod"], namespace=namespace)
    names = [o["metadata"]["name"] for o in items]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: kube.delete(RESOURCES["Pod"], n, namespace=namespace), names))
    deadline = time.monotonic() + timeout_s
    while kube.list(RESOURCES["Pod"], namespace=namespace)[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {namespace} still there after {timeout_s:.0f}s")
        time.sleep(0.5)


def _kube_scheduler(
    cluster: DevCluster,
    kube: Kube,
    namespace: str,
    pods: int,
    *,
    qps: float,
    burst: int,
    meter: CpuMeter,
) -> tuple[float, float]:
    """Start a kube-scheduler at these client limits, measure it on `pods` plain pods
    created at once in `namespace` (its CPU and the cluster's as a phase of `meter`),
    stop it."""
    ks = cluster.start_kube_scheduler(qps=qps, burst=burst)
    try:
        time.sleep(2.0)  # informers listed
        with meter.phase(f"kube-scheduler {qps:g}/{burst}", {"kube-scheduler": ks.pid}):
            return _measure(
                kube, namespace, [_plain(i, namespace) for i in range(pods)], pods, lambda n, _: n
            )
    finally:
        cluster.stop_component(ks)


def run(
    nodes: int = 500,
    jobs: int = 125,
    gang: int = 8,
    paced_jobs: int = 60,
    pace: float | None = None,
) -> list[Result]:
    """Start the cluster, measure gangops (burst, then paced at `pace` pods/s, by
    default half the burst's rate) and kube-scheduler (default client limits, then
    raised), return the figures."""
    pods = jobs * gang
    aside = -(-pods // 8)  # nodes filled by the ceiling phase
    if (2 * jobs + paced_jobs) * gang > (nodes - aside) * 8:
        raise ValueError(
            f"{jobs} + {paced_jobs} gangs of {gang} and {pods} plain pods at a time need"
            f" more than {nodes} 8-GPU nodes"
        )
    build = ensure_binaries()
    with tempfile.TemporaryDirectory(prefix="gangops-bench-gang-") as work:
        cluster = start(
            Options(
                cluster=thousand_node_cluster(nodes),
                data_dir=Path(work),
                bin_dir=build.bin_dir,
                timeout_s=300,
            )
        )
        proc: subprocess.Popen[bytes] | None = None
        try:
            kube = connect(str(cluster.kubeconfig), pool_size=64)
            _setup(kube, gpus=nodes * 8)
            log = Path(work) / "gangops-run.log"
            meter = CpuMeter({c.name: c.pid for c in cluster.components})
            names = sorted(o["metadata"]["name"] for o in kube.list(RESOURCES["Node"])[0])
            kept = names[-aside:]
            # No scheduler running, gangops not yet started. Twice: the first run after
            # the cluster starts is slower (an API server not yet warm), so the ceiling
            # is the faster of the two, the one least kind to gangops' share.
            ceilings: list[tuple[float, Phase]] = []
            for attempt in range(2):
                if attempt:
                    _delete_all(kube, "ceiling")
                with meter.phase(f"ceiling, run {attempt + 1}"):
                    rate = _prebound(kube, "ceiling", pods, kept)
                ceilings.append((rate, meter.phases[-1]))
            ceiling_rate, ceiling = max(ceilings, key=lambda c: c[0])
            proc = _controller(cluster.kubeconfig, log)
            deadline = time.monotonic() + 60
            while "leading" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # informers listed
            meter.pids["gangops run"] = proc.pid
            job_of = lambda name, labels: labels["ai.operator/job-name"]  # noqa: E731
            with meter.phase("gangops burst"):
                gang_rate, gang_p99 = _measure(
                    kube, "gangs", [_job(i, gang) for i in range(jobs)], pods, job_of
                )
            pace = pace or gang_rate / 2
            paced_p99 = float("nan")
            if paced_jobs:
                _, paced_p99 = _measure(
                    kube,
                    "paced",
                    [_job(i, gang, "paced") for i in range(paced_jobs)],
                    paced_jobs * gang,
                    job_of,
                    interval_s=gang / pace,
                )
            # The ceiling again, gangops running beside it (its gangs too): what
            # another scheduler's pods cost gangops, and the ceiling with it installed.
            _delete_all(kube, "ceiling")
            with meter.phase("ceiling, gangops running"):
                beside_rate = _prebound(kube, "beside", pods, kept)
            proc.terminate()  # kube-scheduler is measured alone, as gangops was
            proc.wait(30)
            meter.pids.pop("gangops run")
            ks_rate, ks_p99 = _kube_scheduler(
                cluster, kube, "plain", pods, qps=50.0, burst=100, meter=meter
            )
            _delete_all(kube, "plain")
            raised_rate, raised_p99 = _kube_scheduler(
                cluster, kube, "plain-raised", pods, qps=RAISED_QPS, burst=RAISED_BURST,
                meter=meter,
            )  # fmt: skip
        except RuntimeError:
            print((Path(work) / "gangops-run.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
            cluster.stop()
    print(
        f"gangops burst: {gang_rate:.0f} pods/s, p99 {gang_p99:.2f}s ({jobs} gangs of {gang}); "
        f"gangops paced at {pace:.0f} pods/s: p99 {paced_p99:.2f}s ({paced_jobs} gangs); "
        f"kube-scheduler at qps 50 / burst 100 (its defaults): {ks_rate:.0f} pods/s, "
        f"p99 {ks_p99:.2f}s ({pods} pods), ratio {gang_rate / ks_rate:.2f}x; "
        f"kube-scheduler at qps {RAISED_QPS:g} / burst {RAISED_BURST} (scheduler_perf's): "
        f"{raised_rate:.0f} pods/s, p99 {raised_p99:.2f}s ({pods} pods), "
        f"ratio {gang_rate / raised_rate:.2f}x; control-plane ceiling (pre-bound pods, no "
        f"scheduler): {ceiling_rate:.0f} pods/s, gangops at {gang_rate / ceiling_rate:.0%} "
        f"of it, kube-scheduler at {ks_rate / ceiling_rate:.0%} (defaults) and "
        f"{raised_rate / ceiling_rate:.0%} (raised). Client QPS: gangops unlimited "
        "(32 connections, 16 job writers, 32 pod writers)."
    )
    print("Where the CPU went (user+system core-seconds from /proc, per phase):")
    for phase in meter.phases:
        print(f"  {phase.line()}")
    phases = {p.name: p for p in meter.phases}
    ceiling_cpu = _per_thousand(ceiling.ours_s, pods)
    burst = phases["gangops burst"]
    burst_cpu = _per_thousand(burst.ours_s, pods)
    controller_cpu = _per_thousand(burst.cpu_s["gangops run"], pods)
    beside_cpu = _per_thousand(phases["ceiling, gangops running"].cpu_s["gangops run"], pods)
    print(
        f"Per 1,000 pods: the ceiling {ceiling_cpu:.2f} core-s, gangops' burst "
        f"{burst_cpu:.2f} ({controller_cpu:.2f} of it gangops run's own). Where both "
        f"phases keep every core busy, rate follows CPU per pod: gangops could reach at "
        f"most {ceiling_cpu / burst_cpu:.0%} of the ceiling as it is, and "
        f"{ceiling_cpu / max(burst_cpu - controller_cpu, 1e-9):.0%} with a controller "
        "that used no CPU at all (the API server's, etcd's and the kubelet's work for "
        "the burst's writes stays)."
    )
    print(
        f"Beside another scheduler's {pods} pods (the ceiling again, gangops and its "
        f"{jobs + paced_jobs} gangs running): {beside_rate:.0f} pods/s, gangops run "
        f"{beside_cpu:.2f} core-s per 1,000 of them."
    )
    paced = [Result("gang e2e: p99 creation to bound (paced)", paced_p99, "s", P99_MAX_S)]
    return [
        Result("gang e2e: pods bound per second (burst)", gang_rate, "/s", PODS_PER_S_MIN, True),
        *(paced if paced_jobs else []),
        Result("gang e2e: p99 creation to bound (burst)", gang_p99, "s", float("inf")),
        Result("kube-scheduler qps 50/100: pods bound per second", ks_rate, "/s", 0.0, True),
        Result("kube-scheduler qps 50/100: p99 creation to bound", ks_p99, "s", float("inf")),
        Result("gangops / kube-scheduler qps 50/100", gang_rate / ks_rate, "x", 0.0, True),
        Result("kube-scheduler qps 5000/5000: pods bound per second", raised_rate, "/s", 0.0, True),
        Result(
            "kube-scheduler qps 5000/5000: p99 creation to bound", raised_p99, "s", float("inf")
        ),
        Result(
            "gangops / kube-scheduler qps 5000/5000",
            gang_rate / raised_rate,
            "x",
            EQUAL_SETTINGS_RATIO_MIN,
            True,
        ),
        Result("control plane ceiling: pre-bound pods/s", ceiling_rate, "/s", 0.0, True),
        Result("control plane ceiling: core-s per 1,000 pods", ceiling_cpu, "s", float("inf")),
        Result("gang e2e burst: core-s per 1,000 pods", burst_cpu, "s", float("inf")),
        Result(
            "gang e2e burst: gangops run core-s per 1,000 pods", controller_cpu, "s", float("inf")
        ),
        Result(
            "gangops / control plane ceiling",
            gang_rate / ceiling_rate,
            "x",
            CEILING_SHARE_MIN,
            True,
        ),
    ]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=125, help="gangs in the burst")
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--paced-jobs", type=int, default=60, help="gangs in the paced phase")
    parser.add_argument(
        "--pace", type=float, default=None, help="paced arrivals, pods/s (half the burst's rate)"
    )
    args = parser.parse_args(argv)
    results = run(args.nodes, args.jobs, args.gang, args.paced_jobs, args.pace)
    print_table(results)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
