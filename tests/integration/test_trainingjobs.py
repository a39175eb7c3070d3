"""TrainingJobs end to end on the local control plane: CRD, admission policy,
the gang scheduler placing, queueing, preempting and restarting whole gangs."""

from __future__ import annotations

import copy
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest
from kubernetes import client

from controller.devcluster import DevCluster
from controller.gang.cli import explain_job
from controller.kube.client import RESOURCES, ApiError, Kube
from controller.kube.crds import generate_crds, install
from controller.policy.validate import schema_dir

from .gang_helpers import BATCH, HIGH, GangEnv, policy_doc
from .kube import FAKE_DURATION, FAKE_EXIT_CODE, GPU, wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

_JOB = RESOURCES["TrainingJob"]


def _nodes_of(pods: list[dict[str, object]]) -> Counter[str]:
    return Counter(str(p["spec"]["nodeName"]) for p in pods)  # type: ignore[index]


def test_seed_gang_of_8_takes_two_nodes_with_4_free_not_the_node_with_3(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    a, b, c = env.claim(3)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 24}}))
    env.occupy(a, 4)
    env.occupy(b, 4)
    env.occupy(c, 5)
    env.start()
    env.create(env.job("seed", gang=8))

    status = env.wait_phase("seed", "Running")
    assert status["allocation"] == {a: 4, b: 4}
    assert status["admission"]["state"] == "Admitted"
    assert status["reason"] == "Running"
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True" and ready["Admitted"] == "True"
    pods = env.pods("seed")
    assert _nodes_of(pods) == {a: 4, b: 4}
    for p in pods:
        assert p["spec"]["schedulerName"] == "gangops"
        assert p["metadata"]["annotations"]["gangops.ai/assigned-node"] == p["spec"]["nodeName"]
        assert p["status"]["phase"] == "Running"
        env_vars = {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}
        assert env_vars["WORLD_SIZE"] == "8"
    assert sorted(int(p["metadata"]["labels"]["ai.operator/rank"]) for p in pods) == list(range(8))
    service = env.kube.get(RESOURCES["Service"], "seed", env.namespace)
    assert service is not None and service["spec"]["clusterIP"] == "None"


def test_a_one_pod_job_goes_where_it_leaves_room_for_the_recent_jobs(gang_env: GangEnv) -> None:
    """One-pod jobs are placed for the typical requests of the most recent jobs
    (docs/scheduler.md, "Where a one-pod job goes"), waiting ones too. Beside
    jobs of one 2-GPU pod that wait (above the project's max), a 1-GPU job
    takes the node with 3 GPUs free, leaving 2 together, not the tightest fit
    with 2 free, where best-fit put it and left one GPU no 2-GPU job can use."""
    env = gang_env
    a, b = env.claim(2)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 0, "max": 1}}))
    env.occupy(a, 5)
    env.occupy(b, 6)
    for i in range(3):
        env.create(env.job(f"two-{i}", gang=2, per_worker=2))
    env.start()
    for i in range(3):
        wait_for(
            f"two-{i} to wait, refused by the project's max",
            lambda i=i: env.status(f"two-{i}").get("reason") == "Refused",
        )
    env.create(env.job("one", gang=1))
    assert env.wait_phase("one", "Running")["allocation"] == {a: 1}


def test_over_quota_job_stays_queued_with_its_reason_then_starts_when_quota_frees(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    (a,) = env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 4, "max": 8}}))
    env.start()
    env.create(env.job("first", gang=6, annotations={FAKE_DURATION: "4"}))
    env.wait_phase("first", "Running")
    env.create(env.job("second", gang=4))

    def queued_with_reason() -> dict[str, object] | None:
        s = env.status("second")
        return s if s.get("reason") == "Quota" else None

    status = wait_for("second to wait for quota", queued_with_reason)
    assert status["phase"] == "Queued"
    assert status["message"] == "project p at max: 6 of 8 GPUs in use, this job needs 4"
    text = explain_job(
        env.kube,
        f"{env.namespace}/second",
        system_namespace=env.system_namespace,
        node_selector=env.node_selector,
    )
    assert "Queue position 1 of 1" in text
    assert "Decision: waiting (Quota): project p at max: 6 of 8 GPUs in use" in text
    assert f"    - {env.namespace}/first: 6 GPUs, tier {BATCH} (preemptible), user admin" in text
    time.sleep(1.5)  # several cycles: it stays queued, with no pods
    assert env.status("second")["phase"] == "Queued" and env.pods("second") == []

    first = env.wait_phase("first", "Succeeded")  # its workers end after 4 s
    assert "admission" not in first and "allocation" not in first
    status = env.wait_phase("second", "Running")
    assert status["allocation"] == {a: 4}


