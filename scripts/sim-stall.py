"""Where an arrivals-only run stalls (docs/simulator.md, "Where the default and
gpushare100 traces stall"): `python scripts/sim-stall.py [VARIANT] [--seed N]` from the
repository root, with the public traces in place (../shared/traces or $GANGOPS_TRACES).

Replays the openb trace (or a variant, variant seed 42) as `gangops simulate
--arrivals-only` does for one-pod gangs, `placement.place` then `Snapshot.assume`,
until the arrived demand reaches 100 % of the cluster, and prints what is left:
the pods turned away by shape, the free GPU milli by what is left on each device,
the shares that sit together on each device and what they leave, two offline
packings of the same arrived pods that ignore CPU, memory and nodes (best-fit
decreasing of every share; the same turning away the largest shares first), and
a bound on any packing that places every arrived share (`fluid_waste`).

`--hindsight K` asks what knowing the future would buy (docs/simulator.md,
"Hindsight"): from `--from` % arrived on, before each one-pod gang with GPUs is
placed, the core's choice and the K-1 best-scored other node states (a node
counts once per GPU model, size, free devices and CPU left) are each tried: the
gang assumed there, the next `--horizon` arrivals (default: all of them up to
100 %) placed by the core, and all of it taken back (`Snapshot.forget`). The
candidate after which the most GPU was placed wins, the core's choice on a tie.
With `--turn-away`, leaving the gang out is a candidate too. Slow: the default
trace from 80 % arrived with K=4 takes about a quarter of an hour.

`--window N` reads the typical requests as the controller does
(docs/scheduler.md, "Where a one-pod job goes"): from the last N arrived pods,
read again as a tenth more arrive, from the first arrival on; `--best-fit`
places without a model, as the controller did until 2026-12-06.

`--hole-reserve SHARE` tries holding shares back (docs/simulator.md, "Holding
stranding shares back"): while under SHARE of the cluster's GPUs are free, a share
whose hole few requests fit (`strands`) is turned away when the core's choice for it
opens a free GPU, leaving that GPU to a request that fills it."""

from __future__ import annotations

import argparse
import bisect
from collections import Counter, defaultdict
from collections.abc import Sequence

from controller.gang.workload import REFRESH_SHARE, model_of
from controller.scheduler.fragmentation import FragModel
from controller.scheduler.placement import frag_score, place
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.snapshot import NodeState, Snapshot
from controller.scheduler.types import MILLI, Gang, Placement, PodPlacement, PodShape, Running
from controller.sim.engine import gang_of
from controller.sim.run import prepare_arrivals
from controller.sim.tenants import open_policy_doc
from controller.sim.traces import load_cluster_file, load_trace, traces_dir
from controller.sim.variants import VARIANTS, make_variant

HOLE_FIT = 0.05
"""`--hole-reserve`: a share strands a hole when fewer than this share of the typical
requests fit what it leaves of a GPU (on openb the 810-milli share alone: its 190
milli fit the 160-milli requests, about 1 %; the 650-milli share's 350, about 9 %)."""


