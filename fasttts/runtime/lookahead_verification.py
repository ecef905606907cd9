"""LookAhead Verification (FastTTS section 4.1.3).

When speculative beam extension produced a whole next step for a beam, the verifier request of
the beam's current step is extended with that speculative step: one request scores both, while
the path's KV is hot in the verifier's cache. The current step's score is what the search uses
now (a step's score depends only on its prefix, so it equals the plain request's); the next
step's score is kept with the speculative branch and, if that path is selected and inherits
the branch as its head start, it is used in the next iteration instead of scoring the step
again. Only one complete branch per beam rides along (the lowest-numbered: branch 0 is the one
SBE launches first and R's truncated copies come from); the beam's other branches are scored
when they become steps. A further request per branch would cost a whole path each under
whole-path scoring (that verifier reads no prefix cache) and save one only if that branch
is adopted.
"""

from __future__ import annotations

from fasttts.beam import Beam
from fasttts.runtime.spec_beam_extension import SpecBranch
from fasttts.runtime.token_logprobs import path_step_logprobs, with_branch_logprobs
from fasttts.steps import split_steps
from fasttts.verifiers.base import ScoreRequest

__all__ = ["LookaheadPlan", "plan_requests"]


class LookaheadPlan:
    """Verifier requests for a set of beams, with speculative steps appended where possible,
    and how to hand the scores back.

    Attributes:
        requests: the `ScoreRequest`s to send, in one batch.
        num_lookahead: requests that carried a speculative step.
    """

    def __init__(self) -> None:
        self.requests: list[ScoreRequest] = []
        self._targets: list[tuple[Beam | None, int, SpecBranch | None]] = []
        self.num_lookahead = 0

    def add(self, req: ScoreRequest, beam: Beam | None, own: int, branch: SpecBranch | None) -> None:
        self.requests.append(req)
        self._targets.append((beam, own, branch))

    def apply(self, scores: list[list[float]]) -> None:
        """Give each beam its new steps' scores and each branch its speculative step scores."""
        for (beam, own, branch), sc in zip(self._targets, scores):
            if beam is not None:
                beam.step_scores.extend(sc[:own])
            if branch is not None:
                branch.step_scores = list(sc[own:])


def plan_requests(problem: str, beams: list[Beam], branches: list[SpecBranch],
                  delimiter: str) -> LookaheadPlan:
    """The verifier requests of `beams` (their unscored steps), each with the beam's first
    complete speculative branch appended (module docstring). Beams that keep their token
    log-probabilities (`fasttts.runtime.token_logprobs`) send them along, cut into steps."""
    by_beam: dict[int, list[SpecBranch]] = {}
    for br in branches:
        by_beam.setdefault(br.beam_id, []).append(br)
    plan = LookaheadPlan()
    for beam in beams:
        start = len(beam.step_scores)
        own = len(beam.steps) - start
        extra = [] if beam.finished else by_beam.get(beam.beam_id, [])
        if own <= 0 and not extra:
            continue
        if not extra:
            plan.add(ScoreRequest(problem, tuple(beam.steps), start, path_step_logprobs(beam)),
                     beam, own, None)
            continue
        br = min(extra, key=lambda b: b.branch)
        steps = tuple(split_steps(beam.text + br.text, delimiter))
        plan.add(ScoreRequest(problem, steps, start,
                              with_branch_logprobs(beam, steps, br.token_logprobs)), beam, own, br)
        plan.num_lookahead += 1
    return plan
