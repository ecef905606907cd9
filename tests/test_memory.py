"""Memory that a request allocates is given back when it ends (simulated backend): nothing
per request outlives it, in the library (`FastTTS.solve`) or the server (`fasttts serve`
under load, `benchmarks/memory_load.py`)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc

import pytest

from fasttts.api import FastTTS
from fasttts.backends.base import ScoreRequest
from fasttts.backends.sim import build_sim
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig

MiB = 1 << 20


def _cfg(**search) -> RunConfig:
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     sim=SimConfig(hardware="rtx4090"), search=SearchConfig(**search))


def _traced_growth(run) -> int:
    """Bytes still allocated after `run()` that were not before it (tracemalloc, after gc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_simulated_verifier_keeps_no_step_between_calls():
    _, verifier = build_sim(_cfg())
    problem, calls = "What is 6 times 7?", iter(range(10**6))

    def score_many():
        for i in range(2000):  # 2000 requests, 8 steps of 200 characters each, none repeated
            call = next(calls)
            steps = tuple(f"\u2713 step {call}.{k} " + "x" * 190 + "\n\n" for k in range(8))
            verifier.score([ScoreRequest(problem, steps, 0)])

    score_many()  # the prefix cache's tables fill once
    assert _traced_growth(score_many) < 256 << 10  # was 17 MiB: every step's token ids kept


@pytest.mark.slow
def test_200_solves_keep_under_4_mib():
    with FastTTS(_cfg(method="beam_search", n=4, beam_width=2, max_tokens=256)) as tts:
        for i in range(10):  # warm-up: the KV caches' tables fill
            tts.solve(f"warm-up {i}: what is {i} + 1?", f"w{i}")

        def solve_200():
            for i in range(200):
                tts.solve(f"Problem {i}: what is {i} times 7?", f"p{i}")

        grew = _traced_growth(solve_200)
    print(f"200 FastTTS.solve calls under tracemalloc: {grew / MiB:+.2f} MiB")
    assert grew < 4 * MiB  # was 11.8 MiB, growing without end


@pytest.mark.slow
def test_the_server_gives_its_memory_back_after_a_load():
    out = subprocess.run([sys.executable, "benchmarks/memory_load.py", "--clients", "16",
                          "--duration", "30", "--settle", "2", "--max-growth-mib", "40"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stdout + out.stderr  # was +81 MiB after 40 s, kept
    assert " 0 failed" in out.stdout
