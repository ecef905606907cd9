"""The confidence verifier on the real vLLM CPU engine (embedded default generator, tiny
budgets): the generator's per-token log-probabilities are the model's log p of the sampled
tokens, and a beam search scores steps from them. The engine is this module's own, closed when
the module ends: a session fixture imported from another test module would be a second
session engine that lives to the end of the run (it ran the suite out of memory)."""

from __future__ import annotations

import math

import pytest

from fasttts.backends.base import GenerationParams
from fasttts.config import DEFAULT_GENERATOR, EngineConfig, SearchConfig
from fasttts.runtime.loop import SearchRunner
from fasttts.steps import build_messages
from fasttts.verifiers.confidence import ConfidenceVerifier
from tests.test_vllm_integration import PROBLEM

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def generator():
    from fasttts.backends.vllm_generator import VLLMGenerator

    # float32 whatever the CPU: in bfloat16 (the "auto" dtype on CPUs with AVX-512 BF16) a
    # sampled token's log p and the prompt log p of the same token differ by up to 0.1
    gen = VLLMGenerator(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=256 << 20,
                                     max_model_len=2048, dtype="float32"))
    yield gen
    gen.close()


def _prompt_logprobs(gen, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1, from the same engine's prompt log-probabilities."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    gen.engine.add_request("ref", TokensPrompt(prompt_token_ids=ids),
                           SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
    out = None
    while out is None:
        for o in gen.engine.step():
            if o.request_id == "ref" and o.finished:
                out = o
    return [pos[t].logprob for t, pos in zip(ids[1:], out.prompt_logprobs[1:])]


def test_logprobs_are_the_sampled_tokens_log_p_and_off_by_default(generator):
    prompt = generator.encode_chat(build_messages(PROBLEM.problem))
    got = {}
    for seq_id, logprobs in (("plain", False), ("lp", True)):
        generator.add_sequence(seq_id, prompt, GenerationParams(
            max_tokens=24, temperature=0.8, seed=7, logprobs=logprobs))
        tokens, lps = [], []
        while generator.num_unfinished():
            for up in generator.step():
                tokens += up.new_token_ids
                lps += up.new_logprobs
        got[seq_id] = tokens, lps
    assert got["plain"][1] == [] and got["plain"][0] == got["lp"][0]
    tokens, lps = got["lp"]
    assert len(lps) == len(tokens) == 24 and all(lp <= 0 for lp in lps)
    ref = _prompt_logprobs(generator, prompt + tokens)[len(prompt) - 1:]
    assert lps == pytest.approx(ref, abs=0.05)


def test_beam_search_scored_by_the_generators_confidence(generator):
    cfg = SearchConfig(method="beam_search", n=2, beam_width=2, max_tokens=40, num_iterations=2,
                       seed=3)
    result = SearchRunner(generator, ConfidenceVerifier(), cfg, agg_strategy="min").run(
        PROBLEM.problem, "conf")
    assert result.completions and generator.num_unfinished() == 0
    assert result.verifier_time < 0.05 * result.generator_time
    for b in result.completions:
        assert len(b.token_logprobs) == len(b.token_ids)
        pos, want = 0, []
        for n in b.step_tokens:
            span = b.token_logprobs[pos:pos + n] or [0.0]
            want.append(math.exp(sum(span) / len(span)))
            pos += n
        assert b.step_scores == pytest.approx(want[:len(b.step_scores)])
        assert 0 < b.score <= 1
