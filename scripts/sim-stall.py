"""Where an arrivals-only run stalls (docs/simulator.md, "Where the default and
gpushare100 traces stall"): `python scripts/sim-stall.py [VARIANT] [--seed N]` from the
repository root, with the public traces in place (../shared/traces or $GANGOPS_TRACES).

Replays the openb trace (or a variant, variant seed 42) as `gangops simulate
--arrivals-only` does for one-pod gangs, `placement.place` then `Snapshot.assume`,
until the arrived demand reaches 100 % of the cluster, and prints what is left:
the pods turned away by shape, the free GPU milli by what is left on each device,
the shares that sit together on each device and what they leave, and two offline
packings of the same arrived pods that ignore CPU, memory and nodes (best-fit
decreasing of every share; the same turning away the largest shares first)."""

from __future__ import annotations

import argparse
import bisect
from collections import Counter, defaultdict
from collections.abc import Sequence

from controller.scheduler.fragmentation import FragModel, block_cpu, block_share, typical_pods
from controller.scheduler.placement import place
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import Snapshot
from controller.scheduler.types import MILLI, Running
from controller.sim.engine import gang_of
from controller.sim.run import prepare_arrivals
from controller.sim.tenants import open_policy_doc
from controller.sim.traces import load_cluster_file, load_trace, traces_dir
from controller.sim.variants import VARIANTS, make_variant


def best_fit(shares: Sequence[int], devices: int) -> int:
    """Milli packed by best-fit decreasing of `shares` into at most `devices` GPUs."""
    bins: list[int] = []
    packed = 0
    for s in sorted(shares, reverse=True):
        i = bisect.bisect_left(bins, s)
        if i < len(bins):
            rest = bins.pop(i) - s
        elif len(bins) < devices:
            rest = MILLI - s
        else:
            continue
        packed += s
        bisect.insort(bins, rest)
    return packed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", nargs="?", default="default", choices=("default", *VARIANTS))
    ap.add_argument("--seed", type=int, default=42, help="arrival seed")
    args = ap.parse_args()
    openb = traces_dir() / "openb"
    nodes = load_cluster_file(openb / "openb_node_list_gpu_node.csv")
    jobs = load_trace(openb / "openb_pod_list_default.csv")
    if args.variant != "default":
        jobs = make_variant(jobs, args.variant, seed=42, nodes=nodes)
    cap = sum(n.gpus for n in nodes) * MILLI
    policy = SchedulingPolicy.from_dict(open_policy_doc(cap // MILLI))
    pods = [j.pod for j in jobs]
    frag = FragModel(typical_pods(pods), blocks=block_share(pods), heavy_block_cpu=block_cpu(pods))
    snap = Snapshot(nodes, levels=policy.topology_levels, fragmentation=frag)
    arrived = used = 0
    dropped: Counter[tuple[int, int, int]] = Counter()
    on_device: dict[tuple[str, int], list[int]] = defaultdict(list)
    shares: list[int] = []
    whole = 0
    for job in prepare_arrivals(jobs, cap, seed=args.seed, tune=1.3, order="shuffled"):
        gang = gang_of(job, policy)
        if arrived + gang.gpu_total > cap:
            break
        arrived += gang.gpu_total
        pod = gang.pod
        if pod.shared:
            shares.append(pod.gpu_milli)
        else:
            whole += gang.gpu_total // MILLI
        found = place(snap, gang)
        if found is None:
            dropped[(pod.gpus, pod.gpu_milli, pod.cpu_milli // 1000)] += 1
            continue
        snap.assume(Running(gang, found, 0.0))
        used += gang.gpu_total
        if pod.shared:
            p = found.pods[0]
            on_device[(p.node, p.devices[0])].append(pod.gpu_milli)
    print(f"{args.variant}, seed {args.seed}: {100 * used / cap:.2f} % allocated at "
          f"{100 * arrived / cap:.2f} % arrived; {(cap - used) / MILLI:.1f} GPUs free")  # fmt: skip
    print("turned away (GPUs, milli, cores): " + ", ".join(
        f"{k} x{n}" for k, n in dropped.most_common()))  # fmt: skip
    left: Counter[int] = Counter()
    for ns in snap.nodes:
        for f in ns.free:
            left[f] += f
    print("free GPUs by what is left on the device (milli): " + ", ".join(
        f"{k}: {v / MILLI:.1f}" for k, v in left.most_common(12)))  # fmt: skip
    combos = Counter(tuple(sorted(v, reverse=True)) for v in on_device.values())
    waste = sorted(combos, key=lambda c: -combos[c] * (MILLI - sum(c)))
    print("shares per device, devices, GPUs left: " + "; ".join(
        f"{'+'.join(map(str, c))} x{combos[c]} {combos[c] * (MILLI - sum(c)) / MILLI:.1f}"
        for c in waste[:12]))  # fmt: skip
    room = cap // MILLI - whole
    ranked = sorted(shares, reverse=True)
    choose = max(best_fit(ranked[k:], room) for k in range(0, len(ranked), 10))
    print(f"offline, no CPU/memory/nodes: every share placed (best-fit decreasing) "
          f"{100 * (cap - waste_of(shares)) / cap:.2f} %; turning away the largest shares "
          f"first {100 * (whole * MILLI + choose) / cap:.2f} %")  # fmt: skip


def waste_of(shares: Sequence[int]) -> int:
    """Milli left beside the shares when best-fit decreasing packs every one of them
    (at 100 % arrived, that much demand cannot be placed)."""
    bins: list[int] = []
    for s in sorted(shares, reverse=True):
        i = bisect.bisect_left(bins, s)
        bisect.insort(bins, (bins.pop(i) if i < len(bins) else MILLI) - s)
    return sum(bins)


if __name__ == "__main__":
    main()
