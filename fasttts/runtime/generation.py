"""The generation phase of one iteration: extend every beam by one step (or to its end).

This is the baseline mechanism (search-and-learn on vLLM): all beams of the iteration are
submitted to the engine at once and the engine is stepped until every one has finished its
step; vLLM batches them continuously. The phase is a part of a search run by the driver loop
(`fasttts.runtime.driver`): it wishes its sequences and engine steps and never steps the
engine itself. The trace of running sequences per engine step is kept,
so batch occupancy can be reported (FastTTS Fig. 4 / Fig. 17 left).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fasttts.backends.base import GenerationParams, GeneratorBackend, SequenceUpdate
from fasttts.beam import Beam
from fasttts.runtime import token_logprobs
from fasttts.runtime.driver import Driver, Generate, NewSequence, Search
from fasttts.runtime.spec_beam_extension import SpeculativeBeamExtension
from fasttts.steps import has_final_answer, split_steps

__all__ = ["GenerationTrace", "StepRequest", "beam_seed", "extend_beams", "generate_step",
           "step_token_counts"]


def beam_seed(base_seed: int, problem_id: str, parent_id: int | None, branch: int) -> int:
    """Per-sequence seed of the `branch`-th child of beam `parent_id` in a problem's search.

    The same search decisions draw the same random stream whatever order or batch the engine
    runs them in; and a speculative branch of a beam (SBE) draws exactly the stream its
    future child of the same branch index will draw. Returns an int in [0, 2**31)."""
    key = f"{base_seed}|{problem_id}|{parent_id}|{branch}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % (1 << 31)


@dataclass
class StepRequest:
    """How to extend the beams of one iteration.

    Attributes:
        prompt_ids: the problem's prompt token ids (shared by every beam).
        temperature, top_p: sampling parameters.
        max_tokens: most tokens one path may hold in total (tokens).
        stop: stop strings of this iteration (empty in the last iteration: to the end).
        seed: base seed; with the beam's parent and branch it gives the sequence's seed.
        ordered_priorities: give the i-th beam rank i (`fasttts.runtime.priorities`), so a
            memory-bound engine admits beams in the submitted order (prefix-aware
            scheduling); else all rank 0.
        tag: added to the sequence ids of this call (e.g. "la1" for lookahead rollouts), so
            extra generations of the same beams in one iteration get distinct ids.
        logprobs: ask for the sampled tokens' log-probabilities and keep them on the beams
            (`fasttts.runtime.token_logprobs`).
        next_stop: the stop strings of the next iteration, which speculative branches (its
            children's own requests) are sent with: () when the next iteration is the last
            one, which generates to the end; None = `(step_delimiter,)`.
    """

    prompt_ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    seed: int
    problem_id: str
    iteration: int
    step_delimiter: str = "\n\n"
    ordered_priorities: bool = False
    tag: str = ""
    logprobs: bool = False
    next_stop: tuple[str, ...] | None = None


@dataclass
class GenerationTrace:
    """Per generator engine step: (time s, standard sequences running, speculative sequences
    running, batch slots of the phase), and the tokens generated (speculative ones included).

    Batch occupancy (FastTTS Fig. 17 left) is (standard + speculative) / slots per step."""

    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    tokens: int = 0

    def record(self, t: float, standard: int, speculative: int, slots: int) -> None:
        self.samples.append((t, standard, speculative, slots))

    def mean_occupancy(self) -> float | None:
        """Mean over engine steps of running sequences / batch slots; None without steps."""
        fracs = [min(1.0, (a + b) / s) for _, a, b, s in self.samples if s]
        return sum(fracs) / len(fracs) if fracs else None


def extend_beams(
    generator: GeneratorBackend,
    beams: list[Beam],
    req: StepRequest,
    trace: GenerationTrace,
    speculator: SpeculativeBeamExtension | None = None,
) -> None:
    """`generate_step` run to its end by a driver of its own over `generator` (one search
    alone, `fasttts.runtime.driver.Driver.run`); the arguments are `generate_step`'s.

    Raises:
        whatever the engine raised; every sequence this call added is aborted first (no KV
        blocks are leaked).
    """
    Driver(generator).run(generate_step(generator, beams, req, trace, speculator))


def generate_step(
    generator: GeneratorBackend,
    beams: list[Beam],
    req: StepRequest,
    trace: GenerationTrace,
    speculator: SpeculativeBeamExtension | None = None,
) -> Search:
    """Generate the next step of every beam in place (text, tokens, steps, finish state), as
    a search part that wishes its sequences and engine steps from the driver
    (`fasttts.runtime.driver`); `generator` is only read.

    Phase 1 (continuous beam batching, FastTTS section 4.1.2): every beam gets one sequence,
    all submitted at once, and the engine is stepped until each has finished its step. With a
    `speculator`, phase 2 fills free batch slots with speculative branches of beams that are
    done, and stops them when the last beam finishes (`fasttts.runtime.spec_beam_extension`).

    A beam with a head start (speculative tokens adopted after the last selection) starts from
    them; when they hold its whole step, it needs no sequence at all (in the last iteration,
    which generates to the end, it continues after them); when their sequence still runs in
    the engine (a parked speculative branch), the beam takes that sequence over instead of
    submitting one.

    A beam finishes when the engine emits end-of-sequence ("eos"), the path reaches its token
    budget or the context limit ("length"), the new text holds a complete `\\boxed{}` answer
    ("answer"), or the new step is empty ("empty"). On any error the driver aborts every
    sequence of the search before the error propagates.

    Args:
        generator: the engine (read only: context length, batch slots, clock, state).
        beams: unfinished beams; each gets one sequence.
        req: sampling and stopping parameters of this iteration.
        trace: receives per-step occupancy samples and the token count.
        speculator: speculative beam extension, or None (baseline).
    """
    phase = _Phase(generator, req)
    yield Generate(add=phase.submit(beams), step=False)
    slots = min(len(phase.pending), generator.max_num_seqs) or 1
    try:
        if speculator is not None:
            spec_stop = req.next_stop if req.next_stop is not None else (req.step_delimiter,)
            speculator.begin(generator, beams, req.iteration, req.prompt_ids,
                             lambda b, j: phase.params(b, b.beam_id, j, spec_stop), slots)
            if not phase.pending:  # every beam's step was its head start: nothing to run
                speculator.end()
        add, abort = [], []
        while phase.pending:
            updates = yield Generate(add=add, abort=abort)
            trace.record(generator.now(), len(phase.pending),
                         speculator.running() if speculator else 0, slots)
            phase.route(updates, trace, speculator)
            if speculator is not None:
                add, abort = (speculator.fill(generator, len(phase.pending)) if phase.pending
                              else ([], speculator.end()))
        if abort:
            yield Generate(abort=abort, step=False)
    except BaseException:
        if speculator is not None:
            speculator.end(complete=False)  # the driver aborts the search's sequences
        raise


@dataclass(eq=False)
class _Seq:
    """A standard sequence of a phase: its beam, the step's text so far in chunks (with its
    length in characters), one (character offset, tokens) piece per update, and LookAhead
    scores its head start carried."""

    beam: Beam
    chunks: list[str]
    length: int
    pieces: list[tuple[int, int]]
    head_scores: list[float] = field(default_factory=list)


class _Phase:
    """The standard sequences of one generation phase and what each generated so far.

    Args:
        generator: the engine (its context length).
        req: the phase's step request.
    """

    def __init__(self, generator: GeneratorBackend, req: StepRequest):
        self.req = req
        self.by_seq: dict[str, _Seq] = {}
        self.pending: set[str] = set()  # standard sequences still generating their step
        self.room = generator.max_model_len - len(req.prompt_ids)

    def params(self, beam: Beam, parent_id: int | None, branch: int,
               stop) -> GenerationParams | None:
        """Sampling parameters of a sequence extending `beam` (the stream of `parent_id`'s
        child `branch`); None when the path has no token budget left."""
        req = self.req
        budget = min(req.max_tokens, self.room) - beam.num_tokens
        if budget <= 0:
            return None
        return GenerationParams(max_tokens=budget, temperature=req.temperature, top_p=req.top_p,
                                seed=beam_seed(req.seed, req.problem_id, parent_id, branch),
                                stop=stop, logprobs=req.logprobs)

    def submit(self, beams: list[Beam]) -> list[NewSequence]:
        """One sequence per beam that needs one; head starts are taken first (see
        `generate_step`). Beams out of budget finish ("length")."""
        req, adds = self.req, []
        for position, beam in enumerate(beams):
            head, text0, pieces0 = beam.head_start, "", []
            beam.head_start = None
            if head is not None:
                beam.token_ids.extend(head.token_ids)
                token_logprobs.adopt_head(beam, head)
                text0, pieces0 = head.text, [(0, len(head.token_ids))] if head.token_ids else []
                whole = head.finish_reason in ("eos", "length") or (
                    head.finish_reason == "stop" and req.stop)
                if whole:
                    _finish_step(beam, head.text, head.finish_reason, req, pieces0)
                    _take_scores(beam, head.step_scores)
                    continue
                if head.seq_id is not None:  # a parked speculative branch: go on with it
                    self._track(head.seq_id, _Seq(beam, [text0], len(text0), pieces0))
                    continue
            p = self.params(beam, beam.parent_id, beam.branch, req.stop)
            if p is None:
                if text0:
                    _finish_step(beam, text0, "length", req, pieces0)
                beam.finished, beam.finish_reason = True, "length"
                continue
            seq_id = f"{req.problem_id}/it{req.iteration}{req.tag}/b{beam.beam_id}"
            adds.append(NewSequence(seq_id, req.prompt_ids + beam.token_ids, p,
                                    rank=position if req.ordered_priorities else 0))
            scores = head.step_scores if head is not None and head.finish_reason == "stop" else []
            self._track(seq_id, _Seq(beam, [text0], len(text0), pieces0, scores))
        return adds

    def _track(self, seq_id: str, seq: _Seq) -> None:
        """Route the updates of engine sequence `seq_id` to `seq` from now on."""
        self.by_seq[seq_id] = seq
        self.pending.add(seq_id)

    def route(self, updates: list[SequenceUpdate], trace: GenerationTrace,
              speculator: SpeculativeBeamExtension | None) -> None:
        """One engine step's updates: standard ones to their beams (a finished step leaves
        `pending` and may make its beam a speculative candidate), speculative ones to the
        speculator; every token counts in `trace`. (The runtime's inner loop: one dict
        lookup and a few appends per update.)"""
        by_seq, tokens = self.by_seq, 0
        for up in updates:
            n = len(up.new_token_ids)
            seq = by_seq.get(up.seq_id)
            if seq is None:
                if speculator is not None and speculator.owns(up.seq_id):
                    tokens += n
                    speculator.consume(up)
                continue
            tokens += n
            beam = seq.beam
            beam.token_ids += up.new_token_ids
            if up.new_logprobs:
                beam.token_logprobs += up.new_logprobs
            seq.pieces.append((seq.length, n))
            seq.chunks.append(up.new_text)
            seq.length += len(up.new_text)
            if up.finished:
                _finish_step(beam, "".join(seq.chunks), up.finish_reason, self.req, seq.pieces)
                _take_scores(beam, seq.head_scores)
                self.pending.discard(up.seq_id)
                if speculator is not None:
                    speculator.standard_done(beam, up.finish_reason)
        trace.tokens += tokens


def _take_scores(beam: Beam, scores: list[float]) -> None:
    """Adopt LookAhead scores of a head start's whole step, the first of the beam's new steps
    (a step's score depends only on its prefix, so they are the scores it would get now)."""
    if scores and len(beam.step_scores) + len(scores) <= len(beam.steps):
        beam.step_scores.extend(scores)


def step_token_counts(text: str, pieces: list[tuple[int, int]], delimiter: str) -> list[int]:
    """Tokens of each step of `text` (the text one sequence generated), from its updates
    (character offset where the update's text starts, tokens in the update): an update's
    tokens count for the step its text starts in (exact when updates carry one token)."""
    bounds, pos = [], 0
    for step in split_steps(text, delimiter):
        pos += len(step)
        bounds.append(pos)
    counts = [0] * len(bounds)
    k = 0
    for offset, ntok in pieces:
        while k < len(bounds) - 1 and offset >= bounds[k]:
            k += 1
        if counts:
            counts[k] += ntok
    return counts


def _finish_step(beam: Beam, text: str, reason: str | None, req: StepRequest,
                 pieces: list[tuple[int, int]] = ()) -> None:
    before = len(beam.steps)
    beam.text += text
    beam.steps = split_steps(beam.text, req.step_delimiter)
    new_steps = len(beam.steps) - before
    if new_steps > 0:
        counts = step_token_counts(text, list(pieces), req.step_delimiter)
        beam.step_tokens += (counts + [0] * new_steps)[:new_steps]
    beam.iterations += 1
    if reason in ("eos", "length"):
        beam.finished, beam.finish_reason = True, reason
    elif not text.strip():
        beam.finished, beam.finish_reason = True, "empty"
    elif has_final_answer(text):
        beam.finished, beam.finish_reason = True, "answer"
