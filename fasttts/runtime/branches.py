"""The branch-level search loop: SART's Algorithm 1 (lines 20-50) for one request.

A branch-level method (`SearchStrategy.branch_level`, SART) runs its n branches as n engine
sequences that decode to their end, EOS or `max_tokens`, with no stop at the step delimiter
and no step barrier: no branch ever waits for another. Steps are cut from a branch's text
(`fasttts.steps.split_steps`) only for the PRM. As a search part of the driver loop
(`fasttts.runtime.driver`) it wishes its sequences once, then one engine step at a time:

- a *decode step* of the request is an engine step in which at least one of its branches
  generated a token (its branches may wait in the engine's queue behind other requests');
- every `check_interval` (T) decode steps, a check: the PRM scores each live branch's complete
  steps that it has not scored yet (one `Score` wish; the verifier's prefix cache serves the
  rest when it is incremental), and the strategy's `select` says which live branches go on;
  the others are pruned;
- a branch that completes (EOS or its token budget) is scored at once, its final partial step
  included, and counted; when the strategy's `should_stop` says so (SART: M completions) the
  request stops with its other branches wherever they are, mid-step included;
- a pruned or stopped branch is aborted in the same turn (`Generate(abort=...)`), so the engine
  frees its KV blocks before its next step; a completed one the engine has already released.
  The prompt's blocks are shared by every branch through the prefix cache and go with the last.

Times: the search's generator time is the time it waited for engine steps, its verifier time
the time its `Score` wishes took (on a server both include what other requests ran meanwhile:
the engine is shared). A completion's `finish_time` is when it was scored.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fasttts.backends.base import GenerationParams, SequenceUpdate
from fasttts.beam import Beam
from fasttts.progress import IterationProgress
from fasttts.runtime import token_logprobs
from fasttts.runtime.driver import Generate, NewSequence, Score, Search
from fasttts.runtime.generation import beam_seed, step_token_counts
from fasttts.steps import split_steps
from fasttts.verifiers.base import ScoreRequest, aggregate

if TYPE_CHECKING:
    from fasttts.runtime.loop import SearchRunner, _SearchState

__all__ = ["run_branches"]


@dataclass(eq=False)
class _Branch:
    """One branch as it decodes: its beam, its engine sequence, and its text in pieces (joined
    only when the PRM needs it: a branch of thousands of tokens grows by one token a step).

    Attributes:
        beam: the path (`token_ids` kept current; `text`, `steps`, `step_tokens` set when the
            branch is scored).
        seq_id: its engine sequence.
        chunks: the text of each update.
        pieces: (character offset, tokens) of each update (`step_token_counts`).
        num_chars: characters so far.
    """

    beam: Beam
    seq_id: str
    chunks: list[str] = field(default_factory=list)
    pieces: list[tuple[int, int]] = field(default_factory=list)
    num_chars: int = 0

    def take(self, up: SequenceUpdate) -> None:
        """Add one engine step's tokens and text."""
        if up.new_token_ids:
            self.beam.token_ids.extend(up.new_token_ids)
            self.pieces.append((self.num_chars, len(up.new_token_ids)))
            token_logprobs.extend(self.beam, up)
        if up.new_text:
            self.chunks.append(up.new_text)
            self.num_chars += len(up.new_text)

    def materialize(self, delimiter: str, final: bool) -> None:
        """Set the beam's text and its steps: every step when `final` (the branch ended), else
        the complete ones only (ending with the delimiter; a step being written is left out).
        The tokens of each step (`Beam.step_tokens`) are counted when the branch ends, or at
        each check when its token log-probabilities are kept (the confidence verifier cuts
        them by step)."""
        beam = self.beam
        beam.text = "".join(self.chunks)
        self.chunks = [beam.text]
        steps = split_steps(beam.text, delimiter)
        if not final and steps and not steps[-1].endswith(delimiter):
            steps.pop()
        beam.steps = steps
        if final or beam.token_logprobs:
            counts = step_token_counts(beam.text, self.pieces, delimiter)
            beam.step_tokens = counts[:len(steps)]


def _request(problem: str, br: _Branch, delimiter: str, final: bool) -> ScoreRequest | None:
    """The PRM request of a branch's steps not scored yet (None: nothing new)."""
    br.materialize(delimiter, final)
    beam = br.beam
    if len(beam.steps) <= len(beam.step_scores):
        return None
    lps = None
    if beam.token_logprobs and len(beam.token_logprobs) == len(beam.token_ids):
        lps = token_logprobs.cut(beam.token_logprobs, beam.step_tokens, len(beam.steps), final)
    return ScoreRequest(problem, tuple(beam.steps), len(beam.step_scores), lps)


