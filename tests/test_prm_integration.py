"""The hub PRM formats, exercised on small local models built from the embedded 0.5B model.

Real PRM weights cannot be downloaded here, so each test builds a local checkpoint with the
layout of the real PRM (same architecture name, same extra head tensors, the step tag as one
token) from the embedded model's weights plus a head whose weights the test chooses
(`fasttts.models.derived`). That exercises the real loading and scoring code paths (vLLM's
pooling runner, whole-path with the STEP pooler and incremental from the prefix cache;
transformers + value head); it cannot show that the real PRMs score well.

Exactness tolerance: the engines run in the dtype "auto" picks (float32 on CPUs without
bf16, bf16 elsewhere). An incremental request computes the new step's tokens against cached
KV, a whole-path request computes them in one prefill: the same math in another order of
roundings. The tolerance follows the dtype the verifier really runs in, the verifier's own
`score_tolerance` (`fasttts.verifiers.base.SCORE_TOLERANCE`): 1e-5 in float32 (differences
of about 1e-7), 2e-2 for vLLM in bf16 (measured worst 5.1e-3 over 36 Math-Shepherd steps),
5e-2 for Skywork's transformers in bf16 (measured worst 0.028 over 16 steps with the test's
head: its bf16 CPU attention over a KV cache of another length rounds differently again).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.models.derived import derive_checkpoint, math_shepherd_checkpoint
from fasttts.verifiers.base import ScoreRequest

pytestmark = pytest.mark.integration
MiB = 1 << 20
HIDDEN = 896
STEPS = ("Step 1: 48 / 2 = 24.\n\n", "Step 2: 48 + 24 = 72.\n\n", "So the answer is 72.")
PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many in total?"
#: Twelve steps of 30-60 tokens: paths long enough to span several 32-token blocks.
LONG = tuple(f"Step {k}: multiply {7 * k} by {k + 3} to get {7 * k * (k + 3)}, then subtract "
             f"{k} and divide by {k + 1}, which leaves {(7 * k * (k + 3) - k) / (k + 1):.3f}."
             + (" Check it again." * (k % 3)) + "\n\n" for k in range(1, 13))


def check_scores(verifier):
    full, tail = verifier.score([ScoreRequest(PROBLEM, STEPS, 0), ScoreRequest(PROBLEM, STEPS, 1)])
    assert len(full) == 3 and len(tail) == 2
    assert all(0.0 <= s <= 1.0 for s in full)
    assert verifier.score_tolerance > 0
    assert tail == pytest.approx(full[1:], abs=verifier.score_tolerance)
    return full


def compare_modes(make):
    """Whole-path vs incremental scores of the same steps: the incremental verifier scores
    each path one new step per call, as a search does (earlier scores kept, never re-scored);
    returns (steps compared, worst absolute difference)."""
    whole, inc = make(False), make(True)
    try:
        paths = [LONG, LONG[:6] + tuple(reversed(LONG[6:])), tuple(reversed(LONG))]
        ref = whole.score([ScoreRequest(PROBLEM, p, 0) for p in paths])
        got: list[list[float]] = [[] for _ in paths]
        before = inc.cache_stats()
        for k in range(len(LONG)):
            for i, s in enumerate(inc.score([ScoreRequest(PROBLEM, p[: k + 1], k) for p in paths])):
                got[i] += s
        stats = inc.cache_stats().since(before)
        # no block size configured or 32: the incremental engine runs 32-token blocks on CPU
        assert inc.cache_stats().block_size == 32
        worst = max(abs(a - b) for r, g in zip(ref, got) for a, b in zip(r, g))
        assert whole.score_tolerance == inc.score_tolerance > 0
        assert worst <= whole.score_tolerance, worst
        assert stats.prefix_cache_hit_rate > 0.5  # the prefix cache served the earlier steps
        assert whole.cache_stats().prefix_cache_hits == 0  # STEP pooling reads no cache
        # the ranking of the paths by their last step is the same in both modes
        assert sorted(range(3), key=lambda i: ref[i][-1]) == sorted(range(3), key=lambda i: got[i][-1])
        worst = max(worst, fresh_paths(inc, paths, ref))
        return sum(len(r) for r in ref), worst
    finally:
        whole.close()
        inc.close()


def fresh_paths(inc, paths, ref) -> float:
    """Every step of each path new in one call, first on an empty prefix cache (one request
    per path and no more: the first two paths share six steps, whose tags the second finds
    cached and reads from the first's rows), then again with the paths cached (their tags
    inside the cached prefix are read from requests cut after them); the scores of both
    calls equal the whole-path ones `ref`. Returns the worst difference."""
    inc.engine.reset_prefix_cache()
    worst = 0.0
    for call in range(2):
        before = inc.cache_stats()
        got = inc.score([ScoreRequest(PROBLEM, p, 0) for p in paths])
        queries = inc.cache_stats().since(before).prefix_cache_queries
        whole = sum(len(inc.prompt_ids(PROBLEM, p)) for p in paths)
        assert queries == whole if call == 0 else queries > whole
        worst = max([worst] + [abs(a - b) for r, g in zip(ref, got) for a, b in zip(r, g)])
        assert [len(g) for g in got] == [len(r) for r in ref]
    assert worst <= inc.score_tolerance, worst
    # a step that holds the tag would be read at the wrong token: refused before any request
    bad = (LONG[0], f"{LONG[1].strip()}{inc.step_tag} and more")
    before = inc.cache_stats()
    with pytest.raises(RuntimeError, match="a step of a path holds the step tag text"):
        inc.score([ScoreRequest(PROBLEM, bad, 0)])
    assert inc.cache_stats().since(before).prefix_cache_queries == 0
    assert inc.cache_stats().num_blocks_used == 0
    return worst


def _engine(folder, **kw) -> EngineConfig:
    return EngineConfig(model=str(folder), kv_cache_memory_bytes=128 * MiB, max_model_len=1024,
                        **kw)


@pytest.mark.parametrize("dtype", ["auto", "float32"])
def test_math_shepherd_format_whole_path_and_incremental(tmp_path, dtype):
    """On every host once in the dtype "auto" picks, and once in float32, where the two
    modes must agree to 1e-5 (bfloat16 hosts: the same checkpoint at 2e-2 as well)."""
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(tmp_path / "ms", DEFAULT_GENERATOR)
    v = MathShepherdVerifier(_engine(folder, dtype=dtype))
    if dtype == "float32":
        assert v.score_tolerance == 1e-5
    try:
        check_scores(v)
        ids, tags = v.path_ids(PROBLEM, STEPS)
        assert ids.count(v.step_tag_id) == 3 and [ids[t] for t in tags] == [v.step_tag_id] * 3
    finally:
        v.close()
    n, worst = compare_modes(lambda inc: MathShepherdVerifier(
        _engine(folder, block_size=32, dtype=dtype), incremental=inc))
    print(f"math-shepherd format: {n} steps, worst |incremental - whole| = {worst:.2e}")


def test_a_step_tag_of_two_tokens_is_refused():
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier
    from fasttts.verifiers.pooling import StepTagError

    # the embedded model's own tokenizer splits " ки" into two tokens
    with pytest.raises(StepTagError, match=r"step tag ' ки' is 2 tokens"):
        MathShepherdVerifier(_engine(DEFAULT_GENERATOR))


def _qwen_prm(folder, head_seed=None):
    g = torch.Generator().manual_seed(head_seed or 0)
    if head_seed is None:
        # ReLU(W1 h + b1) = 0 for W1 = 0, b1 = 0; logits = b2 = (0, ln 3) -> p(good) = 0.75
        w1, w2 = torch.zeros(HIDDEN, HIDDEN), torch.zeros(2, HIDDEN)
    else:
        w1 = torch.randn(HIDDEN, HIDDEN, generator=g) * 0.05
        w2 = torch.randn(2, HIDDEN, generator=g) * 0.02  # small: probabilities not saturated
    derive_checkpoint(folder, DEFAULT_GENERATOR, {"architectures": ["Qwen2ForProcessRewardModel"]}, {
        "score.0.weight": w1.to(torch.bfloat16),
        "score.0.bias": torch.zeros(HIDDEN, dtype=torch.bfloat16),
        "score.2.weight": w2.to(torch.bfloat16),
        "score.2.bias": torch.tensor([0.0, 1.0986123], dtype=torch.bfloat16),
    }, rename_tokens={"<|quad_end|>": "<extra_0>"})  # id 151651, as in Qwen2.5-Math-PRM
    return folder


def test_qwen_prm_format_with_a_chosen_head(tmp_path):
    from fasttts.verifiers.qwen_prm import QwenPRMVerifier

    v = QwenPRMVerifier(_engine(_qwen_prm(tmp_path / "qwen-prm")))
    try:
        assert v.step_tag_id == 151651
        scores = check_scores(v)
        assert scores == pytest.approx([0.75] * 3, abs=0.01)
    finally:
        v.close()


def test_qwen_prm_format_whole_path_and_incremental(tmp_path):
    from fasttts.verifiers.qwen_prm import QwenPRMVerifier

    folder = _qwen_prm(tmp_path / "qwen-prm", head_seed=1)
    # no block size given: the incremental engine takes INCREMENTAL_CPU_BLOCK_SIZE (32)
    n, worst = compare_modes(lambda inc: QwenPRMVerifier(_engine(folder), incremental=inc))
    print(f"qwen-prm format: {n} steps, worst |incremental - whole| = {worst:.2e}")


def _skywork(folder, weight):
    derive_checkpoint(folder, DEFAULT_GENERATOR, {}, {"v_head.summary.weight": weight,
                                                      "v_head.summary.bias": torch.tensor([2.0])})
    return folder


def test_skywork_value_head_in_transformers(tmp_path):
    from fasttts.verifiers.skywork import SkyworkVerifier

    v = SkyworkVerifier(EngineConfig(model=str(_skywork(tmp_path / "sk", torch.zeros(1, HIDDEN)))),
                        batch_size=2)
    scores = check_scores(v)
    assert scores == pytest.approx([1 / (1 + torch.exp(torch.tensor(-2.0)).item())] * 3, abs=1e-4)
    ids, flags = v.prompt(PROBLEM, STEPS)
    assert [ids[p] for p in flags] == [v.step_token_id] * 3


def test_skywork_incremental_reuses_past_key_values(tmp_path):
    from fasttts.verifiers.skywork import SkyworkVerifier

    weight = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(2)) * 0.05
    folder = _skywork(tmp_path / "sk", weight)
    whole = SkyworkVerifier(EngineConfig(model=str(folder)), batch_size=3)
    inc = SkyworkVerifier(EngineConfig(model=str(folder), kv_cache_memory_bytes=256 * MiB),
                          incremental=True)
    paths = [LONG[:8], LONG[:4] + LONG[8:12]]
    ref = whole.score([ScoreRequest(PROBLEM, p, 0) for p in paths])
    got = [[], []]
    for k in range(8):
        for i, s in enumerate(inc.score([ScoreRequest(PROBLEM, p[: k + 1], k) for p in paths])):
            got[i] += s
    worst = max(abs(a - b) for r, g in zip(ref, got) for a, b in zip(r, g))
    print(f"skywork: 16 steps, worst |incremental - whole| = {worst:.2e}")
    assert whole.score_tolerance == inc.score_tolerance > 0
    assert worst <= whole.score_tolerance
    # scored one step per call, 8 calls, yet every token of each path was computed exactly
    # once: as many tokens as ONE whole-path pass (which a search would repeat every step)
    assert inc.tokens_computed == whole.tokens_computed
    whole.close()
    inc.close()


def test_model_without_value_head_is_refused(tmp_path):
    from fasttts.verifiers.skywork import load_value_head

    (tmp_path / "x.safetensors").write_bytes(b"")
    save_file({"a": torch.zeros(1)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(ValueError, match="not a Skywork PRM"):
        load_value_head(str(tmp_path))
