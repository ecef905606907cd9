"""A trained step-end head (OVM) served by vLLM scores exactly what it was fitted on.

The head is fitted on features computed with transformers (`FeatureExtractor`) and served
from a truncated sequence-classification checkpoint by vLLM's pooling runner
(`OVMVerifier`). This test builds such a checkpoint from the embedded generator (4 layers, a
seeded random head), and checks that vLLM's step scores equal sigmoid(weight . feature) of the
transformers features, in whole-path and incremental mode, and that the incremental verifier
reads its prefix cache. Both sides run in float32 (the engine pinned to it: on a CPU with
AVX-512 BF16 "auto" would be bfloat16, whose rounding alone moves these scores by ~2e-3).
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.models import resolve_model
from fasttts.models.heads import build_head_checkpoint, save_head
from fasttts.prm_train.features import FeatureExtractor
from fasttts.verifiers.base import ScoreRequest

pytestmark = pytest.mark.integration
MiB = 1 << 20
LAYER = 4
PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many in total?"
STEPS = ("Natalia sold 48 / 2 = 24 clips in May.\n\n",
         "Altogether she sold 48 + 24 = 72 clips.\n\n",
         "Therefore, the final answer is: $\\boxed{72}$. I hope it is correct.")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ovm")
    weight = np.random.default_rng(3).normal(size=896).astype(np.float32) * 0.005
    head = save_head(root / "head", weight, {"base": DEFAULT_GENERATOR, "layer": LAYER,
                                             "system_prompt": None})
    return build_head_checkpoint(head, root / "ckpt"), weight


def _expected(weight) -> list[float]:
    ext = FeatureExtractor(resolve_model(DEFAULT_GENERATOR), [LAYER])
    feats = ext.features(PROBLEM, ["".join(STEPS)])[0][:, 0]
    return (1 / (1 + np.exp(-(feats @ weight)))).tolist()


def test_vllm_scores_equal_the_fitted_head(checkpoint):
    from fasttts.verifiers.ovm import OVMVerifier

    folder, weight = checkpoint
    want = _expected(weight)
    assert len(want) == 3 and max(want) - min(want) > 0.01  # not saturated, not constant
    for incremental in (False, True):
        v = OVMVerifier(EngineConfig(model=str(folder), kv_cache_memory_bytes=64 * MiB,
                                     max_model_len=1024, block_size=32, dtype="float32"),
                        incremental=incremental)
        try:
            ids, tags = v.path_ids(PROBLEM, STEPS)
            assert len(tags) >= len(STEPS) and all(ids[t] == v.step_tag_id for t in tags)
            before = v.cache_stats()
            if incremental:  # one new step per call, as a search does
                got = [s for k in range(3)
                       for s in v.score([ScoreRequest(PROBLEM, STEPS[: k + 1], k)])[0]]
            else:
                got = v.score([ScoreRequest(PROBLEM, STEPS, 0)])[0]
            stats = v.cache_stats().since(before)
            if incremental:  # all steps new in one call: uncached, then cached
                v.engine.reset_prefix_cache()
                for _ in range(2):
                    assert v.score([ScoreRequest(PROBLEM, STEPS, 0)])[0] == pytest.approx(
                        got, abs=v.score_tolerance)
        finally:
            v.close()
        assert got == pytest.approx(want, abs=2e-3), (incremental, got, want)
        if incremental:
            assert stats.prefix_cache_hit_rate > 0.5
        else:
            assert stats.prefix_cache_hits == 0
