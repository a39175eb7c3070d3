"""The controller's HTTP servers (webhooks, metrics and health; the node agent and the
alert receiver reuse it): small routes on top of waitress, with limits an anonymous
client cannot get around.

Why waitress: it is a maintained, dependency-free WSGI server whose limits are built
in and checked before the application runs. Requests are read by one asynchronous
loop and only a complete request is handed to a fixed pool of worker threads, so an
idle or slow connection costs a socket and a small buffer, never a thread. It refuses
a `Content-Length` that is not a plain decimal number (400), answers 413 as soon as
the declared or the de-chunked body passes the limit (the body is not read first),
431 for oversized headers, closes idle connections, and stops accepting at a
connection cap instead of running out of file descriptors.

What waitress lacks is a deadline for reading one request: a client that trickles a
byte every few seconds is never idle. `_Channel` and `_Server` add it (as Go's
`ReadTimeout`): a request not received completely within `read_timeout_s` of its
first byte has its connection closed; blank lines sent between requests count as
neither a request nor activity, so they do not keep a connection open.

The process's file-descriptor limit is part of the same budget: `serve` raises the
soft limit to the hard one (as Go's runtime does) and refuses to start a server whose
connection cap does not fit (two descriptors a connection where a body may be
spooled to a file), with room kept for the API client and Git.
"""

from __future__ import annotations

import argparse
import logging
import resource
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

__all__ = [
    "HttpServer",
    "Limits",
    "Request",
    "Response",
    "Route",
    "ServerError",
    "address_arg",
    "parse_addr",
    "text",
]

log = logging.getLogger(__name__)

_FD_RESERVE = 512
"""File descriptors kept for everything that is not an HTTP connection (API client
pools, Git, logs, the informers' watches)."""

_INBUF_OVERFLOW = 64 * 1024
"""A request body longer than this is spooled by waitress to a temporary file."""

_STATUS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class ServerError(Exception):
    """A server could not be started (address in use, not enough file descriptors)."""


@dataclass(frozen=True)
class Limits:
    """What one server accepts from its clients."""

    max_body_bytes: int = 1024 * 1024
    """Larger bodies are refused with 413 before they are read (declared or chunked)."""
    max_header_bytes: int = 16 * 1024
    """Request line and headers together; larger ones get 431."""
    read_timeout_s: float = 10.0
    """A request must arrive completely within this many seconds of its first byte."""
    idle_timeout_s: float = 15.0
    """A connection with no request in progress is closed after this long."""
    max_connections: int = 2048
    """Open connections at once; beyond it new ones wait in the listen backlog."""
    threads: int = 4
    """Worker threads running handlers; connections never take one while they are read."""


@dataclass(frozen=True)
class Request:
    """A complete request, as a route sees it."""

    method: str
    path: str
    """The decoded path, without the query string."""
    headers: Mapping[str, str]
    """Header names in lower case."""
    body: bytes


Response = tuple[int, str, bytes]
"""Status, content type, body."""
Route = Callable[[Request], Response]


def text(code: int, message: str) -> Response:
    """A plain-text response."""
    return code, "text/plain; charset=utf-8", (message + "\n").encode()


class _Channel(HTTPChannel):  # type: ignore[misc]
    """A connection that remembers when the request it is reading began."""

    request_started: float | None = None
    _active_at: float | None = None

    def received(self, data: bytes) -> bool:
        before = self.request
        if before is None and data and not data.strip(b"\r\n"):
            # Blank lines between requests (which HTTP allows, and waitress reads as
            # empty requests): neither a request nor activity, or a client sending
            # only CRLFs would hold a connection slot for ever.
            self.last_activity = (
                self._active_at if self._active_at is not None else self.creation_time
            )
            return True
        self._active_at = self.last_activity
        result: bool = super().received(data)
        if self.request is None:
            self.request_started = None
        elif self.request is not before:
            self.request_started = time.time()
        return result


class _Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress' TCP server, closing connections whose request is too slow to arrive."""

    channel_class = _Channel
    read_timeout_s = 10.0

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        cutoff = now - self.read_timeout_s
        for channel in list(self.active_channels.values()):
            started = getattr(channel, "request_started", None)
            if started is not None and started < cutoff:
                channel.will_close = True


def _routes_app(routes: Mapping[str, Route], limits: Limits) -> Callable[..., Iterable[bytes]]:
    """A WSGI application dispatching on path prefixes (a prefix ending in / matches
    everything under it; any other matches exactly)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        route = next(
            (
                r
                for prefix, r in routes.items()
                if path == prefix or (prefix.endswith("/") and path.startswith(prefix))
            ),
            None,
        )
        if route is None:
            code, ctype, payload = text(404, "not found")
        else:
            # waitress has already read the whole body within the limit, de-chunked it
            # and set CONTENT_LENGTH to what it read.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = (
                environ["wsgi.input"].read(length) if 0 < length <= limits.max_body_bytes else b""
            )
            headers = {
                k[5:].replace("_", "-").lower(): str(v)
                for k, v in environ.items()
                if k.startswith("HTTP_")
            }
            if environ.get("CONTENT_TYPE"):
                headers["content-type"] = str(environ["CONTENT_TYPE"])
            request = Request(str(environ["REQUEST_METHOD"]), path, headers, body)
            try:
                code, ctype, payload = route(request)
            except Exception:
                log.exception("http handler failed method=%s path=%r", request.method, path)
                code, ctype, payload = text(500, "internal error; see the controller's log")
        start_response(
            f"{code} {_STATUS.get(code, 'Status')}",
            [("Content-Type", ctype), ("Content-Length", str(len(payload)))],
        )
        # A response to HEAD ends with its headers (waitress sends what it is given:
        # on a kept-alive connection a body would read as the next response).
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [payload]

    return app


def parse_addr(addr: str) -> tuple[str, int]:
    """(host, port) of `HOST:PORT` or `:PORT` (any address); ValueError otherwise."""
    host, sep, port = addr.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (or :PORT), a port from 0 to 65535; got {addr!r}")
    return host.strip("[]"), int(port)


def address_arg(addr: str) -> str:
    """argparse's type for a listening address: refused as a usage error (exit 2)."""
    try:
        parse_addr(addr)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return addr


