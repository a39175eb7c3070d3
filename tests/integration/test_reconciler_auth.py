"""Git credentials from a Secret, against real servers on loopback: sshd and http-backend.

A PolicySource's `secretRef` names a Secret in the controller's namespace:
`identity` and `known_hosts` for SSH, `username` and `password` or
`bearerToken` for HTTP(S). Each test starts with one credential wrong and
checks that the source says exactly what is wrong (Ready=False,
`GitOperationFailed`, retried with backoff) and that nothing at all is
applied; then it corrects the Secret, touching nothing else, and the next
retry applies the revision.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.kube.client import RESOURCES

from .git_auth_servers import HttpGit, Sshd, SshdUnavailable, keygen
from .reconciler_helpers import Obj, PolicyRepo, ReconcileEnv, managed

pytest_plugins = ["tests.integration.reconciler_fixtures"]

SECRET = "git-credentials"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except SshdUnavailable as e:
        pytest.skip(f"sshd cannot run here: {e}")
    yield server
    server.stop()


@pytest.fixture
def http_git(policy_repo: PolicyRepo) -> Iterator[HttpGit]:
    """http-backend serving the policy repository as `<url>/repo`."""
    server = HttpGit(policy_repo.path.parent, "alice", "s3cret-password", "s3cret-token")
    server.start()
    yield server
    server.stop()


def _put_secret(env: ReconcileEnv, data: dict[str, bytes]) -> None:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    if env.kube.get(RESOURCES["Secret"], SECRET, env.system_namespace) is None:
        env.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": env.system_namespace},
                "data": encoded,
            },
            field_manager="test",
        )
    else:
        env.kube.merge_patch(
            RESOURCES["Secret"],
            SECRET,
            {"data": encoded},
            field_manager="test",
            namespace=env.system_namespace,
        )


def _refused(env: ReconcileEnv, repo: PolicyRepo, src: str) -> str:
    """Wait for the source to fail on Git; check it is retrying, not stalled, and that
    nothing was applied; return the Ready message."""
    obj = env.wait_condition(src, "Ready", "False", reason="GitOperationFailed")
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["Reconciling"]["status"] == "True"
    assert "Stalled" not in conditions
    _assert_nothing_applied(env, repo, obj)
    return str(conditions["Ready"]["message"])


def _assert_nothing_applied(env: ReconcileEnv, repo: PolicyRepo, obj: Obj) -> None:
    assert "lastAppliedRevision" not in obj["status"]
    assert not (obj["status"].get("inventory") or {}).get("entries")
    assert managed(env.kube, "PriorityClass", repo.name("high")) is None
    assert managed(env.kube, "Namespace", repo.name("a")) is None
    cm = managed(env.kube, "ConfigMap", "gangops-scheduling-policy", env.system_namespace)
    assert cm is None


def _assert_applied(env: ReconcileEnv, repo: PolicyRepo, src: str) -> None:
    obj = env.wait_condition(src, "Ready", revision_sha=repo.head(), timeout=15)
    assert obj["status"]["lastAppliedRevision"] == f"main@sha1:{repo.head()}"
    pc = managed(env.kube, "PriorityClass", repo.name("high"))
    assert pc is not None and pc["value"] == 5000
    quota = managed(env.kube, "ResourceQuota", "gangops-quota", repo.name("a"))
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"


@pytest.mark.parametrize("wrong", ["known_hosts", "identity"])
def test_ssh_with_a_wrong_key_applies_nothing_and_the_right_one_applies(
    reconcile_env: ReconcileEnv,
    policy_repo: PolicyRepo,
    sshd: Sshd,
    tmp_path: Path,
    wrong: str,
) -> None:
    env, repo = reconcile_env, policy_repo
    env.start(retry_base_s=0.2, retry_max_s=0.5)
    other_private, other_public = keygen(tmp_path / "other", "not-the-one")
    right = {"identity": sshd.client_key, "known_hosts": sshd.known_hosts}
    bad = {
        # The server's name with some other host key: what a man in the middle looks like.
        "known_hosts": f"[127.0.0.1]:{sshd.port} ".encode() + other_public,
        # A key the server's authorized_keys does not hold.
        "identity": other_private,
    }
    _put_secret(env, {**right, wrong: bad[wrong]})
    url = sshd.url(repo.path)
    src = env.create_source("ssh", url, secretRef={"name": SECRET})

    message = _refused(env, repo, src)
    expected = {
        "known_hosts": f"Host key for [127.0.0.1]:{sshd.port} has changed and you have"
        " requested strict checking. Host key verification failed.",
        "identity": f"{sshd.user}@127.0.0.1: Permission denied (publickey).",
    }[wrong]
    assert message == f"cannot reach {url}: {expected}", (message, sshd.log.read_text())

    _put_secret(env, right)
    _assert_applied(env, repo, src)


@pytest.mark.parametrize("kind", ["basic", "bearer"])
def test_http_with_a_wrong_credential_applies_nothing_and_the_right_one_applies(
    reconcile_env: ReconcileEnv, policy_repo: PolicyRepo, http_git: HttpGit, kind: str
) -> None:
    env, repo, server = reconcile_env, policy_repo, http_git
    env.start(retry_base_s=0.2, retry_max_s=0.5)
    right, bad = {
        "basic": (
            {"username": b"alice", "password": server.password.encode()},
            {"username": b"alice", "password": b"not-the-password"},
        ),
        "bearer": (
            # A trailing newline, as `kubectl create secret --from-file` leaves it.
            {"bearerToken": server.token.encode() + b"\n"},
            {"bearerToken": b"not-the-token"},
        ),
    }[kind]
    _put_secret(env, bad)
    url = server.url("repo")
    src = env.create_source("http", url, secretRef={"name": SECRET})

    message = _refused(env, repo, src)
    assert message == (
        f"cannot reach {url}: the server refused the credentials (HTTP 401 Unauthorized):"
        " check the secret's `username` and `password`, or `bearerToken`"
    )
    assert "not-the-" not in message
    assert server.requests and all(" 401 " in r for r in server.requests), server.requests

    _put_secret(env, right)
    _assert_applied(env, repo, src)
    assert any(" 200 " in r for r in server.requests), server.requests
