"""Serving a stream of requests on the simulated device, on its virtual clock.

SART's evaluation (section 5.1) serves requests that arrive as a Poisson process and reports
their end-to-end latency (queueing + inference). `fasttts serve` does that in wall-clock time;
on the simulator the arrivals must follow the device's virtual clock instead, so this module
runs the server's pieces in one thread: one driver loop (`fasttts.runtime.driver.Driver`) over
the simulated engines, the server's admission rule (`fasttts.serve.admission`, SART
Algorithm 1 lines 11-19) after every turn, and each admitted request's search as a task of the
driver, exactly as `fasttts.serve.hub` runs them. When nothing runs, the clock jumps to the next
arrival.

A request's record: its arrival, admission and end on the virtual clock (s), its latency
(end - arrival), queueing (admission - arrival) and inference (end - admission) time, tokens
generated, answer and correctness (`fasttts.eval.metrics.problem_record`), or its error.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from fasttts.eval.datasets import Problem
from fasttts.eval.metrics import percentile, problem_record
from fasttts.runtime.driver import Driver, Task
from fasttts.runtime.loop import SearchRunner
from fasttts.serve.admission import BatchState, admits

__all__ = ["Request", "latency_row", "poisson_arrivals", "serve_virtual"]


@dataclass(frozen=True)
class Request:
    """One arriving request: its index, arrival time (s) and problem."""

    index: int
    arrival_s: float
    problem: Problem


def poisson_arrivals(rate: float, count: int, seed: int) -> list[float]:
    """`count` arrival times (s) of a Poisson process of `rate` requests/s (exponential gaps
    from `random.Random(seed)`), from time 0.

    Raises:
        ValueError: rate <= 0 or count < 0.
    """
    if not rate > 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate}")
    if count < 0:
        raise ValueError(f"request count must be >= 0, got {count}")
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def _record(req: Request, started: float, ended: float, task: Task) -> dict:
    """The record of a finished request (module docstring)."""
    rec = {"index": req.index, "problem_id": req.problem.id, "arrival_s": req.arrival_s,
           "start_s": started, "end_s": ended, "latency_s": ended - req.arrival_s,
           "queue_s": started - req.arrival_s, "inference_s": ended - started}
    if task.error is not None:
        return rec | {"error": f"{type(task.error).__name__}: {task.error}", "tokens": 0,
                      "answer": None, "correct": None}
    pr = problem_record(task.result, req.problem.answer, numeric=False)
    return rec | {"error": None, "tokens": pr["tokens_generated"], "answer": pr["answer"],
                  "correct": pr["correct"]["answer"] if pr["correct"] else None,
                  "num_completions": pr["num_completions"],
                  "verifier_s": pr["verifier_time_s"]}


def serve_virtual(tts, search, requests: list[Request], max_active: int = 256,
                  on_request: Callable[[dict], None] | None = None) -> tuple[list[dict], dict]:
    """Serve `requests` on the simulated engines of `tts` (a `fasttts.api.FastTTS` on the
    sim backend) with the search `search` (a SearchConfig), on the virtual clock.

    Args:
        tts: the engines (fresh ones per call keep rows independent).
        search: every request's search.
        requests: the arrivals (any order).
        max_active: the safety cap on requests searching at once (as `fasttts serve`'s).
        on_request: called with each finished request's record.

    Returns:
        (records in arrival order, engine totals: "kv_blocks_after" (blocks still held after
        the drain), "preemptions" (sequences preempted for KV blocks), "verifier_share"
        (verifier seconds / engine seconds), "engine_steps").

    Raises:
        ValueError: `tts` does not run on the simulator (its clock is not virtual).
    """
    gen = tts.generator
    if gen.clock_kind != "simulated":
        raise ValueError("serve_virtual needs the simulated backend (a virtual clock); serve "
                         "real engines with `fasttts serve` and a client")
    driver, clock = Driver(gen, tts.verifier), gen.engine.clock
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    queue: deque[Request] = deque()
    active: dict[int, float] = {}
    records: list[dict] = []

    def finished(req: Request, task: Task) -> None:
        rec = _record(req, active.pop(req.index), gen.now(), task)
        records.append(rec)
        if on_request is not None:
            on_request(rec)

    while pending or queue or driver.tasks:
        while pending and pending[0].arrival_s <= gen.now():
            queue.append(pending.popleft())
        incoming = 0
        while queue and admits(BatchState(gen.max_num_seqs, gen.num_unfinished(),
                                          gen.num_waiting(), incoming, len(active), max_active)):
            req = queue.popleft()
            active[req.index] = gen.now()
            runner = SearchRunner(driver.info, tts.verifier, search,
                                  tts.config.verifier.agg_strategy, tts.config.runtime)
            driver.add(Task(runner.search(req.problem.problem, req.problem.id),
                            prefix=f"r{req.index}::",
                            on_done=lambda task, req=req: finished(req, task)))
            incoming += search.n
        if not driver.advance() and pending:
            clock.advance(max(0.0, pending[0].arrival_s - gen.now()))
    busy, cache = driver.step_time_s + driver.score_time_s, gen.cache_stats()
    return sorted(records, key=lambda r: r["index"]), {
        "kv_blocks_after": cache.num_blocks_used, "preemptions": cache.num_preemptions,
        "verifier_share": driver.score_time_s / busy if busy else 0.0,
        "engine_steps": driver.num_steps}


def latency_row(records: list[dict]) -> dict:
    """The latency summary of one row's records (SART Fig. 5's measures): P50/P90/P97/P99
    end-to-end latency (s), mean queueing and inference time (s), accuracy (fraction of
    graded requests), mean tokens per request, and the requests that failed."""
    ok = [r for r in records if r["error"] is None]
    lat = [r["latency_s"] for r in ok]
    graded = [r for r in ok if r["correct"] is not None]

    def pct(q: float) -> float | None:
        return percentile(lat, q) if lat else None

    return {"requests": len(records), "p50_s": pct(50), "p90_s": pct(90), "p97_s": pct(97),
            "p99_s": pct(99),
            "queue_s": sum(r["queue_s"] for r in ok) / len(ok) if ok else None,
            "inference_s": sum(r["inference_s"] for r in ok) / len(ok) if ok else None,
            "accuracy": sum(bool(r["correct"]) for r in graded) / len(graded) if graded else None,
            "tokens_per_request": sum(r["tokens"] for r in ok) / len(ok) if ok else None,
            "failed": len(records) - len(ok)}
