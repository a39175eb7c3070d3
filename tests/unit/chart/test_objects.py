"""What the chart renders: CRDs and admission policies generated from the code, kept and
upgraded; least-privilege RBAC; the controller and agent as issue 14 asks; the
recording rules; the values reference in sync with the schema."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controller.jobs.admission import admission_objects, mutating_objects
from controller.kube.crds import generate_crds
from controller.policy.validate import schema_dir

from .helm import CHART, ROOT, VALUES_DIR, find, render
from .reference import README, render_reference

Obj = dict[str, Any]


def _without_chart_labels(obj: Obj) -> Obj:
    out = json.loads(json.dumps(obj))
    meta = out["metadata"]
    meta["labels"] = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if not k.startswith(("app.kubernetes.io/", "helm.sh/")) or k == "app.kubernetes.io/part-of"
    }
    if not meta["labels"]:
        del meta["labels"]
    meta.get("annotations", {}).pop("helm.sh/resource-policy", None)
    if meta.get("annotations") == {}:
        del meta["annotations"]
    return out


def test_the_crds_are_the_generated_ones_kept_on_uninstall() -> None:
    objs = render()
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    want = {c["metadata"]["name"]: c for c in generate_crds(schema_dir())}
    assert {c["metadata"]["name"] for c in crds} == set(want)
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert _without_chart_labels(crd) == want[crd["metadata"]["name"]]
    assert not (CHART / "crds").exists(), "crds/ is installed once and never upgraded by Helm"


def test_the_admission_policies_are_the_codes() -> None:
    objs = render(values={"admission": {"mutating": "on"}})
    got = [
        _without_chart_labels(o) for o in objs if o["kind"].endswith(("AdmissionPolicy", "Binding"))
    ]
    got = [
        o
        for o in got
        if o["apiVersion"].startswith("admissionregistration")
        and not o["metadata"]["name"].endswith("-agent-own-node")  # the chart's own, below
    ]

    def key(o: Obj) -> tuple[str, str]:
        return (o["kind"], o["metadata"]["name"])

    assert sorted(got, key=key) == sorted(admission_objects() + mutating_objects(), key=key)


def test_the_agents_own_node_policy_is_bound_and_matches_its_service_account() -> None:
    objs = render()
    policy = find(objs, "ValidatingAdmissionPolicy", "-agent-own-node")
    binding = find(objs, "ValidatingAdmissionPolicyBinding", "-agent-own-node")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    sa = find(objs, "ServiceAccount", "-agent")["metadata"]
    (match,) = policy["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{sa["namespace"]}:{sa["name"]}"' in match["expression"]
    off = render(values={"agent": {"publishNode": False}})
    assert not [o for o in off if o["metadata"]["name"].endswith("-agent-own-node")]


def test_the_mutating_policy_follows_what_the_cluster_serves() -> None:
    def kinds(*extra: str) -> set[str]:
        return {o["kind"] for o in render(extra=extra)}

    assert "MutatingAdmissionPolicy" not in kinds()
    served = ("--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy")
    assert "MutatingAdmissionPolicy" in kinds(*served)


def test_no_rbac_rule_uses_a_wildcard() -> None:
    for values in VALUES_DIR.glob("*.yaml"):
        for o in render(values):
            for rule in o.get("rules") or []:
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(key, []), (values.name, o["metadata"]["name"], rule)


def test_the_agent_may_only_publish_on_nodes() -> None:
    role = find(render(), "ClusterRole", "-agent")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    assert not [
        o
        for o in render(values={"agent": {"publishNode": False}})
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-agent")
    ]


def test_the_controller_deployment() -> None:
    dep = find(render(), "Deployment", "-controller")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    assert dep["spec"]["replicas"] == 2
    assert c["args"][0] == "run" and "--leader-elect" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {"name": "metrics", "containerPort": 8080} in c["ports"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    # no hash of the Secrets' plaintext on the pod: the files are read again when rotated
    assert not (pod["metadata"].get("annotations") or {})
    assert "strategy" not in dep["spec"]  # a rolling update: the Lease keeps one leader
    secrets = {v["name"]: v["secret"] for v in pod["spec"]["volumes"] if "secret" in v}
    assert secrets == {}  # none configured by default
    spread = pod["spec"]["topologySpreadConstraints"][0]
    assert spread["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # Pod Security "restricted": non-root, no escalation, no capabilities, seccomp.
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    pdb = find(render(), "PodDisruptionBudget", "-controller")
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_alertmanagers_token_is_mounted_and_passed_only_when_given() -> None:
    def controller(values: dict[str, Any]) -> dict[str, Any]:
        dep = find(render(values={"controller": values}), "Deployment", "-controller")
        c: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
        return c

    flag = "--alertmanager-token-file=/etc/gangops/alertmanager/token"
    assert flag not in controller({})["args"]
    mine = controller({"alertmanager": {"existingSecret": "am"}})
    assert flag in mine["args"]
    mounts = {m["name"]: m["mountPath"] for m in mine["volumeMounts"]}
    assert mounts["alertmanager-token"] == "/etc/gangops/alertmanager"
    objs = render(values={"controller": {"alertmanager": {"token": "t0ken"}}})
    secret = find(objs, "Secret", "-alertmanager")
    assert secret["data"] == {"token": "dDBrZW4="}
    volumes = {
        v["name"]: v for v in find(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["alertmanager-token"]["secret"]["items"] == [{"key": "token", "path": "token"}]


def test_the_webhook_port_admits_alertmanager_beside_the_webhook_peers() -> None:
    """The receiver shares the webhook port: limiting it to the ingress controller cut
    Alertmanager off (found by a review)."""
    ingress = {"podSelector": {"matchLabels": {"app": "ingress-nginx"}}}
    objs = render(values={"networkPolicy": {"webhookFrom": [ingress]}})
    rules = find(objs, "NetworkPolicy", "-controller")["spec"]["ingress"]
    (webhook,) = [r for r in rules if r["ports"] == [{"port": "webhook"}]]
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    assert webhook["from"] == [ingress, monitoring]


def test_without_a_lease_one_replica_is_replaced_not_rolled_and_has_no_budget() -> None:
    objs = render(values={"controller": {"replicas": 1, "leaderElect": False}})
    strategy = find(objs, "Deployment", "-controller")["spec"]["strategy"]
    assert strategy == {"type": "Recreate", "rollingUpdate": None}  # null: an upgrade drops it
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]  # drains would hang


def test_the_node_agent_daemonset() -> None:
    ds = find(render(), "DaemonSet", "-agent")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # gangops' own cordon: the agent keeps reporting the node it took out of service
    assert {"key": "gangops.ai/gpu-fault", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c[
        "env"
    ]
    assert "--publish-node=on" in c["args"] and "--node=$(NODE_NAME)" in c["args"]
    assert "--interval=10" in c["args"]
    mount = c["volumeMounts"][0]
    assert mount == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)


@pytest.mark.parametrize(("interval", "seconds"), [("10s", "10"), ("500ms", "0.5"), ("2m", "120")])
def test_the_gpu_metrics_interval_is_the_agents_reading_interval_and_the_scrapes(
    interval: str, seconds: str
) -> None:
    values = {"monitoring": {"gpuMetrics": {"interval": interval}, "podMonitor": {"enabled": True}}}
    objs = render(values=values)
    assert (
        f"--interval={seconds}"
        in find(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert find(objs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["interval"] == interval


@pytest.mark.parametrize(
    ("suffix", "name"), [("-gpu", "recording-rules"), ("-gpu-alerts", "alert-rules")]
)
def test_the_prometheus_rules_hold_the_charts_rules_and_they_pass_promtool(
    tmp_path: Path, suffix: str, name: str
) -> None:
    from ruamel.yaml import YAML

    rule = find(
        render(values={"monitoring": {"prometheusRule": {"enabled": True}}}),
        "PrometheusRule",
        suffix,
    )
    path = CHART / "files" / "prometheus" / f"{name}.yaml"
    assert rule["spec"] == YAML(typ="safe").load(path.read_text())
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus): rules not checked")
    extracted = tmp_path / "rules.yaml"
    YAML(typ="safe").dump(rule["spec"], extracted)
    out = subprocess.run(
        [promtool, "check", "rules", str(extracted)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The rules' own test cases, run over the rules as rendered.
    cases = (ROOT / "tests" / "unit" / "prometheus" / f"{name}.test.yaml").read_text()
    tests = tmp_path / "rules.test.yaml"
    tests.write_text(
        cases.replace(f"../../../charts/gangops/files/prometheus/{name}.yaml", "rules.yaml")
    )
    assert "- rules.yaml" in tests.read_text()
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _operator_target(monitor: Obj, objs: list[Obj]) -> dict[str, str]:
    """The labels the Prometheus Operator gives a monitor's target: `namespace`, `pod`
    and `container` of the pod scraped (`service` too, for a ServiceMonitor), `endpoint`
    (the port), `job` (the Service's name for a ServiceMonitor, `<namespace>/<name>` for
    a PodMonitor, or the value of the label `jobLabel` names) and `instance`; then the
    monitor's relabelings (replace with no source labels, labeldrop, labelkeep)."""
    spec, meta = monitor["spec"], monitor["metadata"]
    want = spec["selector"]["matchLabels"]
    (workload,) = [
        o
        for o in objs
        if o["kind"] in ("DaemonSet", "Deployment")
        and want.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    container = workload["spec"]["template"]["spec"]["containers"][0]["name"]
    target = {
        "namespace": meta["namespace"],
        "pod": f"{workload['metadata']['name']}-x7k2p",
        "container": container,
    }
    if monitor["kind"] == "ServiceMonitor":
        (service,) = [
            o
            for o in objs
            if o["kind"] == "Service" and want.items() <= o["metadata"]["labels"].items()
        ]
        target["service"] = job = service["metadata"]["name"]
        labels = service["metadata"]["labels"]
        endpoints = spec["endpoints"]
    else:
        job = f"{meta['namespace']}/{meta['name']}"
        labels = workload["spec"]["template"]["metadata"]["labels"]
        endpoints = spec["podMetricsEndpoints"]
    if "jobLabel" in spec:
        job = labels[spec["jobLabel"]]
    (endpoint,) = endpoints
    target.update(job=str(job), endpoint=endpoint["port"], instance="10.0.0.7:9400")
    for r in endpoint.get("relabelings", []):
        action = r.get("action", "replace").lower()
        if action == "replace" and r.get("sourceLabels"):
            assert r["sourceLabels"] == ["__meta_kubernetes_pod_node_name"], r
            target[r["targetLabel"]] = "node-a"
        elif action == "replace":
            target[r["targetLabel"]] = r["replacement"]
        elif action in ("labeldrop", "labelkeep"):
            drop = action == "labeldrop"
            target = {k: v for k, v in target.items() if bool(re.fullmatch(r["regex"], k)) != drop}
        else:
            raise AssertionError(f"relabel action {action!r} is not emulated here")
    return target


def test_a_gpu_no_pod_holds_carries_no_pod_labels_through_the_podmonitor() -> None:
    """The agent leaves pod, namespace and container off a GPU no container holds.
    The chart's PodMonitor honours the agent's labels, and Prometheus adds a target's
    labels to every series without them: the Operator's own namespace, pod and
    container (the agent's) would then name the agent as the GPU's holder, count an
    idle GPU's usage as the agent pod's, and make fatal XIDs on idle GPUs of two nodes
    one namespace's job fault, which the alert holds back. Found by a review."""
    from controller.agent.agent import Agent, AgentConfig, Owner
    from controller.agent.exposition import render as exposition
    from controller.agent.replay import Replay, fake_gpu_uuid

    objs = render(values={"monitoring": {"podMonitor": {"enabled": True}}})
    monitor = find(objs, "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    target = _operator_target(monitor, objs)
    owners = {fake_gpu_uuid("node-a", 0): Owner("nlp", "bert-0", "trainer")}
    agent = Agent(
        Replay(node="node-a", gpus=2, clock=lambda: 1000.0),
        AgentConfig(node="node-a"),
        owners=lambda: owners,
        clock=lambda: 1000.0,
    )
    agent.tick()
    holders: dict[str, tuple[str | None, str | None, str | None]] = {}
    for line in exposition(agent.snapshot()).decode().splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            scraped = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            stored = {**target, **scraped}  # honorLabels: the scraped label wins
            holders[stored["gpu"]] = (
                stored.get("namespace"),
                stored.get("pod"),
                stored.get("container"),
            )
    assert holders == {"0": ("nlp", "bert-0", "trainer"), "1": (None, None, None)}
    assert target["job"] == "gangops-agent" and target["instance"]
    # `up` has only the target's labels: it names the node (GangopsNodeAgentDown)
    assert target["Hostname"] == "node-a"


@pytest.mark.parametrize(
    ("release", "namespace"),
    [("gangops", "gangops-system"), ("prod", "ml-platform"), ("ml-gangops-eu", "ml")],
)
def test_the_alert_rules_select_the_jobs_of_the_charts_monitors(
    tmp_path: Path, release: str, namespace: str
) -> None:
    """Whatever the release and namespace are called (`helm install prod -n ml-platform`
    names objects prod-gangops-*), GangopsControllerDown holds back while the
    controller is scraped and fires when it is not, and GangopsNodeAgentDown fires for
    a down agent: the rules select the jobs the chart's monitors give their targets,
    as the dev cluster's Prometheus names its agents' job too."""
    from controller.devcluster.prometheus import AGENT_JOB, ALERT_RULES

    on = {"enabled": True}
    objs = render(
        values={"monitoring": {"serviceMonitor": on, "podMonitor": on}},
        release=release,
        namespace=namespace,
    )
    controller_target = _operator_target(find(objs, "ServiceMonitor"), objs)
    agent_target = _operator_target(find(objs, "PodMonitor"), objs)
    controller, agent = controller_target["job"], agent_target["job"]
    assert agent == AGENT_JOB
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus): rules not run")

    from ruamel.yaml import YAML

    rules = YAML(typ="safe").load(ALERT_RULES.read_text())
    annotations = {r["alert"]: r["annotations"] for g in rules["groups"] for r in g["rules"]}

    def case(name: str, series: str, values: str, alert: str, fires: dict[str, str] | None) -> Obj:
        expected = []
        if fires is not None:
            text = {  # the annotations' {{ $labels.x }} filled in, as Prometheus does
                k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: fires[m.group(1)], v)
                for k, v in annotations[alert].items()
            }
            expected = [{"exp_labels": fires, "exp_annotations": text}]
        return {
            "name": name,
            "interval": "1m",
            "input_series": [{"series": series, "values": values}],
            "alert_rule_test": [{"eval_time": "10m", "alertname": alert, "exp_alerts": expected}],
        }

    def up(target: dict[str, str]) -> str:
        return "up{" + ",".join(f'{k}="{v}"' for k, v in sorted(target.items())) + "}"

    up_controller, up_agent = up(controller_target), up(agent_target)
    down = {"severity": "critical", "gangops_action": "none"}
    agent_down = {"severity": "warning", "gangops_action": "none", **agent_target}
    tests = {
        "rule_files": [str(ALERT_RULES)],
        "evaluation_interval": "1m",
        "tests": [
            case("controller up", up_controller, "1x20", "GangopsControllerDown", None),
            case("controller down", up_controller, "0x20", "GangopsControllerDown", down),
            case("agent up", up_agent, "1x20", "GangopsNodeAgentDown", None),
            case("agent down", up_agent, "0x20", "GangopsNodeAgentDown", agent_down),
        ],
    }
    path = tmp_path / "jobs.test.yaml"
    path.write_text(json.dumps(tests))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, f"jobs {controller!r}, {agent!r}:\n{out.stdout}{out.stderr}"


def test_the_values_reference_in_the_readme_is_generated_from_the_schema() -> None:
    assert README.read_text() == render_reference(README.read_text()), (
        "charts/gangops/README.md is stale: run python -m tests.unit.chart.reference"
    )
