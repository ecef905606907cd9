"""The roofline-guided KV allocation and the offload extension (FastTTS section 4.3)."""

import math
from dataclasses import replace

import pytest

from fasttts.perf.specs import load_hardware, load_model
from fasttts.runtime.memory_planner import (PlanError, PlanInput, iteration_time, model_sides,
                                            plan_memory, static_plan)

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
    from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig, VerifierConfig
    from fasttts.engines import build_engines

    def cfg(**rt):
        return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                         verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                         search=SearchConfig(n=64), runtime=RuntimeConfig(**rt),
                         sim=SimConfig(generator_kv_cache_bytes=int(1.5 * GiB),
                                       verifier_kv_cache_bytes=int(1.5 * GiB)))
    planned = build_engines(cfg(memory_planner=True))
    gen, ver, plan = planned.generator, planned.verifier, planned.plan
    assert gen.engine.max_num_seqs == plan.b_dec and ver.engine.max_num_seqs == plan.b_pre
    kv_total = (gen.engine.kv.num_blocks * 16 * 28672 + ver.engine.kv.num_blocks * 16 * 131072)
    assert 3 * GiB - 2 * 16 * 131072 <= kv_total <= 3 * GiB
    base = build_engines(cfg())
    assert base.plan is None and base.replanner is None
    assert base.generator.engine.max_num_seqs == 256


def test_offload_is_an_option_of_the_planner():
    from fasttts.config import RuntimeConfig

    with pytest.raises(ValueError, match="offload is an option of memory_planner"):
        RuntimeConfig(offload=True)


def test_real_engine_plan_needs_model_specs():
    from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig
    from fasttts.engines.real import plan_real_engines

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


def test_cpu_engines_are_priced_on_the_calibration_of_their_threads(monkeypatch):
    """`cpu_calibration`: the fit of the engine's instruction set (else the dtype's first
    listed) of the most engine threads not above the engine's, every name a spec that
    loads, and the planner (`planner_hardware`) follows the generator's threads and this
    CPU's instruction set on the CPU build of vLLM."""
    from fasttts.config import DEFAULT_GENERATOR, EngineConfig, RunConfig
    from fasttts.engines import real
    from fasttts.engines.real import CPU_CALIBRATIONS, cpu_calibration, planner_hardware
    from fasttts.perf.specs import load_hardware

    assert cpu_calibration("float32", 1) == "cpu-epyc-fp32-1thread"
    assert cpu_calibration("float32", 2) == "cpu-epyc-fp32-2thread"
    assert cpu_calibration("float32", 16, "avx2") == "cpu-epyc-fp32-2thread"
    assert cpu_calibration("float32", 2, "avx512") == "cpu-epyc-avx512-fp32-2thread"
    assert cpu_calibration("float32", 16, "avx512") == "cpu-epyc-avx512-fp32-2thread"
    # no AVX-512 fit of one thread: the AVX2 one (over-prices), never the 2-thread fit
    assert cpu_calibration("float32", 1, "avx512") == "cpu-epyc-fp32-1thread"
    assert cpu_calibration("bfloat16", 1, "avx512") == "cpu-epyc-1thread"
    assert cpu_calibration("bfloat16", 2, "avx512") == "cpu-epyc-avx512-bf16-2thread"
    assert cpu_calibration("bfloat16", 2) == "cpu-epyc-avx512-bf16-2thread"
    assert cpu_calibration("bfloat16", 2, "avx2") == "cpu-epyc-avx512-bf16-2thread"
    assert cpu_calibration("float16", 1) == "cpu-epyc-fp32-1thread"
    # AMX: its own two-thread fits; one thread falls to the next slower instruction sets'
    assert cpu_calibration("bfloat16", 2, "amx") == "cpu-xeon-amx-bf16-2thread"
    assert cpu_calibration("float32", 4, "amx") == "cpu-xeon-amx-fp32-2thread"
    assert cpu_calibration("bfloat16", 1, "amx") == "cpu-epyc-1thread"
    assert cpu_calibration("float32", 1, "amx") == "cpu-epyc-fp32-1thread"
    for by_isa in CPU_CALIBRATIONS.values():
        for by_threads in by_isa.values():
            for name in by_threads.values():
                assert load_hardware(name).name == name
    platforms = pytest.importorskip("vllm.platforms")
    monkeypatch.setattr(platforms.current_platform, "is_cpu", lambda: True)
    for isa, names in (("avx2", {1: "cpu-epyc-fp32-1thread", 2: "cpu-epyc-fp32-2thread"}),
                       ("avx512", {1: "cpu-epyc-fp32-1thread",
                                   2: "cpu-epyc-avx512-fp32-2thread"}),
                       ("amx", {1: "cpu-epyc-fp32-1thread", 2: "cpu-xeon-amx-fp32-2thread"})):
        monkeypatch.setattr(real, "cpu_isa", lambda isa=isa: isa)
        for threads in (1, 2):
            cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, num_threads=threads,
                                                   dtype="float32"))
            assert planner_hardware(cfg) == names[threads]


