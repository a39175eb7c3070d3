"""GPU telemetry end to end on the local control plane: node agents replaying GPUs for
every fake node (`gangops agent --fake-nodes`, the per-node agent code), the fake
kubelet's pod-resources API saying which pod holds which GPU, and a real Prometheus
scraping them. PromQL returns the replayed values under the labels of the pods the
gangops scheduler bound; a scripted XID shows as the counter; a hung NVML call
withdraws that GPU's series while its health series stays."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.devcluster import DevCluster
from controller.devcluster.prometheus import Prometheus
from controller.devcluster.telemetry import TelemetryOptions, start_telemetry
from controller.kube.client import RESOURCES

from .gang_helpers import GangEnv, policy_doc
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

GIB = 1024**3
CONTAINERS = 7  # distinct constant series; GPU i of the fleet plays container i mod 7
XID_AT_S, HANG_AT_S = 6.0, 6.0


@dataclass
class Telemetry:
    prometheus: Prometheus
    started: float
    fault_node: str
    offsets: dict[str, int]
    """Each GPU node's first GPU in the fleet's order (the replay's offset)."""

    def expected_util(self, node: str, gpu: int) -> float:
        return 10.0 * ((self.offsets[node] + gpu) % CONTAINERS + 1)

    def query(self, promql: str) -> list[dict[str, object]]:
        return [{**s.labels, "value": s.value} for s in self.prometheus.query(promql)]


def _recording(d: Path) -> Path:
    duty, mem = ["container,timestamp,value"], ["container,timestamp,value"]
    for k in range(CONTAINERS):
        for i in range(3):
            duty.append(f"c{k},{1000 + 60 * i},{10.0 * (k + 1)}")
            mem.append(f"c{k},{1000 + 60 * i},{(k + 1) * GIB}")
    d.mkdir(parents=True)
    (d / "pod_gpu_duty_cycle.csv").write_text("\n".join(duty) + "\n")
    (d / "pod_gpu_memory_used_bytes.csv").write_text("\n".join(mem) + "\n")
    return d


@pytest.fixture(scope="module")
def telemetry(
    dev_cluster: DevCluster,
    claim_node: Callable[..., str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Telemetry]:
    work = tmp_path_factory.mktemp("telemetry")
    fault_node = claim_node(8)
    scenario = work / "scenario.yaml"
    scenario.write_text(
        "events:\n"
        f"  - {{at: {XID_AT_S}, node: {fault_node}, gpu: 1, kind: xid, xid: 48}}\n"
        f"  - {{at: {HANG_AT_S}, node: {fault_node}, gpu: 4, kind: hang}}\n"
    )
    before = list(dev_cluster.components)
    started = time.monotonic()
    t = start_telemetry(
        dev_cluster,
        TelemetryOptions(replay_dir=_recording(work / "rec"), scenario=scenario, speed=1.0),
    )
    offsets, n = {}, 0
    for node in dev_cluster.options.cluster.nodes():
        if node.gpus:
            offsets[node.name] = n
            n += node.gpus
    yield Telemetry(t.prometheus, started, fault_node, offsets)
    for c in dev_cluster.components:
        if c not in before:
            c.stop(5.0)
    dev_cluster.components[:] = before


def test_promql_returns_the_replayed_values_of_the_pods_the_scheduler_bound(
    telemetry: Telemetry, gang_env: GangEnv
) -> None:
    env = gang_env
    env.claim(2)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 16}}))
    env.start()
    env.create(env.job("tele", gang=6, per_worker=2))  # 3 workers of 2 GPUs
    env.wait_phase("tele", "Running")
    pods = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in env.pods("tele")}
    assert len(pods) == 3

    def series() -> list[dict[str, object]] | None:
        got = telemetry.query(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{env.namespace}"}}')
        return got if len(got) == 6 else None

    got = wait_for("the pods' GPU series in Prometheus", series, timeout=30)
    by_pod: dict[str, list[dict[str, object]]] = {}
    for s in got:
        by_pod.setdefault(str(s["pod"]), []).append(s)
    assert set(by_pod) == set(pods), "every pod, and only the job's pods"
    for pod, rows in by_pod.items():
        assert len(rows) == 2, f"{pod} holds 2 GPUs"
        for s in rows:
            node = str(s["Hostname"])
            assert node == pods[pod], "the GPU's node is the pod's node"
            assert s["container"] == "trainer"
            assert s["value"] == telemetry.expected_util(node, int(str(s["gpu"])))
    # a GPU no pod holds on those nodes: idle, and no pod labels (absent, not empty)
    node = next(iter(pods.values()))
    free = telemetry.query(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}", pod=""}}')
    assert free and all(s["value"] == 0.0 for s in free)
    assert all("pod" not in s and "namespace" not in s for s in free)
    # memory follows the same recording, in MiB
    mem = telemetry.query(f'DCGM_FI_DEV_FB_USED{{namespace="{env.namespace}"}}')
    for s in mem:
        k = (telemetry.offsets[str(s["Hostname"])] + int(str(s["gpu"]))) % CONTAINERS
        assert s["value"] == (k + 1) * 1024


def test_a_scripted_xid_is_counted_and_a_hung_call_withdraws_only_that_gpu(
    telemetry: Telemetry,
) -> None:
    node = telemetry.fault_node
    wait = max(0.0, telemetry.started + max(XID_AT_S, HANG_AT_S) - time.monotonic())
    time.sleep(wait)
    t_fault = time.monotonic()

    xid = wait_for(
        "the XID counter",
        lambda: telemetry.query(f'DCGM_EXP_XID_ERRORS_COUNT{{Hostname="{node}", xid="48"}} > 0'),
        timeout=15,
    )
    assert [(x["gpu"], x["value"]) for x in xid] == [("1", 1.0)]
    # the fatal XIDs are counted from 0 on every GPU, so the first is an increase
    zeros = telemetry.query(f'DCGM_EXP_XID_ERRORS_COUNT{{Hostname="{node}", xid="79"}} == 0')
    assert {z["gpu"] for z in zeros} == {str(i) for i in range(8)}, zeros
    # the count the chart's GangopsGPUFatalXID reads: one series per GPU, risen from 0
    risen = telemetry.query(
        f'increase(gangops_gpu_xid_errors_total{{Hostname="{node}", xid="48"}}[5m]) > 0'
    )
    assert [r["gpu"] for r in risen] == ["1"], risen
    assert all("pod" not in r for r in risen)

    def withdrawn() -> bool:
        gpus = {s["gpu"] for s in telemetry.query(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}"}}')}
        return "4" not in gpus and len(gpus) == 7

    wait_for("GPU 4's series withdrawn", withdrawn, timeout=15)
    health = {
        (s["gpu"], s["value"]) for s in telemetry.query(f'gangops_gpu_healthy{{Hostname="{node}"}}')
    }
    assert ("4", 0.0) in health and ("1", 0.0) in health and ("0", 1.0) in health
    print(f"XID counted and hung GPU withdrawn within {time.monotonic() - t_fault:.1f}s")


def test_gpus_the_agent_took_out_are_avoided_by_the_next_placement(
    telemetry: Telemetry, gang_env: GangEnv, dev_cluster: DevCluster
) -> None:
    from controller.agent.podresources import PodResourcesClient, fake_gpu_uuid

    node = telemetry.fault_node
    env = gang_env
    env.nodes = [node]

    def annotated() -> str | None:
        obj = env.kube.get(RESOURCES["Node"], node)
        value = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
            "gangops.ai/unhealthy-gpus"
        )
        return value if value == "1,4" else None

    wait_for("the agent's unhealthy-gpus annotation", annotated, timeout=30)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 16}}))
    env.start()
    env.create(env.job("eight", gang=8))
    status = wait_for(
        "eight to wait for capacity",
        lambda: (s := env.status("eight")).get("reason") == "Capacity" and s,
        timeout=30,
    )
    assert "hold 6 of 8" in status["message"], status["message"]  # 2 of 8 out of service
    env.create(env.job("six", gang=6))
    env.wait_phase("six", "Running")
    with PodResourcesClient(dev_cluster.pod_resources_socket(node)) as client:
        held = {u for u, o in client.list_devices().items() if o.namespace == env.namespace}
    assert len(held) == 6
    assert fake_gpu_uuid(node, 1) not in held and fake_gpu_uuid(node, 4) not in held


