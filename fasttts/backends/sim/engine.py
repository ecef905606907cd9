"""The simulated engine core: vLLM v1-style continuous batching on a virtual clock.

Each `step()`:
1. schedules the running sequences first (decode: 1 token; an unfinished prefill: its next
   chunk), within the token budget `max_num_batched_tokens`; when a sequence's new blocks do
   not fit, the running sequence with the lowest priority (largest `priority` value, latest
   arrival) is preempted by recompute: its blocks are freed and it goes back to waiting;
2. if nothing was preempted, admits waiting sequences in (priority, arrival) order while
   fewer than `max_num_seqs` run and budget is left, after a prefix-cache lookup (chunked
   prefill when the prompt exceeds the budget; without chunked prefill, as on vLLM's CPU
   build, admission stops at the first prompt whose uncached tokens exceed the budget left,
   as vLLM's scheduler does); admission stops at the first whose blocks do not fit;
   a sequence's full blocks enter the prefix cache when they are scheduled, before the step
   runs (vLLM v1's `allocate_slots` caches them then), so a prompt admitted later in the same
   step hits the blocks of one admitted before it (siblings sharing a prompt, a LookAhead
   request and the request it extends, when both are in one step);
3. advances the shared virtual clock by the roofline time of the batch it ran
   (`fasttts.perf.roofline.step_time`);
4. returns the sequences whose tokens are now all computed (the caller samples their next
   token, or finishes them).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from fasttts.backends.base import CacheStats
from fasttts.backends.sim.kv_cache import KVCacheManager, KVSeqState
from fasttts.perf.roofline import SeqWork, StepShape, step_time
from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["SimEngine", "SimSequence", "VirtualClock"]


class VirtualClock:
    """Simulated seconds, shared by the engines of one simulated device."""

    def __init__(self) -> None:
        self.t = 0.0

    def advance(self, dt: float) -> None:
        """Move the clock forward by `dt` >= 0 seconds."""
        self.t += dt


@dataclass(eq=False)
class SimSequence:
    """One sequence in the simulated engine.

    Attributes:
        seq_id: caller's id.
        token_ids: prompt + generated tokens (the caller appends sampled tokens).
        priority: lower runs first (vLLM convention).
        num_computed: tokens whose KV is in the cache.
        max_computed: most tokens ever computed (recompute accounting after preemption).
        num_cached_tokens: tokens found in the prefix cache at first admission.
        seeded: sampled with the request's own random generator (a seed and a temperature
            above 0), which vLLM samples one request at a time (`fasttts.perf.roofline`).
    """

    seq_id: str
    token_ids: list[int]
    priority: int = 0
    arrival: int = 0
    num_computed: int = 0
    max_computed: int = 0
    num_cached_tokens: int | None = None
    kv: KVSeqState = field(default_factory=KVSeqState)
    running: bool = False
    seeded: bool = False


class SimEngine:
    """Scheduler, paged KV cache and roofline clock of one simulated model.

    Args:
        model, hw: what runs and where (the roofline inputs).
        clock: the device's virtual clock (shared with the other engine on the device).
        num_blocks, block_size: KV-cache size in blocks of `block_size` tokens.
        max_num_seqs: most sequences running at once (the decode batch cap, B_dec; for a
            verifier engine, its batch B_pre).
        max_num_batched_tokens: token budget of one step (chunked prefill).
        max_model_len: longest sequence (tokens).
        logits: generation engine (True) or prefill-only verifier engine (False).
        chunked_prefill: split a prompt over steps when it exceeds the budget left (vLLM's
            default); False admits whole prompts only (fasttts's engines on the CPU build).

    Raises:
        ValueError: the KV cache cannot hold one sequence of `max_model_len` tokens (vLLM
            refuses to start in that case too), or a non-positive limit.
    """

    def __init__(self, model: ModelSpec, hw: HardwareSpec, clock: VirtualClock, num_blocks: int,
                 block_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, logits: bool = True, chunked_prefill: bool = True):
        if min(max_num_seqs, max_num_batched_tokens, max_model_len) < 1:
            raise ValueError("max_num_seqs, max_num_batched_tokens and max_model_len must be >= 1")
        need = -(-max_model_len // block_size)
        if num_blocks < need:
            raise ValueError(
                f"{model.name}: a KV cache of {num_blocks} blocks x {block_size} tokens "
                f"({num_blocks * block_size} tokens, {num_blocks * block_size * model.kv_bytes_per_token / 2**30:.2f} GiB) "
                f"cannot hold one sequence of max_model_len={max_model_len} tokens; give the "
                f"engine more memory or lower max_model_len")
        self.model, self.hw, self.clock = model, hw, clock
        self.kv = KVCacheManager(num_blocks, block_size)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.logits = logits
        self.chunked_prefill = chunked_prefill
        self.running: list[SimSequence] = []
        self._waiting: list[tuple[int, int, SimSequence]] = []
        self._arrivals = itertools.count()
        self.seqs: dict[str, SimSequence] = {}
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0
        self.num_steps = 0
        self.busy_time = 0.0
        self.step_log: list[StepShape] | None = None  # a list: every step's shape (calibration)

    def resize(self, kv_bytes: int) -> None:
        """Give the KV cache `kv_bytes` bytes (whole blocks), as rebuilding a real engine with
        another KV size would: the prefix cache starts empty.

        Raises:
            RuntimeError: sequences are still in the engine.
            ValueError: the new cache cannot hold one max_model_len sequence.
        """
        if self.seqs or self.running or self._waiting:
            raise RuntimeError(f"{self.model.name}: cannot resize the KV cache while "
                               f"{len(self.seqs)} sequences are in the engine")
        bs = self.kv.block_size
        num_blocks = kv_bytes // (bs * self.model.kv_bytes_per_token)
        if num_blocks < -(-self.max_model_len // bs):
            raise ValueError(f"{self.model.name}: {kv_bytes / 2**20:.1f} MiB of KV cache cannot "
                             f"hold one sequence of max_model_len={self.max_model_len} tokens")
        self.kv = KVCacheManager(num_blocks, bs, self.kv.enable_prefix_caching)

    def add(self, seq: SimSequence) -> None:
        """Queue a sequence (it keeps its `priority`; arrival order breaks ties)."""
        seq.arrival = next(self._arrivals)
        self.seqs[seq.seq_id] = seq
        heapq.heappush(self._waiting, (seq.priority, seq.arrival, seq))

    def finish(self, seq: SimSequence) -> None:
        """Remove a finished or aborted sequence and free its blocks (they stay cached)."""
        if self.seqs.pop(seq.seq_id, None) is None:
            return
        if seq.running:
            self.running.remove(seq)
            seq.running = False
        else:
            self._waiting = [w for w in self._waiting if w[2] is not seq]
            heapq.heapify(self._waiting)
        self.kv.free(seq.kv)

    def cache_stats(self) -> CacheStats:
        """The KV cache's state and this engine's cumulative counters (blocks, tokens)."""
        kv = self.kv
        return CacheStats(block_size=kv.block_size, num_blocks=kv.num_blocks,
                          num_blocks_used=kv.num_used, prefix_cache_queries=kv.prefix_cache_queries,
                          prefix_cache_hits=kv.prefix_cache_hits,
                          num_preemptions=self.num_preemptions,
                          num_recomputed_tokens=self.num_recomputed_tokens)

    @property
    def num_waiting(self) -> int:
        """Sequences queued and not running."""
        return len(self._waiting)

    def _preempt(self, seq: SimSequence) -> None:
        self.running.remove(seq)
        seq.running = False
        self.kv.free(seq.kv)
        seq.num_computed = 0
        self.num_preemptions += 1
        heapq.heappush(self._waiting, (seq.priority, seq.arrival, seq))

    def step(self) -> list[SimSequence]:
        """Run one engine step (module docstring). Returns the sequences whose tokens are all
        computed after it; [] when nothing could run."""
        budget = self.max_num_batched_tokens
        scheduled: dict[SimSequence, int] = {}
        preempted = False
        for seq in list(self.running):
            if not seq.running or budget <= 0:
                continue
            n = min(len(seq.token_ids) - seq.num_computed, budget)
            if n <= 0:
                continue
            while not self.kv.allocate(seq.kv, seq.num_computed + n):
                victim = max(self.running, key=lambda s: (s.priority, s.arrival))
                budget += scheduled.pop(victim, 0)
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                self.kv.commit(seq.kv, seq.token_ids, seq.num_computed + n)
                scheduled[seq] = n
                budget -= n
        while not preempted and self._waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self._waiting[0][2]
            found = self.kv.lookup(seq.token_ids, seq.kv)
            if not self.chunked_prefill and len(seq.token_ids) - found > budget:
                self.kv.free(seq.kv)
                break
            n = min(len(seq.token_ids) - found, budget)
            if not self.kv.allocate(seq.kv, found + n):
                self.kv.free(seq.kv)
                break
            self.kv.commit(seq.kv, seq.token_ids, found + n)
            self.kv.record_query(len(seq.token_ids), found)
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = found
            heapq.heappop(self._waiting)
            seq.num_computed = found
            seq.running = True
            self.running.append(seq)
            scheduled[seq] = n
            budget -= n
        if not scheduled:
            return []
        shape = StepShape()
        done = []
        for seq, n in scheduled.items():
            start = seq.num_computed
            end = start + n
            full = end == len(seq.token_ids)
            shape.add(SeqWork(n, start, logits=self.logits and full, seeded=seq.seeded))
            self.num_recomputed_tokens += max(0, min(end, seq.max_computed) - start)
            seq.num_computed = end
            seq.max_computed = max(seq.max_computed, end)
            if full:
                done.append(seq)
        if self.step_log is not None:
            self.step_log.append(shape)
        dt = step_time(self.model, self.hw, shape)
        self.clock.advance(dt)
        self.busy_time += dt
        self.num_steps += 1
        return done
