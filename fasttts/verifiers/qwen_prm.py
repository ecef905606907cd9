"""Qwen2.5-Math-PRM (Qwen/Qwen2.5-Math-PRM-7B and -72B; Zhang et al. 2025).

The chat prompt holds the problem as the user turn and the steps as the assistant turn, each
step followed by the separator `<extra_0>`; vLLM's native `Qwen2ForProcessRewardModel` returns
a two-class distribution at every separator and the step score is the probability of class 1.
"""

from __future__ import annotations

from fasttts.config import EngineConfig
from fasttts.verifiers.pooling import PoolingPRMVerifier

__all__ = ["QwenPRMVerifier", "SEPARATOR"]

SEPARATOR = "<extra_0>"
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class QwenPRMVerifier(PoolingPRMVerifier):
    """Qwen2.5-Math-PRM on vLLM's pooling runner (`<extra_0>` separators)."""

    good_class = 1

    def engine_overrides(self, cfg: EngineConfig) -> dict:
        return {}

    @property
    def step_tag_id(self) -> int:
        return self.tokenizer.convert_tokens_to_ids(SEPARATOR)

    def prompt_ids(self, problem: str, steps: tuple[str, ...]) -> list[int]:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": problem},
            {"role": "assistant", "content": "".join(f"{s.strip()}{SEPARATOR}" for s in steps)},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=False)
        return list(self.tokenizer.encode(text, add_special_tokens=False))