def test_without_prometheus_scheduling_goes_on_by_requests_says_so_and_resumes(
    telemetry: Telemetry, gang_env: GangEnv
) -> None:
    from controller.devcluster.prometheus import start_prometheus
    from controller.gang.telemetry import PrometheusTelemetry

    prom = telemetry.prometheus
    port = int(prom.url.rsplit(":", 1)[1])
    provider = PrometheusTelemetry(prom.url, interval_s=0.5, timeout_s=1, max_age_s=3).start()
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 16}}))
    env.start(telemetry=provider.current)
    env.create(env.job("fits", gang=8))
    try:
        env.wait_phase("fits", "Running")
    except AssertionError:
        st = env.status("fits")
        raise AssertionError(f"DEBUG {st} {provider.current().describe(time.time())}") from None
    env.create(env.job("waits", gang=8))  # the node is full: waits for capacity

    def message() -> str:
        return str(env.status("waits").get("message", ""))

    wait_for("waits to say why", lambda: "hold 0 of 8" in message(), timeout=20)
    assert "telemetry" not in message()
    restarted = None
    try:
        prom.stop()
        wait_for(
            "the status to say telemetry is unavailable",
            lambda: "telemetry unavailable" in message() and "requests alone" in message(),
            timeout=20,
        )
        env.kube.delete(RESOURCES["TrainingJob"], "fits", namespace=env.namespace)
        env.wait_phase("waits", "Running", timeout=40)  # scheduling went on, by requests
        restarted = start_prometheus(prom.work_dir, prom.config, port=port)
        wait_for(
            "telemetry to resume without a restart",
            lambda: provider.current().fresh(provider.current().usage, time.time()) or None,
            timeout=30,
        )
    finally:
        provider.stop()
        if restarted is not None:
            restarted.stop()
