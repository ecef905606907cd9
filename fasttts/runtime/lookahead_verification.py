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

Priced (no flag: it is how LookAhead decides). Appending a speculative step of L tokens costs
the verifier those L tokens now, whether or not the branch is kept; if a kept child takes the
branch (prior chance P, `SpecBranch.keep_probability`: its beam's bin, as speculative beam
extension prices it), the next iteration sends no request for that step, which would have
computed the L tokens plus the path before them that the verifier does not find cached: the
whole path for whole-path scoring, nothing (at most the last partial KV block, not counted)
for a verifier that reads its prefix cache (incremental verification). The step rides along
when the expected saving covers the cost,

    P x (L + uncached path tokens) >= L,

so under whole-path scoring most likely branches ride along, and beside incremental
verification a branch rides along only when it is certain to be kept (P = 1): otherwise
LookAhead would only move verifier work forward and spend it on the branches the search drops.
Branches turned down are counted (`LookaheadPlan.num_declined`).
"""

from __future__ import annotations

from fasttts.beam import Beam
from fasttts.runtime.spec_beam_extension import SpecBranch
from fasttts.runtime.token_logprobs import path_step_logprobs, with_branch_logprobs
from fasttts.steps import split_steps
from fasttts.verifiers.base import ScoreRequest

__all__ = ["LookaheadPlan", "plan_requests", "rides_along", "worth_riding"]


class LookaheadPlan:
    """Verifier requests for a set of beams, with speculative steps appended where possible,
    and how to hand the scores back.

    Attributes:
        requests: the `ScoreRequest`s to send, in one batch.
        num_lookahead: requests that carried a speculative step.
        num_declined: complete speculative steps that did not ride along because their
            expected saving is below their cost (module docstring).
    """

    def __init__(self) -> None:
        self.requests: list[ScoreRequest] = []
        self._targets: list[tuple[Beam | None, int, SpecBranch | None]] = []
        self.num_lookahead = 0
        self.num_declined = 0

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


def worth_riding(keep_probability: float, step_tokens: int, uncached_tokens: int) -> bool:
    """The rule of the module docstring: P x (L + U) >= L for a speculative step of L =
    `step_tokens` tokens whose separate request would also compute U = `uncached_tokens`
    tokens of the path, kept with chance P = `keep_probability`."""
    return keep_probability * (step_tokens + uncached_tokens) >= step_tokens


def rides_along(branch: SpecBranch, beam: Beam, prefix_cached: bool) -> bool:
    """Whether `branch`'s complete speculative step is worth appending to `beam`'s request
    (`worth_riding`): L the step's tokens, the path `beam`'s tokens (generator tokens, the
    problem's left out), none of it uncached when the verifier reads its prefix cache
    (`prefix_cached`)."""
    uncached = 0 if prefix_cached else len(beam.token_ids)
    return worth_riding(branch.keep_probability, len(branch.token_ids), uncached)


def plan_requests(problem: str, beams: list[Beam], branches: list[SpecBranch],
                  delimiter: str, prefix_cached: bool = False) -> LookaheadPlan:
    """The verifier requests of `beams` (their unscored steps), each with the beam's first
    complete speculative branch appended where that is worth its verifier work
    (`rides_along`; `prefix_cached`: the verifier reads its prefix cache, module docstring).
    Beams that keep their token log-probabilities (`fasttts.runtime.token_logprobs`) send
    them along, cut into steps."""
    by_beam: dict[int, list[SpecBranch]] = {}
    for br in branches:
        by_beam.setdefault(br.beam_id, []).append(br)
    plan = LookaheadPlan()
    for beam in beams:
        start = len(beam.step_scores)
        own = len(beam.steps) - start
        extra = [] if beam.finished else by_beam.get(beam.beam_id, [])
        br = min(extra, key=lambda b: b.branch) if extra else None
        if br is not None and not rides_along(br, beam, prefix_cached):
            plan.num_declined += 1
            br = None
        if own <= 0 and br is None:
            continue
        if br is None:
            plan.add(ScoreRequest(problem, tuple(beam.steps), start, path_step_logprobs(beam)),
                     beam, own, None)
            continue
        steps = tuple(split_steps(beam.text + br.text, delimiter))
        plan.add(ScoreRequest(problem, steps, start,
                              with_branch_logprobs(beam, steps, br.token_logprobs)), beam, own, br)
        plan.num_lookahead += 1
    return plan
