"""`gangops run`'s HTTP surface under abuse by anonymous clients, on loopback.

The controller runs as a real process against the dev cluster, started with the
soft file-descriptor limit many hosts give a process (1,024), as the review's
probe found it. Then 1,000 anonymous connections on each port (webhooks and
metrics), some idle, some trickling a header byte at a time, some sending
bodies far above the limit (declared, `Content-Length: -1`, chunked), while the
test probes `/healthz` and has a commit reconciled. Bounded: 2,000 client
sockets, an attack of about 12 seconds, then the server's own timeouts.

Asserted are outcomes, not timings: every probe answers (within a generous 10 s
on a loaded machine), the commit is applied, every oversized request gets its
4xx without the body being read, the slow clients are disconnected by the
server, and the controller's memory stays small.
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from controller.devcluster import DevCluster

from .kube import free_port, wait_for
from .reconciler_helpers import TEST_LABEL, PolicyRepo, ReconcileEnv, project

pytest_plugins = ["tests.integration.reconciler_fixtures"]

CONNECTIONS_PER_PORT = 1000
ATTACK_S = 12.0
PROBE_TIMEOUT_S = 10.0


@dataclass
class Controller:
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    webhook_port: int

    def healthz(self) -> int:
        url = f"http://127.0.0.1:{self.metrics_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return e.code

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _soft_fd_limit_1024() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


@pytest.fixture
def controller(
    dev_cluster: DevCluster, reconcile_env: ReconcileEnv, tmp_path: Path
) -> Iterator[Controller]:
    env = reconcile_env
    (tmp_path / "hook-secret").write_bytes(b"s3cret\n")
    log = tmp_path / "controller.log"
    metrics_port, webhook_port = free_port(), free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "run",
                "--kubeconfig",
                str(dev_cluster.kubeconfig),
                "--system-namespace",
                env.system_namespace,
                "--metrics-addr",
                f"127.0.0.1:{metrics_port}",
                "--webhook-addr",
                f"127.0.0.1:{webhook_port}",
                "--webhook-secret-file",
                str(tmp_path / "hook-secret"),
                "--cache-dir",
                str(tmp_path / "cache-ctl"),
                "--source-selector",
                f"{TEST_LABEL}={env.prefix}",
                "--no-leader-elect",
                "--no-scheduler",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_soft_fd_limit_1024,
        )
    c = Controller(proc, log, metrics_port, webhook_port)
    try:

        def up() -> bool:
            assert proc.poll() is None, f"controller exited:\n{c.text()[-3000:]}"
            try:
                return c.healthz() == 200
            except OSError:
                return False

        wait_for("the controller to serve /healthz", up, timeout=20)
        yield c
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _exchange(port: int, request: bytes, *, linger: float = 5.0) -> bytes:
    """Send `request` and return what the server answers within `linger` seconds,
    keeping the connection open meanwhile (as a client streaming a body would)."""
    with socket.create_connection(("127.0.0.1", port), timeout=linger) as s:
        s.sendall(request)
        try:
            return s.recv(4096)
        except TimeoutError:
            return b"(no answer)"


def test_malformed_requests_get_a_clear_status(controller: Controller) -> None:
    port = controller.webhook_port
    head = b"POST /hook/x HTTP/1.1\r\nHost: a\r\n"
    assert _exchange(port, head + b"Content-Length: abc\r\n\r\n{}").startswith(b"HTTP/1.1 400"), (
        "a Content-Length that is not a number is a 400, not a dropped connection"
    )
    # Content-Length: -1 used to be read to EOF before the signature was checked.
    assert _exchange(port, head + b"Content-Length: -1\r\n\r\n" + b"x" * 65536).startswith(
        b"HTTP/1.1 400"
    )
    # Declared too large: refused before the body is sent.
    assert _exchange(port, head + b"Content-Length: 1073741824\r\n\r\n").startswith(b"HTTP/1.1 413")
    assert _exchange(port, b"\x16\x03\x01 not http\r\n\r\n").startswith(b"HTTP/1.0 400")
    assert b" 200 " in _exchange(
        controller.metrics_port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    )


@dataclass
class _Conn:
    sock: socket.socket
    kind: str
    sent: int = 0
    answer: bytes = b""
    closed_by_server: bool = False
    outbox: bytes = b""
    """What is still to send of the current piece (a chunk is sent whole)."""


@dataclass
class _Attack:
    """Anonymous connections driven from one thread by a selector, in ticks."""

    conns: list[_Conn] = field(default_factory=list)
    sel: selectors.DefaultSelector = field(default_factory=selectors.DefaultSelector)

    def open(self, port: int, kind: str, opening: bytes) -> None:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setblocking(False)
        if opening:
            s.send(opening)
        c = _Conn(s, kind, len(opening))
        self.conns.append(c)
        self.sel.register(s, selectors.EVENT_READ, c)

    def tick(self, *, trickle: bool) -> None:
        for c in self.conns:
            if c.closed_by_server:
                continue
            if not c.outbox and not c.answer:
                if c.kind == "slow" and trickle:
                    c.outbox = b"X"
                elif c.kind in ("huge", "minus-one"):
                    c.outbox = b"y" * 16384
                elif c.kind == "chunked" and c.sent < 4 * 1024 * 1024:
                    c.outbox = b"10000\r\n" + b"y" * 65536 + b"\r\n"
            try:
                if c.outbox:
                    n = c.sock.send(c.outbox)
                    c.sent += n
                    c.outbox = c.outbox[n:]
            except BlockingIOError:
                pass
            except OSError:
                c.closed_by_server = True
        for key, _ in self.sel.select(timeout=0):
            c = key.data
            try:
                data = c.sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                c.answer += data
            else:
                c.closed_by_server = True
                self.sel.unregister(c.sock)

    def until(self, what: str, done: Callable[[], bool], *, trickle: bool) -> None:
        """Keep the attack going until `done()`; fail after a generous 45 s."""

        def probe() -> bool:
            self.tick(trickle=trickle)
            return done()

        wait_for(what, probe, timeout=45)

    def of(self, kind: str) -> list[_Conn]:
        return [c for c in self.conns if c.kind == kind]

    def close(self) -> None:
        for c in self.conns:
            c.sock.close()
        self.sel.close()


def _raise_own_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        assert hard >= needed, f"the test needs {needed} file descriptors; the hard limit is {hard}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def test_healthz_and_reconciles_carry_on_through_a_thousand_abusive_connections(
    controller: Controller, reconcile_env: ReconcileEnv, policy_repo: PolicyRepo
) -> None:
    env, repo, n = reconcile_env, policy_repo, policy_repo.name
    src = env.create_source("main", repo.url)
    env.wait_condition(src, "Ready", revision_sha=repo.head())
    _raise_own_fd_limit(2 * CONNECTIONS_PER_PORT + 512)

    attack = _Attack()
    hook = b"POST /hook/" + src.encode() + b" HTTP/1.1\r\nHost: a\r\nX-GitHub-Event: push\r\n"
    openings = {
        "idle": b"",
        "slow": b"POST /hook/x HTTP/1.1\r\nHost: a\r\nX-Slow: ",
        "huge": hook + b"Content-Length: 1073741824\r\n\r\n",
        "minus-one": hook + b"Content-Length: -1\r\n\r\n",
        "chunked": hook + b"Transfer-Encoding: chunked\r\n\r\n",
    }
    kinds = list(openings)
    try:
        for i in range(CONNECTIONS_PER_PORT):
            kind = kinds[i % len(kinds)]
            attack.open(controller.webhook_port, kind, openings[kind])
            metrics_kind = "idle" if i % 2 else "slow"
            attack.open(controller.metrics_port, metrics_kind, openings[metrics_kind])

        # During the attack: health answers, and a pushed commit is applied.
        repo.write("projects/b.yaml", project(n("b"), [n("b")], gpu=6))
        sha = repo.commit("during the attack")
        env.patch_source(
            src, {"metadata": {"annotations": {"gangops.ai/reconcile-requested-at": "attack"}}}
        )
        probes: list[int] = []
        start = time.monotonic()
        next_probe = start
        while time.monotonic() - start < ATTACK_S:
            attack.tick(trickle=True)
            if time.monotonic() >= next_probe:
                probes.append(controller.healthz())
                next_probe = time.monotonic() + 1.0
            time.sleep(0.2)
        assert probes and all(p == 200 for p in probes), probes
        env.wait_condition(src, "Ready", revision_sha=sha, timeout=30)

        # Every oversized request was refused with its 4xx (declared sizes at once;
        # a chunked body at the limit, or at the read deadline if it comes in slower),
        # never read to the end.
        for kind, status in (("huge", b" 413 "), ("minus-one", b" 400 "), ("chunked", b" 413 ")):
            conns = attack.of(kind)
            attack.until(
                f"every {kind} request to be refused",
                lambda conns=conns: all(c.answer or c.closed_by_server for c in conns),
                trickle=False,
            )
            answered = [c for c in conns if c.answer]
            if kind != "chunked":
                assert len(answered) == len(conns), kind
            assert all(status in c.answer.split(b"\r\n")[0] for c in answered), kind
            assert all(c.sent < 8 * 1024 * 1024 for c in conns), kind
        # The slow clients never finished a request: the server hung up on them.
        slow = attack.of("slow")
        attack.until(
            "the server to disconnect every slow client",
            lambda: all(c.closed_by_server for c in slow),
            trickle=True,
        )
        assert controller.healthz() == 200
        rss = controller.rss_mib()
        assert rss < 400, f"the controller holds {rss:.0f} MiB after the attack"
    finally:
        attack.close()
    assert controller.proc.poll() is None, controller.text()[-3000:]
