"""The server's memory under a closed-loop load: whatever a request allocates must be given
back once it ends.

    python benchmarks/memory_load.py [--clients 64] [--duration 300] [--settle 60]

Starts `fasttts serve --backend sim` in a subprocess on loopback, waits for /health, sends
`--warmup` requests of each search one after another (the first requests import the grader
and fill the bounded caches: a one-time cost, not one per request), and records its RSS
(psutil). Then `--clients` clients each send requests back to back for
`--duration` seconds (methods, n and problems in turn, every request a new problem text and
seed), and wait for their last answers (the drain). Prints the RSS before, after the drain and
`--settle` seconds later, the requests and failures, and the KV blocks and sequences /metrics
reports after the drain. Exit code 1 if a request failed, a KV block or sequence is still
held, or the RSS `--settle` seconds after the drain is more than `--max-growth-mib` above the
RSS before the load.

Kept outside `fasttts bench`: a server hardening check (RSS under a closed-loop load of
`fasttts serve`), not a paper figure; its numbers are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import time

import httpx
import psutil

from fasttts.eval.datasets import load_dataset

MiB = 1 << 20

#: The searches the clients ask for, in turn (tts objects; n small enough for many requests).
SEARCHES = ({"method": "beam_search", "n": 4, "beam_width": 2},
            {"method": "best_of_n", "n": 4},
            {"method": "sart", "n": 4},
            {"method": "self_consistency", "n": 4},
            {"method": "dvts", "n": 4, "beam_width": 2})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _client(k: int, base: str, until: float, problems, counts: dict,
                  most: int | None = None) -> None:
    """One client: requests back to back until `until` (time.monotonic), or `most` of them."""
    async with httpx.AsyncClient(timeout=600) as client:
        i = k
        while time.monotonic() < until or (most is not None and counts["requests"] < most):
            problem = problems[i % len(problems)].problem
            body = {"model": "fasttts", "max_tokens": 256, "seed": i,
                    "messages": [{"role": "user", "content": f"({i}) {problem}"}],
                    "tts": SEARCHES[i % len(SEARCHES)]}
            try:
                r = await client.post(f"{base}/v1/chat/completions", json=body)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            counts["requests"] += 1
            counts["failed"] += not ok
            i += 64 * 1024  # a new problem text and seed every time


async def _load(base: str, clients: int, duration: float, problems,
                most: int | None = None) -> dict:
    """`clients` clients for `duration` seconds (or `most` requests); their counts."""
    counts = {"requests": 0, "failed": 0}
    until = time.monotonic() + duration
    await asyncio.gather(*(_client(k, base, until, problems, counts, most)
                           for k in range(clients)))
    return counts


def _wait_ready(base: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode})")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise SystemExit("the server did not come up in 120 s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--duration", type=float, default=300, help="seconds of load")
    p.add_argument("--settle", type=float, default=60, help="seconds to wait after the drain")
    p.add_argument("--max-growth-mib", type=float, default=50)
    p.add_argument("--warmup", type=int, default=0,
                   help="requests of each search before the RSS is first taken")
    a = p.parse_args(argv)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim", "--port", str(port),
         "--served-model-name", "fasttts", "--max-queue", str(2 * a.clients)],
        stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        _wait_ready(base, server)
        proc = psutil.Process(server.pid)
        problems = load_dataset("gsm8k", limit=500)
        if a.warmup:
            asyncio.run(_load(base, 1, 0, problems, a.warmup * len(SEARCHES)))
        before = proc.memory_info().rss
        t0 = time.monotonic()
        counts = asyncio.run(_load(base, a.clients, a.duration, problems))
        wall = time.monotonic() - t0
        after = proc.memory_info().rss
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        held = {m[1]: float(m[2]) for m in re.finditer(
            r"^(fasttts_kv_blocks_used|fasttts_running_sequences|fasttts_running_requests) "
            r"(\S+)$", metrics, re.M)}
        time.sleep(a.settle)
        settled = proc.memory_info().rss
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"{a.clients} clients, {a.duration:.0f} s of load, drained after {wall:.0f} s: "
          f"{counts['requests']} requests, {counts['failed']} failed; after the drain {held}")
    print(f"server RSS: {before / MiB:.0f} MiB before, {after / MiB:.0f} MiB after the drain, "
          f"{settled / MiB:.0f} MiB {a.settle:.0f} s later "
          f"(growth {(settled - before) / MiB:+.0f} MiB)")
    grew = (settled - before) / MiB > a.max_growth_mib
    return 1 if counts["failed"] or any(held.values()) or grew else 0


if __name__ == "__main__":
    sys.exit(main())
