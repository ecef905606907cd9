"""The beam: one partial or finished solution path, shared by search (policy) and runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Beam", "HeadStart"]


@dataclass
class HeadStart:
    """Tokens of a beam's next step generated ahead of time by speculative beam extension.

    Attributes:
        token_ids: the speculative tokens (tokens).
        text: their text.
        finish_reason: "stop" when they hold the whole step (delimiter included), "eos" /
            "length" when the path ended in them, None when the step is unfinished.
        step_scores: PRM scores of the step, when LookAhead Verification scored it already.
        token_logprobs: the generator's log-probability of each of `token_ids` when the run
            keeps them (`Verifier.needs_logprobs`), else empty.
        truncated: a truncated copy of another branch's speculation (R ratio), not this
            beam's own random stream.
        seq_id: the engine sequence that generated `token_ids` and still runs (the beam's own
            speculative branch, kept in the engine after its phase): the beam continues it
            instead of starting a new sequence, so it keeps its random stream exactly; None
            when the tokens are all there is (a whole step, or a stopped branch).
    """

    token_ids: list[int]
    text: str
    finish_reason: str | None = None
    step_scores: list[float] = field(default_factory=list)
    truncated: bool = False
    token_logprobs: list[float] = field(default_factory=list)
    seq_id: str | None = None


@dataclass
class Beam:
    """A path: the problem's prompt plus the steps generated so far.

    Attributes:
        beam_id: unique within one problem's search (children get new ids).
        parent_id: the beam this one was copied from (None for the root).
        token_ids: generated token ids (the prompt is not included).
        token_logprobs: the generator's log-probability (nats) of each of `token_ids`, parallel
            to it, when the run keeps them (a verifier that reads them, `Verifier.
            needs_logprobs`); empty otherwise.
        text: generated text (the decoded steps, stop strings kept).
        steps: `text` split into steps (`fasttts.steps.split_steps`).
        step_scores: PRM score of each step in [0, 1]; len <= len(steps).
        step_tokens: generated tokens of each step (tokens); len == len(steps).
        score: aggregated path score (`aggregate(step_scores, agg_strategy)`).
        finished: True once the beam completed.
        finish_reason: why it finished: "eos" (end-of-sequence token), "answer" (a final
            boxed answer), "length" (token or context budget hit) or "empty" (an empty step:
            the model had nothing more to say); None while running.
        subtree: index of the subtree the beam belongs to (DVTS), 0 otherwise.
        branch: this beam's index among its parent's children (0, 1, ...); with parent_id it
            fixes the beam's random stream (`fasttts.runtime.generation.beam_seed`).
        num_children: children made from this beam so far.
        lineage: beam ids from the root's first child down to this beam (the CoT as a path
            in the search trie; prefix-aware scheduling and its cost model use it).
        head_start: tokens of this beam's next step already generated speculatively (SBE),
            consumed by the next generation phase; None without one.
        iterations: generate -> verify rounds the path took part in.
        start_time: when the problem's search started (seconds, backend clock).
        finish_time: when the beam completed (after its last verification), seconds.
        generator_time: generation-phase time of the iterations the path took part in (s).
        verifier_time: verification-phase time of those iterations (s).
    """

    beam_id: int
    parent_id: int | None = None
    token_ids: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    text: str = ""
    steps: list[str] = field(default_factory=list)
    step_scores: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    score: float = 0.0
    finished: bool = False
    finish_reason: str | None = None
    subtree: int = 0
    branch: int = 0
    num_children: int = 0
    lineage: tuple[int, ...] = ()
    head_start: HeadStart | None = None
    iterations: int = 0
    start_time: float = 0.0
    finish_time: float | None = None
    generator_time: float = 0.0
    verifier_time: float = 0.0

    def child(self, beam_id: int) -> Beam:
        """An unfinished copy of this beam with a new id, this beam as parent, and the next
        branch index of this beam."""
        self.num_children += 1
        return Beam(
            beam_id=beam_id,
            parent_id=self.beam_id,
            branch=self.num_children - 1,
            lineage=self.lineage + (beam_id,),
            token_ids=list(self.token_ids),
            token_logprobs=list(self.token_logprobs),
            text=self.text,
            steps=list(self.steps),
            step_scores=list(self.step_scores),
            step_tokens=list(self.step_tokens),
            score=self.score,
            subtree=self.subtree,
            iterations=self.iterations,
            start_time=self.start_time,
            generator_time=self.generator_time,
            verifier_time=self.verifier_time,
        )

    @property
    def num_tokens(self) -> int:
        """Tokens of the path (generated, prompt excluded)."""
        return len(self.token_ids)
