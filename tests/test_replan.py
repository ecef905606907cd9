"""Re-planning the memory split between requests (`fasttts.runtime.replan`)."""

import itertools

import pytest

from fasttts.config import RunConfig
from fasttts.perf.specs import load_hardware, load_model
from fasttts.runtime.memory_planner import iteration_time, plan_within
from fasttts.runtime.plan_workload import plan_for_run, plan_input
from fasttts.runtime.replan import Replanner

from tests.test_memory_planner import reuse_time

GiB = 1 << 30
GEN, VER, HW = load_model("qwen2.5-math-1.5b"), load_model("math-shepherd-7b"), load_hardware("rtx4090")
FLOOR_TOKENS = 4096  # the verifier's max_model_len: its cache holds one such sequence


def _cfg(n, max_tokens=1536, **runtime):
    """A planner config whose verifier reads its prefix cache (incremental verification), the
    case where the reuse term prices both caches."""
    return RunConfig.model_validate({
        "backend": "sim",
        "runtime": {"memory_planner": True, "incremental_verification": True, **runtime},
        "generator": {"model": "qwen2.5-math-1.5b"},
        "verifier": {"engine": {"model": "math-shepherd-7b"}},
        "search": {"method": "beam_search", "n": n, "beam_width": 4, "max_tokens": max_tokens},
        "sim": {"hardware": "rtx4090"}})


def _replanner(budget, n=8, min_shift=0.1, **runtime):
    plan, ver_kv = plan_for_run(_cfg(n, **runtime), budget, GEN, VER, HW, False, FLOOR_TOKENS)
    return Replanner(budget, GEN, VER, HW, False, FLOOR_TOKENS, plan, budget - ver_kv, ver_kv,
                     min_shift)


def test_plan_within_equals_brute_force_over_the_fixed_split():
    inp = plan_input(_cfg(64), int(1.5 * GiB), GEN, VER, HW)
    gen_bytes, ver_bytes = 1 * GiB, GiB // 2
    plan = plan_within(inp, gen_bytes, ver_bytes)
    # the verifier's 0.5 GiB holds 13 sequences of 304 tokens (38 MiB), not the tree (776 MiB);
    # the generator's 1 GiB holds the whole tree (170 MiB), so all 64
    assert inp.tree_tokens * VER.kv_bytes_per_token > ver_bytes
    cap_pre, cap_dec = ver_bytes // inp.kv_ver, 64
    best = min(((sum(iteration_time(inp, p, d)), -d, p) for p, d in
                itertools.product(range(1, min(64, cap_pre) + 1), range(1, cap_dec + 1))))
    assert (plan.b_pre, plan.b_dec) == (best[2], -best[1])
    assert plan.t_total == pytest.approx(best[0] + reuse_time(inp, ver_bytes, gen_bytes))
    assert (plan.generator_kv_bytes, plan.verifier_kv_bytes) == (gen_bytes, ver_bytes)
    assert plan_within(inp, gen_bytes, inp.kv_ver - 1) is None  # not one verifier sequence


def test_same_workload_changes_nothing():
    rp = _replanner(int(1.5 * GiB))
    assert rp.update(_cfg(8)) is None and rp.num_replans == 0


MiB = 1 << 20


def _optimum_ver_kv(n, budget=GiB, **kw):
    """The verifier KV size (bytes) of the planner's optimum for n beams (S = 1024 tokens)."""
    return plan_for_run(_cfg(n), budget, GEN, VER, HW, False, FLOOR_TOKENS, **kw)[1]