def _score(runner: SearchRunner, st: _SearchState, finished: list[_Branch],
           live: list[_Branch]) -> Search:
    """Score the new steps of `finished` (all of them) and `live` (complete ones) in one
    `Score` wish, then set each beam's aggregated score (a search part)."""
    delim = runner.cfg.step_delimiter
    todo = [(br, _request(st.problem, br, delim, final))
            for final, group in ((True, finished), (False, live)) for br in group]
    todo = [(br, req) for br, req in todo if req is not None]
    if todo:
        t0 = runner.generator.now()
        scores = yield Score([req for _, req in todo])
        st.ver_time += runner.generator.now() - t0
        for (br, _), sc in zip(todo, scores):
            br.beam.step_scores.extend(sc)
    for br in (*finished, *live):
        b = br.beam
        b.score = aggregate(b.step_scores, runner.agg_strategy) if b.step_scores else 0.0


def _launch(runner: SearchRunner, st: _SearchState) -> tuple[dict, list]:
    """The request's branches (the strategy's `expand` of the root) and their sequences."""
    cfg = runner.cfg
    root = Beam(beam_id=0, start_time=st.start)
    ids = itertools.count(1)
    budget = min(cfg.max_tokens, runner.generator.max_model_len - len(st.prompt_ids))
    live: dict[str, _Branch] = {}
    adds = []
    for beam in st.strategy.expand([root], 0, lambda: next(ids)):
        seq_id = f"{st.problem_id}/b{beam.beam_id}"
        params = GenerationParams(
            max_tokens=budget, temperature=cfg.temperature, top_p=cfg.top_p,
            seed=beam_seed(cfg.seed, st.problem_id, root.beam_id, beam.branch),
            logprobs=runner.verifier.needs_logprobs)
        adds.append(NewSequence(seq_id, st.prompt_ids, params))
        live[seq_id] = _Branch(beam, seq_id)
    st.num_sequences += len(adds)
    return live, adds


def _route(live: dict[str, _Branch], updates: list[SequenceUpdate], st: _SearchState) -> list:
    """One engine step's updates to their branches; the branches that completed (they leave
    `live`)."""
    done = []
    for up in updates:
        br = live.get(up.seq_id)
        if br is None:
            continue
        br.take(up)
        st.trace.tokens += len(up.new_token_ids)
        if up.finished:
            br.beam.finished, br.beam.finish_reason = True, up.finish_reason or "length"
            done.append(live.pop(up.seq_id))
    return done


def _close(st: _SearchState, branches: list[_Branch], now: float) -> None:
    """Book the search's times on completed branches."""
    for br in branches:
        b = br.beam
        b.iterations, b.finish_time = 1, now
        b.generator_time, b.verifier_time = st.gen_time, st.ver_time


def run_branches(runner: SearchRunner, st: _SearchState, on_progress=None) -> Search:
    """The branch-level search of one request (module docstring), as a search part.

    Args:
        runner: the search runner (generator, verifier, search config, aggregation).
        st: the search's state (prompt, strategy, counters); its times and trace are kept.
        on_progress: called with an `IterationProgress` after each check.

    Returns (as the generator's return value):
        (completed beams in completion order, checks run, whether the strategy stopped the
        request with branches still live).
    """
    strategy, gen = st.strategy, runner.generator
    live, adds = _launch(runner, st)
    every = list(live.values())
    yield Generate(add=adds, step=False)
    interval = strategy.check_interval
    completed: list[Beam] = []
    since_completed: list[Beam] = []
    steps = checks = 0
    abort: list[str] = []
    slots = max(1, min(len(adds), gen.max_num_seqs))
    t = gen.now()
    while live:
        updates = yield Generate(abort=abort)
        abort = []
        st.gen_time += gen.now() - t
        done = _route(live, updates, st)
        steps += bool(updates)
        st.trace.record(gen.now(), len(live) + len(done), 0, slots)
        due = interval is not None and steps >= interval
        yield from _score(runner, st, done, list(live.values()) if due else [])
        _close(st, done, gen.now())
        completed += [br.beam for br in done]
        since_completed += [br.beam for br in done]
        if strategy.should_stop(completed) and live:
            yield Generate(abort=list(live), step=False)
            st.tree_tokens = len(st.prompt_ids) + sum(br.beam.num_tokens for br in every)
            return completed, checks, True
        if due:
            steps, checks = 0, checks + 1
            going = strategy.select([br.beam for br in live.values()], since_completed)
            if runner.on_select is not None:
                runner.on_select(checks - 1, going)
            kept, since_completed = {b.beam_id for b in going}, []
            abort = [s for s, br in live.items() if br.beam.beam_id not in kept]
            for s in abort:
                del live[s]
            if on_progress is not None:
                on_progress(IterationProgress(st.problem_id, checks - 1, checks, len(live),
                                              len(completed), st.trace.tokens,
                                              gen.now() - st.start))
        t = gen.now()
    if abort:
        yield Generate(abort=abort, step=False)
    st.tree_tokens = len(st.prompt_ids) + sum(br.beam.num_tokens for br in every)
    return completed, checks, False
