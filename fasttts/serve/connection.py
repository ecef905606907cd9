"""The HTTP connection of `fasttts serve`, before any request reaches the app: uvicorn's
httptools protocol with limits on the request line and headers, and OpenAI-shaped errors.

- **Header size**: the request line and headers of one request may take `MAX_HEADER_BYTES`;
  more is refused with 431, as soon as the bytes received while headers are incomplete pass
  it (httptools itself would buffer a header of any size, and every other connection waits
  while it is copied), or once the parsed URL and headers do.
- **Header time**: a connection must complete a request's headers within
  `HEADER_TIMEOUT_S` of opening (or of the request's first byte); else it gets 408 (or is
  closed, when it sent nothing), so idle or slow-drip connections do not stay open.
- **Malformed HTTP** (a request line or header httptools cannot parse): 400 with OpenAI's
  error body, not uvicorn's plain text.

Each refusal closes the connection and writes one access-log line
(`fasttts.serve.access_log.log_request`). Everything after the headers (the Host
allow-list, the body limit, the token) is `fasttts.serve.guard`'s.
"""

from __future__ import annotations

import json
import time

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from fasttts.serve.access_log import log_request
from fasttts.serve.protocol import error_body

__all__ = ["HEADER_TIMEOUT_S", "MAX_HEADER_BYTES", "LimitedHttpToolsProtocol"]

#: Most bytes of one request's request line and headers (bytes).
MAX_HEADER_BYTES = 64 << 10
#: Seconds a connection may take to send a request's headers.
HEADER_TIMEOUT_S = 15.0

_TOO_LARGE = (f"the request line and headers are over {MAX_HEADER_BYTES} bytes, the most this "
              f"server reads")


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; uvicorn then calls `send_400_response`."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the module docstring's limits; give it to
    `uvicorn.Config(http=...)`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_headers = True  # the next bytes belong to a request line or headers
        self._header_bytes = 0
        self._header_timer = None
        self._began = time.monotonic()
        self._refusal: tuple[int, str] | None = None  # a callback's answer to send

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._began = time.monotonic()
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        if (self._in_headers and self._header_bytes > MAX_HEADER_BYTES
                and not self.transport.is_closing()):
            self._refuse(431, _TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_headers, self._header_bytes = False, 0
        self._disarm()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEADER_BYTES:  # all of it arrived in one read
            self._refusal = (431, _TOO_LARGE)
            raise _Refused
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_headers = True

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self._in_headers or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm()  # a pipelined request behind one still answering: wait for that
            return
        if self._header_bytes:
            self._refuse(408, f"the request headers did not arrive within {HEADER_TIMEOUT_S:g} "
                              f"s")
        else:
            self.transport.close()  # nothing sent: nobody to answer

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request httptools cannot parse (or a callback refused), in
        OpenAI's shape."""
        self._refuse(*(self._refusal or (400, "malformed HTTP request: the request line or a "
                                              "header could not be parsed")))

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with an OpenAI error body, close the connection, log it."""
        body = json.dumps(error_body(status, message, "invalid_request_error")).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\n",
                 b"content-length: " + str(len(body)).encode() + b"\r\n",
                 b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
        self._disarm()
        log_request(self.client, b"-", b"-", status, time.monotonic() - self._began, "-")