def test_the_instruction_set_is_read_from_the_cpu_flags():
    from fasttts.engines.platform_info import cpu_isa

    assert cpu_isa(["avx2", "avx512f", "avx512_bf16"]) == "avx512"
    assert cpu_isa(["avx2", "avx512f", "avx512_bf16", "amx_bf16"]) == "amx"
    assert cpu_isa(["avx2", "amx_bf16"]) == "avx2"  # AMX without AVX-512F: not seen, AVX2
    assert cpu_isa(["avx2"]) == "avx2" and cpu_isa([]) == "avx2"


def _verifier_calibration_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "verifier_calibration.py"
    spec = importlib.util.spec_from_file_location("verifier_calibration", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recorded_verifier_calls_are_priced_on_the_calibration_of_their_threads(tmp_path, capsys):
    """benchmarks/verifier_calibration.py prices a recorded call on the CPU calibration of
    its recorded dtype and threads (a record without them counts as one thread); --hardware
    replaces it, and an unknown name or --hardware without --replay / --reprice is a usage
    error."""
    import json

    from fasttts.perf.specs import load_hardware

    mod = _verifier_calibration_module()
    assert mod.recorded_hardware({"num_threads": 2, "dtype": "float32"}).name == "cpu-epyc-fp32-2thread"
    assert mod.recorded_hardware({"dtype": "float32"}).name == "cpu-epyc-fp32-1thread"
    assert mod.recorded_hardware({"dtype": "bfloat16", "num_threads": 1}).name == "cpu-epyc-1thread"
    assert mod.recorded_hardware({"dtype": "float32", "num_threads": 2, "cpu_isa": "avx512"}
                                 ).name == "cpu-epyc-avx512-fp32-2thread"
    h200 = load_hardware("h200")
    assert mod.recorded_hardware({"num_threads": 2, "dtype": "float32"}, h200) is h200

    # one recorded call, replayed: priced on the 2-thread fit, or on --hardware's spec
    waves = [[list(range(1000, 1300)), list(range(2000, 2200))]]
    rec = {"problem_id": "p", "call": 1, "kv_bytes": 1 << 30, "num_threads": 2, "dtype": "float32",
           "block_size": 128, "modes": {m: {"seconds": 1.0, "waves": waves, "block_size": 128}
                                        for m in ("whole", "incremental")}}
    calls = tmp_path / "calls.jsonl"
    calls.write_text(json.dumps(rec) + "\n")

    def replayed(hardware):
        capsys.readouterr()
        assert mod.replay(calls, None, hardware) == 0
        row = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| p | whole")]
        return float(row[0].split("|")[6])

    expect = mod.SimVerifierReplay(False, 1 << 30, 128, load_hardware("cpu-epyc-fp32-2thread"))
    assert replayed(None) == pytest.approx(expect.call(waves), abs=0.05)
    assert replayed(h200) < 0.1 < replayed(None)

    for argv, message in [(["--replay", str(calls), "--hardware", "rtx9999"],
                           "--hardware: unknown hardware spec 'rtx9999'; known: cpu-epyc-1thread"),
                          (["--hardware", "h200"], "--hardware h200: only with --replay or --reprice")]:
        with pytest.raises(SystemExit) as e:
            mod.main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("dtype, calls_of, ours, before", [
    ("fp32", 11, {"whole": (6, 25), "incremental": (14, 21)},
     ("cpu-epyc-fp32-2thread", {"whole": (65, 81), "incremental": (100, 111)})),
    ("bf16", 21, {"whole": (6, 26), "incremental": (2, 8)},
     ("cpu-epyc-1thread", {"whole": (16, 34), "incremental": (7, 11)})),
])
def test_the_avx512_fits_price_this_hosts_recorded_verifier_calls(dtype, calls_of, ours, before,
                                                                  capsys):
    """The AVX-512 two-thread fits, made from generator steps alone, price the verifier calls
    recorded on the same host (`fasttts bench verifier-modes --quick --dtype float32 |
    bfloat16`, 2026-12-05) within the errors docs/verifier-pricing.md states (median |error|
    and max per call, %), and better than the specs that priced these engines before."""
    import re
    from pathlib import Path

    from fasttts.perf.specs import load_hardware

    mod = _verifier_calibration_module()
    calls = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / \
        f"verifier_calls_avx512_{dtype}_2thread.jsonl.gz"

    def errors(hardware):
        capsys.readouterr()
        assert mod.replay(calls, None, hardware) == 0
        out = capsys.readouterr().out
        return {m: (int(a), int(b)) for m, a, b in re.findall(
            rf"(whole|incremental): {calls_of} calls over 0.05 s, median \|error\| (\d+)%, "
            r"median signed [-+]\d+%, max (\d+)%", out)}

    assert errors(None) == ours
    assert errors(load_hardware(before[0])) == before[1]


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
    from fasttts.backends.vllm_engine import min_kv_cache_tokens
    from fasttts.config import (DEFAULT_GENERATOR, EngineConfig, RunConfig, RuntimeConfig,
                                SearchConfig, VerifierConfig)
    from fasttts.engines.real import plan_real_engines
    from fasttts.perf.specs import find_model_spec

    # bf16 (12 KiB per token) and the judge on the generator's model, as the numbers above say
    eng = dict(kv_cache_memory_bytes=64 << 20, max_model_len=4096, block_size=128,
               dtype="bfloat16")
    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **eng),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_GENERATOR, **eng)),
                    search=SearchConfig(n=32, beam_width=4, max_tokens=1024),
                    runtime=RuntimeConfig(memory_planner=True))
    planned, plan = plan_real_engines(cfg, "cpu-epyc-1thread")
    per_token = find_model_spec(DEFAULT_GENERATOR).kv_bytes_per_token
    floor = min_kv_cache_tokens(planned.generator) * per_token
    assert min_kv_cache_tokens(planned.generator) == (4096 // 128 + 1) * 128
    assert planned.generator.kv_cache_memory_bytes >= floor
    assert planned.verifier.engine.kv_cache_memory_bytes >= floor
    assert planned.generator.kv_cache_memory_bytes + planned.verifier.engine.kv_cache_memory_bytes == 128 << 20


# --- the prefix-reuse extension of T_tot (module docstring of memory_planner) ---------------

def reuse_time(inp, ver_bytes, gen_bytes):
    """T_reuse written out from the module docstring: each model recomputes rho * R *
    exp(-cache / (kappa * W * KV bytes per token)), R = N * (S - step_len) * D / 2 tokens at
    the per-token time of one S-token prefill; a verifier that reads no prefix cache
    (whole-path scoring) pays rho * R whatever its cache."""
    import math

    from fasttts.perf.roofline import StepShape, step_time
    from fasttts.runtime.memory_planner import GENERATOR_HIT, VERIFIER_HIT

    if inp.iterations == 1:
        return 0.0
    tokens = inp.num_requests * (inp.verifier_len - inp.step_len) * inp.iterations // 2
    total = 0.0
    for model, cache, hit in ((inp.verifier, ver_bytes, VERIFIER_HIT),
                              (inp.generator, gen_bytes, GENERATOR_HIT)):
        per_token = step_time(model, inp.hardware, StepShape.uniform(
            1, inp.verifier_len, 0, logits=False)) / inp.verifier_len
        miss = math.exp(-cache / (hit.kappa * inp.tree_tokens * model.kv_bytes_per_token))
        if model is inp.verifier and not inp.verifier_reuse:
            miss = 1.0
        total += hit.rho * miss * tokens * per_token
    return total


def _reuse_inp(mem, n, method="beam_search", beam_width=4, s=1024, **extra):
    from fasttts.config import SearchConfig
    from fasttts.runtime.plan_workload import search_shape

    # SART checked every 64 decode steps: the same 16 verifier rounds as a 64-token step
    own = {"sart_t": 64} if method == "sart" else {}
    return PlanInput(memory_bytes=mem, generator=load_model("qwen2.5-math-1.5b"),
                     verifier=load_model("math-shepherd-7b"), hardware=load_hardware("rtx4090"),
                     num_requests=n, verifier_len=s, decode_len=s,
                     **search_shape(SearchConfig(method=method, n=n, beam_width=beam_width,
                                                 **own), s),
                     **extra)


def _brute_force_reuse(inp, steps=400):
    """Every feasible (B_pre, B_dec) and, for each, the memory the batches leave over split at
    `steps` + 1 even points; the least time found."""
    n, m = inp.num_requests, inp.memory_bytes
    w_ver = inp.tree_tokens * inp.verifier.kv_bytes_per_token
    w_gen = inp.tree_tokens * inp.generator.kv_bytes_per_token
    best = None
    for b_pre in range(1, n + 1):
        need_v = max(min(b_pre * inp.kv_ver, w_ver), inp.verifier_floor)
        for b_dec in range(1, n + 1):
            need_g = max(min(b_dec * inp.kv_gen, w_gen), inp.generator_floor)
            left = m - need_v - need_g
            if left < 0:
                continue
            t_batches = sum(iteration_time(inp, b_pre, b_dec))
            if best is not None and t_batches > best:
                continue
            t = min(reuse_time(inp, need_v + left * i // steps, m - need_v - left * i // steps)
                    for i in range(steps + 1))
            best = t_batches + t if best is None else min(best, t_batches + t)
    return best


@pytest.mark.parametrize("mem_gib, n, method", [
    (1.5, 16, "beam_search"), (4.23, 64, "beam_search"), (4.23, 256, "beam_search"),
    (2, 128, "dvts"), (3, 32, "sart"), (14, 64, "beam_search")])
def test_reuse_planner_equals_brute_force(mem_gib, n, method):
    # the planner's closed-form split is the optimum: no grid point of any batch pair beats
    # it, and the best grid point is within the grid's spacing of it
    inp = _reuse_inp(int(mem_gib * GiB), n, method)
    assert inp.iterations == 16
    plan = plan_memory(inp, allow_offload=False)
    t = _brute_force_reuse(inp)
    assert plan.t_total <= t * (1 + 1e-12)
    assert plan.t_total == pytest.approx(t, rel=1e-3)
    assert plan.verifier_kv_bytes + plan.generator_kv_bytes == inp.memory_bytes
    assert plan.t_recompute == pytest.approx(
        reuse_time(inp, plan.verifier_kv_bytes, plan.generator_kv_bytes))


def test_tree_size_and_recompute_by_hand():
    from fasttts.config import SearchConfig
    from fasttts.runtime.plan_workload import search_shape

    def inp(method, **kw):
        return PlanInput(memory_bytes=GiB, generator=load_model("qwen2.5-math-1.5b"),
                         verifier=load_model("math-shepherd-7b"),
                         hardware=load_hardware("rtx4090"), num_requests=16, verifier_len=256,
                         decode_len=256,
                         **{**search_shape(SearchConfig(method=method, n=16, beam_width=4), 256),
                            **kw})

    beam = inp("beam_search")
    assert (beam.iterations, beam.step_len, beam.share, beam.lineages) == (4, 64, 4, 1)
    # levels from the leaves: 16, 4, 1, 1 nodes of 64 tokens
    assert beam.tree_tokens == (16 + 4 + 1 + 1) * 64
    # every path's prefix at every iteration: N * (S - step) * D / 2 = 16 * 192 * 2
    assert beam.recompute_tokens() == 6144
    # DVTS: 4 subtrees never merge: 16 + 4 + 4 + 4 nodes = N * (64 + 192 / 4) tokens
    dvts = inp("dvts")
    assert dvts.lineages == 4 and dvts.tree_tokens == 28 * 64 == 16 * (64 + 192 // 4)
    # independent paths (SART) share nothing: every path holds all of S; checked every
    # T = 64 decode steps, the verifier re-reads every path's prefix as beam search does
    sart = inp("sart", **search_shape(SearchConfig(method="sart", n=16, sart_t=64), 256))
    assert (sart.share, sart.lineages, sart.tree_tokens) == (1, 16, 16 * 256)
    assert sart.recompute_tokens() == 16 * (256 - 64) * 4 // 2
    # the paper's T = 400 is longer than these 256-token paths: one round, no re-reading
    assert inp("sart").recompute_tokens() == 0
    # one pass (best-of-N): no reuse term
    one = inp("best_of_n", iterations=1)
    assert one.recompute_tokens() == 0 and one.tree_tokens == 16 * 256
    # a measured tree wins over the estimate
    assert inp("beam_search", tree_len=100).tree_tokens == 1600
    # the generator's peak of the tree: W until measured, then the measurement, at most W
    assert beam.decode_tree_tokens == beam.tree_tokens
    assert inp("beam_search", decode_tree_len=50).decode_tree_tokens == 800
    assert inp("beam_search", decode_tree_len=500).decode_tree_tokens == beam.tree_tokens
    with pytest.raises(ValueError, match="decode_tree_len must be >= 1 token"):
        inp("beam_search", decode_tree_len=0)
    # the generator's batch of all N needs its measured peak, the verifier's the whole tree
    peaked = inp("beam_search", decode_tree_len=50)
    ver, gen = model_sides(peaked)
    assert gen.need(16) == 800 * peaked.generator.kv_bytes_per_token
    assert ver.need(16) == beam.tree_tokens * peaked.verifier.kv_bytes_per_token
    assert gen.cap(800 * peaked.generator.kv_bytes_per_token, 16) == 16
    with pytest.raises(ValueError, match="tree_len must be >= 1 token"):
        inp("beam_search", tree_len=0)
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        inp("beam_search", iterations=0)


def test_reuse_keeps_the_verifiers_cache_at_large_n():
    # 1.5B + 7B on the RTX 4090 with the default 4.23 GiB of KV, beam search n = 256: the
    # paper's T_tot gave the 7B PRM 1.19 GiB (B_pre = 32) and the rest to the generator, which
    # on the simulator made the PRM recompute its prefixes (2x slower than the static split).
    # With the reuse term the PRM keeps at least the static split's half, and the plan is
    # predicted to beat the static split.
    m = int(4.23 * GiB)
    paper = plan_memory(_inp(m, n=256), allow_offload=False)
    assert paper.verifier_kv_bytes < m // 2
    inp = _reuse_inp(m, 256)
    plan = plan_memory(inp, allow_offload=False)
    assert plan.verifier_kv_bytes >= m // 2
    assert plan.b_dec == 256
    assert plan.t_total < static_plan(inp).t_total
    # the generator keeps its tree: all its prefixes stay cached
    assert plan.generator_kv_bytes >= inp.tree_tokens * inp.generator.kv_bytes_per_token


def test_without_reuse_the_leftover_goes_to_the_generator():
    # one pass (D = 1): the paper's T_tot; the verifier gets what B_pre needs, no more
    inp = _inp(14 * GiB, n=64)
    plan = plan_memory(inp, allow_offload=False)
    assert plan.t_recompute == 0
    assert plan.verifier_kv_bytes == plan.b_pre * inp.kv_ver
    assert plan.generator_kv_bytes == inp.memory_bytes - plan.verifier_kv_bytes


def test_offload_pays_its_transfers_every_iteration():
    # 1.5B + 7B, n = 512: each model alone with all of M keeps more of its search tree; at
    # 8 GiB that saves ~3 s of recompute but moving 4 M per iteration over 16 iterations
    # costs 22 s, so the coupled plan wins; at 4.23 GiB the coupled plan recomputes ~45 s of
    # prefixes, more than the 11.6 s of transfers, so the planner offloads
    from fasttts.runtime.memory_planner import offload_plan

    inp = _reuse_inp(8 * GiB, 512)
    plan, off = plan_memory(inp), offload_plan(inp)
    assert not plan.offload
    assert off.t_offload == pytest.approx(16 * 4 * inp.memory_bytes / 25e9)
    assert off.t_recompute < plan.t_recompute < off.t_offload
    assert off.t_total > plan.t_total
    small = _reuse_inp(int(4.23 * GiB), 512)
    coupled, off = plan_memory(small, allow_offload=False), offload_plan(small)
    assert coupled.t_recompute - off.t_recompute > off.t_offload
    assert plan_memory(small) == off


@pytest.mark.parametrize("prompt,max_new", [(256, 2048), (256, 1024), (1, 1), (100, 7), (7, 100),
                                            (255, 256)])
def test_uniform_peak_len_is_the_brute_force_peak(prompt, max_new):
    from fasttts.runtime.plan_workload import uniform_peak_len

    # KV per sequence started, at decode step t: (p + t) for each of the (L - t) / L still
    # running; every t, by brute force (the formula's maximum may fall between steps)
    steps = [t / 8 for t in range(8 * max_new + 1)]
    peak = max((prompt + t) * (max_new - t) / max_new for t in steps)
    assert uniform_peak_len(prompt, max_new) == math.ceil(peak - 1e-9)
    assert uniform_peak_len(prompt, max_new) <= prompt + max(0, max_new / 2 - prompt) + max_new / 2
    if prompt <= max_new:  # at most the mean, p + L / 2
        assert uniform_peak_len(prompt, max_new) <= math.ceil(prompt + max_new / 2)
    for bad in ((0, max_new), (prompt, 0)):
        with pytest.raises(ValueError, match="must be >= 1 token"):
            uniform_peak_len(*bad)


def test_measured_peak_len_by_hand():
    from fasttts.runtime.plan_workload import measured_peak_len

    # paths of 0 and 100 tokens after a 10-token prompt: at t = 100 one of two holds 110
    assert measured_peak_len(10, [100, 0]) == 55.0  # the mean is 60
    assert measured_peak_len(10, [50, 50, 50]) == 60.0  # equal lengths: the mean
    # lengths 1, 2, 2, 3: at t = 1 all 4 hold 1 (1.0 a path), at t = 2 three hold 2 (1.5), at
    # t = 3 one holds 3 (0.75)
    assert measured_peak_len(0, [3, 1, 2, 2]) == 1.5
    with pytest.raises(ValueError, match="one or more lengths"):
        measured_peak_len(10, [])


def test_the_peak_sizes_only_a_batch_of_all_n_paths():
    """Paths that start together peak at decode_peak_len only if all N run at once; a smaller
    batch refills freed slots with new paths and is sized at S_dec."""
    gen_spec = load_model("qwen2.5-math-1.5b")
    per_token = gen_spec.kv_bytes_per_token
    inp = PlanInput(memory_bytes=GiB, generator=gen_spec, verifier=load_model("math-shepherd-7b"),
                    hardware=load_hardware("rtx4090"), num_requests=4, verifier_len=100,
                    decode_len=100, decode_peak_len=50)
    _, gen = model_sides(inp)
    assert gen.need(4) == 4 * 50 * per_token and gen.need(3) == 3 * 100 * per_token
    assert gen.cap(200 * per_token, 4) == 4  # all four at their peak
    assert gen.cap(199 * per_token, 4) == 1  # not all four: one path of S_dec = 100 fits
    assert gen.cap(99 * per_token, 4) == 0  # not one path of S_dec


def _first_request(method: str, n: int, **rt):
    from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig, VerifierConfig
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     search=SearchConfig(method=method, n=n, beam_width=4, max_tokens=2048),
                     runtime=RuntimeConfig(memory_planner=True, **rt))


def test_a_guessed_length_is_sized_at_the_kv_peak_for_one_pass_methods_only():
    from fasttts.backends.sim import sim_device
    from fasttts.runtime.plan_workload import plan_input

    def peak(method, seq_len=None, **rt):
        cfg = _first_request(method, 128, **rt)
        d = sim_device(cfg)
        return plan_input(cfg, GiB, d.generator, d.verifier, d.hardware, seq_len).decode_peak_len

    # 256 + 2048 / 2 = 1280 tokens on average; at the peak (2048 + 256)^2 / (4 * 2048) = 648
    assert peak("best_of_n") == peak("self_consistency") == 648
    assert peak("best_of_n", seq_len=636) is None  # a measured mean: every path's length
    assert peak("best_of_n", plan_seq_len=900) is None  # given by the user: the same
    assert peak("beam_search") is None and peak("dvts") is None  # step barriers, shared trees
    assert peak("sart") is None  # branch-level: sized at S_dec, as before


def test_a_first_best_of_n_request_of_128_paths_is_not_capped_below_n():
    """Fig. 11's best-of-N at n = 128 (simulated RTX 4090, 1.5B + Math-Shepherd-7B, 2,048
    tokens): sized at every path holding the mean guess (1,280 tokens) the first request got
    B_dec = 64; vLLM's continuous batching ran all 128 paths from the first step on the
    static split without a preemption (docs/benchmarks.md). At the guessed lengths' peak (648
    tokens a path) 128 fit."""
    from fasttts.backends.sim import sim_device
    from fasttts.engines.sim import plan_sim

    cfg = _first_request("best_of_n", 128)
    plan, sizes = plan_sim(cfg, sim_device(cfg))
    assert plan.b_dec == 128
    assert sizes.generator_kv >= 128 * 648 * 28672  # 28,672 bytes of KV per token (1.5B)
    assert sizes.generator_kv < 128 * 1280 * 28672  # what the old sizing could not find


def test_a_replan_on_measured_best_of_n_lengths_sizes_their_measured_peak():
    """A request whose paths measured the guessed mean (1,280 tokens) but spread from 0 to
    2,048 generated tokens: sized at every path holding that mean, 128 paths would not fit
    (B_dec 64, what the planner gave before); at their measured peak they do."""
    from fasttts.config import SimConfig
    from fasttts.engines import build_engines

    cfg = _first_request("best_of_n", 128)
    planned = build_engines(cfg)
    rp = planned.replanner
    assert planned.plan.b_dec == 128
    lengths = [round(i * 2048 / 127) for i in range(128)]  # mean 1024 generated
    rp.observe(256, lengths, 0, cfg.search)
    assert rp.measured_len == 1280 and 640 <= rp.measured_peak_len <= 660
    rp.update(cfg)
    assert rp.plan.b_dec == 128
    beam = _first_request("beam_search", 128)
    rp.observe(256, lengths, 0, beam.search)  # a tree method's paths: no peak of theirs
    assert len(rp._peaks) == 1


def _skywork_inp(n: int):
    """7B generator + Skywork 1.5B (transformers store), RTX 4090, beam search, 3.53 GiB."""
    from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig,
                                VerifierConfig)
    from fasttts.runtime.plan_workload import plan_input

    gen, ver = load_model("qwen2.5-math-7b"), load_model("skywork-prm-1.5b")
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-7b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="skywork-prm-1.5b")),
                    search=SearchConfig(n=n, beam_width=4, max_tokens=2048),
                    runtime=RuntimeConfig(incremental_verification=True))
    return plan_input(cfg, int(3.53 * GiB), gen, ver, load_hardware("rtx4090"))