def _fds(limits: Limits) -> int:
    """Descriptors a server's connections may hold: a body larger than waitress keeps
    in memory is spooled to a file, a second descriptor for its connection."""
    per_connection = 2 if limits.max_body_bytes > _INBUF_OVERFLOW else 1
    return limits.max_connections * per_connection


def _raise_fd_limit(needed: int) -> int:
    """Raise the soft file-descriptor limit to the hard one; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the file descriptor limit error=%r", str(e))
    return soft if soft != resource.RLIM_INFINITY else needed


class HttpServer:
    """One listening address with its routes, served from a background thread."""

    _fd_lock = threading.Lock()
    _fds_promised = 0
    """Connections promised to the servers of this process so far."""

    def __init__(
        self, addr: str, routes: Mapping[str, Route], *, limits: Limits, name: str
    ) -> None:
        try:
            host, port = parse_addr(addr)
        except ValueError as e:
            raise ServerError(f"{name} server: {e}") from None
        self.name = name
        self._limits = limits
        self._fds = _fds(limits)
        with HttpServer._fd_lock:
            needed = HttpServer._fds_promised + self._fds + _FD_RESERVE
            have = _raise_fd_limit(needed)
            if needed > have:
                raise ServerError(
                    f"{name} server: {limits.max_connections} connections ({self._fds} file"
                    f" descriptors) do not fit in the file descriptor limit ({have};"
                    f" {HttpServer._fds_promised} already promised to other servers,"
                    f" {_FD_RESERVE} kept for the rest): raise the limit (ulimit -n) or"
                    " lower the connection cap"
                )
            try:
                adj = self._adjustments(host, port, limits)
            except ValueError as e:  # a host name that does not resolve
                raise ServerError(f"{name} server: cannot listen on {addr!r}: {e}") from None
            # Bound after it is built, so that a failed bind can close what waitress
            # opened first (its worker threads, its trigger pipe, its socket).
            server = _Server(_routes_app(routes, limits), adj=adj, _start=False, bind_socket=False)
            try:
                server.bind_server_socket()
                server.accept_connections()
            except OSError as e:
                server.task_dispatcher.shutdown(timeout=5)
                server.trigger.close()
                server.close()
                raise ServerError(f"{name} server: cannot listen on {addr!r}: {e}") from e
            server.effective_host, server.effective_port = server.getsockname()
            server.read_timeout_s = limits.read_timeout_s
            self._server = server
            HttpServer._fds_promised += self._fds
        self._thread = threading.Thread(target=self._run, name=f"http-{name}", daemon=True)

    @staticmethod
    def _adjustments(host: str, port: int, limits: Limits) -> Adjustments:
        return Adjustments(
            host=host or "0.0.0.0",
            port=port,
            threads=limits.threads,
            connection_limit=limits.max_connections,
            channel_timeout=int(max(1, limits.idle_timeout_s)),
            cleanup_interval=1,
            max_request_body_size=limits.max_body_bytes,
            max_request_header_size=limits.max_header_bytes,
            inbuf_overflow=_INBUF_OVERFLOW,
            asyncore_use_poll=True,  # select() cannot watch descriptors above 1024
            ident="gangops",
            expose_tracebacks=False,
            clear_untrusted_proxy_headers=True,
        )

    @property
    def port(self) -> int:
        """The port listened on (useful with port 0)."""
        return int(self._server.effective_port)

    @property
    def host(self) -> str:
        return str(self._server.effective_host)

    def start(self) -> HttpServer:
        self._thread.start()
        log.info(
            "serving name=%s addr=%s:%d max_body=%d max_connections=%d read_timeout_s=%g",
            self.name,
            self.host,
            self.port,
            self._limits.max_body_bytes,
            self._limits.max_connections,
            self._limits.read_timeout_s,
        )
        return self

    def _run(self) -> None:
        try:
            self._server.run()
        except Exception:
            # The accept loop has closed (shutdown, or a socket error waitress could
            # not recover from).
            log.debug("http server loop ended name=%s", self.name, exc_info=True)

    def stop(self) -> None:
        """Stop listening, close every connection and stop the worker threads."""
        server = self._server
        if self._thread.ident is None:  # never started: no loop owns the sockets
            wasyncore.close_all(server._map)
        else:
            # Sockets belong to the loop's thread: close them there, which ends the loop.
            try:
                server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
            except OSError:  # the loop closed every socket already, its trigger with them
                log.debug("http server already closed name=%s", self.name)
            self._thread.join(5)
        server.task_dispatcher.shutdown(timeout=5)
        with HttpServer._fd_lock:
            HttpServer._fds_promised -= self._fds
