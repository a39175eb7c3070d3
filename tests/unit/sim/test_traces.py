"""Trace and cluster loaders: every supported format, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.scheduler.types import MILLI
from controller.sim.traces import TraceError, load_cluster_file, load_trace


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_openb_full_pod_list(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "b,6000,12288,1,460,,LS,Running,20,100,20\n"
        "a,12000,16384,8,1000,V100M16|V100M32,LS,Running,10,,10\n"
        "c,1000,1024,0,0,,BE,Failed,30,31,30\n",
    )
    jobs = load_trace(p)
    assert [j.id for j in jobs] == ["a", "b", "c"]
    a, b, c = jobs
    assert a.pod.gpus == 8 and a.pod.gpu_milli == MILLI and a.duration is None
    assert a.pod.gpu_models == frozenset({"V100M16", "V100M32"})
    assert b.pod.shared and b.pod.gpu_milli == 460 and b.duration == 80
    assert b.pod.memory == 12288 << 20 and b.pod.cpu_milli == 6000
    assert c.pod.gpus == 0 and c.gpu_milli == 0


def test_openb_short_variant_arrives_in_file_order(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "short.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,1,500\ny,1,1,2,1000\n",
    )
    jobs = load_trace(p)
    assert [(j.id, j.submit, j.duration) for j in jobs] == [("x", 0.0, None), ("y", 1.0, None)]


def test_openb_nodes(tmp_path: Path) -> None:
    p = _write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    (n,) = load_cluster_file(p)
    assert (n.name, n.gpus, n.cpu_milli, n.memory, n.gpu_model) == (
        "n0",
        2,
        64000,
        262144 << 20,
        "P100",
    )


def test_tiresias_jobs_and_cluster(tmp_path: Path) -> None:
    jobs = load_trace(
        _write(
            tmp_path,
            "jobs.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
            "0,8,30,133,vgg11,147,23\n1,1,0,606,vgg19,164,30\n",
        )
    )
    assert [(j.id, j.workers, j.pod.gpus, j.duration) for j in jobs] == [
        ("job-1", 1, 1, 164.0),
        ("job-0", 8, 1, 147.0),
    ]
    nodes = load_cluster_file(
        _write(
            tmp_path,
            "n2g4.csv",
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,4,40,256\n",
        )
    )
    assert [(n.name, n.gpus) for n in nodes] == [("s0-n00", 4), ("s0-n01", 4)]


def test_gangops_csv(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "g.csv",
        "job_id,submit_time,duration,gang_size,min_gpu,max_gpu,gpus_per_worker,gpu_milli,tier,project,user\n"
        "bert,5,3600,16,8,32,8,1000,high,nlp,alice\n"
        "tiny,6,60,1,,,,250,,,\n",
    )
    bert, tiny = load_trace(p)
    assert (bert.workers, bert.pod.gpus, bert.min_workers, bert.max_workers) == (2, 8, 1, 4)
    assert (bert.tier, bert.project, bert.user) == ("high", "nlp", "alice")
    assert tiny.pod.shared and tiny.project is None


def test_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,two,0\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: column 'num_gpu'"):
        load_trace(bad)
    unknown = _write(tmp_path, "u.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        load_trace(unknown)
    gang = _write(
        tmp_path, "g.csv", "job_id,submit_time,duration,gang_size,gpus_per_worker\nj,0,1,6,4\n"
    )
    with pytest.raises(TraceError, match=r"g\.csv:2: gang_size 6"):
        load_trace(gang)
