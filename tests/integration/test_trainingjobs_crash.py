"""Crash safety: `gangops run` killed (SIGKILL) at random moments while it schedules.

Twenty-odd trials share one workload of short gangs that queue behind a
project max, start, finish and make room for the next. Between kills a
monitor reads every job's recorded decision; afterwards one last controller
runs until the workload is done. The records must never admit more than the
project's max at once, no node may ever be double-booked (the fake kubelet
would fail the pod `OutOfnvidia.com/gpu`), no attempt may have two pods of one
rank, and every job must end Succeeded with its whole gang. Every fourth job
is elastic (2..8 GPUs) and the controller grows jobs as soon as it can (while
the queue waits on the project's max it cannot; as the queue drains it does,
so some kills land around resizes).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from controller.devcluster import DevCluster
from controller.kube.client import RESOURCES

from .gang_helpers import GangEnv, policy_doc
from .kube import FAKE_DURATION, wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

TRIALS = 20
MAX_GPUS = 12
JOBS = 36
GANG = 4
ELASTIC = {"minGPU": 2, "maxGPU": 8}
"""The resource profile of every fourth job."""


def _controller(env: GangEnv, dev_cluster: DevCluster, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "controller.cli", "run",
        "--kubeconfig", str(dev_cluster.kubeconfig),
        "--no-leader-elect",
        "--webhook-addr", "",
        "--metrics-addr", "127.0.0.1:0",
        "--system-namespace", env.system_namespace,
        "--job-selector", env.job_selector,
        "--node-selector", env.node_selector,
        "--source-selector", f"gangops.ai/none={env.selector_value}",
        "--cache-dir", str(log.parent / "cache"),
        "--grow-interval", "0",
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def test_crash_at_random_moments_never_breaks_quota_nodes_or_gangs(
    gang_env: GangEnv, dev_cluster: DevCluster, tmp_path: Path
) -> None:
    env = gang_env
    env.claim(2)
    env.set_policy(
        policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8, "max": MAX_GPUS}},
                   timeout_s=8)
    )  # fmt: skip
    for i in range(JOBS):
        manifest = env.job(f"j{i}", gang=GANG, annotations={FAKE_DURATION: "1"})
        if i % 4 == 0:
            manifest["spec"]["resourceProfile"] = dict(ELASTIC)
        env.create(manifest)

    seen_over: list[str] = []
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            jobs, _ = env.kube.list(RESOURCES["TrainingJob"], namespace=env.namespace)
            held = sum(
                len(j["status"]["admission"]["pods"])
                for j in jobs
                if (j.get("status") or {}).get("admission", {}).get("state") == "Admitted"
            )
            if held > MAX_GPUS:
                seen_over.append(f"{held} GPUs admitted at once")
            time.sleep(0.05)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    seed = int(os.environ.get("GANGOPS_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    busy_trials = 0
    for trial in range(TRIALS):
        log = tmp_path / f"controller-{trial}.log"
        proc = _controller(env, dev_cluster, log)
        wait_for("the controller to lead", lambda f=log: "leading" in f.read_text(), timeout=20)
        time.sleep(rng.uniform(0.0, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        text = log.read_text()
        busy_trials += "admitted job=" in text or "gang bound job=" in text
    log = tmp_path / "controller-final.log"
    final = _controller(env, dev_cluster, log)
    try:

        def done() -> bool:
            jobs, _ = env.kube.list(RESOURCES["TrainingJob"], namespace=env.namespace)
            return all((j.get("status") or {}).get("phase") == "Succeeded" for j in jobs)

        wait_for(f"every job to succeed (seed {seed}, log {log})", done, timeout=120)
    finally:
        stop.set()
        final.send_signal(signal.SIGTERM)
        final.wait(30)
        watcher.join(5)

    assert busy_trials >= TRIALS // 4, f"only {busy_trials} kills hit a controller at work"
    assert seen_over == [], f"seed {seed}"
    pods, _ = env.kube.list(RESOURCES["Pod"], namespace=env.namespace)
    refused = [
        p["metadata"]["name"] for p in pods if p["status"].get("reason", "").startswith("Out")
    ]
    assert refused == [], f"double-booked GPUs (seed {seed})"
    ranks = Counter(
        (
            p["metadata"]["labels"]["ai.operator/job-name"],
            p["metadata"]["labels"]["ai.operator/attempt"],
            p["metadata"]["labels"]["ai.operator/rank"],
        )
        for p in pods
    )
    assert max(ranks.values()) == 1
    for i in range(JOBS):
        status = env.status(f"j{i}")
        succeeded = [
            p
            for p in pods
            if p["metadata"]["labels"]["ai.operator/job-name"] == f"j{i}"
            and p["status"]["phase"] == "Succeeded"
        ]
        attempts = Counter(p["metadata"]["labels"]["ai.operator/attempt"] for p in succeeded)
        whole = attempts.get(str(status["attempts"]), 0)
        if i % 4:
            assert whole == GANG, f"j{i}: {attempts} (seed {seed})"
        else:  # elastic: its last size, within its range
            assert ELASTIC["minGPU"] <= whole <= ELASTIC["maxGPU"], f"j{i}: {attempts} ({seed})"
