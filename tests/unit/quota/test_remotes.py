"""A forge or a Git remote that answers badly, or not at all, is an outage the quota
loop retries with backoff: never an exception that ends its pass, never a hang."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.quota import forge
from controller.quota.branch import GitUnavailable, PolicyRepo
from controller.quota.forge import ForgeError, ForgeUnavailable, HttpRequest, urllib_transport


@pytest.fixture
def server() -> Iterator[tuple[socket.socket, list[bytes | None]]]:
    """A local server: each connection gets the next reply set in the list and is
    closed, or (None) is held open and never answered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    replies: list[bytes | None] = []
    held: list[socket.socket] = []

    def loop() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            reply = replies[0] if replies else None
            if reply is None:
                held.append(c)
                continue
            c.recv(65536)
            c.sendall(reply)
            c.close()

    threading.Thread(target=loop, daemon=True).start()
    yield srv, replies
    srv.close()
    for c in held:
        c.close()


@pytest.mark.parametrize(
    "reply",
    [b"SSH-2.0-OpenSSH_9.6\r\n", b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"a":'],
)
def test_an_answer_that_is_not_http_or_cut_short_is_forge_unavailable(
    server: tuple[socket.socket, list[bytes | None]], reply: bytes
) -> None:
    """Found by a review: http.client's BadStatusLine and IncompleteRead escaped the
    transport, ended the loop's pass and skipped the retry's backoff."""
    srv, replies = server
    replies.append(reply)
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/api/v1/repos/a/b/pulls"
    with pytest.raises(ForgeUnavailable):
        urllib_transport(timeout_s=5)(HttpRequest("GET", url, {}))


def test_a_git_remote_that_never_answers_is_given_up_on(
    server: tuple[socket.socket, list[bytes | None]], tmp_path: Path
) -> None:
    """Found by a review: `git fetch` ran without a timeout and held the quota loop
    (and the repository's lock) for as long as the connection stayed open."""
    srv, _ = server
    repo = PolicyRepo(
        url=f"http://127.0.0.1:{srv.getsockname()[1]}/acme/policies.git", base="main",
        path="policies", cache_dir=tmp_path, timeout_s=2,
    )  # fmt: skip
    t0 = time.monotonic()
    with pytest.raises(GitUnavailable):
        repo.base_commit()
    assert time.monotonic() - t0 < 30


def test_an_answer_longer_than_the_limit_is_refused_not_held(
    server: tuple[socket.socket, list[bytes | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transport stops reading past `ANSWER_LIMIT` (a misbehaving forge or a
    proxy streaming without end would otherwise fill the controller's memory); it is
    not an outage to retry at once, so it is a `ForgeError`, not `ForgeUnavailable`."""
    srv, replies = server
    monkeypatch.setattr(forge, "ANSWER_LIMIT", 1000)
    replies.append(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"[" + b" " * 4998 + b"]")
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/api/v1/repos/a/b/pulls"
    with pytest.raises(ForgeError, match="longer than 1000 bytes") as e:
        urllib_transport(timeout_s=5)(HttpRequest("GET", url, {}))
    assert not isinstance(e.value, ForgeUnavailable)
