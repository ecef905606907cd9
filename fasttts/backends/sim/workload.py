"""What the simulated models write and how the simulated PRM scores it.

Token streams (the generator):
- Every path has a latent state, *on track* or *derailed*. Each new step of an on-track path
  derails with probability `p_derail` of the problem (drawn per problem from a hash of its text,
  uniform in [derail_min, derail_max]); a derailed path stays derailed.
- A step is a state marker token (`✓` on track, `✗` derailed), filler tokens, and the step
  delimiter `"\\n\\n"`. Its length in tokens is drawn from a heavy-tailed log-normal (FastTTS
  Fig. 3 right) or from the step lengths of a recorded trace.
- From step `min_steps` on, a step is the final one with probability `final_hazard`; it ends
  with `\\boxed{answer}` and EOS: the problem's reference answer when on track, else one of a
  few wrong answers of the problem.
- Everything is a function of (problem, path tokens, seed) only, through hashes, so any
  scheduling order, batch size or preemption yields the same text.

Scores (the PRM): step k of a path gets sigmoid(+-margin + e_k), + when its marker says on
track; the noise e_k follows an AR(1) along the path (e_k = rho e_{k-1} + sqrt(1 - rho^2) sigma
z_k, z_k a hash of the path up to step k), so consecutive steps' scores are correlated (FastTTS
section 4.1.1 relies on this) and deterministic per (path, step).

Token log-probabilities (the generator's confidence, asked for by the `confidence` verifier):
each sampled token gets log sigmoid(confidence_logit +- confidence_margin + confidence_noise z),
+ while the path is on track, z a hash of (seed, position, token), so a derailed path is less
confident on average and the same token at the same place of the same stream always gets the
same value (speculative head starts carry exactly what the child would have sampled). The
constants are assumptions, not fitted to a model.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fasttts.backends.sim import tokenizer as tok
from fasttts.jsonio import JsonFileError, field_errors, read_jsonl, read_model

__all__ = ["DATASET_DIFFICULTY", "ON_TRACK", "DERAILED", "Workload", "WorkloadModel",
           "problem_difficulty"]

#: Range of the simulated difficulty of a dataset's problems (0 = easiest, 1 = hardest); a
#: problem's place in the range is a hash of its text. MATH-500 uses its 1-5 level instead.
#: Chosen so that baseline beam search accuracies fall in the ranges the FastTTS paper reports
#: for 1.5B generators (AIME lowest, GSM8K highest); they are assumptions, not measurements.
DATASET_DIFFICULTY = {"aime24": (0.7, 1.0), "amc23": (0.45, 0.8), "gsm8k": (0.0, 0.3)}

ON_TRACK, DERAILED = "\u2713", "\u2717"  # ✓ ✗
_ON_ID, _OFF_ID = tok.chunk_id(ON_TRACK.encode()), tok.chunk_id(DERAILED.encode())
_DELIM = tok.encode("\n\n")
_DELIM_ID = _DELIM[0]
_WORDS = [tok.chunk_id(w.encode()) for w in (
    " the", " sum", " of", " we", " get", " x", " =", " 2", " +", " 3", " so", " let", " then",
    " is", " by", " it", " n", " 7", " -", " 5", " and", " to", " (", ")", " if", " 1", " 0", " y",
)]


def _h(*parts: object) -> int:
    """A stable 64-bit hash (Python's str hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


def problem_difficulty(dataset: str, problem: str, level: object = None) -> float:
    """A problem's simulated difficulty in [0, 1] (`DATASET_DIFFICULTY`; MATH-500 by level:
    level L maps to [0.175 (L - 1), 0.175 (L - 1) + 0.3]); unknown datasets span [0, 1]."""
    u = (_h("difficulty", problem) % 10_000) / 10_000
    name = str(dataset).lower()
    if name == "math500" and str(level).isdigit():
        lo = 0.175 * (min(max(int(level), 1), 5) - 1)
        return min(1.0, lo + 0.3 * u)
    lo, hi = DATASET_DIFFICULTY.get(name, (0.0, 1.0))
    return lo + (hi - lo) * u


class WorkloadModel(BaseModel):
    """Parameters of the simulated generator and PRM (module docstring).

    Attributes:
        step_len_median: median step length (tokens) of the log-normal.
        step_len_sigma: log-normal sigma (heavier tail when larger).
        step_len_min, step_len_max: clip of a step's length (tokens).
        step_lengths: empirical step lengths (tokens) from a trace; used instead of the
            log-normal when set.
        min_steps: the first step that may be final.
        final_hazard: probability that a step from `min_steps` on is the final one.
        derail_min, derail_max: per-step derail probability of the easiest (difficulty 0)
            and the hardest (difficulty 1) problem.
        score_margin: PRM logit offset of on-track (+) / derailed (-) steps.
        score_noise: standard deviation of the PRM logit noise.
        score_corr: correlation of the noise between consecutive steps (AR(1) rho).
        num_wrong_answers: distinct wrong answers a problem's derailed paths give.
        confidence_logit: logit of a sampled token's probability, before the track offset.
        confidence_margin: its offset, + on track, - derailed.
        confidence_noise: standard deviation of its per-token noise.
        source: "parametric" or the trace the numbers were fitted from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    step_len_median: float = Field(default=48.0, gt=0)
    step_len_sigma: float = Field(default=0.9, ge=0)
    step_len_min: int = Field(default=8, ge=3)
    step_len_max: int = Field(default=1024, ge=3)
    step_lengths: tuple[int, ...] | None = None
    min_steps: int = Field(default=2, ge=1)
    final_hazard: float = Field(default=0.12, gt=0, le=1)
    derail_min: float = Field(default=0.01, ge=0, le=1)
    derail_max: float = Field(default=0.6, ge=0, le=1)
    score_margin: float = Field(default=0.5, ge=0)
    score_noise: float = Field(default=1.2, ge=0)
    score_corr: float = Field(default=0.7, ge=0, lt=1)
    num_wrong_answers: int = Field(default=6, ge=1)
    confidence_logit: float = 2.0
    confidence_margin: float = Field(default=0.75, ge=0)
    confidence_noise: float = Field(default=2.0, ge=0)
    source: str = "parametric"

    @model_validator(mode="after")
    def _ordered_clip(self) -> WorkloadModel:
        if self.step_len_min > self.step_len_max:
            raise ValueError(f"step_len_min ({self.step_len_min}) is over step_len_max "
                             f"({self.step_len_max}); the clip of a step's length needs "
                             f"min <= max")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> WorkloadModel:
        """A model from a JSON file of these fields, or fitted from a `trace.jsonl` (see
        `from_trace`).

        Raises:
            ValueError: unreadable file, not JSON, unknown or out-of-range fields, a trace
                line that is not one, or an empty trace (one line, naming the file and line:
                `fasttts.jsonio.JsonFileError`).
        """
        path = Path(path)
        try:
            if path.suffix == ".jsonl":
                return cls.from_trace(path)
            return read_model(path, cls)
        except JsonFileError as e:
            raise ValueError(f"bad workload file {e}") from e

    @classmethod
    def from_trace(cls, path: str | Path) -> WorkloadModel:
        """Fit the model to a trace written by `fasttts eval` (`trace.jsonl`: one line per
        problem with, per completed path, `step_tokens`, `step_scores` and `correct`).

        Fitted: the empirical step lengths; `final_hazard` = 1 / mean steps per path
        (min_steps 1); a per-step derail probability p with (1 - p)^steps = fraction of correct
        paths, spread over [p/2, 3p/2]; the PRM margin and noise from the logits of the last
        step score of correct vs incorrect paths.

        Raises:
            fasttts.jsonio.JsonFileError: a line that is not JSON or not a trace line (names
                the file, the line and the field).
            ValueError: no paths with step lengths in the trace.
        """
        lengths: list[int] = []
        steps_per_path: list[int] = []
        logits = {True: [], False: []}
        for number, value in read_jsonl(path):
            try:
                if not isinstance(value, dict):
                    raise TypeError(f"expected a JSON object, got a {type(value).__name__}")
                paths = _TraceLine.model_validate(value).paths
            except (TypeError, ValidationError) as e:
                why = field_errors(e) if isinstance(e, ValidationError) else str(e)
                raise JsonFileError(f"{path}, line {number}",
                                    f"not a trace line ({why})") from None
            for p in paths:
                st = [x for x in p.step_tokens if x > 0]
                if not st:
                    continue
                lengths += st
                steps_per_path.append(len(st))
                if p.step_scores and p.correct is not None:
                    s = min(max(p.step_scores[-1], 1e-4), 1 - 1e-4)
                    logits[p.correct].append(math.log(s / (1 - s)))
        if not lengths:
            raise ValueError(f"trace {path} has no paths with step_tokens")
        mean_steps = statistics.fmean(steps_per_path)
        n_right, n_all = len(logits[True]), len(logits[True]) + len(logits[False])
        frac = min(max(n_right / n_all, 0.01), 0.99) if n_all else 0.5
        p = 1 - frac ** (1 / mean_steps)
        fields: dict = dict(step_lengths=tuple(sorted(lengths)), min_steps=1,
                            final_hazard=min(1.0, 1 / mean_steps), derail_min=p / 2,
                            derail_max=min(1.0, 1.5 * p), source=f"trace:{Path(path).name}")
        if logits[True] and logits[False]:
            fields["score_margin"] = max(0.0, (statistics.fmean(logits[True])
                                               - statistics.fmean(logits[False])) / 2)
            pooled = logits[True] + logits[False]
            if len(pooled) > 2:
                fields["score_noise"] = statistics.pstdev(pooled)
        return cls(**fields)


class _TracePath(BaseModel):
    """The fields of one path of a trace line that `WorkloadModel.from_trace` reads."""

    model_config = ConfigDict(allow_inf_nan=False)
    step_tokens: list[int] = []
    step_scores: list[float] | None = None
    correct: bool | None = None


class _TraceLine(BaseModel):
    """One line of a trace (`fasttts.eval.runner.trace_line`), as `from_trace` reads it."""

    paths: list[_TracePath] = []


class Workload:
    """The simulated generator's token streams and the simulated PRM's scores.

    Args:
        model: the workload parameters.
        answers: reference answer per problem text (from the dataset); problems without one
            get a synthetic answer.
    """

    def __init__(self, model: WorkloadModel | None = None, answers: dict[str, str] | None = None):
        self.model = model or WorkloadModel()
        self.answers = dict(answers or {})
        self.difficulty: dict[str, float] = {}

    def register(self, problem: str, answer: str, difficulty: float | None = None) -> None:
        """Set the reference answer that on-track paths of `problem` reach, and optionally its
        difficulty in [0, 1] (default: `problem_difficulty` of an unknown dataset)."""
        self.answers[problem] = answer
        if difficulty is not None:
            self.difficulty[problem] = min(max(difficulty, 0.0), 1.0)

    def derail_probability(self, problem: str) -> float:
        """The problem's per-step derail probability, from its difficulty."""
        m = self.model
        d = self.difficulty.get(problem)
        if d is None:
            d = problem_difficulty("", problem)
        return m.derail_min + (m.derail_max - m.derail_min) * d

    def answer(self, problem: str, on_track: bool, draw: int) -> str:
        """The final answer of a path: the reference when on track, else a wrong one."""
        right = self.answers.get(problem)
        if right is None:
            right = str(_h("answer", problem) % 1000)
        if on_track:
            return right
        k = draw % self.model.num_wrong_answers
        wrong = str(_h("wrong", problem, k) % 100_000)
        return wrong if wrong != right else wrong + "1"

    def _step_length(self, rng: random.Random) -> int:
        m = self.model
        if m.step_lengths:
            return m.step_lengths[rng.randrange(len(m.step_lengths))]
        x = rng.lognormvariate(math.log(m.step_len_median), m.step_len_sigma)
        return int(min(max(round(x), m.step_len_min), m.step_len_max))

    def stream(self, token_ids: list[int], seed: int) -> Iterator[int]:
        """The tokens a new generator request writes after `token_ids` (prompt + path), lazily,
        ending with EOS after a final step.

        A step's tokens are a function of (seed, the path before the step) only, so a request
        that starts at a step boundary writes the same whatever order or batch it runs in. A
        request that starts inside a step (a head start of speculative tokens resubmitted as
        a new request) draws the rest of the step anew from (seed, its whole prompt), as vLLM
        does: a new request gets a freshly seeded sampler, so it does not continue the random
        stream that wrote the step's first tokens (the same seed from the step's start writes
        something else after them). The step keeps its state marker (its first token); one
        that already holds more tokens than the new draw's step is ended with the step's own
        ending (the delimiter, or the final answer), as a real model finishes the step it is
        in: a step never merges into the next. A sequence that stays in the engine (preempted
        and recomputed, or a speculative sequence adopted as it runs) keeps its stream.

        Raises:
            ValueError: `token_ids` is not a prompt from the simulator's chat template.
        """
        problem, start = tok.split_prompt(token_ids)
        path = token_ids[start:]
        last_delim = max((i for i, t in enumerate(path) if t == _DELIM_ID), default=-1)
        step_start = start + last_delim + 1
        partial = token_ids[step_start:]  # tokens of the current step already there
        before = token_ids[start:step_start]
        on_track = _OFF_ID not in before
        num_steps = before.count(_ON_ID) + before.count(_OFF_ID)
        ids = list(token_ids[:step_start])
        p_derail = self.derail_probability(problem)
        if partial:
            rng = random.Random(_h("resume", seed, hash(tuple(token_ids))))
            rng.random()  # the derail draw: the step's marker already decided it
            on_track = on_track and partial[0] != _OFF_ID
            num_steps += 1
            step, final, tail = self._step(rng, problem, on_track, num_steps)
            rest = step[len(partial):] if len(partial) < len(step) else tail
            yield from rest
            if final:
                return
            ids = list(token_ids) + rest
        while True:
            rng = random.Random(_h("step", seed, hash(tuple(ids))))
            if on_track and rng.random() < p_derail:
                on_track = False
            num_steps += 1
            step, final, _ = self._step(rng, problem, on_track, num_steps)
            yield from step
            if final:
                return
            ids += step

    def _step(self, rng: random.Random, problem: str, on_track: bool,
              num_steps: int) -> tuple[list[int], bool, list[int]]:
        """One step drawn from `rng` (after its derail draw): (its tokens, whether it is the
        final one, its ending: the delimiter or the answer and EOS)."""
        m = self.model
        final = num_steps >= m.min_steps and rng.random() < m.final_hazard
        length = self._step_length(rng)
        tail = _DELIM
        if final:
            answer = self.answer(problem, on_track, rng.getrandbits(16))
            tail = tok.encode(f" so the answer is \\boxed{{{answer}}}.") + [tok.EOS]
        step = [_ON_ID if on_track else _OFF_ID]
        step += [_WORDS[rng.randrange(len(_WORDS))] for _ in range(max(0, length - 1 - len(tail)))]
        return step + tail, final, tail

    def token_logprob(self, token: int, on_track: bool, seed: int, position: int) -> float:
        """The simulated log-probability (nats, < 0) of sampling `token` at `position` of a
        sequence of `seed` (module docstring)."""
        m = self.model
        z = random.Random(_h("lp", seed, position, token)).gauss(0.0, 1.0)
        logit = (m.confidence_logit + (m.confidence_margin if on_track else -m.confidence_margin)
                 + m.confidence_noise * z)
        return -math.log1p(math.exp(-logit)) if logit > -30 else logit

    @staticmethod
    def on_track(token_ids: list[int]) -> bool:
        """Whether the path in `token_ids` (prompt + path) is still on track (no derailed
        step marker in it)."""
        return _OFF_ID not in token_ids[tok.split_prompt(token_ids)[1]:]

    @staticmethod
    def derails(token: int) -> bool:
        """Whether `token` is the marker of a derailed step."""
        return token == _OFF_ID

    def score_steps(self, problem: str, steps: tuple[str, ...]) -> list[float]:
        """PRM score in (0, 1) of every step of a path (module docstring)."""
        m = self.model
        out, e, h = [], 0.0, _h("path", problem)
        for k, step in enumerate(steps):
            h = _h(h, step)
            z = random.Random(h).gauss(0.0, 1.0)
            e = z * m.score_noise if k == 0 else (
                m.score_corr * e + math.sqrt(1 - m.score_corr ** 2) * m.score_noise * z)
            sign = 1.0 if step.lstrip().startswith(ON_TRACK) else -1.0
            out.append(1.0 / (1.0 + math.exp(-(sign * m.score_margin + e))))
        return out
