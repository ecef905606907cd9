"""The server's connections before the app (`fasttts.serve.connection`), on a real uvicorn
server in a thread (simulated backend): header size and time limits, malformed HTTP answered
in OpenAI's shape; and `fasttts serve` end to end: the Host allow-list and the same limits
behind the command line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
import uvicorn

from fasttts.serve import connection
from fasttts.serve.app import create_app
from tests.test_serve import _free_port, state  # noqa: F401  (the simulated server fixture)

MiB = 1 << 20


@pytest.fixture
def server(state):  # noqa: F811
    """A uvicorn server with the connection limits over the simulated server; its port."""
    state.api_key = "secret"
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port,
                                        log_level="error",
                                        http=connection.LimitedHttpToolsProtocol))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield port
    srv.should_exit = True
    thread.join(timeout=30)


def _reply(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return out


def _error(reply: bytes, status: int) -> dict:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), reply[:200]
    assert b"content-type: application/json" in head.lower()
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err


def test_a_huge_header_is_refused_with_431_before_the_token_and_memory_stays_flat(server):
    me = psutil.Process()
    before = me.memory_info().rss
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        piece, sent = b"x" * MiB, 0
        try:
            while sent < 100 * MiB:  # a 100 MiB header, without the token
                s.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        err = _error(_reply(s), 431)
    assert "the request line and headers are over 65536 bytes" in err["message"]
    assert sent < 10 * MiB  # refused at once, not after the whole header
    assert me.memory_info().rss - before < 30 * MiB  # was the whole header, several times


def test_headers_that_never_finish_get_408_and_idle_connections_close(server, monkeypatch):
    monkeypatch.setattr(connection, "HEADER_TIMEOUT_S", 1.0)
    slow = [socket.create_connection(("127.0.0.1", server)) for _ in range(500)]
    idle = [socket.create_connection(("127.0.0.1", server)) for _ in range(500)]
    try:
        for s in slow:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: a")
        start = time.monotonic()
        for s in slow:
            _error(_reply(s), 408)
        assert all(_reply(s) == b"" for s in idle)  # closed, nothing to answer
        assert time.monotonic() - start < 5
    finally:
        for s in slow + idle:
            s.close()


MALFORMED = [
    ("not HTTP", b"GARBAGE\r\n\r\n"),
    ("header without a colon", b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n"),
    ("space in a header name", b"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n"),
    ("control byte in the path", b"GET /he\x01alth HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("two Content-Lengths", b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                            b"Content-Length: 2\r\n\r\nab"),
    ("bad chunk size", b"POST /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"\r\nzz\r\n"),
    ("unknown HTTP version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n"),
]


@pytest.mark.parametrize("kind, request_bytes", MALFORMED, ids=[k for k, _ in MALFORMED])
def test_malformed_http_gets_an_openai_shaped_400(server, kind, request_bytes):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(request_bytes)
        err = _error(_reply(s), 400)
    assert err["message"].startswith("malformed HTTP request")
    with socket.create_connection(("127.0.0.1", server)) as s:  # the server is fine
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert _reply(s).startswith(b"HTTP/1.1 200 ")


def _serve(*flags: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim", "--port", str(port),
         *flags], env={**os.environ, "PYTHONPATH": os.getcwd()}, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if _reply(s).startswith(b"HTTP/1.1 200"):
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the server did not come up")


def _get(port: int, host: bytes, path: bytes = b"/v1/models") -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        return _reply(s)


def test_serve_without_a_key_answers_its_own_names_only_and_limits_headers():
    proc, port = _serve()
    try:
        err = _error(_get(port, b"evil.example"), 403)  # DNS rebinding: was 200
        assert err["message"].startswith("Host 'evil.example' is not served here (it answers "
                                         "to 127.0.0.1, ::1, localhost; --allowed-hosts)")
        for host in (b"127.0.0.1:%d" % port, b"localhost", b"LOCALHOST:1", b"[::1]:%d" % port):
            assert _get(port, host).startswith(b"HTTP/1.1 200 "), host
        assert _error(_get(port, b"localhost", b"/" + b"x" * (70 << 10)), 431)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"BREW /pot HTCPCP/1.0\r\n\r\n")
            _error(_reply(s), 400)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_with_a_key_or_a_star_answers_any_host():
    for flags in (("--api-key", "k"), ("--allowed-hosts", "*")):
        proc, port = _serve(*flags)
        try:
            reply = _get(port, b"tts.example.org", b"/health")
            assert reply.startswith(b"HTTP/1.1 200 "), (flags, reply[:100])
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.parametrize("size, status", [(60 << 10, b"200"), (70 << 10, b"431")])
def test_headers_sent_at_once_are_limited_too(server, size, status):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: "
                  + b"x" * size + b"\r\n\r\n")
        assert _reply(s).startswith(b"HTTP/1.1 " + status)
