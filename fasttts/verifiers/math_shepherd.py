"""Math-Shepherd PRM (Wang et al. 2024, peiyi9979/math-shepherd-mistral-7b-prm).

A causal LM read as a step classifier: after each step comes the tag " ки", and the step's
score is p("+") / (p("+") + p("-")) of the next-token logits at the tag. vLLM serves it as a
pooling model: `convert="classify"` with the LM head rows of "+" and "-" as the classifier
(`classifier_from_token`), read at every tag by the STEP pooler (whole-path mode) or, at the new
tags, from the rows the ALL pooler returns for the tokens computed past the cached prefix
(incremental mode; `fasttts.verifiers.pooling`). Any causal LM whose tokenizer has " ки" as
one token loads this way, which is how the tests exercise the path on a small local model
(`fasttts.models.derived`).
"""

from __future__ import annotations

from fasttts.config import EngineConfig
from fasttts.models import resolve_model
from fasttts.verifiers.pooling import PoolingPRMVerifier

__all__ = ["MathShepherdVerifier", "STEP_TAG"]

STEP_TAG = " ки"


def _classifier_architecture(model: str) -> str:
    from transformers import AutoConfig

    archs = AutoConfig.from_pretrained(resolve_model(model)).architectures or []
    causal = [a for a in archs if a.endswith("ForCausalLM")]
    if not causal:
        raise ValueError(f"math-shepherd verifier needs a causal LM; {model} has {archs}")
    return causal[0].replace("ForCausalLM", "ForSequenceClassification")


class MathShepherdVerifier(PoolingPRMVerifier):
    """Math-Shepherd-format PRM on vLLM's pooling runner (`+`/`-` classes at " ки").

    Input: problem, then " " + step 1 + " ки", "\\n" + step 2 + " ки", ... (the model card's
    format, encoded step by step)."""

    good_class = 0  # classes are ("+", "-")
    step_tag = STEP_TAG

    def engine_overrides(self, cfg: EngineConfig, incremental: bool) -> dict:
                return {
            "convert": "classify",
            "hf_overrides": {
                "architectures": [_classifier_architecture(cfg.model)],
                "classifier_from_token": ["+", "-"],
                "method": "no_post_processing",
            },
            "pooler_config": self.token_pooling(incremental),
        }

    def head_ids(self, problem: str) -> list[int]:
        return list(self.tokenizer.encode(problem))

    def step_ids(self, index: int, step: str) -> list[int]:
        joiner = " " if index == 0 else "\n"
        return list(self.tokenizer.encode(joiner + step.strip(), add_special_tokens=False))