def strands(model: FragModel, pod: PodShape) -> bool:
    """Whether `pod` is a share whose hole on a free GPU few typical requests fit."""
    if not pod.shared:
        return False
    hole = MILLI - pod.gpu_milli
    fit = sum(t.weight for t in model.typical if t.gpus == 1 and t.gpu_milli <= hole)
    return fit < HOLE_FIT


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
    ap.add_argument(
        "--hindsight", type=int, default=0, metavar="K",
        help="try K candidate nodes per pod, each judged by what the core places after it"
        " (default 0: the core's choice alone)",
    )  # fmt: skip
    ap.add_argument(
        "--from", dest="start", type=float, default=90.0, metavar="PERCENT",
        help="with --hindsight: the arrived share from which it is used (default 90)",
    )  # fmt: skip
    ap.add_argument(
        "--horizon", type=int, default=0, metavar="N",
        help="with --hindsight: arrivals looked ahead (default 0: every one up to 100 %%)",
    )  # fmt: skip
    ap.add_argument(
        "--turn-away", action="store_true",
        help="with --hindsight: leaving the pod out is a candidate too",
    )  # fmt: skip
    ap.add_argument(
        "--window", type=int, default=0, metavar="PODS",
        help="read the model from the last PODS arrived pods as the controller does"
        " (default 0: from the whole trace, as the simulator does)",
    )  # fmt: skip
    ap.add_argument("--best-fit", action="store_true", help="place without a model")
    ap.add_argument(
        "--hole-reserve", type=float, default=0.0, metavar="SHARE",
        help="turn away a share whose hole few requests fit when the core would open a free"
        " GPU for it while under SHARE of the GPUs are free (default 0: never)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.hindsight < 0 or args.horizon < 0 or args.window < 0:
        ap.error("--hindsight, --horizon and --window take 0 or more")
    if not 0 <= args.hole_reserve <= 1:
        ap.error("--hole-reserve takes a share from 0 to 1")
    if args.hindsight and (args.window or args.best_fit):
        ap.error("--hindsight judges the whole trace's model: no --window or --best-fit")
    openb = traces_dir() / "openb"
    nodes = load_cluster_file(openb / "openb_node_list_gpu_node.csv")
    jobs = load_trace(openb / "openb_pod_list_default.csv")
    if args.variant != "default":
        jobs = make_variant(jobs, args.variant, seed=42, nodes=nodes)
    cap = sum(n.gpus for n in nodes) * MILLI
    policy = SchedulingPolicy.from_dict(open_policy_doc(cap // MILLI))
    pods = [j.pod for j in jobs]
    frag = FragModel.of(pods)
    start = None if args.window or args.best_fit else frag
    snap = Snapshot(nodes, levels=policy.topology_levels, fragmentation=start)
    arrived = used = 0
    dropped: Counter[tuple[int, int, int]] = Counter()
    on_device: dict[tuple[str, int], list[int]] = defaultdict(list)
    shares: list[int] = []
    whole = 0
    gangs: list[tuple[Gang, int]] = []
    for job in prepare_arrivals(jobs, cap, seed=args.seed, tune=1.3, order="shuffled"):
        gang = gang_of(job, policy)
        if arrived + gang.gpu_total > cap:
            break
        arrived += gang.gpu_total
        gangs.append((gang, arrived))
    hindsight = Hindsight(snap, frag, [g for g, _ in gangs], args)
    by_name = {ns.name: ns for ns in snap.nodes}
    held = 0
    seen: list[PodShape] = []
    read = 0
    for i, (gang, upto) in enumerate(gangs):
        pod = gang.pod
        seen.append(pod)
        if args.window and len(seen) - read >= max(1, REFRESH_SHARE * min(read, args.window)):
            read = len(seen)
            snap.fragmentation = model_of(seen[-args.window :])[1]
            snap.frag_scores.clear()  # scores and rankings of the model read before
            snap.rankings.clear()
        if pod.shared:
            shares.append(pod.gpu_milli)
        else:
            whole += gang.gpu_total // MILLI
        found = place(snap, gang)
        if found is not None and args.hindsight and 100 * upto >= args.start * cap:
            found = hindsight.choose(i, found)
        if found is not None and strands(frag, pod) and cap - used < args.hole_reserve * cap:
            p = found.pods[0]
            if by_name[p.node].free[p.devices[0]] == MILLI:  # it would open a free GPU
                held += 1
                found = None
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
    if args.hindsight:
        print(hindsight.summary())
    if args.hole_reserve:
        print(f"held off a free GPU (--hole-reserve {args.hole_reserve}): {held} shares")
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

    def share(milli: int) -> str:
        return f"{100 * min(arrived, milli) / cap:.2f} %"

    print(f"offline, no CPU/memory/nodes: every share placed (best-fit decreasing) "
          f"{share(cap - waste_of(shares))}; turning away the largest shares first "
          f"{share(whole * MILLI + choose)}; at most {share(cap - fluid_waste(shares))} "
          f"with every share placed (fluid bound)")  # fmt: skip


class Hindsight:
    """Each decision judged by what the core places after it (`--hindsight`)."""

    def __init__(
        self, snap: Snapshot, frag: FragModel, gangs: Sequence[Gang], args: argparse.Namespace
    ) -> None:
        self.snap, self.frag, self.gangs, self.args = snap, frag, gangs, args
        self.decisions = self.changed = self.turned_away = 0

    def choose(self, i: int, found: Placement) -> Placement | None:
        """The candidate for gang `i` after which the most GPU is placed (None:
        leave it out), `found` (the core's choice) on a tie."""
        gang = self.gangs[i]
        if len(found.pods) != 1 or not gang.pod.gpus:
            return found
        self.decisions += 1
        candidates: list[Placement | None] = [found, *self._others(gang, found)]
        if self.args.turn_away:
            candidates.append(None)
        best: Placement | None = found
        most = -1
        for c in candidates:
            if c is None:
                placed = self._rollout(i) - gang.gpu_total
            else:
                self.snap.assume(Running(gang, c, 0.0))
                placed = self._rollout(i)
                self.snap.forget(gang.id)
            if placed > most:
                best, most = c, placed
        if best is not found:
            self.changed += 1
            self.turned_away += best is None
        return best

    def _others(self, gang: Gang, found: Placement) -> list[Placement]:
        """The best-scored nodes other than `found`'s, one per node state."""

        def state(ns: NodeState) -> tuple[object, ...]:
            return (ns.node.gpu_model, ns.node.gpus, tuple(sorted(ns.free)), ns.cpu)

        seen = {state(self.snap.by_name[found.pods[0].node])}
        scored = sorted(
            (frag_score(self.frag, ns, gang.pod), ns)
            for ns, _ in self.snap.open_slots(gang.pod, frozenset())
        )
        out: list[Placement] = []
        for score, ns in scored:
            if len(out) + 1 >= self.args.hindsight:
                break
            if state(ns) not in seen:
                seen.add(state(ns))
                out.append(Placement((PodPlacement(ns.name, score[4]),)))
        return out

    def _rollout(self, i: int) -> int:
        """Milli-GPUs the core places of the arrivals after gang `i` (then taken back)."""
        end = len(self.gangs) if not self.args.horizon else i + 1 + self.args.horizon
        placed: list[Gang] = []
        for gang in self.gangs[i + 1 : end]:
            found = place(self.snap, gang)
            if found is not None:
                self.snap.assume(Running(gang, found, 0.0))
                placed.append(gang)
        for gang in reversed(placed):
            self.snap.forget(gang.id)
        return sum(g.gpu_total for g in placed)

    def summary(self) -> str:
        a = self.args
        ahead = f"the next {a.horizon} arrivals" if a.horizon else "every later arrival"
        return (
            f"hindsight: {a.hindsight} candidates from {a.start:g} % arrived, judged by "
            f"{ahead}{', leaving the pod out among them' if a.turn_away else ''}: "
            f"{self.decisions} decisions, {self.changed} changed"
            f" ({self.turned_away} pods left out)"
        )


def waste_of(shares: Sequence[int]) -> int:
    """Milli left beside the shares when best-fit decreasing packs every one of them
    (at 100 % arrived, that much demand cannot be placed)."""
    bins: list[int] = []
    for s in sorted(shares, reverse=True):
        i = bisect.bisect_left(bins, s)
        bisect.insort(bins, (bins.pop(i) if i < len(bins) else MILLI) - s)
    return sum(bins)


def fluid_waste(shares: Sequence[int]) -> int:
    """Milli that no packing placing every one of `shares` can use: a lower bound.

    Two shares over half a GPU never share a device, so each leaves a hole of
    `MILLI - share` that only shares no larger than the hole can fill. The bound
    pours the shares of half a GPU or less into those holes as a fluid (split at
    will; what is not poured packs without loss elsewhere): a share may go only
    into holes at least its size, and as those sets are nested, pouring the
    largest first into the smallest hole it fits fills as much as any pouring
    can. What stays empty is wasted by every real packing too."""
    room = Counter(MILLI - s for s in shares if 2 * s > MILLI)
    left = {hole: hole * n for hole, n in room.items()}
    holes = sorted(left)
    for s in sorted((s for s in shares if 2 * s <= MILLI), reverse=True):
        need = s
        for hole in holes[bisect.bisect_left(holes, s) :]:
            take = min(need, left[hole])
            left[hole] -= take
            need -= take
            if not need:
                break
    return sum(left.values())


if __name__ == "__main__":
    main()
