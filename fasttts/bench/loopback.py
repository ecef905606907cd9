"""Serving real engines over loopback: `fasttts serve` in a subprocess, Poisson clients.

The real-engine side of the serving benchmarks: the server runs as a user runs it (its own
process, HTTP on 127.0.0.1), a client sends requests with exponential gaps (seeded) for a
while, waits for every answer (the drain), and reads the server's /metrics afterwards (running
sequences and KV blocks still held must be 0). Records have the fields of
`fasttts.bench.serving`'s, with wall-clock seconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fasttts.eval.datasets import Problem
from fasttts.eval.grading import is_equivalent

__all__ = ["Server", "drain_state", "send_poisson"]

#: The /metrics gauges that must read 0 once every request is answered.
_HELD = ("fasttts_kv_blocks_used", "fasttts_running_sequences", "fasttts_running_requests")


class Server:
    """`fasttts serve` on 127.0.0.1 in a subprocess (a context manager; its log goes to
    `log`).

    Args:
        args: `fasttts serve` arguments beyond the address.
        port: the port.
        log: the file its output goes to.
        ready_s: seconds to wait for /health.

    Raises:
        RuntimeError: the server exited or did not answer /health in time (names the log).
    """

    def __init__(self, args: list[str], port: int, log: Path, ready_s: float = 900):
        self.base = f"http://127.0.0.1:{port}"
        self.cmd = [sys.executable, "-m", "fasttts.cli", "serve", "--host", "127.0.0.1",
                    "--port", str(port), "--served-model-name", "fasttts", *args]
        self.log, self.ready_s, self.proc = log, ready_s, None

    def __enter__(self) -> Server:
        self._log = open(self.log, "a")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=os.environ.copy())
        deadline = time.monotonic() + self.ready_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}); see {self.log}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer in {self.ready_s:.0f} s; see "
                                   f"{self.log}")
            time.sleep(2)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


async def _one(client: httpx.AsyncClient, base: str, body: dict, rec: dict,
               gold: str | None, on_request) -> None:
    t0 = time.monotonic()
    try:
        r = await client.post(f"{base}/v1/chat/completions", json=body)
        if r.status_code == 200:
            tts = r.json()["tts"]
            answer = tts["answer"]
            rec.update(error=None, tokens=tts["tokens_generated"], answer=answer,
                       queue_s=tts["queue_s"], inference_s=tts["latency_s"],
                       correct=None if gold is None else bool(answer) and is_equivalent(
                           answer, gold))
        else:
            rec.update(error=f"HTTP {r.status_code}: {r.text[:300]}")
    except httpx.HTTPError as e:
        rec.update(error=f"{type(e).__name__}: {e}")
    rec["latency_s"] = time.monotonic() - t0
    rec.setdefault("tokens", 0)
    rec.setdefault("correct", None)
    rec.setdefault("queue_s", 0.0)
    rec.setdefault("inference_s", rec["latency_s"])
    rec["end_s"] = rec["arrival_s"] + rec["latency_s"]
    if on_request is not None:
        on_request(rec)


async def _send(base: str, tts: dict, max_tokens: int, problems: list[Problem],
                gaps: list[float], first_index: int, on_request) -> list[dict]:
    recs, tasks = [], []
    async with httpx.AsyncClient(timeout=None,
                                 limits=httpx.Limits(max_connections=1000)) as client:
        t0 = time.monotonic()
        for k, gap in enumerate(gaps):
            await asyncio.sleep(gap)
            prob = problems[(first_index + k) % len(problems)]
            body = {"model": "fasttts", "max_tokens": max_tokens, "seed": first_index + k,
                    "messages": [{"role": "user", "content": prob.problem}], "tts": tts}
            rec = {"index": first_index + k, "problem_id": prob.id,
                   "arrival_s": time.monotonic() - t0}
            recs.append(rec)
            tasks.append(asyncio.create_task(_one(client, base, body, rec, prob.answer,
                                                  on_request)))
        await asyncio.gather(*tasks)
    return recs


def send_poisson(base: str, tts: dict, rate: float, count: int, problems: list[Problem],
                 max_tokens: int, seed: int, first_index: int = 0,
                 on_request=None) -> list[dict]:
    """Send `count` chat requests with the `tts` options to the server at `base`, with
    exponential gaps of mean 1 / `rate` s (seeded; the first after one gap, or at once when
    `rate` is inf: all together), problems in order from `first_index`; wait for every answer
    (`on_request(record)` as each ends). Returns one record per request (module docstring)."""
    rng = random.Random(seed)
    gaps = [0.0 if rate == float("inf") else rng.expovariate(rate) for _ in range(count)]
    return asyncio.run(_send(base, tts, max_tokens, problems, gaps, first_index, on_request))


def drain_state(base: str) -> dict[str, float]:
    """The server's running requests and sequences and KV blocks in use (/metrics)."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {m[1]: float(m[2]) for m in re.finditer(rf"^({'|'.join(_HELD)}) (\S+)$", text, re.M)}
