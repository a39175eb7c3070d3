"""The Helm chart on the real local control plane: every values file's render passes
server-side dry-run (core kinds, CRD schemas and admission checked by the API server);
the controller runs as the chart's ServiceAccount, with a token from the TokenRequest
API, through a reconcile and a scheduled TrainingJob, and writes the chart does not
grant are refused; install, upgrade with a CRD change, rollback and uninstall keep the
CRDs and the custom resources.

`helm` is built from its Go module (tools/helm/build.sh, cached); kubectl is the
control plane's own (clusters/local).
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ruamel.yaml import YAML

from controller.devcluster import Build, DevCluster
from controller.kube.client import RESOURCES, ApiError, Kube, connect
from controller.nodehealth import UNHEALTHY_ANNOTATION
from tests.unit.chart.helm import CHART, find, helm, parse, render, value_files

from .gang_helpers import GangEnv, policy_doc
from .kube import free_port, wait_for
from .reconciler_helpers import TEST_LABEL, PolicyRepo, ReconcileEnv, managed

pytest_plugins = ["tests.integration.reconciler_fixtures", "tests.integration.gang_fixtures"]

Obj = dict[str, Any]
MONITORING_CRDS = CHART.parents[1] / "tools" / "monitoring-crds" / "build.sh"
"""Generates the Prometheus Operator's CRDs (ServiceMonitor, PodMonitor,
PrometheusRule) from its API types module with controller-gen, cached by version."""
_NOWHERE = {"gangops.ai/chart-test": "no-such-node"}
"""A node selector no node matches: the chart's pods stay Pending on the shared cluster."""