def test_small_moves_change_caps_only_and_large_moves_resplit():
    # At 1 GiB the optimum's verifier KV is 827.6 MiB for n = 8 (its 512 MiB floor holds its
    # 192 MiB tree; the rest is split where both caches save equal time per byte), 786 MiB
    # for n = 64 and 666.56 MiB for n = 256 (B_pre = 16, B_dec = 43).
    ver = {n: _optimum_ver_kv(n) for n in (8, 64, 256)}
    assert (ver[8] // MiB, ver[64] / MiB, ver[256] / MiB) == (827, 786, 666.5625)
    # With min_shift 0.15, planned for 8; then 64: the optimum moves 4.0 % of M -> keep the
    # split, caps within it; then 256: 15.7 % -> re-split; then 8: 15.7 % again -> re-split.
    assert 0.03 < (ver[8] - ver[64]) / GiB < 0.15 < (ver[8] - ver[256]) / GiB
    rp = _replanner(GiB, n=8, min_shift=0.15)
    first = (rp.generator_kv_bytes, rp.verifier_kv_bytes)
    assert first[1] == ver[8]
    change = rp.update(_cfg(64))
    kept = plan_within(plan_input(_cfg(64), GiB, GEN, VER, HW), *first)
    assert not change.resplit and change.plan == kept and kept.kind == "fixed"
    assert (change.generator_kv_bytes, change.verifier_kv_bytes) == first
    change = rp.update(_cfg(256))
    best, ver_kv = plan_for_run(_cfg(256), GiB, GEN, VER, HW, False, FLOOR_TOKENS)
    assert change.resplit and change.plan == best and (best.b_pre, best.b_dec) == (16, 43)
    assert (change.generator_kv_bytes, change.verifier_kv_bytes) == (GiB - ver_kv, ver_kv)
    change = rp.update(_cfg(8))
    assert change.resplit and change.verifier_kv_bytes == ver[8]
    assert (change.plan.b_pre, change.plan.b_dec) == (8, 8)
    assert rp.update(_cfg(8)) is None
    assert (rp.num_replans, rp.num_resplits) == (3, 2)


def test_the_plan_counts_the_verifiers_floor():
    # 1 GiB, n = 256: the verifier's cache holds one 4096-token sequence (512 MiB) whatever
    # B_pre is, so B_dec must fit in the other 512 MiB (less what the reuse term gives the
    # verifier's prefix cache beyond its floor)
    inp = plan_input(_cfg(256), GiB, GEN, VER, HW, verifier_floor=FLOOR_TOKENS * VER.kv_bytes_per_token)
    best, ver_kv = plan_for_run(_cfg(256), GiB, GEN, VER, HW, False, FLOOR_TOKENS)
    assert ver_kv == best.verifier_kv_bytes >= 512 << 20
    assert best.b_dec * inp.kv_gen <= GiB - ver_kv
    assert best.b_pre * inp.kv_ver <= ver_kv


def test_min_shift_sets_when_to_resplit():
    never = _replanner(GiB, n=256, min_shift=1.0)
    change = never.update(_cfg(8))
    assert not change.resplit and change.plan.kind == "fixed"
    assert never.verifier_kv_bytes == _optimum_ver_kv(256) and never.num_resplits == 0
    always = _replanner(GiB, n=8, min_shift=0.0)
    assert always.update(_cfg(64)).resplit  # 897.6 -> 786 MiB
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="0 <= min_shift <= 1"):
            _replanner(GiB, min_shift=bad)


def test_measured_lengths_set_the_sequence_length():
    rp = _replanner(int(1.5 * GiB))
    assert rp.measured_len is None
    rp.observe(100, [300, 500])  # 100 + 400
    rp.observe(50, [])  # no path returned: ignored
    rp.observe(200, [400])  # 600
    assert rp.measured_len == 550
    change = rp.update(_cfg(64))
    assert change.seq_len == 550
    fixed = _replanner(int(1.5 * GiB), plan_seq_len=2000)
    fixed.observe(100, [300])
    assert fixed.update(_cfg(64, plan_seq_len=2000)).seq_len == 2000


def _sim_tts(n=8, kv_gib=1):
    from fasttts.api import FastTTS

    cfg = _cfg(n, plan_seq_len=1024).model_dump(exclude_unset=True)  # fixed S: the sizes above, by hand
    cfg["sim"].update(generator_kv_cache_bytes=int(kv_gib * GiB / 2),
                      verifier_kv_cache_bytes=int(kv_gib * GiB / 2))
    cfg = RunConfig.model_validate(cfg)
    return FastTTS(cfg), cfg


