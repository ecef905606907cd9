"""Discriminative PRMs that vLLM serves with its pooling runner and the STEP pooler.

One prefill per path returns a class distribution at every step-tag token; the score of a step
is the probability of the "good" class there. Subclasses give the prompt format (where the step
tags go), the engine overrides that make vLLM load the model as a step classifier, and which
class is "good". vLLM's token-wise pooling reads no prefix cache, so a path is prefilled whole
each time it is scored; all of its steps are scored in that one pass.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod

from fasttts.backends.vllm_engine import build_engine, run_batch, shutdown_engine
from fasttts.config import EngineConfig
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["PoolingPRMVerifier"]


class PoolingPRMVerifier(Verifier):
    """Base of PRMs scored through vLLM's `token_classify` pooling task.

    Args:
        cfg: engine configuration of the PRM.
        batch_size: most paths in flight at once (B_pre).

    Raises:
        ValueError: the engine cannot be built as a step classifier.
    """

    #: Column of the pooled class distribution that means "this step is good".
    good_class: int = 0

    def __init__(self, cfg: EngineConfig, batch_size: int = 64):
        self.engine = build_engine(cfg, runner="pooling", **self.engine_overrides(cfg))
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len = self.engine.model_config.max_model_len
        self.batch_size = batch_size
        self.name = f"{type(self).__name__}({cfg.model})"
        self._calls = itertools.count()

    @abstractmethod
    def engine_overrides(self, cfg: EngineConfig) -> dict:
        """Extra `vllm.EngineArgs` that make the engine a step classifier."""

    @property
    @abstractmethod
    def step_tag_id(self) -> int:
        """Token id placed after every step; the pooler reads the classes there."""

    @abstractmethod
    def prompt_ids(self, problem: str, steps: tuple[str, ...]) -> list[int]:
        """Token ids of problem + steps, with one step tag after each step."""

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        from vllm import PoolingParams

        params = PoolingParams(task="token_classify", step_tag_id=self.step_tag_id)
        items = []
        for req in requests:
            ids = self.prompt_ids(req.problem, req.steps)
            if len(ids) > self.max_model_len:
                raise ValueError(
                    f"verifier prompt of {len(ids)} tokens exceeds the PRM's context of "
                    f"{self.max_model_len} tokens; raise max_model_len or lower max_tokens"
                )
            items.append((ids, params))
        outputs = run_batch(self.engine, items, self.batch_size, f"prm{next(self._calls)}")
        scores = []
        for req, out in zip(requests, outputs):
            probs = out.outputs.data[:, self.good_class].float().tolist()
            if len(probs) != len(req.steps):
                raise RuntimeError(
                    f"{self.name}: {len(probs)} step tags scored for {len(req.steps)} steps (a "
                    f"step or the problem contains the step tag text)"
                )
            scores.append(probs[req.start :])
        return scores

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        shutdown_engine(engine)