def _kubectl(build: Build, kubeconfig: Path, *args: str, stdin: str = "") -> str:
    out = subprocess.run(
        [str(build.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, f"kubectl {' '.join(args)}:\n{out.stdout}{out.stderr}"
    return out.stdout


@pytest.fixture(scope="session")
def monitoring_crds(control_plane: Build, dev_cluster: DevCluster) -> list[str]:
    """The Prometheus Operator's CRDs, generated (tools/monitoring-crds/build.sh) and
    installed on the local control plane: the kinds they define."""
    out = subprocess.run(
        ["bash", str(MONITORING_CRDS)], stdout=subprocess.PIPE, text=True, timeout=1800
    )
    assert out.returncode == 0, f"tools/monitoring-crds/build.sh failed (exit {out.returncode})"
    files = sorted(Path(out.stdout.strip().splitlines()[-1]).glob("*.yaml"))
    assert len(files) == 3, files
    args = [a for f in files for a in ("-f", str(f))]
    _kubectl(control_plane, dev_cluster.kubeconfig, "apply", "--server-side", *args)
    _kubectl(
        control_plane, dev_cluster.kubeconfig, "wait", "--for=condition=Established",
        "--timeout=60s", *args,
    )  # fmt: skip
    return [parse(f.read_text())[0]["spec"]["names"]["kind"] for f in files]


def test_the_chart_monitors_and_rules_are_checked_by_the_operators_crds(
    control_plane: Build,
    dev_cluster: DevCluster,
    monitoring_crds: list[str],
    namespace: str,
) -> None:
    """With monitoring on, the ServiceMonitor, PodMonitor and PrometheusRule pass the
    Prometheus Operator's schemas on a real API server; one with a wrong field does not."""
    on = {"enabled": True}
    monitoring = {"serviceMonitor": on, "podMonitor": on, "prometheusRule": on}
    objs = render(namespace=namespace, values={"monitoring": monitoring})
    kinds = {o["kind"] for o in objs}
    assert set(monitoring_crds) == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert set(monitoring_crds) <= kinds, kinds
    mine = [o for o in objs if o["kind"] in monitoring_crds]
    text = "".join("---\n" + json.dumps(o) + "\n" for o in mine)
    out = _kubectl(
        control_plane, dev_cluster.kubeconfig, "apply", "--server-side", "--dry-run=server",
        "--field-manager=chart-dry-run", "-f", "-", stdin=text,
    )  # fmt: skip
    assert out.count("(server dry run)") == len(mine), out
    bad = next(o for o in mine if o["kind"] == "ServiceMonitor")
    bad["spec"]["endpoints"][0]["interval"] = "every minute"
    refused = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(dev_cluster.kubeconfig),
         "apply", "--server-side", "--dry-run=server", "-f", "-"],
        input=json.dumps(bad), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "interval" in refused.stderr, refused.stderr


@pytest.mark.parametrize("values", value_files(), ids=lambda p: p.stem)
def test_every_values_file_passes_server_side_dry_run(
    values: Path,
    control_plane: Build,
    dev_cluster: DevCluster,
    monitoring_crds: list[str],
    trainingjob_api: Kube,
    namespace: str,
) -> None:
    sent = render(values, namespace=namespace, release=f"dry-{secrets.token_hex(3)}")
    text = "".join("---\n" + json.dumps(o) + "\n" for o in sent)
    out = _kubectl(
        control_plane,
        dev_cluster.kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "--field-manager=chart-dry-run",
        "-f",
        "-",
        stdin=text,
    )
    assert out.count("(server dry run)") == len(sent), out


@pytest.mark.parametrize(
    ("kind", "level", "admitted"),
    [("Deployment", "restricted", True), ("DaemonSet", "baseline", False),
     ("DaemonSet", "privileged", True)],
)  # fmt: skip
def test_pod_security_admits_the_controller_at_restricted_and_the_agent_only_at_privileged(
    control_plane: Build,
    dev_cluster: DevCluster,
    api: client.ApiClient,
    namespace: str,
    kind: str,
    level: str,
    admitted: bool,
) -> None:
    """The pods' templates, created (dry-run) as Pods in a namespace enforcing `level`:
    the agent's read-only hostPath to the pod-resources socket is what baseline refuses."""
    client.CoreV1Api(api).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}}
    )
    template = next(o for o in render(namespace=namespace) if o["kind"] == kind)["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "probe", "namespace": namespace},
           "spec": {**template["spec"], "serviceAccountName": "default"}}  # fmt: skip
    out = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(dev_cluster.kubeconfig),
         "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(pod), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if admitted:
        assert out.returncode == 0, out.stderr
    else:
        # ... and for nothing else: PSA lists every violation.
        assert out.returncode != 0, out.stdout
        assert out.stderr.strip().endswith(
            'violates PodSecurity "baseline:latest": hostPath volumes (volume "pod-resources")'
        ), out.stderr


# --- least privilege ---------------------------------------------------------------


Grant = Callable[..., Path]
"""`grant(component, namespace, bound_to=None)`: see the fixture."""


