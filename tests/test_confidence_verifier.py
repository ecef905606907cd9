"""The generator's own confidence as a verifier (kind "confidence", issue 17 item 3): the score
formula, the runtime's token log-probabilities along paths (head starts and lookahead
included), searches on the simulator that use it, and the configurations it refuses."""

import math

import pytest

from fasttts.backends.base import GenerationParams, ScoreRequest
from fasttts.backends.sim import build_sim
from fasttts.beam import Beam
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)
from fasttts.engines import build_engines
from fasttts.runtime.loop import SearchRunner
from fasttts.runtime.token_logprobs import outcome_request, path_step_logprobs, with_branch_logprobs
from fasttts.verifiers import (MODEL_FREE_KINDS, VERIFIER_KINDS, build_verifier, verifier_class)
from fasttts.verifiers.base import aggregate
from fasttts.verifiers.confidence import ConfidenceVerifier, MissingLogprobs

PROBLEM = "Let x + 1/x = 3. Find x^3 + 1/x^3."


# ---- the score ---------------------------------------------------------------------------

def test_mean_score_is_exp_of_mean_step_logprob():
    lps = ((-0.1, -0.3), (-1.0,), (-0.5, -0.5, -2.0))
    req = ScoreRequest("p", ("a\n\n", "b\n\n", "c"), 0, lps)
    got = ConfidenceVerifier().score([req, ScoreRequest("p", req.steps, 2, lps)])
    assert got[0] == pytest.approx([math.exp(-0.2), math.exp(-1.0), math.exp(-1.0)])
    assert got[1] == pytest.approx([math.exp(-1.0)])  # steps start: only


def test_lowest_window_score_by_hand():
    lps = ((-0.1, -0.3), (-1.0,), (0.0, 0.0))
    # window 2, running minimum of window means up to each step's end:
    # step 1: [-0.1, -0.3] -> -0.2; step 2: [-0.3, -1.0] -> -0.65; step 3: [-1.0, 0] -> -0.5, 0
    got = ConfidenceVerifier(window=2).score([ScoreRequest("p", ("a", "b", "c"), 0, lps)])[0]
    assert got == pytest.approx([math.exp(-0.2), math.exp(-0.65), math.exp(-0.65)])


def test_empty_step_and_certain_tokens():
    got = ConfidenceVerifier().score([ScoreRequest("p", ("a", "b"), 0, ((), (0.0, 0.0)))])[0]
    assert got == [1.0, 1.0]  # no tokens before: no evidence; p = 1 tokens: 1


def test_verifier_is_free_and_needs_logprobs():
    v = ConfidenceVerifier()
    assert v.needs_logprobs and v.cache_stats() is None and v.supports_incremental
    with pytest.raises(MissingLogprobs, match="log-probabilities"):
        v.score([ScoreRequest("p", ("a",), 0)])
    with pytest.raises(ValueError, match="step_logprobs"):
        ScoreRequest("p", ("a", "b"), 0, ((-1.0,),))
    with pytest.raises(ValueError, match="window"):
        ConfidenceVerifier(window=0)


# ---- the one list of kinds, the factory ----------------------------------------------------

def test_one_list_of_kinds_every_kind_has_a_class():
    import typing

    kinds = typing.get_args(VerifierConfig.model_fields["kind"].annotation)
    assert "confidence" in VERIFIER_KINDS and set(VERIFIER_KINDS) == set(kinds) - {"auto"}
    assert verifier_class("confidence") is ConfidenceVerifier
    assert set(MODEL_FREE_KINDS) <= set(VERIFIER_KINDS)


def test_build_verifier_loads_no_model():
    v = build_verifier(VerifierConfig(kind="confidence", engine=EngineConfig(model="nowhere/x")),
                       incremental=True)
    assert isinstance(v, ConfidenceVerifier)
    assert v.score([ScoreRequest("p", ("a",), 0, ((-0.5,),))]) == [[pytest.approx(math.exp(-0.5))]]


# ---- token log-probabilities along a path -----------------------------------------------