def test_a_store_of_whole_prefixes_is_priced_by_its_own_s_shaped_hit_model():
    """Skywork's transformers store recomputes rho * R * exp(-(C / (x0 N S KV))^shape), R =
    N (S - step) D / 2 tokens at the per-token time of one S-token prefill (module
    docstring), written out by hand here; the paged cache's exponential is not used."""
    import math

    from fasttts.perf.roofline import StepShape, step_time
    from fasttts.runtime.memory_planner import VERIFIER_STORE_HIT as hit

    inp = _skywork_inp(256)
    assert inp.verifier_reuse and not inp.verifier_paged
    ver, _ = model_sides(inp)
    s, kv = inp.verifier_len, inp.verifier.kv_bytes_per_token
    tokens = inp.num_requests * (s - inp.step_len) * inp.iterations // 2
    r = tokens * step_time(inp.verifier, inp.hardware,
                           StepShape.uniform(1, s, 0, logits=False)) / s
    for gib in (0.0, 1.0, 2.5, 6.0):
        x = gib * GiB / (inp.num_requests * s * kv)
        assert ver.recompute(int(gib * GiB)) == pytest.approx(
            hit.rho * r * math.exp(-(x / hit.x0) ** hit.shape), rel=1e-9)
    # S-shaped: the first GiB saves less than the second (an exponential saves more)
    first = ver.recompute(0) - ver.recompute(GiB)
    second = ver.recompute(GiB) - ver.recompute(2 * GiB)
    assert 0 < first < second