@pytest.fixture
def grant(dev_cluster: DevCluster, tmp_path: Path) -> Iterator[Grant]:
    """`grant(component, namespace)`: apply the chart's RBAC of `component` (controller
    or agent) for a release in `namespace`, and return a kubeconfig holding a token of
    its ServiceAccount from the TokenRequest API. Cluster-wide objects are deleted after."""
    rbac_api = client.RbacAuthorizationV1Api(_api(dev_cluster))
    core = client.CoreV1Api(_api(dev_cluster))
    admission = client.CustomObjectsApi(_api(dev_cluster))
    made: list[Obj] = []

    def apply(component: str, namespace: str, *, bound_to: Obj | None = None) -> Path:
        release = f"lp-{secrets.token_hex(3)}"
        objs = render(namespace=namespace, release=release)
        kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
        if bound_to is not None:  # with the admission policies, and a pod-bound token
            kinds |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        rbac = [
            o
            for o in objs
            if o["kind"] in kinds
            and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        for o in rbac:
            if o["kind"] == "ServiceAccount":
                core.create_namespaced_service_account(namespace, o)
            elif o["kind"] == "ClusterRole":
                rbac_api.create_cluster_role(o)
            elif o["kind"] == "ClusterRoleBinding":
                rbac_api.create_cluster_role_binding(o)
            elif o["kind"] == "Role":
                rbac_api.create_namespaced_role(namespace, o)
            elif o["kind"] == "RoleBinding":
                rbac_api.create_namespaced_role_binding(namespace, o)
            else:
                plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies"}.get(
                    o["kind"], "validatingadmissionpolicybindings"
                )
                admission.create_cluster_custom_object(
                    "admissionregistration.k8s.io", "v1", plural, o
                )
            made.append(o)
        sa = next(o for o in rbac if o["kind"] == "ServiceAccount")["metadata"]["name"]
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if bound_to is not None:
            pod = {**bound_to, "spec": {**bound_to["spec"], "serviceAccountName": sa}}
            created = core.create_namespaced_pod(namespace, pod)
            spec["boundObjectRef"] = {
                "apiVersion": "v1", "kind": "Pod",
                "name": created.metadata.name, "uid": created.metadata.uid,
            }  # fmt: skip
        token = core.create_namespaced_service_account_token(
            sa, namespace, {"spec": spec}
        ).status.token
        admin_cfg = YAML(typ="safe").load(dev_cluster.kubeconfig.read_text())
        cluster = admin_cfg["clusters"][0]["cluster"]
        path = tmp_path / f"{sa}.kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "local", "cluster": cluster}],
                    "users": [{"name": sa, "user": {"token": token}}],
                    "contexts": [{"name": "sa", "context": {"cluster": "local", "user": sa}}],
                    "current-context": "sa",
                }
            )
        )
        return path

    yield apply
    for o in made:
        if o["kind"] == "ClusterRole":
            rbac_api.delete_cluster_role(o["metadata"]["name"])
        elif o["kind"] == "ClusterRoleBinding":
            rbac_api.delete_cluster_role_binding(o["metadata"]["name"])
        elif o["kind"] == "ValidatingAdmissionPolicy":
            admission.delete_cluster_custom_object(
                "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                o["metadata"]["name"],
            )  # fmt: skip
        elif o["kind"] == "ValidatingAdmissionPolicyBinding":
            admission.delete_cluster_custom_object(
                "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                o["metadata"]["name"],
            )  # fmt: skip


_APIS: dict[str, client.ApiClient] = {}


def _api(dev_cluster: DevCluster) -> client.ApiClient:
    from kubernetes import config

    key = str(dev_cluster.kubeconfig)
    if key not in _APIS:
        _APIS[key] = config.new_client_from_config(config_file=key)
    return _APIS[key]


