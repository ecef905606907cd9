"""Greedy lookahead rollouts (search-and-learn's `lookahead` k).

Source: Hugging Face search-and-learn, beam search and DVTS with `lookahead > 0`
(Snell et al. 2024, section 5): a new step is judged by where it leads. From every unfinished
path that is about to be scored, k more steps are generated greedily (temperature 0) on a
throw-away copy; the PRM scores the copy; the path keeps only its own steps, with their scores
taken from the copy's (a step's score depends only on its prefix), and its aggregated score is
the copy's. The rollout tokens count as generated tokens (they cost generator time) but are
never part of a returned path.
"""

from __future__ import annotations

import dataclasses

from fasttts.backends.base import GeneratorBackend
from fasttts.beam import Beam
from fasttts.runtime.driver import Search
from fasttts.runtime.generation import GenerationTrace, StepRequest, generate_step

__all__ = ["lookahead_rollouts"]


def lookahead_rollouts(generator: GeneratorBackend, beams: list[Beam], k: int, req: StepRequest,
                       trace: GenerationTrace) -> Search:
    """Roll each unfinished beam out by up to k greedy steps (a search part: it wishes its
    generation from the driver, `fasttts.runtime.driver`).

    Args:
        generator: the engine (read only).
        beams: the beams to look ahead from (finished ones are skipped).
        k: lookahead steps (>= 1).
        req: this iteration's step request (its stop string and budget are kept; temperature
            becomes 0).
        trace: receives the rollout tokens.

    Returns (as the generator's return value):
        beam_id -> the rolled-out copy (same id and steps, plus up to k more steps).
    """
    copies = {b.beam_id: dataclasses.replace(
        b, token_ids=list(b.token_ids), steps=list(b.steps), step_scores=list(b.step_scores),
        token_logprobs=list(b.token_logprobs), step_tokens=list(b.step_tokens), head_start=None) for b in beams if not b.finished}
    for j in range(1, k + 1):
        live = [c for c in copies.values() if not c.finished]
        if not live:
            break
        yield from generate_step(generator, live, dataclasses.replace(
            req, temperature=0.0, ordered_priorities=False, tag=f"la{j}"), trace)
    return copies