@pytest.mark.parametrize("n", [128, 512])
def test_a_store_of_whole_prefixes_gets_the_split_of_least_summed_recompute(n):
    """The plan's split of what the batches leave is within the search's resolution of the
    least verifier + generator recompute over every 1/4000 of the spare memory (brute force);
    at n = 128 the store gets more than the static split's half (the paged model's fit gave it
    1.05 GiB there, and the simulated verifier then spent x1.72 its seconds), at n = 512 its
    minimum (a store of 1.76 GiB keeps under 10 % of the paths whole: it saves little)."""
    inp = _skywork_inp(n)
    plan = plan_memory(inp, allow_offload=False)
    ver, gen = model_sides(inp)
    v_need, g_need = ver.need(plan.b_pre), gen.need(plan.b_dec)
    total = plan.verifier_kv_bytes + plan.generator_kv_bytes
    assert plan.verifier_kv_bytes >= v_need and plan.generator_kv_bytes >= g_need

    def cost(v):
        return ver.recompute(v) + gen.recompute(total - v)

    left = total - v_need - g_need
    best = min(cost(v_need + left * i // 4000) for i in range(4001))
    assert cost(plan.verifier_kv_bytes) <= best + 1e-3
    if n == 128:
        assert plan.verifier_kv_bytes > total // 2
    else:
        assert plan.verifier_kv_bytes == v_need
    paged = plan_memory(replace(inp, verifier_paged=True), allow_offload=False)
    assert paged.verifier_kv_bytes != plan.verifier_kv_bytes