def _controller_args(values: Obj, namespace: str) -> list[str]:
    """The chart's controller container args for `values`, as the Deployment has them."""
    objs = render(namespace=namespace, values=values)
    dep = next(o for o in objs if o["kind"] == "Deployment")
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.fixture
def run_as(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(kubeconfig: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"run-{len(procs)}.log"
        port = free_port()
        # The chart's args, with what only a pod has replaced: loopback ports, a cache
        # directory, debug logging (every API write in the log).
        keep = [
            a for a in args if not a.startswith(("--metrics-addr", "--webhook-addr", "--cache-dir"))
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controller.cli",
                    *keep,
                    "-v",
                    "--kubeconfig",
                    str(kubeconfig),
                    f"--metrics-addr=127.0.0.1:{port}",
                    "--webhook-addr=",
                    f"--cache-dir={tmp_path / 'cache'}",
                    "--identity=sa",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[2],
            )
        procs.append(proc)
        return proc, log

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(25)
            except subprocess.TimeoutExpired:
                p.kill()


def _clean_log(log: Path) -> str:
    text = log.read_text(errors="replace")
    assert "forbidden" not in text.lower(), text[-4000:]
    return text


def test_the_controller_reconciles_as_the_charts_service_account(
    dev_cluster: DevCluster,
    kube: Kube,
    reconcile_env: ReconcileEnv,
    policy_repo: PolicyRepo,
    run_as: Callable[..., tuple[subprocess.Popen[bytes], Path]],
    grant: Grant,
) -> None:
    env, n = reconcile_env, policy_repo.name
    sa_config = grant("controller", env.system_namespace)
    values = {
        "controller": {
            "sourceSelector": f"{TEST_LABEL}={env.prefix}",
            "lease": {"name": f"{env.prefix}-lease"},
        },
        "scheduler": {"gangScheduling": {"enable": False}},
    }
    args = _controller_args(values, env.system_namespace)
    assert "--leader-elect" in args
    proc, log = run_as(sa_config, [*args, f"--system-namespace={env.system_namespace}"])
    src = env.create_source("main", policy_repo.url)
    env.wait_condition(src, "Ready", revision_sha=policy_repo.head(), timeout=60)
    # What the compiled policy asks for was written under the ServiceAccount's rights.
    assert managed(kube, "PriorityClass", n("high")) is not None
    assert managed(kube, "Namespace", n("a-dev")) is not None
    assert managed(kube, "ResourceQuota", "gangops-quota", n("b")) is not None
    assert managed(kube, "ConfigMap", "gangops-scheduling-policy", env.system_namespace)
    lease = kube.get(RESOURCES["Lease"], f"{env.prefix}-lease", env.system_namespace)
    assert lease is not None and lease["spec"]["holderIdentity"] == "sa"
    # A change is pruned too (delete): drop a project, its namespace goes.
    policy_repo.remove("projects/b.yaml")
    sha = policy_repo.commit("drop b")
    env.patch_source(src, {"metadata": {"annotations": {"gangops.ai/reconcile-requested-at": "x"}}})
    env.wait_condition(src, "Ready", revision_sha=sha, timeout=60)
    assert proc.poll() is None
    text = _clean_log(log)
    assert "api write" in text


def test_the_controller_schedules_as_the_charts_service_account_and_no_more(
    dev_cluster: DevCluster,
    admin: Kube,
    gang_env: GangEnv,
    run_as: Callable[..., tuple[subprocess.Popen[bytes], Path]],
    grant: Grant,
) -> None:
    env = gang_env
    env.claim(1)
    sa_config = grant("controller", env.system_namespace)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    values = {
        "controller": {
            "jobSelector": env.job_selector,
            "gangNodeSelector": env.node_selector,
            "sourceSelector": "gangops.ai/chart-test=none",
            "lease": {"name": f"lease-{env.selector_value}"},
        },
    }
    args = _controller_args(values, env.system_namespace)
    proc, log = run_as(sa_config, [*args, f"--system-namespace={env.system_namespace}"])
    env.create(env.job("lp", gang=8, per_worker=4))
    status = env.wait_phase("lp", "Running", timeout=60)
    assert sum(status["allocation"].values()) == 8
    assert len(env.pods("lp")) == 2
    env.kube.delete(RESOURCES["TrainingJob"], "lp", namespace=env.namespace)
    assert proc.poll() is None
    _clean_log(log)

    # Writes the chart does not grant are refused, on the same token.
    sa = connect(str(sa_config))
    refused: list[tuple[str, Callable[[], object]]] = [
        (
            "reading a Secret outside its namespace",
            lambda: sa.get(RESOURCES["Secret"], "x", env.namespace),
        ),
        (
            "a Secret in its namespace",
            lambda: sa.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "x", "namespace": env.system_namespace},
                },
                field_manager="t",
            ),
        ),
        ("a TrainingJob's spec", lambda: sa.create(env.job("forged", gang=1), field_manager="t")),
        (
            "a CRD",
            lambda: sa.apply(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": "trainingjobs.ai.operator"},
                },
                field_manager="t",
            ),
        ),
        (
            "a ConfigMap in a tenant namespace",
            lambda: sa.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "x", "namespace": env.namespace},
                },
                field_manager="t",
            ),
        ),
        (
            "a Lease elsewhere",
            lambda: sa.create(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": "x", "namespace": env.namespace},
                },
                field_manager="t",
            ),
        ),
        (
            "a Node",
            lambda: sa.merge_patch(
                RESOURCES["Node"],
                env.nodes[0],
                {"metadata": {"labels": {"x": "y"}}},
                field_manager="t",
            ),
        ),
    ]
    for what, call in refused:
        with pytest.raises(ApiError) as e:
            call()
        assert e.value.status == 403, f"{what}: {e.value}"


