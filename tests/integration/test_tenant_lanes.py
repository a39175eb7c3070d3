"""Tenants stay in their lane, as the dev cluster's ordinary users alice and bob.

Each may manage TrainingJobs in the test's namespace (the Role the `alice`
fixture creates; bob is bound to it here) and neither may create pods. The
controller creates the workers, so what a job may ask for is decided at the
front door: by the TrainingJob CRD's rules and the admission policy, enforced
by the API server with no gangops process running, and by the Pod Security
level of the project's namespaces.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, config

from controller.devcluster import DevCluster
from controller.jobs.admission import ADMIN_GROUP
from controller.kube.client import RESOURCES, ApiError, Kube, connect
from controller.nodehealth import CHECKPOINT_ANNOTATION, RESTART_ANNOTATION
from controller.policy.compiler import QUOTA_NAME, compile_policy_set
from controller.policy.loader import Source
from controller.policy.validate import validate_sources

from .gang_helpers import GangEnv
from .kube import wait_for

pytest_plugins = ["tests.integration.gang_fixtures"]

_JOB = RESOURCES["TrainingJob"]


def _bind(api: object, namespace: str, user: str, role: str, rules: list[dict[str, Any]]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    if rules:
        rbac.create_namespaced_role(namespace, {"metadata": {"name": role}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{role}-{user}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


@pytest.fixture
def bob(dev_cluster: DevCluster, gang_env: GangEnv, alice: Kube, api: object) -> Kube:
    """Bob's client, with the same TrainingJob rights as alice (the role `tj`)."""
    _bind(api, gang_env.namespace, "bob", "tj", [])
    return connect(str(dev_cluster.user_kubeconfigs["bob"]))


@pytest.fixture
def job_admin(dev_cluster: DevCluster, gang_env: GangEnv, alice: Kube, api: object) -> Kube:
    """Carol, a member of the documented admin group (the admin impersonating her),
    which RBAC lets edit TrainingJobs as it would any job administrator."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(
        gang_env.namespace,
        {
            "metadata": {"name": "tj-admins"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tj"},
            "subjects": [
                {"kind": "Group", "name": ADMIN_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    api = config.new_client_from_config(config_file=str(dev_cluster.kubeconfig))
    api.set_default_header("Impersonate-User", "carol")
    api.set_default_header("Impersonate-Group", ADMIN_GROUP)
    return Kube(api)


def _refused(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as e:
        call()
    return e.value


def _create_once_policy_active(env: GangEnv, manifest: dict[str, Any], as_: Kube) -> None:
    """Create `manifest` as `as_` once the admission policy is in force (a foreign
    label is refused by it) and the test's RBAC too, each of which takes a moment."""
    probe = env.job("probe", gang=1, user="somebody-else")

    def active() -> bool:
        try:
            env.create(probe, as_=as_)
        except ApiError as e:
            # Not yet RBAC's refusal: a new Role takes a moment to apply too.
            return e.status == 403 and "must name the user creating the job" in e.message
        env.kube.delete(_JOB, "probe", namespace=env.namespace)
        return False

    wait_for("the admission policy to be in force", active)
    env.create(manifest, as_=as_)


