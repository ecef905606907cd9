"""Qwen2.5-Math-PRM (Qwen/Qwen2.5-Math-PRM-7B and -72B; Zhang et al. 2025).

The chat prompt holds the problem as the user turn and the steps as the assistant turn, each
step followed by the separator `<extra_0>`; vLLM's native `Qwen2ForProcessRewardModel` returns
a two-class distribution per token and the step score is the probability of class 1 at its
separator. Whole-path mode reads every separator with the STEP pooler; incremental mode reads
the new separators from the rows the ALL pooler returns for the tokens computed past the
cached prefix (`fasttts.verifiers.pooling`).
"""

from __future__ import annotations

from fasttts.config import EngineConfig
from fasttts.verifiers.pooling import PoolingPRMVerifier

__all__ = ["QwenPRMVerifier", "SEPARATOR"]

SEPARATOR = "<extra_0>"
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
_CONTENT = "\x00steps\x00"


class QwenPRMVerifier(PoolingPRMVerifier):
    """Qwen2.5-Math-PRM on vLLM's pooling runner (`<extra_0>` separators)."""

    good_class = 1
    step_tag = SEPARATOR

    def engine_overrides(self, cfg: EngineConfig, incremental: bool) -> dict:
        return {"pooler_config": self.token_pooling(True)} if incremental else {}

    def tag_token_ids(self) -> list[int]:
        tag = self.tokenizer.convert_tokens_to_ids(SEPARATOR)
        if tag is None or tag == self.tokenizer.unk_token_id:
            return list(self.tokenizer.encode(SEPARATOR, add_special_tokens=False))
        return [tag]

    def head_ids(self, problem: str) -> list[int]:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": problem},
            {"role": "assistant", "content": _CONTENT},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=False)
        return list(self.tokenizer.encode(text.split(_CONTENT)[0], add_special_tokens=False))

    def step_ids(self, index: int, step: str) -> list[int]:
        return list(self.tokenizer.encode(step.strip(), add_special_tokens=False))
