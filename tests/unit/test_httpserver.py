"""The HTTP server's limits, on a real server on loopback, with raw sockets: what an
anonymous client sends is what the test sends, byte for byte.

Timeouts are set short here (1 s) and the assertions wait generously (10 s), so a
loaded machine makes the tests slower, not flaky.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from controller import httpserver
from controller.httpserver import HttpServer, Limits, Request, Response, ServerError, text

LIMITS = Limits(
    max_body_bytes=1024, max_header_bytes=2048, read_timeout_s=1, idle_timeout_s=2, threads=2
)


def _echo(request: Request) -> Response:
    return text(200, f"{request.method} {request.path} {len(request.body)}")


def _boom(request: Request) -> Response:
    raise RuntimeError("handler bug")


@pytest.fixture
def server() -> Iterator[HttpServer]:
    s = HttpServer(
        "127.0.0.1:0", {"/echo/": _echo, "/boom": _boom}, limits=LIMITS, name="test"
    ).start()
    yield s
    s.stop()


def _exchange(server: HttpServer, data: bytes, *, wait: float = 10.0) -> bytes:
    """Send `data` and return the first answer, without closing our side first (a
    server that waits for EOF would never answer)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


POST = b"POST /echo/x HTTP/1.1\r\nHost: a\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"


def test_a_well_formed_request_reaches_its_route(server: HttpServer) -> None:
    answer = _exchange(server, POST + b"Content-Length: 5\r\n\r\nhello")
    assert _status(answer) == 200
    assert _status(_exchange(server, CHUNKED + b"5\r\nhello\r\n0\r\n\r\n")) == 200
    assert _status(_exchange(server, b"GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n")) == 404


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        # Content-Length: -1 was read to EOF before the handler ran (D1).
        (POST + b"Content-Length: -1\r\n\r\n" + b"x" * 4096, 400),
        (POST + b"Content-Length: abc\r\n\r\n{}", 400),
        (POST + b"Content-Length: 1, 2\r\n\r\n{}", 400),
        # Declared too large: refused before the body is sent.
        (POST + b"Content-Length: 1073741824\r\n\r\n", 413),
        # Chunked: refused once the decoded body passes the limit.
        (CHUNKED + b"401\r\n" + b"y" * 1025 + b"\r\n" * 2, 413),
        (POST + b"X-Big: " + b"h" * 4096 + b"\r\n\r\n", 431),
        (b"\x16\x03\x01\x02\x00 not http\r\n\r\n", 400),
        (POST + b"Transfer-Encoding: gzip\r\n\r\n", 501),
    ],
    ids=["minus-one", "not-a-number", "list", "declared-huge", "chunked-huge", "headers",
         "tls-on-http", "unknown-coding"],
)  # fmt: skip
def test_malformed_and_oversized_requests_get_a_clear_status(
    server: HttpServer, request_bytes: bytes, status: int
) -> None:
    assert _status(_exchange(server, request_bytes)) == status


def test_a_handler_that_raises_answers_500_and_the_server_carries_on(server: HttpServer) -> None:
    assert _status(_exchange(server, b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\n")) == 500
    assert _status(_exchange(server, POST + b"Content-Length: 0\r\n\r\n")) == 200


def _closed_by_server(s: socket.socket, *, trickle: bool, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    s.settimeout(0.3)
    while time.monotonic() < deadline:
        try:
            if trickle:
                s.send(b"x")
            if s.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def test_a_client_trickling_a_request_is_disconnected_at_the_read_deadline(
    server: HttpServer,
) -> None:
    """Never idle, never done: only a deadline on the whole request stops it."""
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(POST + b"X-Slow: ")
        assert _closed_by_server(s, trickle=True)


def test_an_idle_connection_is_closed(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        assert _closed_by_server(s, trickle=False)


def test_many_idle_connections_do_not_keep_others_out(server: HttpServer) -> None:
    """Connections are read by one loop, not a thread each: 200 idle ones, twice
    the worker threads' count many times over, leave the server answering."""
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
    try:
        assert _status(_exchange(server, POST + b"Content-Length: 0\r\n\r\n")) == 200
    finally:
        for s in idle:
            s.close()


def test_a_connection_cap_beyond_the_file_descriptor_limit_is_refused() -> None:
    with pytest.raises(ServerError, match="do not fit in the file descriptor limit"):
        HttpServer("127.0.0.1:0", {}, limits=Limits(max_connections=10**9), name="greedy")


def test_a_response_to_head_ends_with_its_headers(server: HttpServer) -> None:
    """Found by a review: the route's body followed a HEAD response, and on a kept-alive
    connection read as the start of the next response."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(
            b"HEAD /echo/x HTTP/1.1\r\nHost: a\r\n\r\n"
            + b"GET /echo/y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 15" in head
    assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(b"GET /echo/y 0\n")


def test_blank_lines_alone_do_not_keep_a_connection_open(server: HttpServer) -> None:
    """Found by a review: each CRLF pair was an empty request to waitress, activity
    that reset the idle timer, so a client sending nothing else held its connection
    slot for ever (a few of them, the whole connection cap)."""
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(0.3)
        deadline = time.monotonic() + 8  # 4 idle timeouts
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                s.send(b"\r\n")
                closed = s.recv(4096) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
        assert closed


@pytest.mark.parametrize(
    "addr", ["localhost", "no-such-host.invalid:0", "127.0.0.1:-1", "127.0.0.1:70000", ":８０"]
)
def test_an_address_that_is_not_host_and_port_is_refused(addr: str) -> None:
    """Found by a review: some raised ValueError past the callers (a traceback), and
    port 70000 listened on 4464."""
    with pytest.raises(ServerError):
        HttpServer(addr, {}, limits=Limits(max_connections=8), name="bad")


def test_a_server_that_cannot_listen_leaves_nothing_open() -> None:
    """Found by a review: waitress starts its worker threads and opens its trigger and
    socket before it binds; a failed bind left them all behind."""
    busy = HttpServer("127.0.0.1:0", {}, limits=Limits(max_connections=8), name="busy").start()
    try:
        fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
        for _ in range(3):
            with pytest.raises(ServerError, match="cannot listen"):
                HttpServer(f"127.0.0.1:{busy.port}", {}, limits=Limits(max_connections=8), name="x")
        assert (len(os.listdir("/proc/self/fd")), threading.active_count()) == (fds, threads)
    finally:
        busy.stop()


def test_connections_whose_bodies_may_spool_to_a_file_count_two_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a review: a body over waitress's 64 KiB in memory is spooled to a
    file, so half-sent 70 KiB bodies took the descriptors kept for the API client."""
    monkeypatch.setattr(httpserver, "_raise_fd_limit", lambda needed: 2000)
    small = HttpServer(
        "127.0.0.1:0", {}, limits=Limits(max_body_bytes=1024, max_connections=1000), name="s"
    )
    small.stop()
    with pytest.raises(ServerError, match="1000 connections \\(2000 file descriptors\\)"):
        HttpServer("127.0.0.1:0", {}, limits=Limits(max_connections=1000), name="big")