def test_a_running_job_whose_spec_shrinks_is_admitted_again_not_charged_less(
    gang_env: GangEnv,
) -> None:
    """Found by a review: charged by its edited spec, a running 6-GPU gang shrunk to 2
    on paper let a second job of 4 start beside its 6 pods, past the project's max of
    8 (and onto GPUs the kubelet then refused). It now starts again at its new size."""
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 4, "max": 8}}))
    env.start()
    env.create(env.job("first", gang=6))
    env.wait_phase("first", "Running")
    env.kube.merge_patch(_JOB, "first", {"spec": {"gangSize": 2}}, field_manager="t",
                         namespace=env.namespace)  # fmt: skip
    env.create(env.job("second", gang=4))

    def restarted() -> list[dict[str, object]] | None:
        pods = [p for p in env.pods("first") if not p["metadata"].get("deletionTimestamp")]
        names = sorted(str(p["metadata"]["name"]) for p in pods)
        return pods if names == ["first-2-0", "first-2-1"] else None

    wait_for("first at its new size (attempt 2)", restarted)
    events, _ = env.kube.list(RESOURCES["Event"], namespace=env.namespace)
    said = [e["message"] for e in events if e.get("reason") == "SpecChanged"]
    assert said and "gangSize (workers) 6 -> 2" in said[0], said
    env.wait_phase("second", "Running")
    held = sum(
        int(c["resources"]["limits"][GPU])
        for job in ("first", "second")
        for p in env.pods(job)
        for c in p["spec"]["containers"]
    )
    assert held <= 8


def test_deleting_a_job_removes_its_pods(gang_env: GangEnv) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.start()
    env.create(env.job("doomed", gang=2))
    env.wait_phase("doomed", "Running")
    env.kube.delete(_JOB, "doomed", namespace=env.namespace)
    # The garbage collector follows the owner references; a CRD it has not
    # discovered yet costs it one resync (30 s) the first time.
    wait_for("the workers to be deleted", lambda: not env.pods("doomed"), timeout=90)


def test_high_tier_job_preempts_a_batch_job(gang_env: GangEnv) -> None:
    env = gang_env
    (a,) = env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.start()
    env.create(env.job("batch", gang=8, tier=BATCH))
    env.wait_phase("batch", "Running")
    env.create(env.job("urgent", gang=8, tier=HIGH))

    status = env.wait_phase("urgent", "Running")
    assert status["allocation"] == {a: 8}
    victim = env.status("batch")
    assert victim["phase"] == "Preempted"
    assert f"preempted by {env.namespace}/urgent" in victim["message"]
    assert "admission" not in victim and "allocation" not in victim
    assert {c["type"]: c["status"] for c in victim["conditions"]}["Preempted"] == "True"
    assert all(p["status"]["phase"] != "Running" for p in env.pods("batch"))
    assert _nodes_of([p for p in env.pods("urgent")]) == {a: 8}
    assert env.controllers[0].metrics.preemptions.labels("p", BATCH)._value.get() == 1
    # `kubectl describe tj` tells each job's story in Events.
    events, _ = env.kube.list(RESOURCES["Event"], namespace=env.namespace)

    def story(job: str) -> list[tuple[str, str]]:
        mine = [e for e in events if e["involvedObject"]["name"] == job]
        return [(e["type"], e["reason"]) for e in sorted(mine, key=lambda e: e["metadata"]["name"])]

    assert story("batch") == [("Normal", "Admitted"), ("Warning", "Preempted")]
    assert story("urgent") == [("Normal", "Preempting"), ("Normal", "Admitted")]


def test_worker_failure_restarts_the_whole_gang_then_fails_at_the_backoff_limit(
    gang_env: GangEnv,
) -> None:
    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.start()
    failing = {FAKE_DURATION: "1", FAKE_EXIT_CODE: "3"}
    env.create(env.job("flaky", gang=4, annotations=failing, backoff_limit=1))

    status = env.wait_phase("flaky", "Failed", timeout=60)
    assert status["reason"] == "BackoffLimitExceeded"
    assert status["restarts"] == 1
    assert "failed" in status["message"] and "backoffLimit 1" in status["message"]
    assert status["attempts"] == 2
    pods = env.pods("flaky")
    # The worker that failed first is kept for its logs; its siblings were deleted
    # with it (the whole gang restarts), so nothing of the job runs.
    assert {p["metadata"]["labels"]["ai.operator/attempt"] for p in pods} == {"1", "2"}
    assert all(p["status"]["phase"] == "Failed" for p in pods)
    stalled = {c["type"]: c["status"] for c in status["conditions"]}["Stalled"]
    assert stalled == "True"


