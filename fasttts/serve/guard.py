"""The server's front door: Host allow-list, body-size limit and bearer token, before the
app reads a body.

`RequestGuard` is a pure ASGI middleware (not Starlette's `BaseHTTPMiddleware`, which hides
client disconnects from the endpoints). For every HTTP request, in this order:

1. with an allow-list of hosts (`fasttts serve` sets one when no token is configured: the
   bound address and localhost), a `Host` header naming another host is refused with 403,
   so a web page whose own name resolves to this machine (DNS rebinding) cannot use the
   server through a browser; a request without a Host header (HTTP/1.0) passes;
2. a `Content-Length` over the limit is refused with 413 without reading a byte of the body;
3. without the bearer token (when one is configured) every path but the open ones
   (`/health`) is refused with 401, still before the body is read; the token is compared as
   bytes in constant time, so any header or key (non-ASCII included) is a clean 401 or a match;
4. the body is read, at most the limit (a chunked body that grows past it is a 413), and
   handed on to the app, which parses it. Later `receive` calls (disconnects) pass through.

The request line and headers are limited before any of this, by the connection
(`fasttts.serve.connection`: at most `MAX_HEADER_BYTES`, within `HEADER_TIMEOUT_S`). So a
client without the token, or with a body over the limit, costs the server at most the
header limit plus the body limit in memory, and usually only the header limit.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from starlette.responses import JSONResponse

from fasttts.serve.protocol import error_body

__all__ = ["OPEN_PATHS", "RequestGuard", "host_name"]

#: Paths served without the bearer token (probes).
OPEN_PATHS = frozenset({"/health"})


class _Disconnected(Exception):
    pass


def host_name(host: str) -> str:
    """The host part of a Host header or address, lower-cased, without a port or the
    brackets of an IPv6 address: "LocalHost:8000" -> "localhost", "[::1]:80" -> "::1"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    if host.count(":") == 1:  # name:port (a bare IPv6 address has more colons)
        return host.split(":")[0]
    return host


class RequestGuard:
    """ASGI middleware enforcing the body limit and the bearer token (module docstring).

    Args:
        app: the ASGI app behind the guard.
        max_body_bytes: most bytes of a request body (bytes).
        api_key: the bearer token (None = no token needed).
        allowed_hosts: the host names a Host header may name (`host_name` form); None = any.
        on_reject: called with the HTTP status of every request the guard refuses.
    """

    def __init__(self, app, max_body_bytes: int, api_key: str | None = None,
                 allowed_hosts: tuple[str, ...] | None = None,
                 on_reject: Callable[[int], None] | None = None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._expected = f"Bearer {api_key}".encode() if api_key else None
        self.allowed_hosts = (None if allowed_hosts is None
                              else frozenset(host_name(h) for h in allowed_hosts))
        self.on_reject = on_reject

    async def _refuse(self, scope, receive, send, status: int, message: str, kind: str):
        if self.on_reject is not None:
            self.on_reject(status)
        await JSONResponse(error_body(status, message, kind), status_code=status)(
            scope, receive, send)

    def _wrong_host(self, host: bytes) -> str:
        shown = host.decode("latin-1")[:100].encode("unicode_escape").decode("ascii")
        return (f"Host {shown!r} is not served here (it answers to "
                f"{', '.join(sorted(self.allowed_hosts))}; --allowed-hosts): a web page must "
                f"not reach a server without a token through a name of its own")

    def _too_large(self, size: str) -> str:
        return (f"the request body is {size}; at most {self.max_body_bytes} bytes are allowed "
                f"(--max-request-bytes)")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        host = headers.get(b"host")
        if (self.allowed_hosts is not None and host is not None
                and host_name(host.decode("latin-1")) not in self.allowed_hosts):
            return await self._refuse(scope, receive, send, 403, self._wrong_host(host),
                                      "permission_error")
        length = headers.get(b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                return await self._refuse(scope, receive, send, 400,
                                          "Content-Length is not a number of bytes",
                                          "invalid_request_error")
            if int(length) > self.max_body_bytes:
                return await self._refuse(scope, receive, send, 413,
                                          self._too_large(f"{int(length)} bytes"),
                                          "invalid_request_error")
        if (self._expected is not None and scope["path"] not in OPEN_PATHS
                and not secrets.compare_digest(headers.get(b"authorization", b""),
                                               self._expected)):
            return await self._refuse(scope, receive, send, 401,
                                      "missing or wrong bearer token (Authorization: Bearer KEY)",
                                      "authentication_error")
        try:
            body = await self._read_body(receive)
        except _Disconnected:
            return  # the client left before sending its body: nobody to answer
        if body is None:
            return await self._refuse(scope, receive, send, 413, self._too_large("larger"),
                                      "invalid_request_error")
        replay = [{"type": "http.request", "body": body, "more_body": False}]

        async def replayed():
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _read_body(self, receive) -> bytes | None:
        """The whole body, or None once it grows past the limit (the rest is not read).

        Raises:
            _Disconnected: the client went away first.
        """
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