def _agent(node: str, kubeconfig: Path, scenario: str, log: Path) -> subprocess.Popen[bytes]:
    """`gangops agent` for `node` with fake GPUs playing `scenario`, publishing on the
    Node with `kubeconfig`; its output in `log`."""
    played = log.with_suffix(".scenario.yaml")
    played.write_text(scenario)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "agent", "--node", node,
             "--listen", f"127.0.0.1:{free_port()}", "--scenario", str(played),
             "--gpus", "8", "--pod-resources-socket", "", "--publish-node", "on",
             "--kubeconfig", str(kubeconfig)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def test_the_node_agent_publishes_gpu_health_as_the_charts_service_account_and_no_more(
    admin: Kube,
    namespace: str,
    grant: Grant,
    tmp_path: Path,
) -> None:
    # A Node of its own (no kubelet behind it): the session's fake GPU nodes are
    # claimed by the scheduling tests.
    node = f"chart-agent-{secrets.token_hex(3)}"
    admin.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
                 field_manager="test")  # fmt: skip
    sa_config = grant("agent", namespace)
    log = tmp_path / "agent.log"
    proc = _agent(node, sa_config, "events: []\n", log)
    try:

        def published() -> Obj | None:
            live = admin.get(RESOURCES["Node"], node) or {}
            conds = (live.get("status") or {}).get("conditions") or []
            return next((c for c in conds if c["type"] == "GPUProblem"), None)

        cond = wait_for("the agent's condition on its Node", published, timeout=30)
        assert cond["reason"] == "GPUsHealthy"
        text = log.read_text(errors="replace")
        assert "forbidden" not in text.lower(), text[-3000:]
    finally:
        proc.terminate()
        proc.wait(20)
    sa = connect(str(sa_config))
    refused: list[tuple[str, Callable[[], object]]] = [
        ("listing pods", lambda: sa.list(RESOURCES["Pod"])),
        ("reading a Secret", lambda: sa.get(RESOURCES["Secret"], "x", namespace)),
        ("deleting a Node", lambda: sa.delete(RESOURCES["Node"], node)),
        (
            "creating a Node",
            lambda: sa.create(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{node}-forged"}},
                field_manager="t",
            ),
        ),
    ]
    for what, call in refused:
        with pytest.raises(ApiError) as e:
            call()
        assert e.value.status == 403, f"{what}: {e.value}"
    admin.delete(RESOURCES["Node"], node)


