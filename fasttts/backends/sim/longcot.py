"""A long chain-of-thought workload for the simulator: reasoning-model branches of thousands
of tokens (SART section 3, Figs. 2-3), fitted to recorded data.

Lengths and correctness (`LongCoTModel`, fitted by `fasttts.backends.sim.longcot_fit` to
EXAONE-Deep-32B's 80 samples on each of 197 GPQA-Diamond questions; committed as
`longcot_gpqa.json` with the derivation):

- a question (a hash of its text) draws its log median length m_q = mu + sigma z_q and its
  accuracy p_q = sigmoid(a + b z_q + s e_q + shift), z_q, e_q ~ N(0, 1);
- a branch (a hash of its seed) draws its log length m_q + r, r = scale * Student-t(df),
  times `length_scale`, and whether it is right, with logit p_q - c r: within a question
  correctness depends only weakly on length;
- the run's `max_tokens` cuts a branch (finish "length", no answer: wrong, as the data's
  capped samples are).

Scaling to the simulated model (the stated rule): lengths are used as recorded
(`length_scale` 1: no per-sample lengths of an R1-Distill model are public; EXAONE-Deep-32B is
a long-CoT reasoner of the same class on the same GPQA-Diamond questions), and `shift` moves
every question's logit so the mean accuracy is the simulated model's published pass@1
(`target_accuracy`: DeepSeek-R1-Distill-Qwen-14B, GPQA-Diamond 59.1 %, DeepSeek-R1 report).

Text and scores (assumptions, as `fasttts.backends.sim.workload`): a branch is paragraphs
("steps") of log-normal lengths (the parametric workload's) with the state marker first
(`✓`; `✗` from the point a wrong branch derails, uniform over its length), ending with
"so the answer is \\boxed{X}." and EOS; a right branch answers the reference, a wrong one
another of the question's `num_choices` (GPQA: 4) choices. The PRM scores steps exactly as
the parametric workload's does (same margin, noise and correlation), so it separates right
from wrong branches as much as it does there.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fasttts.backends.sim import tokenizer as tok
from fasttts.jsonio import JsonFileError, read_model
from fasttts.backends.sim.workload import _WORDS, DERAILED, ON_TRACK, Workload, WorkloadModel, _h

__all__ = ["BUILTIN", "LongCoTModel", "LongCoTWorkload", "mean_length", "skew_normal"]

_DIR = Path(__file__).parent
#: Long-CoT workloads shipped with fasttts, by name (`--sim-workload NAME`).
BUILTIN = {"longcot-gpqa": _DIR / "longcot_gpqa.json"}
_LETTERS = "ABCD"


def skew_normal(u0, u1, skew: float):
    """(x, z): a standard skew-normal draw x of shape `skew` made of two standard normal draws
    (delta |u0| + sqrt(1 - delta^2) u1, delta = skew / sqrt(1 + skew^2)) and x standardized to
    mean 0, SD 1. Floats or numpy arrays."""
    delta = skew / math.sqrt(1 + skew * skew)
    x = delta * abs(u0) + math.sqrt(1 - delta * delta) * u1
    mean = delta * math.sqrt(2 / math.pi)
    return x, (x - mean) / math.sqrt(1 - mean * mean)


class LongCoTModel(BaseModel):
    """Parameters of the long-CoT workload (module docstring; fields of `longcot_fit`).

    Attributes:
        log_median_skew, log_median_loc, log_median_scale: the skew-normal of the questions'
            log median length (log tokens).
        spread_df, spread_scale: Student-t degrees of freedom and scale of a branch's log
            length around its question's median (log tokens).
        acc_intercept, acc_slope, acc_sd: a, b, s of a question's accuracy logit.
        length_slope: c, the drop of a branch's correctness logit per unit of its log length
            above the question's median.
        data_cap: the generation cap of the recorded data (tokens; for reference).
        fitted_accuracy: the fitted model's mean accuracy before `shift`, branches cut at
            `data_cap` (a check against the data's).
        length_scale: factor on every branch length (the scaling rule; 1 = as recorded).
        target_accuracy: the simulated model's mean accuracy that `shift` was solved for.
        shift: added to every question's accuracy logit.
        num_choices: answer choices of a question (a wrong branch answers another one).
        source: what the numbers were fitted to and how.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    log_median_skew: float
    log_median_loc: float
    log_median_scale: float = Field(ge=0)
    spread_df: float = Field(gt=0)
    spread_scale: float = Field(ge=0)
    acc_intercept: float
    acc_slope: float
    acc_sd: float = Field(ge=0)
    length_slope: float
    data_cap: int = Field(gt=0)
    fitted_accuracy: float | None = Field(default=None, ge=0, le=1)
    length_scale: float = Field(default=1.0, gt=0)
    target_accuracy: float | None = Field(default=None, gt=0, lt=1)
    shift: float = 0.0
    num_choices: int = Field(default=4, ge=2, le=len(_LETTERS))
    source: str = ""

    @classmethod
    def load(cls, name_or_path: str | Path) -> LongCoTModel:
        """A built-in model by name (`BUILTIN`) or one from a JSON file.

        Raises:
            ValueError: unreadable file or bad fields (names the file).
        """
        path = BUILTIN.get(str(name_or_path), Path(name_or_path))
        try:
            return read_model(path, cls)
        except JsonFileError as e:
            raise ValueError(f"cannot read long-CoT workload {e}") from None

    def question(self, problem: str) -> tuple[float, float]:
        """(log median length, accuracy logit) of a question, from a hash of its text."""
        rng = random.Random(_h("longcot-q", problem))
        x, z = skew_normal(rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0), self.log_median_skew)
        e = rng.gauss(0.0, 1.0)
        return (self.log_median_loc + self.log_median_scale * x,
                self.acc_intercept + self.acc_slope * z + self.acc_sd * e + self.shift)

    def branch(self, problem: str, seed: int) -> tuple[int, bool, float]:
        """(length in tokens, right?, derail point as a fraction of the length) of the branch
        of `seed` on `problem`."""
        log_median, logit = self.question(problem)
        rng = random.Random(_h("longcot-b", problem, seed))
        t = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(self.spread_df / 2, 2.0)
                                            / self.spread_df)
        r = self.spread_scale * t
        length = max(16, round(math.exp(log_median + r) * self.length_scale))
        right = rng.random() < 1.0 / (1.0 + math.exp(-(logit - self.length_slope * r)))
        return length, right, rng.random()