def test_only_the_owner_or_an_admin_may_change_a_jobs_spec(
    gang_env: GangEnv, alice: Kube, bob: Kube, job_admin: Kube
) -> None:
    env = gang_env
    _create_once_policy_active(env, env.job("bobs", gang=1, user="bob"), bob)

    def patch(who: Kube, body: dict[str, Any]) -> dict[str, Any]:
        return who.merge_patch(_JOB, "bobs", body, field_manager="t", namespace=env.namespace)

    def once_authorised(who: Kube, body: dict[str, Any]) -> dict[str, Any]:
        """`patch`, waiting out the moment a new RoleBinding takes to apply."""

        def attempt() -> dict[str, Any] | None:
            try:
                return patch(who, body)
            except ApiError as e:
                assert e.status == 403 and "cannot patch resource" in e.message, e
                return None

        return wait_for("RBAC to allow the patch", attempt)

    # What is not spec stays open to anyone with edit rights on TrainingJobs.
    once_authorised(alice, {"metadata": {"annotations": {"note": "seen by alice"}}})
    # Alice may not spend bob's quota: no size, range, priority or image of hers.
    grow = {"spec": {"resourceProfile": {"minGPU": 1, "maxGPU": 32}}}
    err = _refused(lambda: patch(alice, grow))
    assert err.status == 403, err
    assert (
        f"only the owner of the job (bob) or a member of group {ADMIN_GROUP} may change its"
        " spec; you are alice" in err.message
    )
    image = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "alice/miner:latest",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            }
        }
    }
    assert _refused(lambda: patch(alice, image)).status == 403
    # A cluster admin outside the group is held to the same rule.
    assert _refused(lambda: patch(env.kube, grow)).status == 403
    job = env.kube.get(_JOB, "bobs", env.namespace)
    assert job is not None and "resourceProfile" not in job["spec"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] != "alice/miner:latest"

    # The owner and the admin group may change the spec.
    assert patch(bob, grow)["spec"]["resourceProfile"]["maxGPU"] == 32
    shrunk = once_authorised(job_admin, {"spec": {"resourceProfile": {"maxGPU": 2}}})
    assert shrunk["spec"]["resourceProfile"]["maxGPU"] == 2


def test_only_the_owner_or_gangops_requests_a_jobs_restart(
    gang_env: GangEnv, alice: Kube, bob: Kube
) -> None:
    """Found by a review: the alert actions' request annotations were open to anyone
    with edit rights, so alice restarted bob's job at will (one dated in the year 9999
    at every admission, and never counted against its backoffLimit)."""
    env = gang_env
    _create_once_policy_active(env, env.job("bobs", gang=1, user="bob"), bob)
    ask = {"metadata": {"annotations": {RESTART_ANNOTATION: "9999-01-01T00:00:00Z not really"}}}

    def patch(who: Kube, body: dict[str, Any]) -> dict[str, Any]:
        return who.merge_patch(_JOB, "bobs", body, field_manager="t", namespace=env.namespace)

    def refused_once_authorised() -> ApiError:
        def attempt() -> ApiError | None:
            try:
                patch(alice, ask)
            except ApiError as e:
                return None if "cannot patch resource" in e.message else e  # RBAC not yet
            raise AssertionError("alice requested a restart of bob's job")

        return wait_for("RBAC to allow alice's patch", attempt)

    err = refused_once_authorised()
    assert err.status == 403 and "you are alice" in err.message, err
    assert "a holder of the verb restart on trainingjobs" in err.message
    check = {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: "2026-01-01T00:00:00Z x"}}}
    assert _refused(lambda: patch(alice, check)).status == 403
    # other annotations stay open to her; the owner and gangops (the admin here holds
    # every verb, restart included) may ask
    patch(alice, {"metadata": {"annotations": {"note": "seen by alice"}}})
    patch(bob, {"metadata": {"annotations": {RESTART_ANNOTATION: "2026-01-01T00:00:00Z mine"}}})
    patch(env.kube, ask)


def _pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "trainer", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    container.update(spec.pop("container", {}))
    return {"containers": [container], **spec}


