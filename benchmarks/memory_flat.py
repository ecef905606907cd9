"""The server's memory under large bodies and headers without a token: they must be refused
before they are read or parsed (413 over the body limit, 401 without the token, 431 over the
header limit), so its RSS stays flat and other clients are served meanwhile.

    python benchmarks/memory_flat.py [--bodies 10] [--headers 10] [--mib 100]

Starts `fasttts serve --backend sim --api-key ...` in a subprocess, sends each body twice (with
a Content-Length, and chunked without one) and then `--headers` requests with one header of
`--mib` MiB, while another client polls `/health`; prints the server's RSS before and after
(psutil) and the slowest `/health` answer. Exit code 1 if a body or header is not refused
with 413/401/431, the RSS grows by more than --max-growth-mib, or `/health` took more than
--max-health-s.

Kept outside `fasttts bench`: a server hardening check (requests refused before they are read),
not a paper figure or a speed measurement; its numbers are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

import psutil

MiB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(port: int, size: int, mode: str) -> int | None:
    """Send one POST of `size` bytes (stopping when the server answers); its HTTP status.
    `mode`: "length" (a body with Content-Length), "chunked" (a chunked body) or "header"
    (the bytes are the value of one header)."""
    chunked = mode == "chunked"
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + {"chunked": "Transfer-Encoding: chunked\r\n", "length": f"Content-Length: {size}\r\n",
               "header": "X-Big: "}[mode]
            + ("" if mode == "header" else "\r\n")).encode()
    piece = b"x" * MiB
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        s.setblocking(False)
        sent, reply = 0, b""
        while sent < size and not reply:
            try:
                s.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece)
                sent += len(piece)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                time.sleep(0.01)
            try:
                reply = s.recv(4096)
            except BlockingIOError:
                pass
            except ConnectionResetError:
                break
        s.setblocking(True)
        deadline = time.monotonic() + 10
        while not reply and time.monotonic() < deadline:
            try:
                reply = s.recv(4096)
            except OSError:
                break
    return int(reply.split()[1]) if reply.startswith(b"HTTP/") else None


def _poll_health(port: int, stop: threading.Event, slowest: list[float]) -> None:
    """GET /health until `stop`, keeping the slowest answer's seconds in `slowest[0]`."""
    while not stop.is_set():
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            while s.recv(4096):
                pass
        slowest[0] = max(slowest[0], time.monotonic() - t0)
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit code (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bodies", type=int, default=10)
    p.add_argument("--headers", type=int, default=10)
    p.add_argument("--mib", type=int, default=100, help="MiB per body or header")
    p.add_argument("--max-growth-mib", type=float, default=50)
    p.add_argument("--max-health-s", type=float, default=1.0)
    a = p.parse_args(argv)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim", "--port", str(port),
         "--api-key", "secret"], stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if _status(port, 0, "length") is not None:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        proc = psutil.Process(server.pid)
        before = proc.memory_info().rss
        statuses, headers, peak = [], [], before
        for _ in range(a.bodies):
            for mode in ("length", "chunked"):
                statuses.append(_status(port, a.mib * MiB, mode))
                peak = max(peak, proc.memory_info().rss)
        stop, slowest = threading.Event(), [0.0]
        poller = threading.Thread(target=_poll_health, args=(port, stop, slowest), daemon=True)
        poller.start()
        for _ in range(a.headers):
            headers.append(_status(port, a.mib * MiB, "header"))
            peak = max(peak, proc.memory_info().rss)
        stop.set()
        poller.join(timeout=60)
        after = proc.memory_info().rss
    finally:
        server.kill()
    growth = (after - before) / MiB
    print(f"{a.bodies} x 2 bodies of {a.mib} MiB without a token: statuses {sorted(set(statuses))}"
          f" ({statuses.count(413)} x 413, {statuses.count(401)} x 401); {a.headers} headers of "
          f"{a.mib} MiB: {headers.count(431)} x 431, slowest /health meanwhile "
          f"{slowest[0]:.3f} s; server RSS before {before / MiB:.1f} MiB, after "
          f"{after / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, growth {growth:+.1f} MiB")
    ok = (set(statuses) <= {401, 413} and headers == [431] * a.headers
          and growth <= a.max_growth_mib and slowest[0] <= a.max_health_s)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
