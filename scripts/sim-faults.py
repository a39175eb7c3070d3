"""Write the seeded faults files of docs/sim-faults/ for the openb cluster (docs/simulator.md,
"Telemetry and faults"): `python scripts/sim-faults.py` from the repository root, with the
public traces in place (../shared/traces or $GANGOPS_TRACES)."""

from __future__ import annotations

import random
from pathlib import Path

from controller.sim.traces import load_cluster_file, traces_dir

OUT = Path("docs/sim-faults")


def events(rng: random.Random, nodes: list, count: int, span: int, *, resets: bool) -> list[str]:
    out: list[tuple[int, str]] = []
    for n in rng.sample(nodes, count):
        at, gpu = rng.randrange(0, span), rng.randrange(n.gpus)
        kind = rng.choice(["xid79", "xid48", "lost"])
        where = f"at: {at}, node: {n.name}, gpu: {gpu}"
        if kind == "xid79":
            out.append((at, f"  - {{{where}, kind: xid, xid: 79}}"))
        elif kind == "xid48":
            seconds = ", seconds: 86400" if resets else ""
            out.append((at, f"  - {{{where}, kind: xid, xid: 48{seconds}}}"))
        else:
            out.append((at, f"  - {{{where}, kind: lost}}"))
            if resets:
                back = at + rng.randrange(3600, 7 * 86400)
                out.append(
                    (
                        back,
                        f"  - {{at: {back}, node: {n.name}, gpu: {gpu}, kind: reset, "
                        "seconds: 120}",
                    )
                )
    return [line for _, line in sorted(out)]


def main() -> None:
    nodes = load_cluster_file(traces_dir() / "openb" / "openb_node_list_gpu_node.csv")
    nodes = [n for n in nodes if n.gpus > 0]
    rng = random.Random(13)
    head = [
        "# GPU faults on the openb cluster: 60 nodes of 1,213, one GPU each, at seeded times",
        '# over the trace\'s 149 days (docs/simulator.md, "Telemetry and faults").',
        "events:",
    ]
    (OUT / "openb.yaml").write_text(
        "\n".join(head + events(rng, nodes, 60, 12_900_000, resets=True)) + "\n"
    )
    rng = random.Random(13)
    head = [
        "# GPU faults on the openb cluster within the first hour: 120 nodes of 1,213, one GPU",
        '# each, at seeded times (docs/simulator.md, "Telemetry and faults"): the multi-tenant',
        "# runs (--load, one pass) arrive within about an hour.",
        "events:",
    ]
    (OUT / "openb-hour.yaml").write_text(
        "\n".join(head + events(rng, nodes, 120, 3600, resets=False)) + "\n"
    )


if __name__ == "__main__":
    main()
