"""Zero-shot judge verifier: a PRM made from any instruct model (the embedded default).

For step k of a path the judge reads the problem and steps 1..k, is asked whether step k is
correct, and its score is the probability of the answer token "Yes" against "No" at the first
answer position: score = p(Yes) / (p(Yes) + p(No)), read from vLLM's logprobs of exactly those
two tokens (`SamplingParams.logprob_token_ids`), so one prefill + one token per step.

The prompt puts the steps before the question, so the prompts of consecutive steps of a path
(and of sibling paths) share everything up to the newest step: vLLM's prefix cache makes
scoring a new step cost roughly that step's tokens plus the short question.
"""

from __future__ import annotations

import itertools
import math

from fasttts.backends.vllm_engine import (build_engine, engine_cache_stats, run_batch,
                                          shutdown_engine)
from fasttts.config import EngineConfig
from fasttts.verifiers.base import ScoreRequest, Verifier, score_tolerance

__all__ = ["JudgeVerifier", "JUDGE_SYSTEM_PROMPT", "JUDGE_QUESTION"]

JUDGE_SYSTEM_PROMPT = (
    "You are a careful math teacher. You check a student's solution one step at a time."
)
JUDGE_QUESTION = (
    "Look only at the LAST step above. Is it mathematically correct and does it move the "
    "solution forward? Answer with a single word: Yes or No."
)


class JudgeVerifier(Verifier):
    """Step scores from an instruct model asked "is the last step correct?".

    Args:
        cfg: engine configuration of the judge model.
        batch_size: most scoring requests in flight at once (B_pre).
        incremental: accepted for the common interface; the judge always asks about one step
            per request, with vLLM's prefix cache on (module docstring), so it is incremental
            in either mode.

    Raises:
        ValueError: the tokenizer has no single-token "Yes"/"No".
    """

    supports_incremental = True
    incremental = True

    def __init__(self, cfg: EngineConfig, batch_size: int = 64, incremental: bool = True):
        self.engine = build_engine(cfg)
        self.tokenizer = self.engine.get_tokenizer()
        self.batch_size = batch_size
        self.name = f"judge({cfg.model})"
        self.max_model_len = self.engine.model_config.max_model_len
        self.score_tolerance = score_tolerance(self.runner, self.engine.model_config.dtype)
        self.yes_id = self._single_token("Yes")
        self.no_id = self._single_token("No")
        self._calls = itertools.count()

    def _single_token(self, word: str) -> int:
        ids = self.tokenizer.encode(word, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"judge model's tokenizer splits {word!r} into {len(ids)} tokens")
        return ids[0]

    def prompt_ids(self, problem: str, steps: tuple[str, ...] | list[str]) -> list[int]:
        """Token ids of the judging prompt for the last of `steps`."""
        body = "".join(steps).rstrip()
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {
                "role": "user",
                "content": f"Problem:\n{problem}\n\nSolution so far:\n{body}\n\n{JUDGE_QUESTION}",
            },
        ]
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if len(ids) >= self.max_model_len:
            # Keep the question and the newest steps: drop text from the middle of the path.
            keep_head = self.max_model_len // 4
            ids = ids[:keep_head] + ids[len(ids) - (self.max_model_len - keep_head - 1) :]
        return ids

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0, max_tokens=1, logprob_token_ids=[self.yes_id, self.no_id]
        )
        items, owners = [], []
        for r, req in enumerate(requests):
            for k in range(req.start, len(req.steps)):
                items.append((self.prompt_ids(req.problem, req.steps[: k + 1]), params))
                owners.append(r)
        outputs = run_batch(self.engine, items, self.batch_size, f"judge{next(self._calls)}")
        scores: list[list[float]] = [[] for _ in requests]
        for owner, out in zip(owners, outputs):
            lp = out.outputs[0].logprobs[0]
            yes, no = lp[self.yes_id].logprob, lp[self.no_id].logprob
            m = max(yes, no)
            scores[owner].append(math.exp(yes - m) / (math.exp(yes - m) + math.exp(no - m)))
        return scores

    def cache_stats(self):
        return engine_cache_stats(self.engine)

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        shutdown_engine(engine)
