"""Math-Shepherd PRM (Wang et al. 2024, peiyi9979/math-shepherd-mistral-7b-prm).

A causal LM read as a step classifier: after each step comes the tag " ки", and the step's
score is p("+") / (p("+") + p("-")) of the next-token logits at the tag. vLLM serves it as a
pooling model: `convert="classify"` with the LM head rows of "+" and "-" as the classifier
(`classifier_from_token`), read at every tag by the STEP pooler. Any causal LM loads this way,
which is how the tests exercise the path on a small local model.
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
    """Math-Shepherd-format PRM on vLLM's pooling runner (STEP pooler, `+`/`-` classes)."""

    good_class = 0  # classes are ("+", "-")

    def engine_overrides(self, cfg: EngineConfig) -> dict:
        return {
            "convert": "classify",
            "hf_overrides": {
                "architectures": [_classifier_architecture(cfg.model)],
                "classifier_from_token": ["+", "-"],
                "method": "no_post_processing",
            },
            "pooler_config": {"tok_pooling_type": "STEP"},
        }

    @property
    def step_tag_id(self) -> int:
        return self.tokenizer.encode(STEP_TAG, add_special_tokens=False)[-1]

    def prompt_ids(self, problem: str, steps: tuple[str, ...]) -> list[int]:
        body = "".join(f"{s.strip()}{STEP_TAG}\n" for s in steps)
        return list(self.tokenizer.encode(f"{problem} {body}"))
