"""httpread against a real socket: a server that answers too much, or too slowly, is
cut off at the caller's bounds; a 4xx/5xx answer comes back with its body."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from controller.httpread import BodyTooLarge, get


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """serve(answer) -> url: one connection on loopback, answered by `answer(conn)`."""
    listeners: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(answer: Callable[[socket.socket], None]) -> str:
        lsock = socket.create_server(("127.0.0.1", 0))
        listeners.append(lsock)

        def run() -> None:
            conn, _ = lsock.accept()
            with conn:
                conn.recv(65536)
                with contextlib.suppress(OSError):  # the client gave up: what the test wants
                    answer(conn)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)
        return f"http://127.0.0.1:{lsock.getsockname()[1]}/api/v1/query"

    yield start
    for lsock in listeners:
        lsock.close()
    for t in threads:
        t.join(timeout=5)


def test_an_answer_over_the_limit_is_refused(serve: Callable[..., str]) -> None:
    def endless(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        for _ in range(64):
            conn.sendall(b"x" * 65536)

    with pytest.raises(BodyTooLarge, match="longer than 100000 bytes"):
        get(serve(endless), timeout_s=10, limit_bytes=100_000)


def test_an_answer_dripped_past_the_timeout_is_cut_off(serve: Callable[..., str]) -> None:
    """Each byte comes well within urllib's per-read timeout; the whole does not."""

    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            conn.sendall(b"x")
            time.sleep(0.05)

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="not read whole in time"):
        get(serve(drip), timeout_s=1, limit_bytes=100_000)
    assert time.monotonic() - start < 5


def test_a_chunked_answer_and_an_error_answer_come_back_whole(
    serve: Callable[..., str],
) -> None:
    def chunked(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )

    def refused(conn: socket.socket) -> None:
        body = b'{"status":"error","error":"bad query"}'
        conn.sendall(
            b"HTTP/1.1 422 Unprocessable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    assert get(serve(chunked), timeout_s=10, limit_bytes=11) == (200, b"hello world")
    assert get(serve(refused), timeout_s=10, limit_bytes=1000) == (
        422,
        b'{"status":"error","error":"bad query"}',
    )


def test_an_answer_cut_short_is_an_incomplete_read(serve: Callable[..., str]) -> None:
    """Read in parts, http.client ends a body cut short without a word; read whole, it
    raises. The callers count on the error (a cut-short forge answer is an outage)."""

    def short(conn: socket.socket) -> None:
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"a":')

    with pytest.raises(http.client.IncompleteRead):
        get(serve(short), timeout_s=10, limit_bytes=1000)