def _refused(create: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as e:
        create()
    return e.value


def _refused_once_active(env: GangEnv, manifest: dict[str, object], as_: Kube) -> ApiError:
    """The refusal, waiting out the few seconds a new admission policy takes to apply."""

    def attempt() -> ApiError | None:
        try:
            env.create(manifest, as_=as_)
        except ApiError as e:
            return e
        meta = manifest["metadata"]
        env.kube.delete(_JOB, meta["name"], namespace=meta["namespace"])  # type: ignore[index]
        return None

    return wait_for("the admission policy to refuse", attempt)


def test_admission_policy_charges_a_job_to_its_creator(gang_env: GangEnv, alice: Kube) -> None:
    env = gang_env
    manifest = env.job("spend-bobs", gang=1, user="bob")
    err = _refused_once_active(env, manifest, alice)
    assert err.status == 403
    assert 'label ai.operator/user must name the user creating the job: set it to "alice"' in (
        err.message
    )
    assert env.kube.get(_JOB, "spend-bobs", env.namespace) is None

    mine = env.create(env.job("mine", gang=1, user="alice"), as_=alice)
    assert mine["metadata"]["labels"]["ai.operator/user"] == "alice"
    handover = {"metadata": {"labels": {"ai.operator/user": "bob"}}}
    err = _refused(
        lambda: alice.merge_patch(
            _JOB, "mine", handover, field_manager="t", namespace=env.namespace
        )
    )
    assert err.status == 403 and "cannot be changed" in err.message
    # Other labels may change; and nobody, not even an admin, hands the job over.
    alice.merge_patch(
        _JOB, "mine", {"metadata": {"labels": {"team": "a"}}}, field_manager="t",
        namespace=env.namespace,
    )  # fmt: skip
    err = _refused(
        lambda: env.kube.merge_patch(
            _JOB, "mine", handover, field_manager="t", namespace=env.namespace
        )
    )
    assert err.status == 403


def test_a_job_without_the_user_label_is_charged_to_its_creator(
    gang_env: GangEnv, alice: Kube
) -> None:
    env = gang_env
    manifest = env.job("unlabelled", gang=1)
    del manifest["metadata"]["labels"]["ai.operator/user"]

    def created() -> dict[str, object] | None:
        try:
            return env.create(manifest, as_=alice)
        except ApiError as e:  # the mutating policy takes a moment to apply
            assert e.status == 403, e
            return None

    job = wait_for("the mutating admission policy to fill the label in", created)
    assert job["metadata"]["labels"]["ai.operator/user"] == "alice"
    # A label naming someone else is not overwritten: still refused.
    err = _refused(lambda: env.create(env.job("bobs", gang=1, user="bob"), as_=alice))
    assert err.status == 403 and 'set it to "alice"' in err.message


def _ghost_node(env: GangEnv) -> str:
    """A Ready 8-GPU node no kubelet serves: pods bound to it never run (until the
    node lifecycle controller notices its missing Lease, 40 s later)."""
    name = f"ghost-{secrets.token_hex(3)}"
    env.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "capacity": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        },
        field_manager="gangops-tests",
    )
    env.nodes = [name]
    return name


def test_a_gang_not_running_within_the_timeout_is_rolled_back_and_requeued(
    gang_env: GangEnv, api: client.ApiClient
) -> None:
    env = gang_env
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}, timeout_s=2))
    ghost = _ghost_node(env)
    core = client.CoreV1Api(api)
    try:
        env.start()
        env.create(env.job("stuck", gang=4))

        def rolled_back() -> dict[str, object] | None:
            s = env.status("stuck")
            return s if s.get("reason") == "GangTimeout" else None

        status = wait_for("the gang timeout", rolled_back)
        assert status["phase"] == "Queued" and "admission" not in status
        assert "of 4 workers were running 2s after admission (gang timeout)" in str(
            status["message"]
        )
        assert status["rollbacks"] >= 1 and status["notBefore"]

        def first_attempt_deleted() -> bool:
            return not [
                p
                for p in env.pods("stuck")
                if p["metadata"]["labels"]["ai.operator/attempt"] == "1"
                and not p["metadata"].get("deletionTimestamp")
            ]

        wait_for("the rolled-back attempt's pods to be deleted", first_attempt_deleted)
    finally:
        for c in env.controllers:
            c.stop()
        for p in env.pods("stuck"):  # no kubelet confirms their deletion
            core.delete_namespaced_pod(p["metadata"]["name"], env.namespace, grace_period_seconds=0)
        env.kube.delete(RESOURCES["Node"], ghost)


