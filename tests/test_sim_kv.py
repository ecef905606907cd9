"""The simulated paged KV cache: prefix sharing, LRU eviction, preemption by recompute."""

import pytest

from fasttts.backends.sim.engine import SimEngine, SimSequence, VirtualClock
from fasttts.backends.sim.kv_cache import KVCacheManager, KVSeqState
from fasttts.perf.specs import load_hardware, load_model


def _engine(num_blocks, block_size, max_model_len, **kw):
    return SimEngine(load_model("qwen2.5-math-1.5b"), load_hardware("rtx4090"), VirtualClock(),
                     num_blocks, block_size, max_num_seqs=kw.pop("max_num_seqs", 256),
                     max_num_batched_tokens=kw.pop("max_num_batched_tokens", 8192),
                     max_model_len=max_model_len, **kw)


def _run_to_done(engine, seqs):
    pending = set(seqs)
    while pending:
        for s in engine.step():
            pending.discard(s)


def test_two_sequences_sharing_a_1000_token_prefix_hold_one_prefix():
    eng = _engine(num_blocks=1000, block_size=16, max_model_len=4096)
    prefix = list(range(5000, 6000))
    a = SimSequence("a", prefix + list(range(10)))
    b = SimSequence("b", prefix + list(range(100, 110)))
    eng.add(a)
    _run_to_done(eng, [a])
    eng.add(b)
    _run_to_done(eng, [b])
    # a: ceil(1010 / 16) = 64 blocks; b shares the 62 full prefix blocks and adds 2
    assert eng.kv.num_used == 64 + 2
    assert b.num_cached_tokens == 62 * 16
    assert (eng.kv.prefix_cache_queries, eng.kv.prefix_cache_hits) == (2020, 992)


def test_a_sequence_admitted_in_the_same_step_hits_the_blocks_scheduled_before_it():
    # vLLM v1 caches a request's full blocks when it schedules it (KVCacheManager.allocate_slots
    # -> cache_blocks), so a sibling admitted later in the same step reads them
    eng = _engine(num_blocks=1000, block_size=16, max_model_len=4096)
    prefix = list(range(5000, 6000))
    a = SimSequence("a", prefix + list(range(10)))
    b = SimSequence("b", prefix + list(range(100, 110)))
    eng.add(a)
    eng.add(b)
    assert set(eng.step()) == {a, b}  # one step computed both
    assert (a.num_cached_tokens, b.num_cached_tokens) == (0, 62 * 16)
    assert eng.kv.num_used == 64 + 2


def test_without_sharing_each_sequence_holds_its_own_blocks():
    eng = _engine(num_blocks=1000, block_size=16, max_model_len=4096)
    a = SimSequence("a", list(range(5000, 6010)))
    b = SimSequence("b", list(range(7000, 8010)))
    for s in (a, b):
        eng.add(s)
    _run_to_done(eng, [a, b])
    assert eng.kv.num_used == 64 + 64


def test_freed_blocks_stay_cached_until_evicted_lru():
    kv = KVCacheManager(num_blocks=4, block_size=2)
    a = KVSeqState()
    assert kv.allocate(a, 4)
    kv.commit(a, [1, 2, 3, 4], 4)
    kv.free(a)
    assert kv.num_used == 0 and kv.num_free == 4
    b = KVSeqState()
    assert kv.lookup([1, 2, 3, 4, 5], b) == 4  # both blocks still cached
    kv.free(b)
    # 4 more blocks: the two uncached ones first, then the cached ones (tail block first)
    c = KVSeqState()
    assert kv.allocate(c, 8)
    assert kv.num_evictions == 2
    d = KVSeqState()
    kv.free(c)
    assert kv.lookup([1, 2, 3, 4, 5], d) == 0


def test_allocation_fails_without_change_when_blocks_run_out():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = KVSeqState()
    assert kv.allocate(a, 8)
    b = KVSeqState()
    assert not kv.allocate(b, 8)
    assert (b.blocks, kv.num_used, kv.num_free) == ([], 2, 1)


def test_preemption_eviction_and_recompute_are_counted_exactly():
    """block_size 4, 6 blocks, two 8-token prompts growing to 16 tokens (4 blocks each) must
    collide: worked by hand in the comments."""
    eng = _engine(num_blocks=6, block_size=4, max_model_len=16)
    a = SimSequence("a", list(range(100, 108)), priority=0)
    b = SimSequence("b", list(range(200, 208)), priority=1)
    eng.add(a)
    eng.add(b)
    preempted_at = None
    for step in range(1, 40):
        for s in eng.step():
            s.token_ids.append(1000 + len(s.token_ids))
            if len(s.token_ids) == 16:
                eng.finish(s)
        if preempted_at is None and eng.num_preemptions:
            preempted_at = step
        if not eng.seqs:
            break
    # steps 1-5 fill 3 blocks each (12 tokens); step 6: a needs a 4th block, none is free,
    # so b (priority 1) is preempted with 12 computed tokens; its 3rd block is evicted for a.
    assert preempted_at == 6
    assert eng.num_preemptions == 1
    # b comes back after a finished: its first 2 blocks are still cached (8 tokens), so
    # tokens 9-12 are computed again (4 recomputed); a's 3rd block is evicted for b.
    assert eng.num_recomputed_tokens == 4
    assert eng.kv.num_evictions == 2
    assert (eng.kv.prefix_cache_queries, eng.kv.prefix_cache_hits) == (8 + 8 + 13, 8)
    assert eng.kv.num_used == 0 and not eng.running


def test_engine_refuses_a_cache_that_cannot_hold_one_sequence():
    with pytest.raises(ValueError, match="cannot hold one sequence of max_model_len=4096"):
        _engine(num_blocks=10, block_size=16, max_model_len=4096)


def test_max_num_seqs_caps_the_running_batch():
    eng = _engine(num_blocks=1000, block_size=16, max_model_len=4096, max_num_seqs=2)
    seqs = [SimSequence(f"s{i}", list(range(i * 100, i * 100 + 20))) for i in range(5)]
    for s in seqs:
        eng.add(s)
    eng.step()
    assert len(eng.running) == 2 and eng.num_waiting == 3