_PRIVILEGED = {"securityContext": {"privileged": True}}
_SECRET = "read a Secret (volumes, env, envFrom) only if you may get it yourself"


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (_pod(hostNetwork=True), "hostNetwork is not allowed"),
        (_pod(hostPID=True), "hostPID is not allowed"),
        (_pod(hostIPC=True), "hostIPC is not allowed"),
        (
            _pod(
                volumes=[{"name": "root", "hostPath": {"path": "/"}}],
                container={"volumeMounts": [{"name": "root", "mountPath": "/host"}]},
            ),
            "hostPath volumes are not allowed",
        ),
        (_pod(container={"securityContext": {"privileged": True}}), "privileged containers"),
        (
            _pod(container={"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
            "capabilities.add may only name",
        ),
        (_pod(container={"ports": [{"containerPort": 22, "hostPort": 22}]}), "hostPort"),
        (
            _pod(initContainers=[{"name": "i", "image": "x", **_PRIVILEGED}]),
            "privileged containers",
        ),
        (_pod(serviceAccountName="builder"), 'service account "builder" only if you may create'),
        # found by a review: the workers' logs would show the tenant a Secret they may
        # not read
        (_pod(volumes=[{"name": "s", "secret": {"secretName": "db"}}]), _SECRET),
        (
            _pod(volumes=[{"name": "s", "projected": {"sources": [{"secret": {"name": "db"}}]}}]),
            _SECRET,
        ),
        (
            _pod(container={"env": [{"name": "P", "valueFrom": {
                "secretKeyRef": {"name": "db", "key": "password"}}}]}),
            _SECRET,
        ),
        (_pod(initContainers=[{"name": "i", "image": "x", "envFrom": [{"secretRef": {
            "name": "db"}}]}]), _SECRET),
    ],
    ids=["hostNetwork", "hostPID", "hostIPC", "hostPath", "privileged", "SYS_ADMIN", "hostPort",
         "privileged-init", "serviceAccount", "secret-volume", "projected-secret",
         "secret-env", "secret-envFrom-init"],
)  # fmt: skip
def test_a_trainingjob_cannot_ask_for_what_its_submitter_could_not_run(
    gang_env: GangEnv,
    alice: Kube,
    user_api: Callable[[str], client.ApiClient],
    pod: dict[str, Any],
    message: str,
) -> None:
    env = gang_env
    assert not _can_create_pods(user_api("alice"), env.namespace), "alice may not create pods"
    ok = env.job("fine", gang=1, user="alice")
    _create_once_policy_active(env, ok, alice)
    manifest = env.job("root", gang=1, user="alice")
    manifest["spec"]["template"]["spec"] = pod
    err = _refused(lambda: env.create(manifest, as_=alice))
    assert err.status in (403, 422), err
    assert message in err.message, err.message
    assert env.kube.get(_JOB, "root", env.namespace) is None


def test_a_job_may_name_a_secret_its_submitter_may_get(
    gang_env: GangEnv, bob: Kube, api: object
) -> None:
    env = gang_env
    read = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
             "resourceNames": ["wandb"]}]  # fmt: skip
    _bind(api, env.namespace, "bob", "secret-wandb", read)
    _create_once_policy_active(env, env.job("plain-b", gang=1, user="bob"), bob)
    manifest = env.job("with-secret", gang=1, user="bob")
    manifest["spec"]["template"]["spec"] = _pod(
        container={"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "wandb",
                                                                          "key": "k"}}}]}
    )  # fmt: skip

    def created() -> bool:
        try:
            env.create(manifest, as_=bob)
        except ApiError as e:  # until the authorizer sees bob's new Role
            assert e.status == 403 and _SECRET in e.message, e
            return False
        return True

    wait_for("bob's job reading a Secret he may get to be admitted", created)
    other = env.job("other-secret", gang=1, user="bob")
    other["spec"]["template"]["spec"] = _pod(
        volumes=[{"name": "s", "secret": {"secretName": "db"}}]
    )
    assert _refused(lambda: env.create(other, as_=bob)).status == 403


def test_a_service_account_is_for_submitters_who_may_create_pods(
    gang_env: GangEnv, alice: Kube, bob: Kube, api: object
) -> None:
    env = gang_env
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    _bind(api, env.namespace, "bob", "pods", pods)
    manifest = env.job("with-sa", gang=1, user="bob")
    manifest["spec"]["template"]["spec"]["serviceAccountName"] = "builder"
    _create_once_policy_active(env, env.job("plain", gang=1, user="bob"), bob)

    def created() -> bool:
        try:
            env.create(manifest, as_=bob)
        except ApiError as e:  # until the authorizer sees bob's new Role
            assert e.status == 403 and "only if you may create pods" in e.message, e
            return False
        return True

    wait_for("bob's job naming a service account to be admitted", created)
    # Alice, who may not create pods, may not submit one naming it.
    mine = env.job("mine", gang=1, user="alice")
    mine["spec"]["template"]["spec"]["serviceAccount"] = "builder"
    assert _refused(lambda: env.create(mine, as_=alice)).status == 403