def test_explain_on_the_command_line(
    gang_env: GangEnv, dev_cluster: DevCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli import main

    env = gang_env
    env.claim(1)
    env.set_policy(policy_doc({"p": {"namespace": env.namespace, "guaranteed": 8}}))
    env.create(env.job("huge", gang=16))
    common = ["--kubeconfig", str(dev_cluster.kubeconfig), "--system-namespace"]
    args = ["explain", f"{env.namespace}/huge", *common, env.system_namespace]
    assert main([*args, "--node-selector", env.node_selector]) == 0
    out = capsys.readouterr().out
    assert "Decision: waiting (Capacity): needs 16 GPUs (16 workers x 1 GPU)" in out
    assert main(["explain", f"{env.namespace}/nope", *common, env.system_namespace]) == 1
    assert f"TrainingJob {env.namespace}/nope not found" in capsys.readouterr().err


def test_install_crds_applies_both_admission_policies(dev_cluster: DevCluster) -> None:
    cmd = [sys.executable, "-m", "controller.cli", "install-crds", "--kubeconfig"]
    out = subprocess.run(
        [*cmd, str(dev_cluster.kubeconfig)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "namespace/gangops-system applied" in out.stdout
    assert "validatingadmissionpolicy/trainingjobs.ai.operator-user applied" in out.stdout
    assert "mutatingadmissionpolicy/trainingjobs.ai.operator-user applied" in out.stdout
    assert "mutatingadmissionpolicybinding/trainingjobs.ai.operator-user applied" in out.stdout


@pytest.mark.parametrize("name", ["bert.v2", "1bert", "j" * 51])
def test_a_job_whose_name_cannot_name_its_service_and_hostnames_is_refused(
    gang_env: GangEnv, name: str
) -> None:
    """Found by a review: such names were created, and every launch was refused for
    ever (the Service name must be a DNS-1035 label, a hostname at most 63). The
    CRD's rule on the whole object refuses them at `kubectl apply`; 50 characters
    pass."""
    env = gang_env
    err = _refused(lambda: env.create(env.job(name, gang=1)))
    assert err.status == 422 and "DNS-1035 label of at most 50 characters" in err.message
    env.create(env.job("j" * 50, gang=1))


def test_a_job_made_before_the_name_rule_stays_writable(gang_env: GangEnv) -> None:
    """Found by a review: a rule on the whole object is checked on every write, and
    names of 51 to 59 characters ran before the rule; with it, the controller could
    no longer write such a job's status. The rule holds at create only
    (`optionalOldSelf`)."""
    env = gang_env
    (crd,) = [c for c in generate_crds(schema_dir()) if c["spec"]["names"]["kind"] == "TrainingJob"]
    before = copy.deepcopy(crd)
    del before["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    name = "llama-70b-lora-finetune-experiment-2024-06-01-run-003"  # 53 characters
    try:
        install(env.kube, [before])
        wait_for("the CRD without the rule", lambda: _created(env, name))
    finally:
        install(env.kube, [crd])
    wait_for("the rule back", lambda: _refused_now(env, name + "x"))
    patch = {"status": {"phase": "Queued", "message": "written after the upgrade"}}
    written = env.kube.merge_patch(
        _JOB, name, patch, field_manager="t", namespace=env.namespace, subresource="status"
    )
    assert written["status"]["message"] == "written after the upgrade"


def _created(env: GangEnv, name: str) -> bool:
    try:
        env.create(env.job(name, gang=1))
    except ApiError as e:
        assert e.status == 422, e
        return False
    return True


def _refused_now(env: GangEnv, name: str) -> bool:
    try:
        env.create(env.job(name, gang=1))
    except ApiError as e:
        return e.status == 422
    env.kube.delete(_JOB, name, namespace=env.namespace)
    return False