def test_path_logprobs_cut_by_step_tokens():
    b = Beam(beam_id=1, token_ids=[1, 2, 3, 4, 5], token_logprobs=[-1, -2, -3, -4, -5],
             steps=["a\n\n", "b\n\n"], step_tokens=[2, 2])
    assert path_step_logprobs(b) == ((-1, -2), (-3, -4, -5))  # leftover token: last step
    assert with_branch_logprobs(b, ("a\n\n", "b\n\n", "c\n\n"), [-6, -7]) == (
        (-1, -2), (-3, -4, -5), (-6, -7))
    req = outcome_request("p", b)
    assert req.steps == ("",) and req.step_logprobs == ((-1, -2, -3, -4, -5),)
    unkept = Beam(beam_id=2, token_ids=[1, 2], steps=["a"], step_tokens=[2])
    assert path_step_logprobs(unkept) is None and outcome_request("p", unkept).step_logprobs is None
    child = b.child(3)
    assert child.token_logprobs == b.token_logprobs and child.token_logprobs is not b.token_logprobs


def _cfg(runtime=None, method="beam_search", **search):
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(kind="confidence", agg_strategy="min",
                                             engine=EngineConfig(model="math-shepherd-7b")),
                     search=SearchConfig(method=method, **{"n": 16, "beam_width": 4, "seed": 1,
                                                           **search}),
                     sim=SimConfig(), runtime=runtime or RuntimeConfig())


def test_sim_generator_gives_logprobs_only_when_asked():
    gen, _ = build_sim(_cfg())
    prompt = gen.encode_chat([{"role": "user", "content": PROBLEM}])
    gen.add_sequence("a", prompt, GenerationParams(max_tokens=20, seed=3))
    gen.add_sequence("b", prompt, GenerationParams(max_tokens=20, seed=3, logprobs=True))
    got = {"a": ([], []), "b": ([], [])}
    while gen.num_unfinished():
        for up in gen.step():
            got[up.seq_id][0].extend(up.new_token_ids)
            got[up.seq_id][1].extend(up.new_logprobs)
    assert got["a"][0] == got["b"][0] and got["a"][1] == []
    assert len(got["b"][1]) == len(got["b"][0]) and all(lp < 0 for lp in got["b"][1])


def _search(cfg):
    built = build_engines(cfg)
    gen, ver = built.generator, built.verifier
    picked = []
    runner = SearchRunner(gen, ver, cfg.search, agg_strategy=cfg.verifier.agg_strategy,
                          runtime=cfg.runtime, on_select=lambda it, kept: picked.append(
                              [(b.beam_id, tuple(b.step_scores)) for b in kept]))
    result = runner.run(PROBLEM, "p")
    return picked, result


def _confidence_by_hand(beam: Beam) -> list[float]:
    out, pos = [], 0
    for n in beam.step_tokens:
        span = beam.token_logprobs[pos:pos + n]
        out.append(math.exp(sum(span) / len(span)))
        pos += n
    return out


def test_beam_search_on_the_simulator_selects_by_confidence(monkeypatch):
    """Every kept beam's step scores are exp(mean token log-probability) of its steps, the
    kept beams are the n/B best by min-aggregated confidence of the candidates, and the
    verifier costs no time and has no cache."""
    cfg = _cfg()
    built = build_engines(cfg)  # the simulated generator; the confidence verifier, no engine
    gen, ver = built.generator, built.verifier
    assert isinstance(ver, ConfidenceVerifier)
    decisions = []
    from fasttts.search import beam_search

    select = beam_search.BeamSearch.select

    def spy(self, live, finished):
        kept = select(self, live, finished)
        decisions.append((list(live), list(kept)))
        return kept

    monkeypatch.setattr(beam_search.BeamSearch, "select", spy)
    result = SearchRunner(gen, ver, cfg.search, agg_strategy="min").run(PROBLEM, "p")
    assert len(decisions) >= 2
    for live, kept in decisions:
        for b in live:
            assert len(b.token_logprobs) == len(b.token_ids)
            assert b.step_scores == pytest.approx(_confidence_by_hand(b))
            assert b.score == pytest.approx(aggregate(b.step_scores, "min"))
        best = sorted((b.score for b in live), reverse=True)[:len(kept)]
        assert sorted((b.score for b in kept), reverse=True) == best
    assert result.verifier_time == 0.0 and result.verifier_cache is None
    assert result.completions and all(0 < c.score <= 1 for c in result.completions)


def test_derailed_paths_are_less_confident_on_the_simulator():
    """The simulator's quality model: on-track steps (marker ✓) get higher confidence."""
    _, result = _search(_cfg(method="best_of_n", n=32))
    on, off = [], []
    for b in result.completions:
        for step, score in zip(b.steps, b.step_scores):
            (on if step.lstrip().startswith("\u2713") else off).append(score)
    assert on and off and sum(on) / len(on) > sum(off) / len(off)


