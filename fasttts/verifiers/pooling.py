"""Discriminative PRMs that vLLM serves with its pooling runner.

A path is the problem's tokens, then each step's tokens followed by one step-tag token; a
step's score is the probability of the "good" class of the classifier read at its tag. Token ids
are built step by step (`path_ids`), so a path's ids are a prefix of its extension's ids, which
is what vLLM's prefix cache needs. Two modes, one per engine (`incremental`):

- **whole-path** (search-and-learn's way, the baseline): one `token_classify` request per path
  with the STEP pooler, which reads every tag of the path. vLLM reads no prefix cache for STEP
  pooling (`ModelConfig.is_prefix_caching_supported`; `PoolingParams` sets
  `skip_reading_prefix_cache` for token-wise tasks), so every path is prefilled whole each time
  it is scored.
- **incremental**: one request per path, the path up to its last tag, read with the ALL token
  pooler while the prefix cache is read (`incremental_params`). vLLM then computes only the
  tokens past the cached prefix, and ALL returns one row per token computed, so every new step's
  tag is read from the rows of one request, whatever number of new steps the path has. A path
  scored before has its earlier steps cached; a fresh one (best-of-N, SART's first check of a
  branch) pays one prefill of what it does not share, as a whole-path request would. On 32-token
  KV blocks on vLLM's CPU build unless configured (`incremental_engine_config`: vLLM reuses
  whole blocks only). Every PRM here is causal, so the hidden state at a tag depends only on
  the tokens before it: the score equals the whole-path score of that step.

A new step's tag can lie inside the cached prefix when another path with the same steps was
scored before or runs in the same call (vLLM always computes at least a prompt's last token,
never the ones before it that it found cached). Such a tag is read from the rows of a request
of the call that has the same tokens up to it and computed it, or else in a second round from
a request cut right after it, whose last token is the tag.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod

from fasttts.backends.vllm_engine import (build_engine, engine_cache_stats,
                                          incremental_engine_config, run_batch, shutdown_engine)
from fasttts.config import EngineConfig
from fasttts.verifiers.base import ScoreRequest, Verifier, score_tolerance

__all__ = ["PoolingPRMVerifier", "StepTagError"]


class StepTagError(ValueError):
    """The checkpoint's tokenizer does not encode the step tag as one token."""