def mean_length(model: LongCoTModel, cap: int, questions: int = 2000, per: int = 8) -> float:
    """Mean branch length (tokens) of `model` over `questions` simulated questions x `per`
    branches, each cut at `cap` tokens (a run's `max_tokens`): what one branch holds in the KV
    cache at its end, on average (deterministic)."""
    total = sum(min(model.branch(f"mean-length question {q}", s)[0], cap)
                for q in range(questions) for s in range(per))
    return total / (questions * per)


class LongCoTWorkload(Workload):
    """The simulated generator's long-CoT branches (module docstring); scores, confidence and
    answers as `Workload`'s.

    Args:
        model: the long-CoT parameters.
        steps: the step lengths and PRM score parameters (default: the parametric workload's).
        answers: reference answer per problem text.
    """

    def __init__(self, model: LongCoTModel, steps: WorkloadModel | None = None,
                 answers: dict[str, str] | None = None):
        super().__init__(steps, answers)
        self.longcot = model

    def answer(self, problem: str, on_track: bool, draw: int) -> str:
        """The reference for a right branch; for a wrong one another choice (a letter when
        the reference is one, else `Workload.answer`'s wrong answers)."""
        right = self.answers.get(problem) or _LETTERS[_h("longcot-a", problem) % 4]
        if on_track or right not in _LETTERS[:self.longcot.num_choices]:
            return right if on_track else super().answer(problem, False, draw)
        others = [c for c in _LETTERS[:self.longcot.num_choices] if c != right]
        return others[draw % len(others)]

    def stream(self, token_ids: list[int], seed: int) -> Iterator[int]:
        """The branch's tokens after `token_ids` (prompt + path), ending with EOS: the whole
        branch of (problem, seed) with the path's tokens skipped (so a resumed sequence goes
        on exactly).

        Raises:
            ValueError: `token_ids` is not a prompt from the simulator's chat template.
        """
        problem, start = tok.split_prompt(token_ids)
        skip = len(token_ids) - start
        for t in self._branch_tokens(problem, seed):
            if skip:
                skip -= 1
                continue
            yield t

    def _branch_tokens(self, problem: str, seed: int) -> Iterator[int]:
        length, right, derail_at = self.longcot.branch(problem, seed)
        rng = random.Random(_h("longcot-s", problem, seed))
        tail = tok.encode(f" so the answer is \\boxed{{{self.answer(problem, right, seed)}}}.")
        on, off = tok.encode(ON_TRACK)[0], tok.encode(DERAILED)[0]
        delim = tok.encode("\n\n")
        done = 0
        while True:
            size = self._step_length(rng)
            final = done + size + len(tail) >= length
            marker = on if right or done < derail_at * length else off
            body = max(0, (length - done - len(tail) - 1) if final else size - 1 - len(delim))
            yield marker
            yield from rng.choices(_WORDS, k=body)
            if final:
                yield from tail
                yield tok.EOS
                return
            yield from delim
            done += 1 + body + len(delim)
