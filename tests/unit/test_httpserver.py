"""The HTTP server's limits, on a real server on loopback, with raw sockets: what an
anonymous client sends is what the test sends, byte for byte.

Timeouts are set short here (1 s) and the assertions wait generously (10 s), so a
loaded machine makes the tests slower, not flaky.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

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