@pytest.mark.parametrize("runtime", [
    RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0),
    RuntimeConfig.fasttts(spec_truncation_ratio=0),
])
def test_head_starts_carry_logprobs_same_decisions(runtime):
    """With R = 0 speculative head starts are the beam's own stream, log-probabilities
    included: SBE (and LookAhead Verification, which scores speculative steps from the
    branch's log-probabilities) make the same selections as the baseline."""
    base, rb = _search(_cfg())
    spec, rs = _search(_cfg(runtime))
    assert rs.spec["head_start_tokens"] > 0
    assert base == spec
    assert [b.step_scores for b in rb.completions] == [b.step_scores for b in rs.completions]


def test_truncated_head_starts_and_lookahead_rollouts_keep_logprobs_parallel():
    for cfg in (_cfg(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0.85)),
                _cfg(lookahead=1)):
        _, result = _search(cfg)
        for b in result.completions:
            assert len(b.token_logprobs) == len(b.token_ids)
            assert b.step_scores == pytest.approx(_confidence_by_hand(b))


def test_outcome_scoring_uses_the_whole_path():
    _, result = _search(_cfg(method="best_of_n_orm", n=8))
    for b in result.completions:
        lps = b.token_logprobs
        assert b.score == pytest.approx(math.exp(sum(lps) / len(lps)))


# ---- memory and configurations -------------------------------------------------------------

def test_generator_gets_all_the_memory():
    plain = build_engines(_cfg())
    planned = build_engines(_cfg(RuntimeConfig(memory_planner=True)))
    try:
        assert planned.plan.kind == "generator-only" and planned.plan.verifier_kv_bytes == 0
        assert planned.replanner is None
        assert planned.generator.engine.kv.num_blocks == plain.generator.engine.kv.num_blocks
        with_prm = build_engines(_cfg().model_copy(update={"verifier": VerifierConfig(
            engine=EngineConfig(model="math-shepherd-7b"))}))
        assert plain.generator.engine.kv.num_blocks > 2 * with_prm.generator.engine.kv.num_blocks
        with_prm.close()
    finally:
        plain.close()
        planned.close()


def test_real_planner_gives_the_generator_both_kv_sizes():
    from fasttts.engines import _generator_only_real

    cfg = RunConfig(verifier=VerifierConfig(kind="confidence"),
                    runtime=RuntimeConfig(memory_planner=True))
    applied, plan = _generator_only_real(cfg)
    total = cfg.generator.kv_cache_memory_bytes + cfg.verifier.engine.kv_cache_memory_bytes
    assert applied.generator.kv_cache_memory_bytes == total == plan.generator_kv_bytes


def test_cli_refuses_a_verifier_model_with_confidence(capsys):
    from fasttts.cli import main

    assert main(["solve", "--backend", "sim", "--verifier-kind", "confidence",
                 "--verifier", "math-shepherd-7b", "What is 1+1?"]) == 2
    assert "drop --verifier" in capsys.readouterr().err


def test_server_start_line_names_no_verifier_model():
    from fasttts.serve.access_log import start_line

    line = start_line(_cfg(), ["fasttts"], "http://x")
    assert "the generator's own confidence" in line and "math-shepherd" not in line


def test_confidence_window_flag_reaches_the_verifier():
    """`--confidence-window 2` builds the lowest-window verifier (the hand-computed scores of
    `test_lowest_window_score_by_hand`); without it the mean; with another kind, an error."""
    from fasttts.cli import _run_config, build_parser

    def built(*argv):
        args = build_parser().parse_args(["solve", "x", "--verifier-kind", "confidence", *argv])
        return build_verifier(_run_config(args).verifier)

    lps = ((-0.1, -0.3), (-1.0,), (0.0, 0.0))
    req = ScoreRequest("p", ("a", "b", "c"), 0, lps)
    assert built("--confidence-window", "2").score([req])[0] == pytest.approx(
        [math.exp(-0.2), math.exp(-0.65), math.exp(-0.65)])
    assert built().score([req])[0] == pytest.approx([math.exp(-0.2), math.exp(-1.0), 1.0])
    with pytest.raises(ValueError, match="confidence_window applies to verifier kind "
                                         "'confidence' only, not 'judge'"):
        VerifierConfig(kind="judge", confidence_window=2)
    with pytest.raises(ValueError, match="greater than 0"):
        VerifierConfig(kind="confidence", confidence_window=0)