def test_fasttts_follows_each_problems_n_on_the_simulator():
    # simulated engines at 1 GiB, whose generator also keeps a 4096-token floor (112 MiB):
    # n = 8 and n = 64 plan verifier caches within 10 % of M of each other (the split stays,
    # the caps follow), n = 256 one 15 % smaller (re-split), and back
    floor = 4096
    ver = {n: _optimum_ver_kv(n, generator_min_tokens=floor) for n in (8, 64, 256)}
    assert abs(ver[8] - ver[64]) / GiB <= 0.1 < (ver[8] - ver[256]) / GiB
    blocks = {n: kv // (16 * VER.kv_bytes_per_token) for n, kv in ver.items()}
    tts, cfg = _sim_tts(n=8)
    with tts:
        gen, ver_engine = tts.generator.engine, tts.verifier.engine
        assert ver_engine.kv.num_blocks == blocks[8]
        for n, resplit in ((8, None), (64, False), (256, True), (8, True)):
            result = tts.solve("What is 2+3?", "p", search=cfg.search.model_copy(update={"n": n}))
            caps = (tts.plan.b_pre, tts.plan.b_dec)
            assert (gen.max_num_seqs, ver_engine.max_num_seqs) == (caps[1], caps[0])
            assert resplit is None or tts.replans[-1].resplit == resplit
            assert len(result.completions) <= n
            assert not gen.seqs and gen.kv.num_used == 0 and ver_engine.kv.num_used == 0
            if n == 256:
                assert caps == (16, 43)
                assert ver_engine.kv.num_blocks == blocks[256]
                assert gen.kv.num_blocks == (GiB - ver[256]) // (16 * GEN.kv_bytes_per_token)
        # back at n = 8 the plan uses the path lengths measured meanwhile, so the split
        # comes back to within 1 % of M of the first one, not to the block
        assert abs(ver_engine.kv.num_blocks - blocks[8]) * 16 * VER.kv_bytes_per_token < GiB / 100
        assert len(tts.replans) == 3
        with pytest.raises(Exception, match="beam_width"):
            tts.solve("What is 2+3?", "p", search=cfg.search.model_copy(update={"n": 6}))
        assert len(tts.replans) == 3  # the bad search re-planned nothing


def test_without_the_planner_nothing_replans():
    from fasttts.api import FastTTS

    cfg = _cfg(8, memory_planner=False)
    with FastTTS(cfg) as tts:
        tts.solve("What is 2+3?", "p", search=cfg.search.model_copy(update={"n": 16}))
        assert tts.replanner is None and tts.replans == [] and tts.generator.max_num_seqs == 256


def test_caps_are_validated():
    tts, _ = _sim_tts()
    with tts:
        with pytest.raises(ValueError, match="max_running must be >= 1"):
            tts.generator.set_max_running(0)
        with pytest.raises(ValueError, match="batch_size must be >= 1"):
            tts.verifier.set_batch_size(0)
        tts.generator.engine.seqs["x"] = object()
        with pytest.raises(RuntimeError, match="cannot resize the KV cache while 1 sequences"):
            tts.generator.engine.resize(GiB)
        del tts.generator.engine.seqs["x"]
        with pytest.raises(ValueError, match="cannot hold one sequence of max_model_len"):
            tts.generator.engine.resize(1 << 20)


def test_offload_plans_keep_their_offload_flag():
    # 150 MiB with 1024-token sequences: a 7B verifier sequence (128 MiB) and a 1.5B generator
    # sequence (28 MiB) do not fit together, so each model gets the whole budget in turn
    # (best-of-N: paths share only the prompt, so each holds all 1024 tokens)
    def cfg(n):  # n = 2 is no beam search of beam_width 4: change method and n at once
        c = _cfg(8, plan_seq_len=1024)
        return c.model_copy(update={"search": c.search.model_copy(
            update={"method": "best_of_n", "n": n})})

    budget = 150 << 20
    plan, ver_kv = plan_for_run(cfg(8), budget, GEN, VER, HW, True, 0)
    assert plan.offload and ver_kv == budget and (plan.b_pre, plan.b_dec) == (1, 5)
    rp = Replanner(budget, GEN, VER, HW, True, 0, plan, budget, budget)
    assert rp.update(cfg(16)) is None  # the same caps: nothing to change
    change = rp.update(cfg(2))
    assert change.plan.offload and not change.resplit and change.plan.b_dec == 2
    assert (change.generator_kv_bytes, change.verifier_kv_bytes) == (budget, budget)


def test_a_measured_search_tree_replaces_the_estimate_for_the_same_search_shape():
    rp = _replanner(GiB, n=8, min_shift=0.0)
    search64 = _cfg(64).search
    assert rp.measured_tree_len(search64) is None
    # trees 3x the estimate of n = 64 (8704 tokens = 136 per path)
    rp.observe(100, [900], tree_tokens=64 * 388, search=search64)
    rp.observe(100, [900], tree_tokens=64 * 390, search=search64)
    assert rp.measured_tree_len(search64) == 389
    assert rp.measured_tree_len(_cfg(256).search) is None  # another n: not this tree
    change = rp.update(_cfg(64))
    assert plan_input(_cfg(64), GiB, GEN, VER, HW, change.seq_len,
                      tree_len=389).tree_tokens == 64 * 389
    best, ver_kv = plan_for_run(_cfg(64), GiB, GEN, VER, HW, False, FLOOR_TOKENS,
                                change.seq_len, tree_len=389)
    estimated, _ = plan_for_run(_cfg(64), GiB, GEN, VER, HW, False, FLOOR_TOKENS,
                                change.seq_len)
    assert change.plan == best and change.verifier_kv_bytes == ver_kv
    # the measured verifier tree (3.0 GiB vs 1.06 GiB estimated) leaves more to recompute
    assert best.t_recompute > estimated.t_recompute
    # no generator peak measured: its batch is sized at the measured tree
    assert rp.measured_decode_tree_len(search64) is None
    rp.observe(100, [900], tree_tokens=64 * 389, search=search64, decode_tree_tokens=64 * 200)
    assert rp.measured_decode_tree_len(search64) == 200  # the one request that measured it
    rp.update(_cfg(64))
    peaked, _ = plan_for_run(_cfg(64), GiB, GEN, VER, HW, False, FLOOR_TOKENS,
                             change.seq_len, tree_len=389, decode_tree_len=200)
    # a batch of all 64 at their measured peak fits where 64 paths at the tree did not
    assert rp.plan == peaked and (best.b_dec, peaked.b_dec) == (32, 64)
    assert plan_input(_cfg(64), GiB, GEN, VER, HW, change.seq_len, tree_len=389,
                      decode_tree_len=200).decode_tree_tokens == 64 * 200
    # a request with no path, or no tree, records nothing
    rp.observe(100, [], tree_tokens=10, search=_cfg(16).search)
    rp.observe(100, [50], tree_tokens=0, search=_cfg(16).search)
    assert rp.measured_tree_len(_cfg(16).search) is None


def test_measured_trees_are_kept_for_the_most_recent_search_shapes_only():
    from fasttts.runtime.replan import MAX_SHAPES

    rp = _replanner(GiB, n=8, min_shift=0.0)
    base = _cfg(64).search

    def shape(g):  # a client may send any granularity: one new shape per request
        return base.model_copy(update={"method": "vg_search", "granularity": g})

    rp.observe(100, [900], tree_tokens=64 * 100, search=shape(1))
    for g in range(2, 10 * MAX_SHAPES):
        rp.observe(100, [900], tree_tokens=64 * 100, search=shape(g))
        if g % 7 == 0:  # a shape still in use stays
            rp.observe(100, [900], tree_tokens=64 * 200, search=shape(1))
    assert rp.measured_tree_len(shape(2)) is None  # forgotten
    assert rp.measured_tree_len(shape(10 * MAX_SHAPES - 1)) == 100
    assert rp.measured_tree_len(shape(1)) is not None
    assert len(rp._trees) == MAX_SHAPES
