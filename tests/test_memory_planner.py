"""The roofline-guided KV allocation and the offload extension (FastTTS section 4.3)."""

import pytest

from fasttts.backends.sim.specs import load_hardware, load_model
from fasttts.runtime.memory_planner import (PlanError, PlanInput, iteration_time, plan_memory,
                                            static_plan)

GiB = 1 << 30


def _inp(mem, n=64, s=1024, s_dec=1024, gen="qwen2.5-math-1.5b", ver="math-shepherd-7b",
         hw="rtx4090"):
    return PlanInput(memory_bytes=mem, generator=load_model(gen), verifier=load_model(ver),
                     hardware=load_hardware(hw), num_requests=n, verifier_len=s, decode_len=s_dec)


def _brute_force(inp):
    best = None
    for b_pre in range(1, inp.num_requests + 1):
        for b_dec in range(1, inp.num_requests + 1):
            if b_pre * inp.kv_ver + b_dec * inp.kv_gen > inp.memory_bytes:
                continue
            t = sum(iteration_time(inp, b_pre, b_dec))
            key = (t, -b_dec)
            if best is None or key < best[0]:
                best = (key, b_pre, b_dec)
    return best


@pytest.mark.parametrize("mem_gib, n", [(1.5, 16), (4, 64), (14, 64), (2, 128)])
def test_planner_equals_brute_force(mem_gib, n):
    inp = _inp(int(mem_gib * GiB), n=n)
    plan = plan_memory(inp, allow_offload=False)
    (t, _), b_pre, b_dec = _brute_force(inp)
    assert (plan.b_pre, plan.b_dec) == (b_pre, b_dec)
    assert plan.t_total == pytest.approx(t)
    assert plan.verifier_kv_bytes + plan.generator_kv_bytes <= inp.memory_bytes
    assert plan.t_total <= static_plan(inp).t_total + 1e-12


def test_by_hand_kv_sizes():
    inp = _inp(GiB)
    assert inp.kv_ver == 1024 * 131072  # Mistral-7B: 128 KiB per token
    assert inp.kv_gen == 1024 * 28672  # Qwen2.5-Math-1.5B: 28 KiB per token
    assert inp.s_cache == 512


def test_ties_go_to_the_larger_decode_batch():
    # N = 1: every feasible pair has b_pre = b_dec = 1; with N = 2 and room for everything,
    # a larger decode batch never loses
    inp = _inp(64 * GiB, n=2)
    plan = plan_memory(inp, allow_offload=False)
    assert plan.b_dec == 2


def test_too_small_budget_offloads_or_fails_clearly():
    # 100 MiB holds one generator sequence (28 MiB) but not one 7B verifier sequence (128 MiB)
    inp = _inp(100 << 20)
    with pytest.raises(PlanError, match="cannot hold one verifier sequence of 1024 tokens"):
        plan_memory(inp, allow_offload=False)
    # with offloading each model alone gets the whole budget: the 7B verifier still does not fit
    with pytest.raises(PlanError):
        plan_memory(inp)
    inp = _inp(150 << 20)  # 128 + 28 MiB > 150 MiB: coupled impossible, offload possible
    plan = plan_memory(inp)
    assert plan.offload and plan.kind == "offload" and plan.b_pre == 1 and plan.b_dec == 5
    assert plan.t_offload == pytest.approx(4 * (150 << 20) / 25e9)


def test_cpu_has_no_offload():
    inp = _inp(150 << 20, hw="cpu-epyc-1thread")
    with pytest.raises(PlanError, match="offloading does not apply"):
        plan_memory(inp)


def test_offload_loses_when_memory_is_ample():
    assert not plan_memory(_inp(14 * GiB)).offload


def test_bad_input():
    with pytest.raises(ValueError, match="num_requests must be >= 1"):
        _inp(GiB, n=0)


def test_planner_applied_to_the_simulated_device():
    from fasttts.backends.sim import build_sim
    from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig, VerifierConfig

    def cfg(**rt):
        return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                         verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                         search=SearchConfig(n=64), runtime=RuntimeConfig(**rt),
                         sim=SimConfig(generator_kv_cache_bytes=int(1.5 * GiB),
                                       verifier_kv_cache_bytes=int(1.5 * GiB)))
    gen, ver = build_sim(cfg(memory_planner=True))
    plan = gen.plan
    assert gen.engine.max_num_seqs == plan.b_dec and ver.engine.max_num_seqs == plan.b_pre
    kv_total = (gen.engine.kv.num_blocks * 16 * 28672 + ver.engine.kv.num_blocks * 16 * 131072)
    assert 3 * GiB - 2 * 16 * 131072 <= kv_total <= 3 * GiB
    base_gen, _ = build_sim(cfg())
    assert base_gen.plan is None and base_gen.engine.max_num_seqs == 256


