"""The server's memory under large bodies without a token: they must be refused before they
are read or parsed (413 over the size limit, 401 without the token), so its RSS stays flat.

    python benchmarks/memory_flat.py [--bodies 10] [--mib 100]

Starts `fasttts serve --backend sim --api-key ...` in a subprocess, sends each body twice (with
a Content-Length, and chunked without one), and prints the server's RSS before and after (psutil).
Exit code 1 if a body is not refused with 413/401 or the RSS grows by more than --max-growth-mib.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import psutil

MiB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(port: int, size: int, chunked: bool) -> int | None:
    """Send one POST of `size` bytes (stopping when the server answers); its HTTP status."""
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + ("Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n")
            + "\r\n").encode()
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


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit code (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bodies", type=int, default=10)
    p.add_argument("--mib", type=int, default=100, help="MiB per body")
    p.add_argument("--max-growth-mib", type=float, default=50)
    a = p.parse_args(argv)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim", "--port", str(port),
         "--api-key", "secret"], stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if _status(port, 0, False) is not None:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        proc = psutil.Process(server.pid)
        before = proc.memory_info().rss
        statuses, peak = [], before
        for _ in range(a.bodies):
            for chunked in (False, True):
                statuses.append(_status(port, a.mib * MiB, chunked))
                peak = max(peak, proc.memory_info().rss)
        after = proc.memory_info().rss
    finally:
        server.kill()
    growth = (after - before) / MiB
    print(f"{a.bodies} x 2 bodies of {a.mib} MiB without a token: statuses {sorted(set(statuses))}"
          f" ({statuses.count(413)} x 413, {statuses.count(401)} x 401); server RSS before "
          f"{before / MiB:.1f} MiB, after {after / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, "
          f"growth {growth:+.1f} MiB")
    ok = set(statuses) <= {401, 413} and growth <= a.max_growth_mib
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