def test_the_node_agent_writes_only_its_own_node_and_there_only_its_own_fields(
    admin: Kube, namespace: str, grant: Grant, tmp_path: Path
) -> None:
    """The chart's admission policy, on the real API server, with a token bound to a
    pod on the agent's Node (as a DaemonSet's is): its GPU health is published; any
    other Node, a label, a taint or another condition of its own is refused (a review
    found the RBAC alone let a stolen agent token taint every node)."""
    mine, other = (f"chart-own-{secrets.token_hex(3)}" for _ in range(2))
    for n in (mine, other):
        admin.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}},
                     field_manager="test")  # fmt: skip
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"agent-{secrets.token_hex(3)}"},
        "spec": {
            "nodeName": mine,
            "containers": [{"name": "agent", "image": "gangops", "securityContext": restricted}],
        },
    }
    config = grant("agent", namespace, bound_to=probe)
    sa = connect(str(config))
    node = RESOURCES["Node"]

    def refused(name: str, patch: Obj, sub: str | None = None) -> str:
        with pytest.raises(ApiError) as e:
            sa.merge_patch(node, name, patch, field_manager="t", subresource=sub)
        assert e.value.status in (403, 422), e.value
        return e.value.message

    def policy_active() -> str | None:
        try:
            sa.merge_patch(node, other, {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: "0"}}},
                           field_manager="t")  # fmt: skip
        except ApiError as e:
            return e.message
        return None

    assert "only the Node its pod runs on" in wait_for(
        "the policy in force", policy_active, timeout=30
    )
    log = tmp_path / "agent.log"
    proc = _agent(mine, config, "events:\n  - {at: 0, gpu: 2, kind: xid, xid: 79}\n", log)
    try:

        def published() -> Obj | None:
            live = admin.get(node, mine) or {}
            conds = (live.get("status") or {}).get("conditions") or []
            cond = next((c for c in conds if c["type"] == "GPUProblem"), None)
            has = (live["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION)
            return cond if cond and cond["status"] == "True" and has == "2" else None

        try:  # the agent starts a Python process: slow on a loaded machine
            wait_for("the agent's GPU health on its own Node", published, timeout=90)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- the agent's log:\n{log.read_text()[-3000:]}") from None
        assert "forbidden" not in log.read_text(errors="replace").lower()
    finally:
        proc.terminate()
        proc.wait(20)
    assert "only the Node its pod runs on" in refused(
        other, {"status": {"conditions": [{"type": "GPUProblem", "status": "True"}]}}, "status"
    )
    only_ours = "may change only the gangops.ai/unhealthy-gpus annotation"
    assert only_ours in refused(mine, {"metadata": {"labels": {"x": "y"}}})
    assert only_ours in refused(mine, {"metadata": {"annotations": {"other": "x"}}})
    assert only_ours in refused(mine, {"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}})
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": "gone",
             "uid": "00000000-0000-0000-0000-000000000000"}  # fmt: skip
    assert only_ours in refused(mine, {"metadata": {"ownerReferences": [owner]}})
    assert only_ours in refused(mine, {"metadata": {"finalizers": ["x/y"]}})
    # a status write keeps the metadata it carries: checked there too
    assert only_ours in refused(mine, {"metadata": {"labels": {"x": "y"}}}, "status")
    assert only_ours in refused(mine, {"metadata": {"annotations": {"other": "x"}}}, "status")
    only_condition = "only the GPUProblem condition"
    assert only_condition in refused(
        mine, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "status"
    )
    for field, value in [
        ("addresses", [{"type": "InternalIP", "address": "10.9.9.9"}]),
        ("daemonEndpoints", {"kubeletEndpoint": {"Port": 1}}),
        ("capacity", {"nvidia.com/gpu": "64"}),
        ("volumesInUse", ["kubernetes.io/csi/x^y"]),
    ]:
        assert only_condition in refused(mine, {"status": {field: value}}, "status"), field
    for n in (mine, other):
        admin.delete(node, n)


def _bind(rbac_api: client.RbacAuthorizationV1Api, namespace: str, user: str, role: str) -> None:
    """A RoleBinding of `user` to ClusterRole `role` in `namespace`."""
    rbac_api.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )  # fmt: skip


def _one_gpu_job(name: str, namespace: str, user: str) -> Obj:
    return {
        "apiVersion": "ai.operator/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"ai.operator/user": user}},
        "spec": {"gangSize": 1, "priority": "batch", "template": {"spec": {"containers": [
            {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        ]}}},
    }  # fmt: skip


def test_tenants_bound_to_edit_create_trainingjobs_and_view_only_reads_them(
    dev_cluster: DevCluster,
    trainingjob_api: Kube,
    namespace: str,
) -> None:
    """The chart's aggregated ClusterRoles, on the cluster's own `edit` and `view`."""
    rbac_api = client.RbacAuthorizationV1Api(_api(dev_cluster))
    roles = [
        o
        for o in render(release=f"agg-{secrets.token_hex(3)}")
        if o["kind"] == "ClusterRole" and "-trainingjobs-" in o["metadata"]["name"]
    ]
    assert len(roles) == 2
    for role, user in (("edit", "alice"), ("view", "bob")):
        _bind(rbac_api, namespace, user, role)
    alice = connect(str(dev_cluster.user_kubeconfigs["alice"]))
    bob = connect(str(dev_cluster.user_kubeconfigs["bob"]))
    job = _one_gpu_job("mine", namespace, "alice")

    def refused(call: Callable[[], object]) -> bool:
        try:
            call()
        except ApiError as e:
            assert e.status == 403, e
            return True
        return False

    # Without the chart's roles, edit and view do not reach TrainingJobs.
    assert refused(lambda: alice.create(job, field_manager="t"))
    assert refused(lambda: bob.list(RESOURCES["TrainingJob"], namespace=namespace))
    try:
        for o in roles:
            rbac_api.create_cluster_role(o)
        wait_for(
            "alice's TrainingJob (edit, aggregated)",
            lambda: not refused(lambda: alice.create(job, field_manager="t")),
        )
        wait_for(
            "bob's list (view, aggregated)",
            lambda: not refused(lambda: bob.list(RESOURCES["TrainingJob"], namespace=namespace)),
        )
        assert bob.get(RESOURCES["TrainingJob"], "mine", namespace) is not None
        other = {**job, "metadata": {**job["metadata"], "name": "bobs",
                                     "labels": {"ai.operator/user": "bob"}}}  # fmt: skip
        assert refused(lambda: bob.create(other, field_manager="t"))
        # Nobody but the controller writes a job's status.
        assert refused(
            lambda: alice.merge_patch(
                RESOURCES["TrainingJob"], "mine", {"status": {"phase": "Running"}},
                field_manager="t", namespace=namespace, subresource="status",
            )
        )  # fmt: skip
    finally:
        for o in roles:
            rbac_api.delete_cluster_role(o["metadata"]["name"])


def test_tenants_bound_to_the_tenant_role_create_trainingjobs_but_no_pods(
    dev_cluster: DevCluster, trainingjob_api: Kube, namespace: str
) -> None:
    """Found by a review: the chart told tenants to be bound to `edit`, which creates
    pods directly (an 8-GPU pod with nodeName, past the user's max, tiers and gang);
    its own `<release>-tenants` role does what docs/security.md's does."""
    rbac_api = client.RbacAuthorizationV1Api(_api(dev_cluster))
    role = find(render(release=f"ten-{secrets.token_hex(3)}"), "ClusterRole", "-tenants")
    rbac_api.create_cluster_role(role)
    try:
        _bind(rbac_api, namespace, "carol", role["metadata"]["name"])
        carol = connect(str(dev_cluster.user_kubeconfigs["carol"]))
        job = _one_gpu_job("carols", namespace, "carol")

        def created() -> bool:
            try:
                carol.create(job, field_manager="t")
            except ApiError as e:
                assert e.status == 403, e  # until the binding is in force
                return False
            return True

        wait_for("carol's TrainingJob (the tenant role)", created)
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "direct", "namespace": namespace},
            "spec": {"nodeName": "anywhere", "containers": [
                {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}
            ]},
        }  # fmt: skip
        with pytest.raises(ApiError) as e:
            carol.create(pod, field_manager="t")
        assert e.value.status == 403 and "cannot create resource" in e.value.message
        with pytest.raises(ApiError) as e:
            carol.get(RESOURCES["Secret"], "any", namespace)
        assert e.value.status == 403
        assert carol.list(RESOURCES["Pod"], namespace=namespace) is not None  # reads them
    finally:
        rbac_api.delete_cluster_role(role["metadata"]["name"])


# --- install, upgrade, rollback, uninstall ------------------------------------------


def test_install_upgrade_with_a_crd_change_rollback_and_uninstall_keep_crds_and_resources(
    dev_cluster: DevCluster,
    admin: Kube,
    trainingjob_api: Kube,
    namespace: str,
    tmp_path: Path,
) -> None:
    release = f"life-{secrets.token_hex(3)}"
    base = ["--kubeconfig", str(dev_cluster.kubeconfig), "--namespace", namespace]
    # Admission policies off: they are shared by the session's other tests, and an
    # uninstall would take them away (their server-side dry-run is tested above).
    values = tmp_path / "values.yaml"
    values.write_text(
        json.dumps(
            {
                "admission": {"validating": False, "mutating": "off"},
                "controller": {"nodeSelector": _NOWHERE},
                "agent": {"nodeSelector": _NOWHERE},
            }
        )
    )
    tiers = "prioritytiers.policy.ai.operator"

    def crd_props() -> set[str]:
        crd = admin.get(RESOURCES["CustomResourceDefinition"], tiers)
        assert crd is not None
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        return set(spec["properties"])

    helm("install", release, str(CHART), *base, "--values", str(values), "--take-ownership")
    assert "owner" not in crd_props()
    # Version 2 of the chart adds a field to a CRD: the upgrade must apply it.
    chart2 = tmp_path / "gangops"
    shutil.copytree(CHART, chart2)
    path = chart2 / "files" / "crds" / "policy.ai.operator_prioritytiers.yaml"
    yaml = YAML(typ="safe", pure=True)
    crd = yaml.load(path.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "owner"
    ] = {"type": "string", "description": "added by chart 0.2.0"}
    with path.open("w") as f:
        yaml.dump(crd, f)
    chart_yaml = chart2 / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace("version: 0.1.0", "version: 0.2.0"))
    # The session's fixtures installed these CRDs with `gangops install-crds` (field
    # manager gangops), as a cluster moving to the chart has them: the release adopts
    # them (--take-ownership) and takes their fields over when it changes them.
    helm("upgrade", release, str(chart2), *base, "--values", str(values), "--force-conflicts")
    assert "owner" in crd_props()
    tier = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PriorityTier",
        "metadata": {"name": f"{release}-tier"},
        "spec": {"value": 10, "preemptionPolicy": "Never", "owner": "platform"},
    }
    admin.create(tier, field_manager="test")

    helm("rollback", release, "1", *base, "--force-conflicts")
    assert "owner" not in crd_props()
    history = json.loads(helm("history", release, *base, "--output", "json").stdout)
    assert [h["chart"] for h in history] == ["gangops-0.1.0", "gangops-0.2.0", "gangops-0.1.0"]

    dep = f"{release}-gangops-controller"
    assert admin.get(RESOURCES["ServiceAccount"], dep, namespace) is not None
    helm("uninstall", release, *base)
    assert admin.get(RESOURCES["ServiceAccount"], dep, namespace) is None
    for name in (tiers, "trainingjobs.ai.operator", "policysources.policy.ai.operator"):
        assert admin.get(RESOURCES["CustomResourceDefinition"], name) is not None, name
    kept = admin.get(RESOURCES["PriorityTier"], f"{release}-tier")
    assert kept is not None and kept["spec"]["value"] == 10
    admin.delete(RESOURCES["PriorityTier"], f"{release}-tier")


def test_the_chart_renders_for_the_servers_own_capabilities(
    dev_cluster: DevCluster,
    namespace: str,
) -> None:
    """Against the live server (not --kube-version), the MutatingAdmissionPolicy the local
    control plane serves is rendered in auto mode."""
    out = helm(
        "template",
        "caps",
        str(CHART),
        "--namespace",
        namespace,
        "--dry-run=server",
        "--take-ownership",  # of the session's CRDs and policies: this only reads
        "--kubeconfig",
        str(dev_cluster.kubeconfig),
    )
    assert "MutatingAdmissionPolicy" in {o["kind"] for o in parse(out.stdout)}