class PoolingPRMVerifier(Verifier):
    """Base of PRMs scored through vLLM's pooling runner (module docstring).

    Args:
        cfg: engine configuration of the PRM.
        batch_size: most requests in flight at once (B_pre).
        incremental: score each new step from the prefix cache (module docstring).

    Raises:
        StepTagError: the step tag is not a single token of the checkpoint's tokenizer.
        fasttts.models.ModelLoadError: the engine cannot be built as a classifier.
    """

    #: Column of the pooled class distribution that means "this step is good".
    good_class: int = 0
    supports_incremental = True
    #: The text of the step tag (one token of the checkpoint's vocabulary).
    step_tag: str = ""

    def __init__(self, cfg: EngineConfig, batch_size: int = 64, incremental: bool = False):
        self.incremental = incremental
        if incremental:  # smaller blocks on CPU: less of each path recomputed
            cfg = incremental_engine_config(cfg)
        self.engine = build_engine(cfg, runner="pooling", **self.engine_overrides(cfg, incremental))
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len = self.engine.model_config.max_model_len
        self.score_tolerance = score_tolerance(self.runner, self.engine.model_config.dtype)
        self.batch_size = batch_size
        mode = "incremental" if incremental else "whole-path"
        self.name = f"{type(self).__name__}({cfg.model}, {mode})"
        self._calls = itertools.count()
        self.step_tag_id = self._single_token_tag(cfg.model)

    def _single_token_tag(self, model: str) -> int:
        ids = self.tag_token_ids()
        if len(ids) != 1:
            self.close()
            raise StepTagError(
                f"{model}: the step tag {self.step_tag!r} is {len(ids)} tokens {ids} in this "
                f"checkpoint's tokenizer; a {type(self).__name__} needs it to be one token (the "
                f"classifier is read at it)")
        return ids[0]

    def tag_token_ids(self) -> list[int]:
        """Token ids of the step tag text (one id for a usable checkpoint)."""
        return list(self.tokenizer.encode(self.step_tag, add_special_tokens=False))

    @abstractmethod
    def engine_overrides(self, cfg: EngineConfig, incremental: bool) -> dict:
        """Extra `vllm.EngineArgs` that make the engine a classifier for the mode."""

    @staticmethod
    def token_pooling(incremental: bool) -> dict:
        """The `pooler_config` of a mode's engine: STEP (every tag, no cache read) for
        whole-path, ALL (every token computed, cache read) for incremental."""
        return {"tok_pooling_type": "ALL" if incremental else "STEP"}

    @abstractmethod
    def head_ids(self, problem: str) -> list[int]:
        """Token ids of everything before the first step."""

    @abstractmethod
    def step_ids(self, index: int, step: str) -> list[int]:
        """Token ids of step `index` (0-based) before its tag: the text joining it to the
        previous tag, then the step's own text."""

    def path_ids(self, problem: str, steps: tuple[str, ...]) -> tuple[list[int], list[int]]:
        """(token ids of problem + steps, each step followed by the tag; position of each tag).

        Tag tokens inside the head (a prompt that holds the tag text, e.g. a "\\n\\n" tag
        after a system prompt with blank lines) come first in the positions; the last
        `len(steps)` positions are the steps' own tags.

        Raises:
            ValueError: the path is longer than the PRM's context.
        """
        ids = self.head_ids(problem)
        tags = [i for i, t in enumerate(ids) if t == self.step_tag_id]  # tags in the head
        for i, step in enumerate(steps):
            ids += self.step_ids(i, step)
            ids.append(self.step_tag_id)
            tags.append(len(ids) - 1)
        if len(ids) > self.max_model_len:
            raise ValueError(
                f"verifier prompt of {len(ids)} tokens exceeds the PRM's context of "
                f"{self.max_model_len} tokens; raise max_model_len or lower max_tokens")
        return ids, tags

    def prompt_ids(self, problem: str, steps: tuple[str, ...]) -> list[int]:
        """Token ids of problem + steps with one step tag after each step."""
        return self.path_ids(problem, steps)[0]

    def incremental_params(self):
        """`PoolingParams` of an incremental request: every token's class distribution (the
        ALL token pooler), the prefix cache read, so the rows are those of the tokens vLLM
        computed (module docstring)."""
        from vllm import PoolingParams

        return PoolingParams(task="token_classify", skip_reading_prefix_cache=False)

    def last_token_probs(self, output) -> list[float]:
        """The class distribution at the last token of an incremental request's output."""
        return output.outputs.data[-1].float().tolist()

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        paths = self._paths(requests)
        if self.incremental:
            return self._score_incremental(requests, paths)
        return self._score_whole(requests, paths)

    def _score_whole(self, requests, paths) -> list[list[float]]:
        from vllm import PoolingParams

        params = PoolingParams(task="token_classify", step_tag_id=self.step_tag_id)
        items = [(ids, params) for ids, _ in paths]
        outputs = run_batch(self.engine, items, self.batch_size, f"prm{next(self._calls)}")
        scores = []
        for req, out, (_, tags) in zip(requests, outputs, paths):
            probs = out.outputs.data[:, self.good_class].float().tolist()
            if len(probs) != len(tags):
                raise RuntimeError(
                    f"{self.name}: {len(probs)} step tags scored for {len(req.steps)} steps (a "
                    f"step contains the step tag text {self.step_tag!r})")
            scores.append(probs[len(tags) - len(req.steps) + req.start :])
        return scores

    def new_tags(self, req: ScoreRequest, path: tuple[list[int], list[int]]) -> list[int]:
        """Positions of the tags of `req`'s steps from `req.start` on in its `path_ids`.

        Raises:
            RuntimeError: a step's text holds the step tag (its score would be read at the
                wrong token).
        """
        ids, tags = path
        if ids.count(self.step_tag_id) != len(tags):
            raise RuntimeError(f"{self.name}: a step of a path holds the step tag text "
                               f"{self.step_tag!r}; it cannot be scored")
        return tags[len(tags) - len(req.steps) + req.start:]

    def prefills(self, requests: list[ScoreRequest]) -> list[list[int]]:
        """The token ids of the first round of an incremental call: one prompt per request
        with new steps, its path up to its last tag (module docstring)."""
        return [ids for req, (ids, _) in zip(requests, self._paths(requests))
                if req.start < len(req.steps)]

    def _paths(self, requests):
        return [self.path_ids(r.problem, r.steps) for r in requests]

    def _score_incremental(self, requests, paths) -> list[list[float]]:
        params = self.incremental_params()
        owners = [r for r, req in enumerate(requests) if req.start < len(req.steps)]
        new = {r: self.new_tags(requests[r], paths[r]) for r in owners}  # raises before any run
        outs = run_batch(self.engine, [(paths[r][0], params) for r in owners], self.batch_size,
                         f"prm{next(self._calls)}")
        rows = {r: (out.outputs.data, len(paths[r][0]) - out.outputs.data.shape[0])
                for r, out in zip(owners, outs)}  # (rows, the first position vLLM computed)
        scores: list[dict[int, float]] = [{} for _ in requests]
        cut: list[tuple[int, int]] = []  # (request, tag position) read in the second round
        for r in owners:
            for pos in new[r]:
                got = self._row_at(paths, rows, r, pos)
                if got is None:
                    cut.append((r, pos))
                else:
                    scores[r][pos] = got
        if cut:
            items = [(paths[r][0][: pos + 1], params) for r, pos in cut]
            for (r, pos), out in zip(cut, run_batch(self.engine, items, self.batch_size,
                                                    f"prm{next(self._calls)}")):
                scores[r][pos] = self.last_token_probs(out)[self.good_class]
        return [[s[pos] for pos in sorted(s)] for s in scores]

    def _row_at(self, paths, rows, r: int, pos: int) -> float | None:
        """The score at tag `pos` of request `r` from the first round's rows: its own, or
        those of a request with the same tokens up to the tag that computed it (a path
        sharing steps with another of the call finds them cached); None if none did."""
        ids = paths[r][0]
        for other in [r, *rows]:
            data, first = rows[other]
            if first <= pos and (other == r or paths[other][0][: pos + 1] == ids[: pos + 1]):
                return float(data[pos - first, self.good_class])
        return None

    def cache_stats(self):
        return engine_cache_stats(self.engine)

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        shutdown_engine(engine)
