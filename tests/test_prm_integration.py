"""The hub PRM formats, exercised on small local models built from the embedded 0.5B model.

Real PRM weights cannot be downloaded here, so each test builds a local checkpoint with the
layout of the real PRM (same architecture name, same extra head tensors) from the embedded
model's weights plus a head whose weights the test chooses. That exercises the real loading and
scoring code paths (vLLM pooling runner with the STEP pooler; transformers + value head); it
cannot show that the real PRMs score well.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.models import prepare_model
from fasttts.verifiers.base import ScoreRequest

pytestmark = pytest.mark.integration
MiB = 1 << 20
STEPS = ("Step 1: 48 / 2 = 24.\n\n", "Step 2: 48 + 24 = 72.\n\n", "So the answer is 72.")
PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many in total?"


def derived_checkpoint(dest, config_update, extra_tensors, rename_tokens=None):
    """A folder with the embedded model's weights (linked), an edited config, one more
    safetensors file holding `extra_tensors`, and special tokens renamed as in
    `rename_tokens` (old text -> new text, same id)."""
    src = prepare_model(DEFAULT_GENERATOR)
    dest.mkdir()
    for f in src.iterdir():
        if f.name == "model.safetensors":
            (dest / f.name).symlink_to(f)
        elif f.name != "config.json":
            shutil.copy(f, dest / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(config_update)
    (dest / "config.json").write_text(json.dumps(cfg))
    save_file(extra_tensors, str(dest / "head.safetensors"))
    if rename_tokens:
        tok = json.loads((dest / "tokenizer.json").read_text())
        for entry in tok["added_tokens"]:
            entry["content"] = rename_tokens.get(entry["content"], entry["content"])
        vocab = tok["model"]["vocab"]
        for old, new in rename_tokens.items():
            vocab[new] = vocab.pop(old)
        (dest / "tokenizer.json").write_text(json.dumps(tok))
    return cfg


def check_scores(verifier):
    full, tail = verifier.score([ScoreRequest(PROBLEM, STEPS, 0), ScoreRequest(PROBLEM, STEPS, 1)])
    assert len(full) == 3 and len(tail) == 2
    assert all(0.0 <= s <= 1.0 for s in full)
    assert tail == pytest.approx(full[1:], abs=1e-3)
    return full


def test_math_shepherd_format_on_vllm_pooling_runner():
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    v = MathShepherdVerifier(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=128 * MiB,
                                          max_model_len=1024))
    try:
        check_scores(v)
        ids = v.prompt_ids(PROBLEM, STEPS)
        assert ids.count(v.step_tag_id) == 3
    finally:
        v.close()


def test_qwen_prm_format_with_a_chosen_head(tmp_path):
    from fasttts.verifiers.qwen_prm import QwenPRMVerifier

    folder = tmp_path / "qwen-prm"
    hidden = 896
    # head: ReLU(W1 h + b1) = 0 for W1 = 0, b1 = 0; logits = b2 = (0, ln 3) -> p(good) = 0.75
    derived_checkpoint(folder, {"architectures": ["Qwen2ForProcessRewardModel"]}, {
        "score.0.weight": torch.zeros(hidden, hidden, dtype=torch.bfloat16),
        "score.0.bias": torch.zeros(hidden, dtype=torch.bfloat16),
        "score.2.weight": torch.zeros(2, hidden, dtype=torch.bfloat16),
        "score.2.bias": torch.tensor([0.0, 1.0986123], dtype=torch.bfloat16),
    }, rename_tokens={"<|quad_end|>": "<extra_0>"})  # id 151651, as in Qwen2.5-Math-PRM
    v = QwenPRMVerifier(EngineConfig(model=str(folder), kv_cache_memory_bytes=128 * MiB,
                                     max_model_len=1024))
    try:
        assert v.step_tag_id == 151651
        scores = check_scores(v)
        assert scores == pytest.approx([0.75] * 3, abs=0.01)
    finally:
        v.close()


def test_skywork_value_head_in_transformers(tmp_path):
    from fasttts.verifiers.skywork import SkyworkVerifier

    folder = tmp_path / "skywork"
    derived_checkpoint(folder, {}, {"v_head.summary.weight": torch.zeros(1, 896),
                                    "v_head.summary.bias": torch.tensor([2.0])})
    v = SkyworkVerifier(EngineConfig(model=str(folder)), batch_size=2)
    scores = check_scores(v)
    assert scores == pytest.approx([1 / (1 + torch.exp(torch.tensor(-2.0)).item())] * 3, abs=1e-4)
    ids, flags = v.prompt(PROBLEM, STEPS)
    assert [ids[p] for p in flags] == [v.step_token_id] * 3


def test_model_without_value_head_is_refused(tmp_path):
    from fasttts.verifiers.skywork import load_value_head

    (tmp_path / "x.safetensors").write_bytes(b"")
    save_file({"a": torch.zeros(1)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(ValueError, match="not a Skywork PRM"):
        load_value_head(str(tmp_path))