def test_offload_is_an_option_of_the_planner():
    from fasttts.config import RuntimeConfig

    with pytest.raises(ValueError, match="offload is an option of memory_planner"):
        RuntimeConfig(offload=True)


def test_real_engine_plan_needs_model_specs():
    from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig
    from fasttts.runtime.memory_planner import plan_real_engines

    cfg = RunConfig(runtime=RuntimeConfig(memory_planner=True), search=SearchConfig(n=16))
    planned, plan = plan_real_engines(cfg, "cpu-epyc-1thread")
    total = cfg.generator.kv_cache_memory_bytes + cfg.verifier.engine.kv_cache_memory_bytes
    assert (planned.generator.kv_cache_memory_bytes
            + planned.verifier.engine.kv_cache_memory_bytes) == total
    assert planned.generator.extra_engine_args["max_num_active_seqs"] == plan.b_dec
    assert planned.generator.extra_engine_args["max_num_seqs"] == max(256, plan.b_dec)
    assert planned.verifier.batch_size == plan.b_pre
    odd = cfg.model_copy(update={"generator": EngineConfig(model="/models/my-own-llm")})
    with pytest.raises(PlanError, match="no model spec for '/models/my-own-llm'"):
        plan_real_engines(odd, "cpu-epyc-1thread")
    off = cfg.model_copy(update={"runtime": RuntimeConfig(memory_planner=True, offload=True)})
    with pytest.raises(PlanError, match="drop --offload"):
        plan_real_engines(off, "rtx4090")


def test_prefix_sharing_splits_the_shared_tokens_by_hand():
    # S = S_dec = 1024, 960 of them shared by 4 siblings: each holds 64 + 960 / 4 = 304 tokens
    plain = _inp(1 << 30)
    shared = PlanInput(**{**plain.__dict__, "shared_len": 960, "share": 4})
    assert shared.kv_gen == 304 * plain.generator.kv_bytes_per_token
    assert shared.kv_ver == 304 * plain.verifier.kv_bytes_per_token
    # more sequences fit, so the plan's decode batch can only grow
    assert plan_memory(shared).b_dec >= plan_memory(plain).b_dec
    with pytest.raises(ValueError, match="shared_len must be within"):
        PlanInput(**{**plain.__dict__, "shared_len": 2000})


def test_real_plan_leaves_each_engine_one_max_length_sequence():
    # 64 MiB + 64 MiB, max_model_len 4096, n = 32: the roofline optimum alone would give the
    # generator 46 MiB, less than one 4096-token sequence plus vLLM's reserved block
    # (49.5 MiB at 12 KiB per token), which vLLM refuses to build
    from fasttts.backends.sim.specs import find_model_spec
    from fasttts.backends.vllm_engine import min_kv_cache_tokens
    from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RunConfig,
                                RuntimeConfig, SearchConfig, VerifierConfig)
    from fasttts.runtime.memory_planner import plan_real_engines

    eng = dict(kv_cache_memory_bytes=64 << 20, max_model_len=4096, block_size=128)
    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **eng),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_VERIFIER, **eng)),
                    search=SearchConfig(n=32, beam_width=4, max_tokens=1024),
                    runtime=RuntimeConfig(memory_planner=True))
    planned, plan = plan_real_engines(cfg, "cpu-epyc-1thread")
    per_token = find_model_spec(DEFAULT_GENERATOR).kv_bytes_per_token
    floor = min_kv_cache_tokens(planned.generator) * per_token
    assert min_kv_cache_tokens(planned.generator) == (4096 // 128 + 1) * 128
    assert planned.generator.kv_cache_memory_bytes >= floor
    assert planned.verifier.engine.kv_cache_memory_bytes >= floor
    assert planned.generator.kv_cache_memory_bytes + planned.verifier.engine.kv_cache_memory_bytes == 128 << 20
