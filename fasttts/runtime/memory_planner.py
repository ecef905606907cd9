"""Asymmetric multi-model memory allocation (FastTTS section 4.3): split a KV-cache budget
between the verifier and the generator by a roofline model of the whole search iteration.

Roofline-guided KV allocation (section 4.3.1). For N requests (beams), verifier input length
S, generation length S_dec and mean cached length S_cache during decoding, the iteration takes

    T_tot(B_pre, B_dec) = ceil(N / B_pre) * T_roof(verifier prefill of B_pre x S tokens)
                        + ceil(N / B_dec) * S_dec * T_roof(generator decode of B_dec sequences
                                                           at context S_cache)

subject to B_pre * KVBytes_ver(1, S) + B_dec * KVBytes_gen(1, S_dec) <= M. Latency falls
monotonically with memory, so the optimum uses the whole budget: for every feasible integer
B_pre the largest B_dec that fits is taken, T_tot evaluated, and the minimum kept; ties go to
the larger B_dec (decoding is the more memory-sensitive stage). T_roof is
`fasttts.perf.roofline.step_time` on the hardware spec.

Offloading (section 4.3.2). When M is very small, the inactive model's KV cache can be moved
to host memory between phases, so each model alone may use all of M:
B_pre <= M / KVBytes_ver(1, S), B_dec <= M / KVBytes_gen(1, S_dec); this costs moving up to M
bytes out and M bytes in at each of the two phase switches of an iteration, 4 M / host
bandwidth per iteration (times D, the iterations, with the reuse term below). The planner
picks whichever of the coupled and the offload plan is faster. Devices whose memory is host
memory (CPUs) have no host link: offloading does not apply there.

Prefix reuse across iterations (an extension of T_tot; `PlanInput.iterations` > 1). T_tot
charges each path's S tokens once to the verifier, as if every iteration found the previous
iteration's KV in the prefix cache. A search runs D generate -> verify iterations, and each
resubmits every path whole (prompt and all earlier steps) to both engines; only what a cache
still holds from the last iteration is not recomputed. A model whose cache keeps nothing
recomputes every path's prefix at every iteration, R = T_roof(prefill of N * (S - step_len)
* D / 2 tokens) (the prefix grows about linearly over the D iterations; the search-and-learn
order sends siblings N / beam_width requests apart, so a small cache does not even keep what
siblings share). A cache of C bytes keeps the most-shared part of the tree (vLLM frees a
finished request's blocks tail first, so the trunk that many paths share stays and the
unshared tails go), and the recomputed share falls about exponentially in C:

    T_reuse = sum over the two models of rho * R * exp(-C / (kappa * W_bytes)),

W_bytes being one iteration's tree (N paths, shared prefixes counted once: W tokens) in the
model's KV. kappa (the cache, as a share of the tree, that cuts the misses by e) and rho (the
recompute a model with no cache really pays, per R: a generator whose running batch does not
fit also loses it to preemption) are fitted per model role (`HitModel`) on simulated sweeps
of the split on one data set and checked on another (`benchmarks/kv_split_sweep.py`).
Memory beyond the two batches' needs is split where the two caches save equal time per byte
(the costs are convex, so the split has one optimum, in closed form: `_split_left`). The batch
needs also count the tree: B sequences of one iteration hold min(B * KVBytes(1, S), W *
KVBytes/token). W is estimated from the search shape (`tree_tokens`) or measured by the
runtime (`PlanInput.tree_len`); the generator's batch holds at most its measured peak of the
tree (`PlanInput.decode_tree_tokens`: steps that end apart free their blocks). With D = 1
(the default) both terms are the paper's and `T_reuse` = 0; a verifier that reads no
prefix cache (whole-path scoring) pays rho * R whatever its size.

A verifier run in transformers (Skywork's value head, `PlanInput.verifier_paged` False) keeps
a store of whole prefixes, least recently used first, not the paged cache: each stored path
holds all its tokens, and in the search-and-learn order a parent survives until its children
are scored only in a store of about half an iteration's paths. Its recompute is
rho * R * exp(-(x / x0)^shape), x = C / (N * S * KVBytes/token) (`StoreHitModel`, fitted on
replays of the simulated store, which runs the product's eviction), S-shaped in C; the split
of what the batches leave is then the least summed recompute of a search over C
(`_least_recompute`).

The static split of the search-and-learn baseline (the generator gets a fixed share of M) is
evaluated by the same T_tot, for comparison.

This module is the planning math only; the workload of a run's configuration (its search's
prefix sharing, its verifier's cache reads) is `fasttts.runtime.plan_workload`, and the
explanation `fasttts plan` prints is `fasttts.cli.plan_explain`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fasttts.perf.roofline import StepShape, step_time
from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["GENERATOR_HIT", "PLAN_STEP_LEN", "VERIFIER_HIT", "VERIFIER_STORE_HIT", "HitModel",
           "MemoryPlan", "ModelSide", "PlanError", "PlanInput", "StoreHitModel",
           "generator_only_plan", "iteration_time", "model_sides", "offload_plan", "plan_memory", "plan_within",
           "static_plan"]


class PlanError(ValueError):
    """The budget cannot hold one verifier and one generator sequence (and offloading does not
    apply or is off)."""


#: Tokens of a path's newest step, the part siblings do not share (the simulated and real
#: workloads' median steps are 34-90 tokens).
PLAN_STEP_LEN = 64


#: The generator's share of the KV memory in the search-and-learn baseline's static split
#: (`static_plan`).
STATIC_GENERATOR_SHARE = 0.5


@dataclass(frozen=True)
class HitModel:
    """How one model's recompute falls with its KV cache (module docstring, T_reuse).

    Attributes:
        kappa: the cache that cuts the recomputed share by e, as a share of the tree W (1).
        rho: the recompute a cache of nothing really costs, per R (1).
    """

    kappa: float
    rho: float


@dataclass(frozen=True)
class StoreHitModel:
    """How the recompute of a store of whole prefixes, evicted least recently used first,
    falls with its size (Skywork's transformers store, `fasttts.verifiers.skywork`; module
    docstring, T_reuse): rho * R * exp(-(x / x0)^shape), x = C / (N * S * KV bytes per token),
    the store as a share of one iteration's paths held whole.

    Unlike the paged cache, such a store keeps each scored path whole (siblings' shared
    prefixes are copies) and, in the search-and-learn order (siblings N / beam_width requests
    apart), loses a parent before its first child is scored unless it holds about half an
    iteration's paths: its recompute stays near R until x ~ 0.1, then falls steeply, and is
    ~0 only past x ~ 1.

    Attributes:
        x0: the x at which the recompute is R / e (1).
        shape: how steeply it falls around x0 (1; 1 = exponential).
        rho: the recompute a store of nothing really costs, per R (1).
    """

    x0: float
    shape: float
    rho: float


#: Fitted by `benchmarks/kv_split_sweep.py --fit` on simulated RTX 4090 sweeps of the KV split
#: (beam search n = 512, Qwen2.5-Math-7B + Skywork-PRM-1.5B, MATH-500 problem 1); checked out
#: of sample on AIME 2024 problem 1 (docs/verifier-pricing.md, "The KV split").
VERIFIER_HIT = HitModel(kappa=0.153, rho=2.54)
GENERATOR_HIT = HitModel(kappa=0.159, rho=9.64)

#: Fitted by `benchmarks/kv_split_sweep.py --store-curve ... --fit` on the simulated store's
#: recompute (RTX 4090, beam search n = 256 and 512, Qwen2.5-Math-7B + Skywork-PRM-1.5B,
#: MATH-500 problem 1); checked out of sample on AIME 2024 problem 1 (docs/verifier-pricing.md,
#: "Skywork's store of whole prefixes").
VERIFIER_STORE_HIT = StoreHitModel(x0=0.288, shape=1.71, rho=2.41)


@dataclass(frozen=True)
class PlanInput:
    """The workload and machine the planner sizes for.

    Attributes:
        memory_bytes: M, the KV-cache budget shared by the two models (bytes).
        generator, verifier: the models' shapes.
        hardware: the roofline (P, BW) and host link.
        num_requests: N, beams per iteration.
        verifier_len: S, tokens of one verifier input.
        decode_len: S_dec, tokens a generator sequence generates (and holds in its KV).
        decode_peak_len: tokens per sequence at the generator's KV peak when a batch holds
            all N sequences at once and they end at lengths of a distribution (vLLM frees a
            finished sequence's blocks at once, so the peak is below every sequence holding
            S_dec; `fasttts.runtime.plan_workload.uniform_peak_len`). A smaller batch
            refills its freed slots with new sequences and is sized at S_dec. None = S_dec
            (all sequences reach S_dec together: the paper's accounting).
        cache_len: mean cached length during decoding (tokens); default S_dec / 2.
        shared_len: tokens of each sequence (verifier input and generator sequence) that it
            shares with other sequences of the iteration through the prefix cache (tokens;
            0 = the paper's accounting, every sequence holds all its tokens).
        share: sequences that share those tokens (beam search: the beam_width siblings of
            one parent), so each holds shared_len / share of them.
        verifier_floor, generator_floor: bytes each KV cache takes however small its batch
            is (an engine must hold one max_model_len sequence); the coupled constraint becomes
            max(B_pre * KVBytes_ver, verifier_floor) + max(B_dec * KVBytes_gen,
            generator_floor) <= M. 0 = the paper's.
        iterations: D, generate -> verify iterations a path goes through (1 = one pass, the
            paper's T_tot with no reuse term; module docstring).
        step_len: tokens one iteration adds to a path (the tree's level height).
        lineages: distinct paths the search keeps at every depth of the tree, at least
            (`fasttts.runtime.plan_workload.search_shape`: beam search N / (4 beam_width),
            DVTS its N / beam_width subtrees, independent samples N); with `share` it sets the estimated tree size W.
        tree_len: W / N measured by the runtime (unique tokens of one iteration's tree per
            path); None = estimate it (`tree_tokens`).
        decode_tree_len: W_dec / N measured by the runtime (the generator's KV peak of one
            iteration's batch of all N paths, per path: `decode_tree_tokens`); None = W / N.
        verifier_reuse: the verifier reads its prefix cache (incremental verification or
            the judge); False = it prefills every path whole each iteration, so its cache saves
            nothing: its recompute term is R whatever its size (h = 0).
        verifier_paged: the verifier's cache is vLLM's paged prefix cache (blocks shared
            between paths, evicted tail first: `VERIFIER_HIT`); False = Skywork's
            transformers store of whole prefixes, least recently used first
            (`fasttts.verifiers.skywork`; `VERIFIER_STORE_HIT`, module docstring).
    """

    memory_bytes: int
    generator: ModelSpec
    verifier: ModelSpec
    hardware: HardwareSpec
    num_requests: int
    verifier_len: int
    decode_len: int
    decode_peak_len: int | None = None
    cache_len: int | None = None
    shared_len: int = 0
    share: int = 1
    verifier_floor: int = 0
    generator_floor: int = 0
    iterations: int = 1
    step_len: int = PLAN_STEP_LEN
    lineages: int = 1
    tree_len: int | None = None
    decode_tree_len: int | None = None
    verifier_reuse: bool = True
    verifier_paged: bool = True

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "num_requests", "verifier_len", "decode_len", "share",
                     "iterations", "step_len", "lineages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.decode_peak_len is not None and not 1 <= self.decode_peak_len <= self.decode_len:
            raise ValueError(f"decode_peak_len must be within 1..S_dec = {self.decode_len}, "
                             f"got {self.decode_peak_len}")
        longest = min(self.verifier_len, self.decode_peak_len or self.decode_len)
        if not 0 <= self.shared_len <= longest:
            raise ValueError(f"shared_len must be within 0..min(S, S_dec, decode_peak_len) = "
                             f"{longest}, got {self.shared_len}")
        if self.cache_len is not None and self.cache_len < 1:
            raise ValueError(f"cache_len must be >= 1 token, got {self.cache_len}")
        for name in ("tree_len", "decode_tree_len"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 token, got {getattr(self, name)}")

    def _held(self, length: int) -> int:
        """Tokens one sequence of `length` tokens holds in the KV cache (its shared tokens
        counted once per `share` sequences)."""
        return length - self.shared_len + math.ceil(self.shared_len / self.share)

    @property
    def kv_ver(self) -> int:
        """KVBytes_ver(1, S): one verifier sequence's KV (bytes), shared tokens split."""
        return self._held(self.verifier_len) * self.verifier.kv_bytes_per_token

    @property
    def kv_gen(self) -> int:
        """KVBytes_gen(1, S_dec): one generator sequence's KV (bytes), shared tokens split."""
        return self._held(self.decode_len) * self.generator.kv_bytes_per_token

    @property
    def kv_gen_all(self) -> int:
        """KV bytes per generator sequence when the batch holds all N at once: at
        `decode_peak_len` when set, else `kv_gen`."""
        length = self.decode_peak_len or self.decode_len
        return self._held(length) * self.generator.kv_bytes_per_token

    @property
    def s_cache(self) -> int:
        """S_cache: the mean cached length while decoding (tokens), `cache_len` or S_dec / 2."""
        return self.cache_len if self.cache_len is not None else self.decode_len // 2

    @property
    def tree_tokens(self) -> int:
        """W: unique tokens of one iteration's search tree, all N paths of S tokens with their
        shared prefixes counted once (tokens). `tree_len` * N when measured. One pass: N
        paths each holding `_held(S)`. Otherwise the tree has D = `iterations` levels of
        `step_len` tokens (the top level takes what is left of S, the prompt included);
        level k above the leaves has min(N, max(lineages, ceil(N / share^k))) nodes."""
        n = self.num_requests
        if self.tree_len is not None:
            return n * self.tree_len
        if self.iterations == 1:
            return n * self._held(self.verifier_len)
        total, nodes, top = 0, n, self.verifier_len - (self.iterations - 1) * self.step_len
        for k in range(self.iterations):
            height = self.step_len if k < self.iterations - 1 else max(1, top)
            total += min(n, max(self.lineages, nodes)) * height
            nodes = -(-nodes // self.share)
        return total

    @property
    def decode_tree_tokens(self) -> int:
        """W_dec: the most the generator's batch of all N sequences of one iteration holds
        (tokens). vLLM frees a finished sequence's own blocks at once while the prefix its
        siblings share stays, so steps that end apart hold less than the whole tree W at
        once: `decode_tree_len` * N as measured by the runtime (each iteration's newest level
        at the peak of its lengths, `fasttts.runtime.loop.SearchResult.decode_tree_tokens`),
        at most W; W itself when not measured. On simulated 7B searches (AIME 2024 problem
        60, n = 128 / 256 / 512) the measured W_dec was within -2 % to +15 % of the engine's
        peak of referenced blocks, the measured W 32-70 % above it, and no estimate from the
        search shape within 12 % at every n (docs/techniques.md, "Shared KV")."""
        tree = self.tree_tokens
        if self.decode_tree_len is None:
            return tree
        return min(tree, self.num_requests * self.decode_tree_len)

    def recompute_tokens(self) -> int:
        """Tokens each model recomputes over the search when its cache keeps nothing between
        iterations: every path's prefix at every iteration, N * (S - step_len) * D / 2
        (module docstring); 0 for one pass."""
        if self.iterations == 1:
            return 0
        prefix = max(0, self.verifier_len - self.step_len)
        return self.num_requests * prefix * self.iterations // 2


@dataclass(frozen=True)
class MemoryPlan:
    """A memory split and the batch caps that go with it.

    Attributes:
        b_pre: verifier batch (sequences per prefill pass).
        b_dec: generator decode batch (running sequences).
        verifier_kv_bytes, generator_kv_bytes: KV-cache sizes (bytes); they hold the batches
            and, in a coupled plan, share all of M (what the batches leave over is prefix
            cache).
        offload: the inactive model's KV cache is offloaded to host memory between phases.
        t_total: predicted search time (s): verifier + generator + recompute + transfer.
        t_verify, t_decode: the two terms of the paper's T_tot (s).
        t_offload: the transfer overhead (s), 0 without offloading.
        kind: "roofline", "offload", "static" or "fixed".
        t_recompute: prefix recomputation of both models (T_reuse, s; 0 for one pass).
        iterations: D, the iterations the plan's times cover.
    """

    b_pre: int
    b_dec: int
    verifier_kv_bytes: int
    generator_kv_bytes: int
    offload: bool
    t_total: float
    t_verify: float
    t_decode: float
    t_offload: float
    kind: str
    t_recompute: float = 0.0
    iterations: int = 1

    @property
    def t_offload_per_iteration(self) -> float:
        """The transfer overhead of one iteration, 4 M / host bandwidth (s): what an engine
        pays at each generate -> verify round; `t_offload` is D of them."""
        return self.t_offload / self.iterations

    def throughput(self, inp: PlanInput) -> float:
        """Predicted generated tokens per second of the search (N * S_dec / T_tot)."""
        return inp.num_requests * inp.decode_len / self.t_total


def iteration_time(inp: PlanInput, b_pre: int, b_dec: int) -> tuple[float, float]:
    """(verifier time, generator time) of one iteration at batches (b_pre, b_dec), seconds
    (the two terms of T_tot; module docstring)."""
    n, hw = inp.num_requests, inp.hardware
    pre = step_time(inp.verifier, hw, StepShape.uniform(b_pre, inp.verifier_len, 0, logits=False))
    dec = step_time(inp.generator, hw, StepShape.decode(b_dec, inp.s_cache))
    return math.ceil(n / b_pre) * pre, math.ceil(n / b_dec) * inp.decode_len * dec


class ModelSide:
    """One model's side of the plan: its batch needs and its reuse term.

    Attributes:
        per_seq: KV bytes of one sequence (shared prefix split, `PlanInput.kv_ver` / `kv_gen`).
        per_seq_all: KV bytes per sequence of a batch of all `n` sequences (`kv_gen_all`:
            sequences that start together and end apart peak below `per_seq`).
        floor: bytes its KV cache takes however small its batch (`PlanInput.verifier_floor`).
        reuse: its cache is read across iterations (the verifier: `verifier_reuse`).
        paged: its cache is vLLM's paged prefix cache (`hit` a `HitModel`); False = a store
            of whole prefixes (`hit` a `StoreHitModel`; the verifier: `verifier_paged`).
        tree: bytes of one iteration's search tree W in its KV (bytes).
        held: the most a batch holds (bytes): the tree, the generator's at its decode peak
            (`PlanInput.decode_tree_tokens`).
        raw: R, the recompute of every path's prefix at every iteration at the per-token
            time of one `length`-token prefill (s; 0 for one pass).
        full: rho * R, its recompute over the search when its cache keeps nothing (s).
        scale: the cache that cuts its recompute by e (bytes): kappa * tree (paged), x0 * N *
            S * KV bytes per token (a store).
        shape: the exponent of cache / scale (1 for the paged cache).
    """

    def __init__(self, inp: PlanInput, model: ModelSpec, per_seq: int, floor: int,
                 length: int, hit: HitModel | StoreHitModel, reuse: bool = True,
                 per_seq_all: int | None = None, held_tokens: int | None = None):
        self.per_seq, self.floor, self.reuse = per_seq, floor, reuse
        self.n, self.per_seq_all = inp.num_requests, per_seq_all or per_seq
        self.tree = inp.tree_tokens * model.kv_bytes_per_token
        self.held = (held_tokens or inp.tree_tokens) * model.kv_bytes_per_token
        self.paged = isinstance(hit, HitModel)
        if self.paged:
            self.scale, self.shape = hit.kappa * self.tree, 1.0
        else:
            whole = inp.num_requests * inp.verifier_len * model.kv_bytes_per_token
            self.scale, self.shape = hit.x0 * whole, hit.shape
        tokens = inp.recompute_tokens()
        self.raw = 0.0
        if tokens:
            per_token = step_time(model, inp.hardware,
                                  StepShape.uniform(1, length, 0, logits=False)) / length
            self.raw = tokens * per_token
        self.full = hit.rho * self.raw

    def need(self, batch: int) -> int:
        """Bytes a batch of `batch` sequences holds (`held` at most), at least the floor."""
        per = self.per_seq_all if batch >= self.n else self.per_seq
        return max(min(batch * per, self.held), self.floor)

    @property
    def saves(self) -> bool:
        """A larger cache saves it time (it recomputes prefixes and reads its cache)."""
        return bool(self.full) and self.reuse

    def recompute(self, cache: int) -> float:
        """rho * R * exp(-(cache / scale)^shape) for a KV cache of `cache` bytes (s); rho * R
        when the cache is not read (module docstring)."""
        if not self.saves:
            return self.full
        return self.full * math.exp(-(cache / self.scale) ** self.shape)

    def recompute_many(self, caches):
        """`recompute` of each size of a numpy array of KV cache sizes (bytes) -> seconds."""
        if not self.saves:
            return np.full(len(caches), self.full)
        return self.full * np.exp(-(caches / self.scale) ** self.shape)

    def cap(self, room: int, limit: int) -> int:
        """Largest batch <= limit whose need fits `room` bytes (0 if none)."""
        if self.need(1) > room:
            return 0
        if self.held <= room or (limit >= self.n and self.need(self.n) <= room):
            return limit
        return min(limit, self.n - 1, room // self.per_seq)


def model_sides(inp: PlanInput) -> tuple[ModelSide, ModelSide]:
    """The (verifier, generator) sides of the plan of `inp`."""
    return (ModelSide(inp, inp.verifier, inp.kv_ver, inp.verifier_floor, inp.verifier_len,
                      VERIFIER_HIT if inp.verifier_paged else VERIFIER_STORE_HIT,
                      inp.verifier_reuse),
            ModelSide(inp, inp.generator, inp.kv_gen, inp.generator_floor, inp.verifier_len,
                      GENERATOR_HIT, per_seq_all=inp.kv_gen_all,
                      held_tokens=inp.decode_tree_tokens))


def _split_left(ver: ModelSide, gen: ModelSide):
    """The function (verifier need, generator need, left) -> KV sizes (verifier, generator)
    that gives the `left` bytes beyond the batches' needs where the two recompute terms save
    equal time per byte. With R_v e^(-v / a) + R_g e^(-g / b), v + g = T (the needs plus
    `left`), the optimum is v = (ln(R_v b / (R_g a)) + T / b) / (1 / a + 1 / b), clipped to
    the needs (the sum is convex in v, so clipping keeps it optimal). A model whose cache saves
    nothing gets only its need; without any reuse term all of it goes to the generator (the
    paper's tie rule). A verifier with a store of whole prefixes (`ModelSide.paged` False: its
    recompute is S-shaped in its size, so the sum is not convex) gets the v of least summed
    recompute on `_least_recompute`'s grid."""

    searches: dict[int, object] = {}  # total -> its `_least_recompute`

    def split(ver_need: int, gen_need: int, left: int) -> tuple[int, int]:
        if not ver.saves:
            return ver_need, gen_need + left
        total = ver_need + gen_need + left
        if not ver.paged:
            if total not in searches:
                searches[total] = _least_recompute(ver, gen, total)
            v = searches[total](ver_need, ver_need + left)
            return v, total - v
        if not gen.saves:
            return ver_need + left, gen_need
        a, b = ver.scale, gen.scale
        v = (math.log(ver.full * b / (gen.full * a)) + total / b) / (1 / a + 1 / b)
        v = min(max(int(v), ver_need), ver_need + left)
        return v, total - v

    return split


#: Sizes of the grid over [0, total] on which `_least_recompute` looks for the verifier's
#: share (a resolution of total / SPLIT_GRID bytes: 0.9 MiB of 3.5 GiB).
SPLIT_GRID = 4096


def _least_recompute(ver: ModelSide, gen: ModelSide, total: int):
    """The function (lo, hi) -> the verifier size v in [lo, hi] (bytes) that minimises
    ver.recompute(v) + gen.recompute(total - v), over a grid of `SPLIT_GRID` + 1 sizes of
    [0, total] (evaluated once) and the two ends. Ties go to the smaller v (the generator: the
    paper's tie rule)."""
    grid = np.linspace(0, total, SPLIT_GRID + 1).astype(np.int64)
    cost = ver.recompute_many(grid) + gen.recompute_many(total - grid)

    def least(lo: int, hi: int) -> int:
        i, j = int(np.searchsorted(grid, lo)), int(np.searchsorted(grid, hi, side="right"))
        ends = {lo: ver.recompute(lo) + gen.recompute(total - lo),
                hi: ver.recompute(hi) + gen.recompute(total - hi)}
        if j > i:
            k = i + int(np.argmin(cost[i:j]))
            ends[int(grid[k])] = float(cost[k])
        return min(ends, key=lambda v: (ends[v], v))

    return least


def _batches(n: int, cap: int) -> list[int]:
    """The smallest batch of each batch count ceil(n / b), for b in 1..cap, ascending: within a
    count, a larger batch costs no less time (same passes, larger each) and more memory."""
    out, b = [], 1
    while b <= cap:
        out.append(b)
        passes = -(-n // b)
        if passes == 1:
            break
        b = -(-n // (passes - 1))
    return out


def _plan(inp: PlanInput, b_pre: int, b_dec: int, kind: str, ver_bytes: int, gen_bytes: int,
          overhead: float = 0.0) -> MemoryPlan:
    tv, tg = iteration_time(inp, b_pre, b_dec)
    ver, gen = model_sides(inp)
    tr = ver.recompute(ver_bytes) + gen.recompute(gen_bytes)
    return MemoryPlan(b_pre, b_dec, ver_bytes, gen_bytes, kind == "offload",
                      tv + tg + tr + overhead, tv, tg, overhead, kind, tr, inp.iterations)


def _coupled(inp: PlanInput) -> MemoryPlan | None:
    """The fastest (B_pre, B_dec) under the coupled constraint, over every feasible pair (the
    paper's search, extended: the leftover memory is priced by the reuse term). Only the
    smallest batch of each batch count is tried (`_batches`), then, for B_dec, larger ones of
    that count as long as they tie (ties go to the larger B_dec)."""
    n, m = inp.num_requests, inp.memory_bytes
    ver, gen = model_sides(inp)
    cap_pre = ver.cap(m - gen.need(1), n)
    if cap_pre < 1:
        return None
    hw, split = inp.hardware, _split_left(ver, gen)
    dec_step: dict[int, float] = {}

    def t_dec(b: int) -> float:
        if b not in dec_step:
            dec_step[b] = (-(-n // b) * inp.decode_len
                           * step_time(inp.generator, hw, StepShape.decode(b, inp.s_cache)))
        return dec_step[b]

    counts = _batches(n, n)
    ends = [nxt - 1 for nxt in counts[1:]] + [n]
    best = None
    for b_pre in _batches(n, cap_pre):
        ver_need = ver.need(b_pre)
        room = m - ver_need
        cap_dec = gen.cap(room, n)
        t_pre = -(-n // b_pre) * step_time(
            inp.verifier, hw, StepShape.uniform(b_pre, inp.verifier_len, 0, logits=False))

        def total(b_dec: int) -> float:
            gen_need = gen.need(b_dec)
            v, g = split(ver_need, gen_need, room - gen_need)
            return t_pre + t_dec(b_dec) + ver.recompute(v) + gen.recompute(g)

        for b_dec, end in zip(counts, ends):
            if b_dec > cap_dec:
                break
            if best is not None and t_pre + t_dec(b_dec) > best[0][0]:
                continue  # the reuse term only adds: this pair cannot win
            t = total(b_dec)
            # a larger batch of the same count ties only if its decode time does
            while b_dec < min(end, cap_dec) and t_dec(b_dec + 1) == t_dec(b_dec) \
                    and total(b_dec + 1) == t:
                b_dec += 1
            key = (t, -b_dec)
            if best is None or key < best[0]:
                best = (key, b_pre, b_dec)
    _, b_pre, b_dec = best
    ver_need, gen_need = ver.need(b_pre), gen.need(b_dec)
    v, g = split(ver_need, gen_need, m - ver_need - gen_need)
    return _plan(inp, b_pre, b_dec, "roofline", v, g)


def _fastest(count: int, cost) -> int:
    """The batch in 1..count with the least cost(batch); ties go to the larger batch."""
    return min(range(1, count + 1), key=lambda b: (cost(b), -b))


def plan_within(inp: PlanInput, generator_bytes: int, verifier_bytes: int) -> MemoryPlan | None:
    """The fastest batch caps for a KV split that stays as it is (re-planning without resizing
    the engines): each batch as large as its cache holds (`ModelSide.cap`, at most N). The two
    terms of T_tot then depend on one batch each and the reuse term on neither, so each is
    minimised on its own (ties to the larger batch). Kind "fixed".

    Returns:
        The plan, or None when a share cannot hold one sequence.
    """
    n = inp.num_requests
    ver, gen = model_sides(inp)
    cap_pre = ver.cap(verifier_bytes, n)
    cap_dec = gen.cap(generator_bytes, n)
    if cap_pre < 1 or cap_dec < 1:
        return None
    b_pre = _fastest(cap_pre, lambda b: iteration_time(inp, b, 1)[0])
    b_dec = _fastest(cap_dec, lambda b: iteration_time(inp, 1, b)[1])
    return _plan(inp, b_pre, b_dec, "fixed", verifier_bytes, generator_bytes)


def offload_plan(inp: PlanInput) -> MemoryPlan | None:
    """The offload plan (section 4.3.2): each model alone may use all of M while it runs,
    each batch as large as M holds, at 4 M / host bandwidth per iteration of transfers. None
    when the device has no host link (its memory is host memory) or M cannot hold one
    sequence of each model."""
    bw, m = inp.hardware.host_bandwidth, inp.memory_bytes
    ver, gen = model_sides(inp)
    b_pre = ver.cap(m, inp.num_requests)
    b_dec = gen.cap(m, inp.num_requests)
    if bw is None or b_pre < 1 or b_dec < 1:
        return None
    return _plan(inp, b_pre, b_dec, "offload", m, m, inp.iterations * 4 * m / bw)


def plan_memory(inp: PlanInput, allow_offload: bool = True) -> MemoryPlan:
    """The fastest split of `inp.memory_bytes` (module docstring; FastTTS section 4.3).

    Args:
        inp: budget, models, hardware, workload.
        allow_offload: also consider offloading the inactive model's KV cache (section 4.3.2).

    Raises:
        PlanError: no plan fits (the message gives the per-sequence sizes and the budget).
    """
    coupled = _coupled(inp)
    offload = offload_plan(inp) if allow_offload else None
    plans = [p for p in (coupled, offload) if p is not None]
    if not plans:
        why = (" and offloading does not apply (the device has no host link)"
               if allow_offload and inp.hardware.host_bandwidth is None else "")
        shared = (f", each with its shared prefix split {inp.share} ways"
                  if inp.shared_len and inp.share > 1 else "")
        raise PlanError(
            f"a KV budget of {inp.memory_bytes / 2**20:.1f} MiB cannot hold one verifier sequence "
            f"of {inp.verifier_len} tokens ({inp.kv_ver / 2**20:.1f} MiB) plus one generator "
            f"sequence of {inp.decode_len} tokens ({inp.kv_gen / 2**20:.1f} MiB)"
            f"{shared}{why}; "
            f"give more memory or shorter sequences")
    return min(plans, key=lambda p: (p.t_total, -p.b_dec))


def generator_only_plan(generator_kv_bytes: int, b_dec: int) -> MemoryPlan:
    """The plan of a run without a verifier model (the "confidence" kind scores steps from the
    generator's own log-probabilities): nothing to split or trade, so the generator gets all
    of the KV memory and its full batch; no times are predicted (kind "generator-only").

    Raises:
        PlanError: no memory or no batch.
    """
    if generator_kv_bytes <= 0 or b_dec < 1:
        raise PlanError(f"no generator memory ({generator_kv_bytes} bytes) or batch ({b_dec})")
    return MemoryPlan(b_pre=1, b_dec=b_dec, verifier_kv_bytes=0,
                      generator_kv_bytes=generator_kv_bytes, offload=False, t_total=0.0,
                      t_verify=0.0, t_decode=0.0, t_offload=0.0, kind="generator-only")


def static_plan(inp: PlanInput, generator_share: float = STATIC_GENERATOR_SHARE) -> MemoryPlan:
    """The baseline's static split: the generator gets `generator_share` of M, the verifier the
    rest, each batch as large as its share holds (at most N).

    Raises:
        PlanError: a share cannot hold one sequence.
    """
    gen_bytes = int(inp.memory_bytes * generator_share)
    ver, gen = model_sides(inp)
    b_dec = gen.cap(gen_bytes, inp.num_requests)
    b_pre = ver.cap(inp.memory_bytes - gen_bytes, inp.num_requests)
    if b_pre < 1 or b_dec < 1:
        raise PlanError(f"the static split ({generator_share:.2f} of {inp.memory_bytes / 2**20:.1f} "
                        f"MiB to the generator) cannot hold one sequence of each model")
    return _plan(inp, b_pre, b_dec, "static", inp.memory_bytes - gen_bytes, gen_bytes)
