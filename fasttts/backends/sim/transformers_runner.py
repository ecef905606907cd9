"""The time a verifier that runs in transformers takes (`Verifier.runner == "transformers"`).

`fasttts.verifiers.skywork.SkyworkVerifier` runs Skywork's value-head PRM in transformers, not
in a paged vLLM engine, and the simulator prices it the same way:

- whole-path: the requests go in chunks of B_pre paths; each chunk is one forward pass over
  its paths padded on the right to the longest (every row computes `width` tokens, padding
  included), with no cache of earlier calls;
- incremental: one path at a time; each new step is one forward pass at batch 1 over the
  step's tokens on top of the longest prefix of the path kept in a least-recently-used store
  of `store_bytes` (the prefix's `past_key_values` are deep-copied first: its KV bytes read
  and written once more), and the new prefix is stored.

Times come from the same roofline as the simulated engines (`fasttts.perf.roofline`), on the
device's shared clock.
"""

from __future__ import annotations

from collections import OrderedDict

from fasttts.backends.sim.engine import VirtualClock
from fasttts.perf.roofline import StepShape, step_time
from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["TransformersRunner"]


class TransformersRunner:
    """Prices one verifier's scoring calls as transformers runs them (module docstring).

    Args:
        model, hw: the verifier model and the device (the roofline inputs).
        clock: the device's virtual clock.
        store_bytes: the incremental mode's store of prefixes (bytes; the verifier's
            `kv_cache_memory_bytes`).
        batch_size: paths per forward pass in whole-path mode (B_pre).

    Attributes:
        tokens_computed: tokens of every forward pass, padding included.
    """

    def __init__(self, model: ModelSpec, hw: HardwareSpec, clock: VirtualClock,
                 store_bytes: int, batch_size: int):
        self.model, self.hw, self.clock = model, hw, clock
        self.store_bytes = store_bytes
        self.batch_size = batch_size
        self.tokens_computed = 0
        self._store: OrderedDict[tuple, int] = OrderedDict()  # prefix key -> its tokens
        self._stored_tokens = 0

    def whole(self, paths: list[list[int]]) -> None:
        """Score whole paths (token ids each): padded chunks of `batch_size`, one pass each."""
        for i in range(0, len(paths), self.batch_size):
            chunk = paths[i:i + self.batch_size]
            width = max(len(p) for p in chunk)
            self.tokens_computed += width * len(chunk)
            self._advance(StepShape.uniform(len(chunk), width, 0, logits=False))

    def incremental(self, prefixes: list[tuple[tuple, int]], start: int) -> None:
        """Score one path's steps from `start` on: `prefixes` holds, per step of the path,
        (a key of the path cut after that step, the cut's length in tokens)."""
        for k in range(start, len(prefixes)):
            key, length = prefixes[k]
            hit = next((j for j in range(k - 1, -1, -1) if prefixes[j][0] in self._store), None)
            base = 0 if hit is None else prefixes[hit][1]
            if hit is not None:
                self._store.move_to_end(prefixes[hit][0])
            self.tokens_computed += length - base
            copy_s = 2 * base * self.model.kv_bytes_per_token / self.hw.bandwidth
            self.clock.advance(copy_s)
            self._advance(StepShape.uniform(1, length - base, base, logits=False))
            self._keep(key, length)

    def _advance(self, shape: StepShape) -> None:
        self.clock.advance(step_time(self.model, self.hw, shape))

    def _keep(self, key: tuple, tokens: int) -> None:
        """Store a prefix; evict least recently used ones over `store_bytes`."""
        if key in self._store:
            self._stored_tokens -= self._store[key]
        self._store[key] = tokens
        self._stored_tokens += tokens
        while self._store and self._stored_tokens * self.model.kv_bytes_per_token > self.store_bytes:
            _, old = self._store.popitem(last=False)
            self._stored_tokens -= old
