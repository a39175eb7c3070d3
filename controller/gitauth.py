"""Git credentials from a Secret, as environment for `git` (nothing lands on a command line).

Shared by the reconciler (fetching a PolicySource) and the quota-request loop
(pushing its branches to the same repository): `identity` and `known_hosts`
for SSH, `username` and `password` or `bearerToken` for HTTPS (as an
`http.extraHeader` passed through `GIT_CONFIG_*`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GitAuth", "GitError", "auth_from_secret"]


@dataclass(frozen=True)
class GitAuth:
    """Credentials, as environment for `git` (nothing lands on a command line)."""

    env: Mapping[str, str] = field(default_factory=dict)


class GitError(Exception):
    """A Git operation failed; `reason` is the condition reason the status shows."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def auth_from_secret(data: Mapping[str, bytes], *, key_dir: Path) -> GitAuth:
    """Git credentials from a Secret's decoded data.

    `identity` (+ `known_hosts`, required: host keys are always checked) for
    SSH; `username` and `password`, or `bearerToken`, for HTTPS. Key files are
    written into `key_dir` (mode 0600).
    """
    env: dict[str, str] = {}
    headers: list[str] = []
    if "identity" in data:
        if "known_hosts" not in data:
            raise GitError("InvalidSecret", "secret has `identity` but no `known_hosts`")
        key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest = hashlib.sha256(data["identity"] + data["known_hosts"]).hexdigest()[:16]
        identity = key_dir / f"{digest}.key"
        known = key_dir / f"{digest}.known_hosts"
        for path, content in ((identity, data["identity"]), (known, data["known_hosts"])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content if content.endswith(b"\n") else content + b"\n")
        env["GIT_SSH_COMMAND"] = (
            f"ssh -i {shlex.quote(str(identity))} -o IdentitiesOnly=yes"
            f" -o UserKnownHostsFile={shlex.quote(str(known))}"
            " -o StrictHostKeyChecking=yes -o BatchMode=yes"
        )
    if "username" in data and "password" in data:
        basic = base64.b64encode(data["username"] + b":" + data["password"]).decode()
        headers.append(f"Authorization: Basic {basic}")
    elif "bearerToken" in data:
        headers.append(f"Authorization: Bearer {data['bearerToken'].decode().strip()}")
    for i, header in enumerate(headers):
        env[f"GIT_CONFIG_KEY_{i}"] = "http.extraHeader"
        env[f"GIT_CONFIG_VALUE_{i}"] = header
    if headers:
        env["GIT_CONFIG_COUNT"] = str(len(headers))
    return GitAuth(env=env)
