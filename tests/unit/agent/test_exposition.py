"""The agent's exposition: dcgm-exporter parity (names, types, help, labels), valid
Prometheus text (promtool and prometheus_client's parser), withdrawn series."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.agent.agent import Agent, AgentConfig, Owner
from controller.agent.exposition import render
from controller.agent.fields import FIELDS, FIELDS_BY_NAME, NOT_FROM_NVML
from controller.agent.replay import Event, Replay, Scenario, fake_gpu_uuid
from controller.nodehealth import FATAL_XIDS

from .conftest import Clock

REFERENCE = (
    Path(__file__).resolve().parents[3].parent
    / "shared"
    / "reference"
    / "dcgm-exporter"
    / "default-counters.csv"
)


def _default_counters() -> list[tuple[str, str, str]]:
    if not REFERENCE.is_file():
        pytest.skip(
            f"dcgm-exporter's default-counters.csv is not at {REFERENCE}"
            " (../shared beside the checkout)"
        )
    out = []
    for row in csv.reader(REFERENCE.read_text().splitlines()):
        if not row or row[0].lstrip().startswith("#"):
            continue
        name, kind, help_ = (c.strip() for c in (row[0], row[1], ",".join(row[2:])))
        out.append((name, kind, help_))
    return out


def test_every_default_dcgm_counter_is_exported_alike_or_explained() -> None:
    counters = [c for c in _default_counters() if c[1] != "label"]
    assert len(counters) > 20
    for name, kind, help_ in counters:
        if name in NOT_FROM_NVML:
            assert name not in FIELDS_BY_NAME
            continue
        assert name in FIELDS_BY_NAME, (
            f"{name} is a default dcgm-exporter counter: export it or say why not"
        )
        f = FIELDS_BY_NAME[name]
        assert (f.kind, f.help) == (kind, help_), name
    listed = {c[0] for c in counters}
    assert set(FIELDS_BY_NAME) <= listed, "every exported field is one of dcgm-exporter's defaults"
    assert set(NOT_FROM_NVML) <= listed


def test_the_driver_version_is_a_label_as_in_dcgm_exporter() -> None:
    labels = [c[0] for c in _default_counters() if c[1] == "label"]
    assert labels == ["DCGM_FI_DRIVER_VERSION"]


def _snapshot(clock: Clock, owners: dict[str, Owner] | None = None, events: tuple[Event, ...] = ()):  # type: ignore[no-untyped-def]
    replay = Replay(node="gpu-node-7", gpus=2, clock=clock, scenario=Scenario(events))
    agent = Agent(
        replay,
        AgentConfig(node="gpu-node-7"),
        owners=(lambda: owners) if owners is not None else None,
        clock=clock,
    )
    agent.tick()
    clock.t += 1
    agent.poll_xids(0)
    agent.tick()
    return agent.snapshot()


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_series_carry_dcgm_labels_and_pod_labels_only_when_held(clock: Clock) -> None:
    owner = Owner("nlp", "bert-0", "trainer")
    snap = _snapshot(clock, {fake_gpu_uuid("gpu-node-7", 0): owner})
    text = render(snap).decode()
    fams = _families(text)
    util = fams["DCGM_FI_DEV_GPU_UTIL"]
    by_gpu = {s.labels["gpu"]: s.labels for s in util.samples}  # type: ignore[attr-defined]
    assert by_gpu["0"] == {
        "gpu": "0",
        "UUID": fake_gpu_uuid("gpu-node-7", 0),
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA L40S",
        "Hostname": "gpu-node-7",
        "DCGM_FI_DRIVER_VERSION": "570.172.08",
        "container": "trainer",
        "namespace": "nlp",
        "pod": "bert-0",
    }
    assert not {"pod", "namespace", "container"} & set(by_gpu["1"]), "absent, not empty"
    # counters keep dcgm-exporter's names: no _total appended
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    for f in FIELDS:
        assert f"# HELP {f.name} {f.help}\n" in text


def test_the_hostname_label_case_is_configurable(clock: Clock) -> None:
    text = render(_snapshot(clock), hostname_label="hostname").decode()
    assert 'hostname="gpu-node-7"' in text and "Hostname=" not in text


def test_xids_and_health_series(clock: Clock) -> None:
    snap = _snapshot(
        clock, events=(Event(at=0.5, kind="xid", gpu=1, xid=79), Event(at=0.5, kind="lost", gpu=0))
    )
    text = render(snap).decode()
    assert 'DCGM_EXP_XID_ERRORS_COUNT{gpu="1"' in text and 'xid="79"} 1\n' in text
    healthy = {s.labels["gpu"]: s.value for s in _families(text)["gangops_gpu_healthy"].samples}  # type: ignore[attr-defined]
    assert healthy == {"0": 0.0, "1": 0.0}
    # the lost GPU's values are withdrawn; its health series stays
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' not in text
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in text
    states = [s for s in _families(text)["gangops_gpu_health_state"].samples if s.value == 1]  # type: ignore[attr-defined]
    assert {(s.labels["gpu"], s.labels["state"]) for s in states} == {
        ("0", "lost"),
        ("1", "reboot_required"),
    }


def test_promtool_accepts_the_exposition(clock: Clock) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool not found: install the Debian package prometheus (scripts/debian-deps.sh)"
        )
    owner = Owner("nlp", "bert-0", "trainer")
    text = render(
        _snapshot(
            clock,
            {fake_gpu_uuid("gpu-node-7", 0): owner},
            (Event(at=0.5, kind="xid", gpu=1, xid=48),),
        )
    )
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, check=False)
    out = (r.stdout + r.stderr).decode()
    # 0: clean; 3: lint findings only. The only findings allowed are the ones DCGM's own
    # names and labels cause (camelCase labels, counters without _total).
    assert r.returncode in (0, 3), out
    allowed = (
        "label names should be written in 'snake_case' not 'camelCase'",
        'counter metrics should have "_total" suffix',
        "metric name should not include type 'counter'",
    )
    for line in out.splitlines():
        assert any(a in line for a in allowed), line


def test_fatal_xid_counts_start_at_zero(clock: Clock) -> None:
    """Found by a review: a GPU's first fatal XID made its count series appear at 1,
    and `increase()` over one sample is nothing, so the chart's GangopsGPUFatalXID
    never fired on what the agent exports. Every fatal XID is counted from 0."""
    fams = _families(render(_snapshot(clock)).decode())
    for name in ("DCGM_EXP_XID_ERRORS_COUNT", "gangops_gpu_xid_errors"):
        counts = {
            (s.labels["gpu"], s.labels["xid"]): s.value
            for s in fams[name].samples  # type: ignore[attr-defined]
        }
        assert counts == {(g, str(x)): 0.0 for g in ("0", "1") for x in FATAL_XIDS}, name
    assert {48, 79, 95, 119, 140} <= set(FATAL_XIDS) and 13 not in FATAL_XIDS


def test_the_xid_count_the_alert_reads_keeps_its_series_and_the_pod_it_hit_is_kept(
    clock: Clock,
) -> None:
    """Found by reviews: DCGM's XID count takes its pod labels from the GPU's holder
    at each scrape, so a fatal XID that ends the pod before the next scrape shows on a
    new series already at 1, and the chart's alert never saw it rise. The alert reads
    gangops_gpu_xid_errors_total, which has no pod labels, and the pod from
    gangops_gpu_xid_owner_timestamp_seconds: the holder when that XID came, kept while
    the XID repeats within 6 minutes after the pod has ended (a repeat dropped it), at
    the time of the last repeat, until 6 minutes after it (a repeat 8 minutes later
    named it); gangops_gpu_xid_last_timestamp_seconds says when the last XID came."""
    uuid = fake_gpu_uuid("gpu-node-7", 1)
    owners = {uuid: Owner("nlp", "bert-0", "trainer")}
    xids = (1.5, 5.5, 406.0, 407.0)
    replay = Replay(
        node="gpu-node-7", gpus=2, clock=clock,
        scenario=Scenario(tuple(Event(at=t, kind="xid", gpu=1, xid=79) for t in xids)),
    )  # fmt: skip
    agent = Agent(
        replay,
        AgentConfig(node="gpu-node-7"),
        owners=lambda: owners,
        clock=clock,
        wall=lambda: 1_765_000_000 + clock.t,
    )

    def series(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        family = _families(render(agent.snapshot()).decode()).get(name)
        return {
            tuple(sorted(s.labels.items())): s.value
            for s in getattr(family, "samples", ())  # absent while it has no series
            if s.labels["UUID"] == uuid and s.labels["xid"] == "79"
        }

    def hit() -> list[tuple[str, float]]:
        return [
            (dict(labels)["pod"], at)
            for labels, at in series("gangops_gpu_xid_owner_timestamp_seconds").items()
        ]

    agent.tick()
    before = series("gangops_gpu_xid_errors")
    dcgm_before = series("DCGM_EXP_XID_ERRORS_COUNT")
    assert list(before.values()) == [0.0] and hit() == []
    clock.t += 2
    assert agent.poll_xids(0) == 1
    owners.clear()  # the XID ended the pod
    agent.tick()
    after = series("gangops_gpu_xid_errors")
    assert after == {k: 1.0 for k in before}, "the same series, risen"
    assert not {"pod", "namespace", "container"} & {k for k, _ in next(iter(after))}
    (labels,) = series("gangops_gpu_xid_owner_timestamp_seconds")
    assert dict(labels) == {
        "Hostname": "gpu-node-7", "UUID": uuid, "xid": "79",
        "namespace": "nlp", "pod": "bert-0", "container": "trainer",
    }  # fmt: skip
    assert hit() == [("bert-0", 1_765_001_002.0)]
    # DCGM's count, for contrast: a new series already at 1, the pod's one gone
    dcgm_after = series("DCGM_EXP_XID_ERRORS_COUNT")
    assert set(dcgm_after).isdisjoint(dcgm_before) and list(dcgm_after.values()) == [1.0]
    # another pod on the GPU changes nothing; a repeat that finds no pod is bert-0's
    owners[uuid] = Owner("nlp", "bert-1", "trainer")
    clock.t += 2
    agent.tick()
    assert hit() == [("bert-0", 1_765_001_002.0)]
    owners.clear()
    clock.t += 2
    agent.tick()  # bert-1 has gone, as the agent reads it
    assert agent.poll_xids(0) == 1
    assert hit() == [("bert-0", 1_765_001_006.0)]
    # 6 minutes after the last repeat it is no one's; the next repeat finds no pod
    clock.t += 400.5
    agent.tick()
    assert hit() == []
    assert agent.poll_xids(0) == 1
    assert hit() == []
    (last,) = series("gangops_gpu_xid_last_timestamp_seconds").values()
    assert last == 1_765_001_406.5
    # and one that finds a pod names it
    owners[uuid] = Owner("nlp", "bert-2", "trainer")
    agent.tick()
    clock.t += 1
    assert agent.poll_xids(0) == 1
    assert hit() == [("bert-2", 1_765_001_407.5)]
    assert list(series("gangops_gpu_xid_errors").values()) == [4.0]


def test_the_fatal_xid_alert_names_the_fatal_xids() -> None:
    """The chart's alert and the agent's zero counts name the same XIDs."""
    rules = (
        Path(__file__).parents[3] / "charts/gangops/files/prometheus/alert-rules.yaml"
    ).read_text()
    named = set(re.findall(r'gangops_gpu_xid_errors_total\{xid=~"([0-9|]+)"', rules))
    assert named and all(set(map(int, n.split("|"))) == set(FATAL_XIDS) for n in named), named
