"""Reading an answer from a server gangops does not run (Prometheus, a Git forge),
bounded in size and in time.

urllib's timeout bounds each socket read, not the answer: a server that drips a
byte at a time, or streams without end, would hold the caller's thread for as
long as it likes and fill its memory. `get` reads the body in chunks and gives up
past `limit_bytes` (`BodyTooLarge`) or past `timeout_s` from the request's start
(`TimeoutError`, as urllib says for a silent server).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Protocol

__all__ = ["BodyTooLarge", "get", "read_within"]

_CHUNK = 64 * 1024


class BodyTooLarge(ValueError):
    """The answer is longer than the caller accepts."""


class _Readable(Protocol):
    def read(self, amt: int = ..., /) -> bytes: ...


def read_within(
    stream: _Readable,
    *,
    limit_bytes: int,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> bytes:
    """The rest of `stream`, refused once longer than `limit_bytes` or once the
    `clock` passes `deadline`; `http.client.IncompleteRead` where it ends before its
    Content-Length. `read1` is used where the stream has it, so that one call waits
    for one socket read, not for a whole chunk of a chunked answer."""
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
    parts: list[bytes] = []
    size = 0
    while True:
        if clock() > deadline:
            raise TimeoutError(f"answer not read whole in time ({size} bytes so far)")
        chunk = read(min(_CHUNK, limit_bytes + 1 - size))
        if not chunk:
            # http.client raises IncompleteRead for a body cut short only when read
            # whole; read in parts, the end comes early and `length` says so
            left = getattr(stream, "length", None)
            if isinstance(left, int) and left > 0:
                raise http.client.IncompleteRead(b"".join(parts), left)
            return b"".join(parts)
        size += len(chunk)
        if size > limit_bytes:
            raise BodyTooLarge(f"answer longer than {limit_bytes} bytes")
        parts.append(chunk)


def get(
    request: str | urllib.request.Request, *, timeout_s: float, limit_bytes: int
) -> tuple[int, bytes]:
    """(status, body) of one request: a 4xx/5xx answer too, with its body (read
    within the same bounds). Network errors are urllib's (`URLError`, `OSError`,
    `http.client.HTTPException`)."""
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return int(resp.status), read_within(resp, limit_bytes=limit_bytes, deadline=deadline)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, read_within(e, limit_bytes=limit_bytes, deadline=deadline)
