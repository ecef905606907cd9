"""Outcome-supervised value model (OVM; Yu et al. 2024) served as a sequence classifier.

A causal LM checkpoint in Hugging Face's `*ForSequenceClassification` layout with one label:
a linear `score` head (no bias) on the final-norm hidden state, whose sigmoid is the
probability that a path ending here reaches a correct answer. `fasttts prm train` fits such a
head on the generator's own hidden states (`fasttts.prm_train`); the checkpoint may keep only
the first `num_hidden_layers` layers of the backbone, the layer the head was fitted on.

Format: the generator's own chat prompt (the system prompt the head was trained with, from
the checkpoint's `config.json` key `fasttts_ovm`), then each step's stripped text followed by
the step delimiter "\\n\\n" as one token, the tag the head is read at. vLLM serves it on the
pooling runner: STEP pooling at every tag (whole-path) or ALL pooling of the tokens computed
past the cached prefix, read at the new tags (incremental; `fasttts.verifiers.pooling`).
"""

from __future__ import annotations

import json
from pathlib import Path

from fasttts.config import EngineConfig
from fasttts.models import resolve_model
from fasttts.steps import build_messages
from fasttts.verifiers.pooling import PoolingPRMVerifier

__all__ = ["CONFIG_KEY", "OVMVerifier", "STEP_TAG", "ovm_head_ids", "ovm_step_ids"]

STEP_TAG = "\n\n"
#: The checkpoint config key holding the format's settings (system_prompt, layer, provenance).
CONFIG_KEY = "fasttts_ovm"


def ovm_head_ids(tokenizer, problem: str, system_prompt: str | None) -> list[int]:
    """Token ids before the first step: the generator's chat prompt with the generation prompt."""
    text = tokenizer.apply_chat_template(build_messages(problem, system_prompt),
                                         add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def ovm_step_ids(tokenizer, step: str) -> list[int]:
    """Token ids of one step before its tag: the step's text without surrounding whitespace."""
    return list(tokenizer.encode(step.strip(), add_special_tokens=False))


def ovm_settings(model: str) -> dict:
    """The `fasttts_ovm` settings of a checkpoint's config.json ({} when absent)."""
    path = Path(resolve_model(model)) / "config.json"
    if not path.is_file():  # a hub id: vLLM downloads it; the format's defaults apply
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get(CONFIG_KEY, {})


class OVMVerifier(PoolingPRMVerifier):
    """An OVM / trained step-end head on vLLM's pooling runner (module docstring).

    Raises:
        StepTagError: the tokenizer does not encode "\\n\\n" as one token.
        fasttts.models.ModelLoadError: the checkpoint is not a one-label sequence classifier.
    """

    good_class = 0  # one label; vLLM applies a sigmoid to it
    step_tag = STEP_TAG

    def __init__(self, cfg: EngineConfig, batch_size: int = 64, incremental: bool = False):
        self.system_prompt = ovm_settings(cfg.model).get("system_prompt")
        super().__init__(cfg, batch_size, incremental)

    def engine_overrides(self, cfg: EngineConfig, incremental: bool) -> dict:
        return {"pooler_config": self.token_pooling(incremental)}

    def head_ids(self, problem: str) -> list[int]:
        return ovm_head_ids(self.tokenizer, problem, self.system_prompt)

    def step_ids(self, index: int, step: str) -> list[int]:
        return ovm_step_ids(self.tokenizer, step)
