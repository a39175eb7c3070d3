"""The local control plane's own certificate authority, certificates and keys.

A real cluster authenticates every component and user with X.509 client
certificates signed by its CA, and signs service-account tokens with a key
pair; the tests need the same (RBAC is only meaningful when users are who they
say they are). Everything is generated fresh for each cluster with the
`openssl` command-line tool, which every Linux and macOS machine has, so the
project needs no cryptography package. Keys are ECDSA P-256: fast to generate
and accepted by every Kubernetes component and by Python's `ssl`.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Credential", "Pki", "PkiError", "Subject", "create_pki"]


class PkiError(RuntimeError):
    """The certificates could not be generated; the message says which command failed and why."""


@dataclass(frozen=True)
class Subject:
    """Who a client certificate names: Kubernetes reads the user from CN and groups from O."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Credential:
    """A certificate and its private key, both PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every file a cluster needs."""

    ca: Credential
    """The cluster CA: clients trust its certificate; the API server checks client certificates."""
    serving: Credential
    """The API server's serving certificate (loopback names and the service IP)."""
    service_account_key: Path
    """Private key that signs service-account tokens."""
    service_account_pub: Path
    """Its public key, with which the API server verifies them."""
    clients: Mapping[str, Credential]
    """Client certificates by name."""


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    exe = shutil.which("openssl")
    if exe is None:
        raise PkiError("the `openssl` command is required to create the cluster's certificates")
    proc = subprocess.run([exe, *args], input=stdin, capture_output=True, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise PkiError(f"openssl {args[0]} failed (exit {proc.returncode}): {err}")
    return proc.stdout


def _key(path: Path) -> Path:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)
    return path


def _subject(subject: Subject) -> str:
    parts = [*(f"O={g}" for g in subject.groups), f"CN={subject.user}"]
    for p in parts:
        if "/" in p or "," in p:
            raise PkiError(f"certificate subject part {p!r} may not contain '/' or ','")
    return "".join(f"/{p}" for p in parts)


def _sign(
    directory: Path, name: str, ca: Credential, subject: Subject, extensions: Sequence[str]
) -> Credential:
    key = _key(directory / f"{name}.key")
    csr = _openssl("req", "-new", "-key", str(key), "-subj", _subject(subject))
    ext = directory / f"{name}.ext"
    ext.write_text("\n".join(extensions) + "\n", encoding="utf-8")
    cert = directory / f"{name}.crt"
    _openssl(
        "x509", "-req", "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", f"0x{secrets.token_hex(16)}", "-days", "365", "-sha256",
        "-extfile", str(ext), "-out", str(cert),
        stdin=csr,
    )  # fmt: skip
    ext.unlink()
    return Credential(cert=cert, key=key)


def create_pki(
    directory: Path,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    clients: Mapping[str, Subject],
) -> Pki:
    """Create a CA, the API server's serving certificate, a service-account key pair and
    one client certificate per entry of `clients`, as files in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key(directory / "ca.key")
    ca_cert = directory / "ca.crt"
    _openssl(
        "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", "3650",
        "-subj", "/CN=gangops-dev-cluster-ca", "-out", str(ca_cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    ca = Credential(cert=ca_cert, key=ca_key)
    leaf = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature"]
    sans = ",".join([*(f"DNS:{d}" for d in dns_names), *(f"IP:{i}" for i in ip_addresses)])
    serving = _sign(
        directory,
        "apiserver",
        ca,
        Subject("kube-apiserver"),
        [*leaf, "extendedKeyUsage=serverAuth", f"subjectAltName={sans}"],
    )
    signed = {
        name: _sign(directory, name, ca, subject, [*leaf, "extendedKeyUsage=clientAuth"])
        for name, subject in clients.items()
    }
    sa_key = _key(directory / "service-account.key")
    sa_pub = directory / "service-account.pub"
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return Pki(
        ca=ca,
        serving=serving,
        service_account_key=sa_key,
        service_account_pub=sa_pub,
        clients=signed,
    )
