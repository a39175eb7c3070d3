"""Trace and cluster loaders: every supported format, and errors that name the line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller.clusterspec import ClusterSpecError
from controller.scheduler.policy import SchedulingPolicy
from controller.scheduler.types import MILLI
from controller.sim.generator import generate, to_csv
from controller.sim.tenants import open_policy_doc
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


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("job_id,submit_time,duration,gang_size\na,0,inf,8\n", r"a\.csv:2: column 'duration'"),
        ("job_id,submit_time,duration,gang_size\na,1e400,1,8\n", r"column 'submit_time'"),
        ("job_id,submit_time,duration,gang_size\na,-5,1,8\n", r"'submit_time'.* found '-5'"),
        ("job_id,submit_time,duration,gang_size\na,0,-1,8\n", r"'duration'.* found '-1'"),
        ("job_id,submit_time,duration,gang_size\na,0,1\x00,8\n", r"a\.csv:2: column 'duration'"),
        ("\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", r"not a trace: byte 0x89 at offset 0"),
    ],
    ids=["inf", "1e400", "negative-submit", "negative-duration", "nul", "binary"],
)
def test_malformed_traces_are_trace_errors(tmp_path: Path, text: str, says: str) -> None:
    """Each was a traceback (OverflowError, UnicodeDecodeError) or silently
    accepted (negative times); `gangops simulate` prints a TraceError, exit 1."""
    path = tmp_path / "a.csv"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(TraceError, match=says):
        load_trace(path)


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("n.csv", "sn,cpu_milli,memory_mib,gpu,model\nx,1,1,inf,V100\n", r"column 'gpu'"),
        ("n.csv", "sn,cpu_milli,memory_mib,gpu,model\nx,1,1,100000,V100\n", r"0 to 1024"),
        (
            "t.csv",
            "num_switch,num_node_p_switch,num_gpu_p_node\n1000000,1000000,8\n",
            "more than 100000 nodes",
        ),
        (
            "c.yaml",
            "kind: Cluster\nspec:\n  pools: [{name: p, count: 1, gpusPerNode: 8, taints: [1]}]\n",
            r"taints\[0\]: expected a mapping",
        ),
        (
            "c.yaml",
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + "kind: Cluster\nspec:\n  pools: [{name: p, count: 1, gpusPerNode: 8, "
            "labels: {x: *i}}]\n",
            r"labels\.x: expected a string, found list",
        ),
    ],
    ids=["gpu-inf", "gpu-huge", "switches-huge", "taint-not-mapping", "label-alias-bomb"],
)
def test_malformed_clusters_are_errors(tmp_path: Path, name: str, text: str, says: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    start = time.perf_counter()
    with pytest.raises((TraceError, ClusterSpecError), match=says):
        load_cluster_file(path)
    assert time.perf_counter() - start < 5


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


_GANGOPS = "job_id,submit_time,duration,gang_size"
_OPENB_PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
_TIRESIAS = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
_NODES = "sn,cpu_milli,memory_mib,gpu,model"
_SWITCHES = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # a job that arrives twice: its first copy's GPUs leaked, a negative delay
        (f"{_GANGOPS}\na,0,100,1\nb,1,100,1\na,5,100,1\n", r"t\.csv:4: job_id 'a' repeats line 2"),
        (f"{_OPENB_PODS}\np1,1,1,1,1000\np1,1,1,1,1000\n", r"t\.csv:3: name 'p1' repeats line 2"),
        (f"{_TIRESIAS}\n7,1,0,1,m,10,1\n7,2,5,1,m,10,1\n", r"t\.csv:3: job_id '7' repeats line 2"),
        # a short row leaves the name column (here the last) missing
        ("submit_time,duration,gang_size,job_id\n0,100,1\n", r"t\.csv:2: column 'job_id' is empty"),
        (f"{_GANGOPS}\n  ,0,100,1\n", r"t\.csv:2: column 'job_id' is empty"),
        (f"{_TIRESIAS}\n,1,0,1,m,10,1\n", r"t\.csv:2: column 'job_id' is empty"),
        # gpu_milli is a share of one GPU: 1 to 1000 (0 divided by zero, 5000 ran)
        (f"{_GANGOPS},gpu_milli\na,0,100,1,0\n", r"t\.csv:2: column 'gpu_milli'.* 1 to 1000"),
        (f"{_GANGOPS},gpu_milli\na,0,100,1,5000\n", r"t\.csv:2: column 'gpu_milli'.* 1 to 1000"),
    ],
    ids=[
        "gangops-dup",
        "openb-dup",
        "tiresias-dup",
        "short-row-job_id",
        "blank-job_id",
        "tiresias-blank-job_id",
        "gpu_milli-0",
        "gpu_milli-5000",
    ],
)
def test_trace_rows_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(TraceError, match=says):
        load_trace(_write(tmp_path, "t.csv", text))


def test_gpu_milli_bounds_are_accepted(tmp_path: Path) -> None:
    low, whole = load_trace(
        _write(tmp_path, "t.csv", f"{_GANGOPS},gpu_milli\na,0,1,1,1\nb,1,1,1,1000\n")
    )
    assert (low.pod.gpu_milli, low.pod.shared) == (1, True)
    assert (whole.pod.gpu_milli, whole.pod.shared) == (MILLI, False)


def test_openb_pods_without_a_name_are_numbered(tmp_path: Path) -> None:
    jobs = load_trace(_write(tmp_path, "t.csv", f"{_OPENB_PODS}\n,1,1,1,1000\n,1,1,1,1000\n"))
    assert [j.id for j in jobs] == ["pod-0", "pod-1"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # counted twice in the capacity, once in the snapshot
        (
            f"{_NODES}\nn,1,1,1,P100\nm,1,1,1,P100\nn,1,1,1,P100\n",
            r"c\.csv:4: sn 'n' repeats line 2",
        ),
        # `sn` is the last column and a short row leaves it out
        (
            "gpu,cpu_milli,memory_mib,model,sn\n2,1000,1000,P100\n",
            r"c\.csv:2: column 'sn' is empty",
        ),
        # no GPU at all: every figure is a share of the GPUs
        (f"{_NODES}\n", r"c\.csv: no GPU in the cluster \(0 node"),
        (f"{_NODES}\nn1,64000,262144,0,\n", r"c\.csv: no GPU in the cluster \(1 node"),
        (f"{_SWITCHES}\n1,4,0,64,512\n", r"c\.csv: no GPU in the cluster \(4 node"),
        # more GPUs than a policy may hold (1,000,000)
        (
            f"{_SWITCHES}\n1,1000,1024,64,512\n",
            r"c\.csv:2: 1000 nodes of 1024 GPUs: more than 1000000 GPUs",
        ),
        (
            f"{_SWITCHES}\n1,500,1024,64,512\n1,500,1024,64,512\n",
            r"c\.csv:3: .*more than 1000000 GPUs",
        ),
        (
            _NODES + "\n" + "".join(f"n{i},1,1,1024,A\n" for i in range(977)),
            r"c\.csv:978: more than 1000000 GPUs in all",
        ),
    ],
    ids=[
        "dup-sn",
        "short-row-sn",
        "header-only",
        "zero-gpu-nodes",
        "zero-gpu-switches",
        "switches-over-1M-gpus",
        "rows-over-1M-gpus",
        "nodes-over-1M-gpus",
    ],
)
def test_cluster_rows_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(TraceError, match=says):
        load_cluster_file(_write(tmp_path, "c.csv", text))


def test_openb_node_list_node_limit(tmp_path: Path) -> None:
    """docs/simulator.md: at most 100,000 nodes, the limit the Tiresias cluster CSV
    and cluster.yaml already held."""
    rows = "".join(f"n{i},1,1,{i % 2},A\n" for i in range(100_001))
    with pytest.raises(TraceError, match=r"c\.csv:100002: more than 100000 nodes"):
        load_cluster_file(_write(tmp_path, "c.csv", f"{_NODES}\n{rows}"))
    nodes = load_cluster_file(
        _write(tmp_path, "ok.csv", f"{_NODES}\n{rows.rsplit('n100000', 1)[0]}")
    )
    assert len(nodes) == 100_000


def test_tiresias_cluster_rows_name_their_own_switches(tmp_path: Path) -> None:
    """Two rows used to both name their nodes s0-n00..., one node name twice."""
    nodes = load_cluster_file(
        _write(tmp_path, "c.csv", f"{_SWITCHES}\n1,2,4,40,256\n2,1,8,40,256\n")
    )
    assert [(n.name, n.gpus, n.labels["topology.kubernetes.io/rack"]) for n in nodes] == [
        ("s0-n00", 4, "switch-0"),
        ("s0-n01", 4, "switch-0"),
        ("s1-n00", 8, "switch-1"),
        ("s2-n00", 8, "switch-2"),
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # int(float(...)) read these as 2, 0 and 10 without a word
        (f"{_GANGOPS}\na,0,100,2.9\n", r"t\.csv:2: column 'gang_size': expected a whole number"),
        (f"{_OPENB_PODS}\np,1,1,0.4,1000\n", r"t\.csv:2: column 'num_gpu'.* found '0\.4'"),
        (f"{_TIRESIAS}\n7,1e1,0,1,m,10,1\n", r"t\.csv:2: column 'num_gpu'.* found '1e1'"),
        (f"{_TIRESIAS}\n7,1,-0.5,1,m,10,1\n", r"t\.csv:2: column 'submit_time'"),
        (f"{_NODES}\nn,1_000,1,8,V100\n", r"t\.csv:2: column 'cpu_milli'.* found '1_000'"),
        (f"{_GANGOPS}\na,1e3,100,1\n", r"t\.csv:2: column 'submit_time': expected seconds"),
        # an elastic job grows and shrinks by whole workers (these were floored)
        (
            f"{_GANGOPS},min_gpu,max_gpu,gpus_per_worker\na,0,100,8,4,12,8\n",
            r"t\.csv:2: min_gpu 4 and max_gpu 12 must be multiples of gpus_per_worker 8",
        ),
        (f"{_GANGOPS},min_gpu\na,0,100,8,0\n", r"t\.csv:2: column 'min_gpu'.* from 1"),
    ],
    ids=[
        "fraction",
        "openb-fraction",
        "exponent",
        "negative-fraction",
        "underscore",
        "seconds-exponent",
        "min-max-not-whole-workers",
        "min-0",
    ],
)
def test_numbers_that_are_not_whole_are_refused(tmp_path: Path, text: str, says: str) -> None:
    path = _write(tmp_path, "t.csv", text)
    with pytest.raises((TraceError, ClusterSpecError), match=says):
        (load_cluster_file if text.startswith(_NODES) else load_trace)(path)


def test_whole_numbers_written_with_a_point_and_decimal_seconds_are_read(tmp_path: Path) -> None:
    (a,) = load_trace(_write(tmp_path, "t.csv", f"{_GANGOPS}\na,12.25,3600.5,8.0\n"))
    assert (a.submit, a.duration, a.workers) == (12.25, 3600.5, 8)


def test_a_saved_generated_trace_replays_as_it_ran(tmp_path: Path) -> None:
    # times were written with six digits (`608147.2` as `608147`, `1006165.3` as `1.00617e+06`)
    doc = open_policy_doc(64)
    jobs = generate(
        jobs=3000, capacity_gpus=64, policy=SchedulingPolicy.from_dict(doc), seed=7, load=0.9
    )
    assert max(j.submit for j in jobs) > 1e5
    back = load_trace(_write(tmp_path, "g.csv", to_csv(jobs)))
    assert back == sorted(jobs, key=lambda j: j.submit)