def _can_create_pods(api: client.ApiClient, namespace: str) -> bool:
    attributes = {"namespace": namespace, "verb": "create", "resource": "pods"}
    review = {"spec": {"resourceAttributes": attributes}}
    out = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(out.status.allowed)


_PROJECT = """\
apiVersion: policy.ai.operator/v1
kind: Project
metadata: {{name: {name}}}
spec:
  namespaces: [{name}]
  quota: {{max: {{gpu: 8}}}}
"""
_CLUSTER = """\
apiVersion: policy.ai.operator/v1
kind: ClusterPolicy
metadata: {name: c}
spec: {capacity: {gpu: 16}}
"""


def _source(path: str, text: str) -> Source:
    data = text.encode()
    return Source(path, len(data), lambda: data)


def test_compiled_project_namespaces_refuse_pods_beyond_baseline(gang_env: GangEnv) -> None:
    """Whoever creates the pod, the controller included: Pod Security Admission
    checks the pod, not the requester."""
    env = gang_env
    name = f"psa-{secrets.token_hex(4)}"
    sources = [
        _source("cluster.yaml", _CLUSTER),
        _source("project.yaml", _PROJECT.format(name=name)),
    ]
    result = validate_sources(sources, root=".", resolve=lambda ref: None)
    assert result.policy_set is not None, result.diagnostics
    objects = compile_policy_set(result.policy_set, revision="r", source_root=".")
    namespace = next(o for o in objects if o["kind"] == "Namespace")
    env.kube.create(namespace, field_manager="t")
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "root", "namespace": name},
            "spec": _pod(hostNetwork=True),
        }
        err = _refused(lambda: env.kube.create(pod, field_manager="gangops"))
        assert err.status == 403 and 'violates PodSecurity "baseline:latest"' in err.message
    finally:
        env.kube.delete(RESOURCES["Namespace"], name)


def test_a_pod_that_asks_only_for_gpus_is_admitted_under_a_cpu_and_memory_quota(
    gang_env: GangEnv,
) -> None:
    """The README's TrainingJob template sets only `nvidia.com/gpu`; a quota on
    CPU and memory makes the API server refuse such a pod (`must specify
    requests.cpu`) unless the compiled LimitRange gives it default requests."""
    env = gang_env
    name = f"defaults-{secrets.token_hex(4)}"
    project = _PROJECT.format(name=name).replace("{gpu: 8}", '{gpu: 8, cpu: "16", memory: 64Gi}')
    sources = [_source("cluster.yaml", _CLUSTER), _source("project.yaml", project)]
    result = validate_sources(sources, root=".", resolve=lambda ref: None)
    assert result.policy_set is not None, result.diagnostics
    objects = compile_policy_set(result.policy_set, revision="r", source_root=".")
    mine = [o for o in objects if name in (o["metadata"].get("namespace"), o["metadata"]["name"])]
    assert [o["kind"] for o in mine] == ["Namespace", "ResourceQuota", "LimitRange"]
    for obj in mine:
        env.kube.apply(obj, field_manager="t")
    try:
        quota = RESOURCES["ResourceQuota"]

        def computed() -> object:
            live = env.kube.get(quota, QUOTA_NAME, namespace=name) or {}
            return (live.get("status") or {}).get("hard")

        wait_for("the quota controller to compute the quota's status", computed)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "worker", "namespace": name},
            "spec": _pod(),
        }
        created = env.kube.create(pod, field_manager="gangops")
        requests = created["spec"]["containers"][0]["resources"]["requests"]
        assert requests == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    finally:
        env.kube.delete(RESOURCES["Namespace"], name)
