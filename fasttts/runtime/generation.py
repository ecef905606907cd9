"""The generation phase of one iteration: extend every beam by one step (or to its end).

This is the baseline mechanism (search-and-learn on vLLM): all beams of the iteration are
submitted to the engine at once and the engine is stepped until every one has finished its
step; vLLM batches them continuously. The trace of running sequences per engine step is kept,
so batch occupancy can be reported (FastTTS Fig. 4 / Fig. 17 left).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fasttts.backends.base import GenerationParams, GeneratorBackend
from fasttts.beam import Beam
from fasttts.steps import has_final_answer, split_steps

__all__ = ["GenerationTrace", "StepRequest", "beam_seed", "extend_beams"]


def beam_seed(base_seed: int, problem_key: str, iteration: int, beam_id: int) -> int:
    """Per-sequence seed from (base seed, problem, iteration, beam): the same search decisions
    draw the same random stream whatever order or batch the engine runs them in.
    Returns an int in [0, 2**31)."""
    key = f"{base_seed}|{problem_key}|{iteration}|{beam_id}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % (1 << 31)


@dataclass
class StepRequest:
    """How to extend the beams of one iteration.

    Attributes:
        prompt_ids: the problem's prompt token ids (shared by every beam).
        temperature, top_p: sampling parameters.
        max_tokens: most tokens one path may hold in total (tokens).
        stop: stop strings of this iteration (empty in the last iteration: to the end).
        seed: base seed; problem_key and iteration complete the per-sequence seed.
    """

    prompt_ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    seed: int
    problem_key: str
    iteration: int
    step_delimiter: str = "\n\n"


@dataclass
class GenerationTrace:
    """Per engine step of the generation phase: (time in s, running sequences)."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    tokens: int = 0

    def record(self, t: float, running: int) -> None:
        self.samples.append((t, running))


def extend_beams(
    generator: GeneratorBackend, beams: list[Beam], req: StepRequest, trace: GenerationTrace
) -> None:
    """Generate the next step of every beam in place (text, tokens, steps, finish state).

    A beam finishes when the engine emits end-of-sequence ("eos"), the path reaches its token
    budget or the context limit ("length"), the new text holds a complete `\\boxed{}` answer
    ("answer"), or the new step is empty ("empty"). On any error, every sequence this call
    added is aborted before the error propagates (no KV blocks are leaked).

    Args:
        generator: the engine.
        beams: unfinished beams; each gets one sequence.
        req: sampling and stopping parameters of this iteration.
        trace: receives (time, running sequences) per engine step and the token count.
    """
    by_seq: dict[str, Beam] = {}
    room = generator.max_model_len - len(req.prompt_ids)
    try:
        for beam in beams:
            budget = min(req.max_tokens, room) - beam.num_tokens
            if budget <= 0:
                beam.finished, beam.finish_reason = True, "length"
                continue
            seq_id = f"{req.problem_key}/it{req.iteration}/b{beam.beam_id}"
            params = GenerationParams(
                max_tokens=budget,
                temperature=req.temperature,
                top_p=req.top_p,
                seed=beam_seed(req.seed, req.problem_key, req.iteration, beam.beam_id),
                stop=req.stop,
            )
            generator.add_sequence(seq_id, req.prompt_ids + beam.token_ids, params)
            by_seq[seq_id] = beam
        new_text = {seq_id: "" for seq_id in by_seq}
        pieces: dict[str, list[tuple[int, int]]] = {seq_id: [] for seq_id in by_seq}
        pending = set(by_seq)
        while pending:
            updates = generator.step()
            trace.record(generator.now(), len(pending))
            for up in updates:
                beam = by_seq.get(up.seq_id)
                if beam is None:
                    continue
                beam.token_ids.extend(up.new_token_ids)
                trace.tokens += len(up.new_token_ids)
                pieces[up.seq_id].append((len(new_text[up.seq_id]), len(up.new_token_ids)))
                new_text[up.seq_id] += up.new_text
                if up.finished:
                    pending.discard(up.seq_id)
                    _finish_step(beam, new_text[up.seq_id], up.finish_reason, req,
                                 pieces[up.seq_id])
    except BaseException:
        generator.abort(list(by_seq))
        raise


def _step_token_counts(text: str, pieces: list[tuple[int, int]], delimiter: str) -> list[int]:
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
        counts = _step_token_counts(text, list(pieces), req.step_delimiter)
        beam.step_tokens += (counts + [0] * new_steps)[:new_steps]
    beam.iterations += 1
    if reason in ("eos", "length"):
        beam.finished, beam.finish_reason = True, reason
    elif not text.strip():
        beam.finished, beam.finish_reason = True, "empty"
    elif has_final_answer(text):
        beam.finished, beam.finish_reason = True, "answer"
