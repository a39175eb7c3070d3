"""Git servers that ask for credentials, on loopback, for the reconciler's auth tests.

`Sshd` is a real OpenSSH server (Debian's openssh-server, installed by
scripts/debian-deps.sh) running as the current user with a generated host key
and one authorized client key; any repository on disk is reached as
`ssh://<user>@127.0.0.1:<port>/<absolute path>`. `HttpGit` is `git
http-backend` behind a small threaded HTTP server that lets a request through
only with the right `Authorization` header (Basic username:password, or a
Bearer token). Both are started and stopped by the tests' fixtures; when
sshd cannot run on a machine, `Sshd.start` says exactly why (`SshdUnavailable`).
"""

from __future__ import annotations

import base64
import hmac
import os
import pwd
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .kube import free_port, wait_for

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
"""sshd started as root insists on this (empty) directory; Debian's ssh.service
creates it at boot, a container without systemd never does."""


class SshdUnavailable(Exception):
    """sshd cannot run on this machine; the message says why."""


def keygen(path: Path, comment: str) -> tuple[bytes, bytes]:
    """A new ed25519 key pair at `path` (and `path`.pub): (private, public)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.read_bytes(), path.with_suffix(".pub").read_bytes()


@dataclass
class Sshd:
    """`sshd -D -e` on a free loopback port, for the current user, keys in `home`."""

    home: Path
    port: int = field(default_factory=free_port)
    user: str = field(default_factory=lambda: pwd.getpwuid(os.getuid()).pw_name)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.home / "sshd.log"

    @property
    def client_key(self) -> bytes:
        """The private key `authorized_keys` accepts (a Secret's `identity`)."""
        return (self.home / "client").read_bytes()

    @property
    def known_hosts(self) -> bytes:
        """A known_hosts line for this server's host key (a Secret's `known_hosts`)."""
        key = " ".join((self.home / "host.pub").read_text().split()[:2])
        return f"[127.0.0.1]:{self.port} {key}\n".encode()

    def url(self, repo: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repo.resolve()}"

    def start(self) -> None:
        """Generate keys and config, start sshd, and prove it serves Git with the client
        key; raise SshdUnavailable with sshd's own words if any of that fails."""
        if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
            raise SshdUnavailable(
                f"{SSHD} or ssh-keygen is missing: install openssh-server"
                " (scripts/debian-deps.sh does, under `make test`)"
            )
        if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
            try:
                PRIVSEP_DIR.mkdir(mode=0o755)
            except OSError as e:
                raise SshdUnavailable(f"sshd as root needs {PRIVSEP_DIR}: {e}") from None
        keygen(self.home / "host", "gangops-test-host")
        _, public = keygen(self.home / "client", "gangops-test-client")
        (self.home / "authorized_keys").write_bytes(public)
        config = self.home / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {self.home / 'host'}\n"
            f"AuthorizedKeysFile {self.home / 'authorized_keys'}\nPidFile none\n"
            "UsePAM no\nStrictModes no\nUseDNS no\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nLogLevel VERBOSE\n"
        )
        check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise SshdUnavailable(f"sshd -t: {check.stderr.strip() or check.returncode}")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._prove()
        except BaseException:
            self.stop()
            raise

    def _prove(self) -> None:
        """Wait until sshd says it listens, then list a repository through it."""
        proc = self.proc
        assert proc is not None
        said = f"Server listening on 127.0.0.1 port {self.port}."

        def up_or_gone() -> bool:
            return proc.poll() is not None or said in self.log.read_text()

        wait_for("sshd to listen", up_or_gone, timeout=10)
        if proc.poll() is not None:
            raise SshdUnavailable(f"sshd exited: {self.log.read_text().strip()}")
        probe = self.home / "probe.git"
        subprocess.run(["git", "init", "-q", "--bare", str(probe)], check=True)
        (self.home / "known_hosts").write_bytes(self.known_hosts)
        ssh = (
            f"ssh -i {self.home / 'client'} -o IdentitiesOnly=yes -o BatchMode=yes"
            f" -o StrictHostKeyChecking=yes -o UserKnownHostsFile={self.home / 'known_hosts'}"
        )
        try:
            ls = subprocess.run(
                ["git", "ls-remote", self.url(probe)],
                env={**os.environ, "GIT_SSH_COMMAND": ssh},
                capture_output=True,
                text=True,
                timeout=20,
            )
        except subprocess.TimeoutExpired:
            raise SshdUnavailable(
                f"git over this sshd did not answer in 20 s; sshd said: {self.log.read_text()}"
            ) from None
        if ls.returncode != 0:
            raise SshdUnavailable(
                f"git over this sshd fails: {ls.stderr.strip()}; sshd said:"
                f" {self.log.read_text().strip()}"
            )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def _cgi_response(raw: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """A CGI program's output: status, headers, body."""
    sep = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    head, _, body = raw.partition(sep)
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers.append((name, value.strip()))
    return status, headers, body


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(format % args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "").encode()
        return any(hmac.compare_digest(given, ok) for ok in self.server.accepted)

    def _serve(self) -> None:
        if not self._authorized():
            body = b"authentication required\n"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="gangops-test"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": "gangops-test",
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": self.headers.get("Content-Length", ""),
        }
        for name, value in self.headers.items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if key not in ("HTTP_AUTHORIZATION", "HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                env[key] = value
        length = int(self.headers.get("Content-Length") or 0)
        request = self.rfile.read(length) if length else b""
        done = subprocess.run(
            ["git", "http-backend"], input=request, env=env, capture_output=True, check=False
        )
        status, headers, body = _cgi_response(done.stdout)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, accepted: list[bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.accepted = accepted
        self.requests: list[str] = []


@dataclass
class HttpGit:
    """`git http-backend` serving the repositories under `root` at
    `http://127.0.0.1:<port>/<name>`, to requests carrying an accepted credential."""

    root: Path
    username: str
    password: str
    token: str
    _server: _Server | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        basic = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        accepted = [f"Basic {basic}".encode(), f"Bearer {self.token}".encode()]
        self._server = _Server(self.root, accepted)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-backend", daemon=True
        )
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        """The requests served so far (`"GET /... HTTP/1.1" 200 -`), for failure messages."""
        assert self._server is not None
        return self._server.requests

    def url(self, name: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
