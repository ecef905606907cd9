"""A paged KV cache with prefix caching, as vLLM v1's `KVCacheManager` / `BlockPool` do it.

- Memory is split into blocks of `block_size` tokens; a sequence holds a list of blocks.
- Every *full* block gets a hash chained over the whole prefix (hash of the parent block's hash
  and this block's token ids), so two sequences with the same first k blocks of tokens map to
  the same k blocks: a shared prefix is stored once and each block is reference-counted.
- A block whose reference count drops to 0 keeps its hash and contents and goes to the tail of
  the free queue; it can be hit again until it is evicted. New allocations take blocks from the
  head of the free queue (least recently freed first), evicting their cached hash (LRU).
- A sequence's blocks are freed tail first, so the deepest blocks of a path are evicted before
  the shared prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["KVCacheManager", "KVSeqState", "MAX_BLOCKS"]

#: Most blocks one simulated KV cache holds: 1.5x the largest bundled device and model pair
#: (h200 with a 0.5B model: 693,043 blocks of 16 tokens); the block tables cost about 140 MiB
#: of host memory at the limit, where a `--hardware` file of 1e18 bytes would need terabytes.
MAX_BLOCKS = 1 << 20


@dataclass
class KVSeqState:
    """The cache's view of one sequence.

    Attributes:
        blocks: block ids in position order.
        hashes: chained hashes of the first `len(hashes)` (full) blocks.
    """

    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)


class KVCacheManager:
    """Block allocation, prefix-cache lookup and LRU eviction for one engine.

    Args:
        num_blocks: blocks in the pool (>= 1).
        block_size: tokens per block (>= 1).
        enable_prefix_caching: share and keep full blocks by hash.

    Raises:
        ValueError: num_blocks or block_size < 1, or num_blocks over `MAX_BLOCKS`.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        if num_blocks > MAX_BLOCKS:
            raise ValueError(
                f"a simulated KV cache of {num_blocks} blocks ({num_blocks * block_size} "
                f"tokens) is over the simulator's limit of {MAX_BLOCKS} blocks; give the "
                f"engines less KV memory (--generator-kv-cache, --verifier-kv-cache, "
                f"--memory-fraction, a --hardware spec with less memory) or larger blocks "
                f"(--block-size)")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash -> block id
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.num_used = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks not referenced by any sequence (cached-but-free blocks included)."""
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def _chain(self, parent: int | None, tokens: list[int]) -> int:
        return hash((parent, tuple(tokens)))

    def lookup(self, token_ids: list[int], state: KVSeqState) -> int:
        """Attach the longest cached prefix of `token_ids` to a sequence with no blocks yet.

        At most `len(token_ids) - 1` tokens are taken from the cache (the last token is always
        computed, to produce logits), in whole blocks. The hit counters are updated by
        `record_query` once the sequence is admitted (a failed admission is not a query).

        Returns:
            The number of tokens found (a multiple of block_size).
        """
        assert not state.blocks, "lookup is for a sequence without blocks"
        if not self.enable_prefix_caching:
            return 0
        bs, parent = self.block_size, None
        for i in range((len(token_ids) - 1) // bs):
            h = self._chain(parent, token_ids[i * bs:(i + 1) * bs])
            block = self._cached.get(h)
            if block is None:
                break
            self._touch(block)
            state.blocks.append(block)
            state.hashes.append(h)
            parent = h
        return len(state.blocks) * bs

    def record_query(self, num_tokens: int, num_hits: int) -> None:
        """Count one prefix-cache query of `num_tokens` tokens of which `num_hits` were found."""
        self.prefix_cache_queries += num_tokens
        self.prefix_cache_hits += num_hits

    def _touch(self, block: int) -> None:
        if self._ref[block] == 0:
            del self._free[block]
            self.num_used += 1
        self._ref[block] += 1

    def can_allocate(self, state: KVSeqState, num_tokens: int) -> bool:
        """Whether the sequence can grow to hold `num_tokens` tokens now."""
        return self.blocks_needed(num_tokens) - len(state.blocks) <= len(self._free)

    def allocate(self, state: KVSeqState, num_tokens: int) -> bool:
        """Grow the sequence's blocks to hold `num_tokens` tokens.

        Returns:
            False (and changes nothing) when there are not enough free blocks.
        """
        need = self.blocks_needed(num_tokens) - len(state.blocks)
        if need > len(self._free):
            return False
        for _ in range(max(need, 0)):
            block, _ = self._free.popitem(last=False)
            old = self._hash_of[block]
            if old is not None:
                if self._cached.get(old) == block:
                    del self._cached[old]
                self._hash_of[block] = None
                self.num_evictions += 1
            self._ref[block] = 1
            self.num_used += 1
            state.blocks.append(block)
        return True

    def commit(self, state: KVSeqState, token_ids: list[int], num_computed: int) -> None:
        """Register the full blocks among the first `num_computed` tokens in the prefix cache.

        Called when those tokens are scheduled, before the step that computes them, as vLLM
        v1's `KVCacheManager.allocate_slots` caches blocks (`cache_blocks` over
        num_computed + num_new_tokens): a sequence admitted later in the same step already
        hits them. `token_ids` are the sequence's tokens (prompt + generated)."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        parent = state.hashes[-1] if state.hashes else None
        for i in range(len(state.hashes), num_computed // bs):
            h = self._chain(parent, token_ids[i * bs:(i + 1) * bs])
            block = state.blocks[i]
            state.hashes.append(h)
            if h not in self._cached and self._hash_of[block] is None:
                self._cached[h] = block
                self._hash_of[block] = h
            parent = h

    def free(self, state: KVSeqState) -> None:
        """Release the sequence's blocks, tail first; unreferenced blocks stay cached (LRU)."""
        for block in reversed(state.blocks):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self.num_used -= 1
                if self._hash_of[block] is None:
                    self._free[block] = None
                    self._free.move_to_end(block, last=False)  # uncached: reuse first
                else:
                    self._free[block] = None
        state.blocks.clear()
        state.hashes.clear()
