"""One access-log line per HTTP request of `fasttts serve`, and the server's start and ready
lines.

    2026-12-01 11:32:05 127.0.0.1:51234 "POST /v1/chat/completions" 200 3.412 s request_id=1f0c9a7e2b4d

The request id is the client's `X-Request-ID` header when it sends a usable one (letters,
digits, `-_.:`, at most 64), else a new random one; the response carries it back in
`X-Request-ID`, so a client can match its request to the log line. Latency runs from the
request's arrival to the last byte of the response (a stream's whole length). A request whose
handler fails before answering is logged with status 500. The method and path are logged as
the client sent them (the path still percent-encoded), with every byte outside printable ASCII,
and `"` and `\\`, percent-encoded: no client can start a line of its own or send terminal
escapes (the log line is written before the token is checked, so anyone could try).

`AccessLog` is a plain ASGI middleware, not Starlette's `BaseHTTPMiddleware`: that one would
hide client disconnects from the endpoints, and cancelling a search on disconnect needs them.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

import uvicorn

__all__ = ["AccessLog", "ReadyServer", "log_request", "server_url", "start_line"]

logger = logging.getLogger("fasttts.serve")
access_logger = logging.getLogger("fasttts.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

#: The bytes a logged method or path keeps as they are: printable ASCII but `"` and `\`.
_KEPT = frozenset(range(0x21, 0x7F)) - {ord('"'), ord("\\")}


def _shown(raw: bytes) -> str:
    """`raw` with every byte outside `_KEPT` percent-encoded (one log line, no escapes)."""
    return "".join(chr(b) if b in _KEPT else f"%{b:02X}" for b in raw)


def log_request(client: tuple[str, int] | None, method: bytes, path: bytes, status: int,
                seconds: float, request_id: str) -> None:
    """Write one access-log line (module docstring); `method` and `path` as the client sent
    them (escaped here)."""
    who = f"{client[0]}:{client[1]}" if client else "-"
    access_logger.info('%s "%s %s" %d %.3f s request_id=%s', who, _shown(method), _shown(path),
                       status, seconds, request_id)


def _request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's X-Request-ID if usable, else a new random id."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1")
            if _REQUEST_ID.match(text):
                return text
    return uuid.uuid4().hex[:12]


class AccessLog:
    """ASGI middleware: logs method, path, status, latency and request id of every HTTP
    request to the `fasttts.access` logger (INFO), and returns the id as `X-Request-ID`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        rid = _request_id(scope.get("headers") or [])
        status = 500

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            path = scope.get("raw_path") or scope["path"].encode("utf-8", "backslashreplace")
            log_request(scope.get("client"), scope["method"].encode("latin-1", "replace"), path,
                        status, time.monotonic() - start, rid)


def server_url(host: str, port: int) -> str:
    """http://host:port, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def start_line(cfg, served_names, url: str, platform: str = "", techniques: str = "") -> str:
    """The line `fasttts serve` logs before it builds the engines: address, served model
    names, the models behind them, the backend (on the simulator: that its texts are
    synthetic), what it runs on (`platform`:
    `fasttts.engines.platform_info.describe_platform`, the resolved dtype and threads) and the
    FastTTS techniques the server's searches run with, each method those it has
    (`techniques`: `fasttts.cli.run_options.techniques_on`)."""
    backend = ("sim (simulated: texts are synthetic, timings are a simulated "
               f"{cfg.sim.hardware})" if cfg.backend == "sim" else cfg.backend)
    names = ", ".join(served_names)
    verifier = ("the generator's own confidence" if cfg.verifier.kind == "confidence"
                else cfg.verifier.engine.model)
    on = "".join(f"; {x}" for x in (platform, techniques) if x)
    return (f"fasttts serve: {url}, model {names} (generator {cfg.generator.model}, verifier "
            f"{verifier}), backend {backend}{on}; starting the engines")


class ReadyServer(uvicorn.Server):
    """A uvicorn server that calls `on_ready(url)` once it accepts connections (with the real
    port, also for `port=0`)."""

    def __init__(self, config: uvicorn.Config, on_ready):
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if not self.should_exit and self.servers and self.servers[0].sockets:
            port = self.servers[0].sockets[0].getsockname()[1]
            self.on_ready(server_url(self.config.host, port))
