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
