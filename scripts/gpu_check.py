"""Compare the agent's /metrics with nvidia-smi on a real GPU (scripts/gpu-check.sh)."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

QUERY = "index,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"


def main(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    ours: dict[tuple[str, str], float] = {}
    for m in re.finditer(r'^(DCGM_\w+)\{gpu="(\d+)"[^}]*\} (\S+)$', text, re.M):
        ours[(m.group(2), m.group(1))] = float(m.group(3))
    smi = subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    ok = True
    for line in smi.strip().splitlines():
        idx, uuid, used, total, util, temp, power = (c.strip() for c in line.split(","))
        pairs = [
            ("memory used MiB", float(used), ours.get((idx, "DCGM_FI_DEV_FB_USED"))),
            (
                "memory total MiB",
                float(total),
                sum(ours.get((idx, f"DCGM_FI_DEV_FB_{k}"), 0.0) for k in ("USED", "FREE", "RESERVED")),
            ),
            ("utilisation %", float(util), ours.get((idx, "DCGM_FI_DEV_GPU_UTIL"))),
            ("temperature C", float(temp), ours.get((idx, "DCGM_FI_DEV_GPU_TEMP"))),
            ("power W", float(power), ours.get((idx, "DCGM_FI_DEV_POWER_USAGE"))),
        ]
        print(f"GPU {idx} {uuid} (agent UUID label present: {uuid in text})")
        for name, want, got in pairs:
            good = got is not None and abs(got - want) <= max(1.0, 0.01 * abs(want))
            ok &= good
            print(f"  {name:18} nvidia-smi {want:10.2f}  agent {got if got is not None else 'absent':>10}  {'OK' if good else 'DIFF'}")
    print("verdict:", "agent matches nvidia-smi" if ok else "differences above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
