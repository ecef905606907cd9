"""The generator's token log-probabilities along a path, for verifiers that read them.

A run whose verifier reads the generator's confidence (`Verifier.needs_logprobs`, the
`confidence` kind) asks the generator for each sampled token's log-probability
(`GenerationParams.logprobs`) and keeps them on the beam, parallel to its tokens
(`Beam.token_logprobs`): the tokens a sequence generated, those adopted from a speculative
head start (`HeadStart.token_logprobs`, carried from `SpecBranch.token_logprobs`) and those of
lookahead rollouts (throw-away copies of the beam). When the runtime builds a verifier request
it cuts them into steps by `Beam.step_tokens` (`ScoreRequest.step_logprobs`). Runs whose
verifier does not read them keep nothing and pay nothing.

The generation and speculation modules call the small hooks here, so their own logic stays
free of the bookkeeping.
"""

from __future__ import annotations

from fasttts.backends.base import ScoreRequest, SequenceUpdate
from fasttts.beam import Beam, HeadStart

__all__ = ["adopt_head", "cut", "extend", "head_logprobs", "outcome_request", "path_step_logprobs",
           "with_branch_logprobs"]


def extend(target, up: SequenceUpdate) -> None:
    """Append the log-probabilities of an update to a beam or speculative branch (its
    `token_logprobs`), when the update carries them."""
    if up.new_logprobs:
        target.token_logprobs.extend(up.new_logprobs)


def adopt_head(beam: Beam, head: HeadStart) -> None:
    """A beam takes a head start's tokens: take their log-probabilities too."""
    beam.token_logprobs.extend(head.token_logprobs)


def head_logprobs(token_logprobs: list[float], keep: int | None = None) -> list[float]:
    """A head start's log-probabilities from its branch's (the first `keep` of them for a
    truncated copy)."""
    return list(token_logprobs if keep is None else token_logprobs[:keep])


def path_step_logprobs(beam: Beam) -> tuple[tuple[float, ...], ...] | None:
    """The beam's token log-probabilities cut into its steps (one tuple per `beam.steps`),
    by `beam.step_tokens`; tokens no step count holds go to the last step. None when the beam
    does not keep one per token (a run that did not ask for them)."""
    lps = beam.token_logprobs
    if len(lps) != len(beam.token_ids):
        return None
    return cut(lps, beam.step_tokens, len(beam.steps))


def cut(lps: list[float], step_tokens: list[int], num_steps: int,
        rest_to_last: bool = True) -> tuple[tuple[float, ...], ...]:
    """`lps` cut into `num_steps` steps of `step_tokens` tokens each (a step without a count
    gets none). The tokens after the last counted step go to the last step with
    `rest_to_last`, else nowhere (a step still being written)."""
    if not num_steps:
        return ()
    out, pos = [], 0
    for n in step_tokens[:num_steps]:
        out.append(list(lps[pos:pos + n]))
        pos += n
    out += [[] for _ in range(num_steps - len(out))]
    if rest_to_last:
        out[-1] += lps[pos:]
    return tuple(tuple(x) for x in out)


def with_branch_logprobs(beam: Beam, steps: tuple[str, ...],
                         branch_logprobs: list[float]) -> tuple[tuple[float, ...], ...] | None:
    """The step log-probabilities of `steps`, the beam's steps followed by those of a
    speculative branch's text (LookAhead Verification): the branch's tokens all go to its last
    step (a branch stops at the step delimiter, so it holds one step)."""
    own = path_step_logprobs(beam)
    if own is None:
        return None
    extra = len(steps) - len(own)
    if extra <= 0:
        return own
    return own + tuple(() for _ in range(extra - 1)) + (tuple(branch_logprobs),)


def outcome_request(problem: str, beam: Beam) -> ScoreRequest:
    """The request of an outcome-scored path (the whole text as one step), with all of its
    token log-probabilities when it keeps them."""
    lps = beam.token_logprobs
    keep = bool(lps) and len(lps) == len(beam.token_ids)
    return ScoreRequest(problem, (beam.text,), step_logprobs=(tuple(lps),) if keep else None)
