"""The shared generate -> verify -> select loop that runs every search method.

FastTTS section 3.1: each iteration extends the active beams by one step (generation), scores
the new steps with the PRM (verification), and lets the search keep the best (selection),
until every path is finished or the iteration budget is spent (the last iteration generates
to the end). Times are read from the generator backend's clock, so the same loop reports
wall-clock seconds on vLLM and virtual seconds on the simulator.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from fasttts.backends.base import CacheStats, GeneratorBackend
from fasttts.beam import Beam
from fasttts.config import RuntimeConfig, SearchConfig
from fasttts.progress import IterationProgress
from fasttts.runtime.generation import GenerationTrace, StepRequest, extend_beams
from fasttts.runtime.lookahead_verification import plan_requests
from fasttts.runtime.lookahead_rollout import lookahead_rollouts
from fasttts.runtime.prefix_scheduling import baseline_order, prefix_aware_order, schedule_cost
from fasttts.runtime.spec_beam_extension import SpeculativeBeamExtension
from fasttts.runtime.token_logprobs import outcome_request
from fasttts.search import make_strategy
from fasttts.steps import build_messages
from fasttts.verifiers.base import Verifier, aggregate

__all__ = ["PromptTooLongError", "SearchResult", "SearchRunner"]


class PromptTooLongError(ValueError):
    """The problem's prompt leaves no room to generate within the model's context."""


@dataclass
class SearchResult:
    """Everything one problem's search produced; metrics are computed from it in
    `fasttts.eval.metrics`.

    Attributes:
        problem_id: the problem's id.
        completions: returned completed paths, at most n, best aggregated score first.
        num_iterations: iterations run.
        start_time, end_time: search start and end on the backend clock (s).
        generator_time, verifier_time: total time in generation / verification phases (s).
        tokens_generated: every token the generator produced, pruned paths included.
        num_sequences: engine sequences submitted.
        prompt_tokens: tokens of the problem's prompt.
        cache: the generator's KV-cache statistics at the end, counters of this problem only.
        verifier_cache: the same of the verifier's engine (None: a verifier without one).
        occupancy: per generator engine step (time s, standard sequences, speculative
            sequences, batch slots); `mean_occupancy` summarises it.
        mean_occupancy: mean running / batch slots over generator engine steps (None if none).
        clock: "wall" or "simulated" (the generator backend's `clock_kind`).
        schedule_cost: the prefix-schedule cost of the submission orders, summed over
            iterations (`fasttts.runtime.prefix_scheduling.schedule_cost`, one CoT per trie;
            beams).
        tree_tokens: unique tokens of the largest iteration's search tree: the prompt plus the
            tokens each path node generated, shared prefixes counted once (tokens; the
            memory planner's W, `fasttts.runtime.memory_planner`).
        spec: speculative beam extension counters (empty when off): tokens generated
            speculatively, tokens adopted as head starts, branches launched, phases stopped by
            preemption, lookahead requests sent.
        stopped_early: the method stopped the search with paths still live (SART's M).
        search_stats: the method's own decisions worth reporting (SART: checks, prunings).
        answer_rule: the vote that gives the method's answer ("weighted", "majority", "best").
    """

    problem_id: str
    completions: list[Beam]
    num_iterations: int
    start_time: float
    end_time: float
    generator_time: float
    verifier_time: float
    tokens_generated: int
    num_sequences: int
    prompt_tokens: int
    cache: CacheStats | None = None
    verifier_cache: CacheStats | None = None
    occupancy: list[tuple[float, int, int, int]] = field(default_factory=list)
    mean_occupancy: float | None = None
    schedule_cost: int = 0
    tree_tokens: int = 0
    clock: str = "wall"
    spec: dict[str, int] = field(default_factory=dict)
    stopped_early: bool = False
    search_stats: dict = field(default_factory=dict)
    answer_rule: str = "weighted"

    @property
    def latency(self) -> float:
        """End-to-end search time of the problem (s)."""
        return self.end_time - self.start_time


class SearchRunner:
    """Runs one search configuration over problems with a generator and a verifier.

    Args:
        generator: the generator backend.
        verifier: the PRM.
        search: the search configuration (method and its parameters).
        agg_strategy: how step scores become a path score (`last|min|prod|mean`).
        runtime: the FastTTS techniques to use (default: none, the baseline).
        on_select: called as on_select(iteration, kept) after each selection (kept: the beams
            that survive; for tests and traces of the search decisions).
    """

    def __init__(
        self,
        generator: GeneratorBackend,
        verifier: Verifier,
        search: SearchConfig,
        agg_strategy: str = "last",
        runtime: RuntimeConfig | None = None,
        on_select=None,
    ):
        self.generator = generator
        self.verifier = verifier
        self.cfg = search
        self.runtime = runtime or RuntimeConfig()
        aggregate([1.0], agg_strategy)  # validates the name
        self.agg_strategy = agg_strategy
        self.on_select = on_select

    def run(self, problem: str, problem_id: str = "problem", on_progress=None) -> SearchResult:
        """Search for solutions of one problem; `on_progress`, if given, is called with an
        `IterationProgress` after each iteration (`fasttts.progress`).

        Raises:
            ValueError: the problem is empty.
            PromptTooLongError: the prompt does not leave room for one generated token.
        """
        cfg = self.cfg
        prompt_ids = self.prompt_ids(problem, problem_id)
        strategy = make_strategy(cfg)  # per-search state starts fresh
        ids = itertools.count()
        cache_before = self.generator.cache_stats()
        verifier_before = self.verifier.cache_stats()
        start = self.generator.now()
        root = Beam(beam_id=next(ids), start_time=start)
        kept, completed = [root], []
        trace = GenerationTrace()
        gen_time = ver_time = 0.0
        num_sequences = 0
        iteration = -1
        stopped_early = False
        rt = self.runtime
        sbe = (SpeculativeBeamExtension(cfg.beam_width, rt.spec_truncation_ratio, cfg.seed,
                                        problem_id) if rt.spec_beam_extension else None)
        num_lookahead = 0
        previous: list[int] = []  # beam ids in the generator's last submission order
        prm_previous: list[int] = []  # and in the PRM's
        cost = 0
        own: dict[int, int] = {}  # tokens each path node generated beyond its parent's
        tree_tokens = 0
        for iteration in range(strategy.num_iterations):
            last = iteration == strategy.num_iterations - 1
            children = strategy.expand(kept, iteration, lambda: next(ids))
            if not children:
                iteration -= 1
                break
            order = prefix_aware_order if rt.prefix_aware_scheduling else baseline_order
            children = order(children, previous)
            previous = [b.beam_id for b in children]
            cost += schedule_cost([b.lineage for b in children])
            if sbe is not None:
                sbe.adopt(children, self.generator.decode)
            num_sequences += len(children)
            step_req = StepRequest(
                prompt_ids=prompt_ids,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_tokens=cfg.max_tokens,
                stop=() if last else (cfg.step_delimiter,),
                seed=cfg.seed,
                problem_id=problem_id,
                iteration=iteration,
                step_delimiter=cfg.step_delimiter,
                ordered_priorities=rt.prefix_aware_scheduling,
                logprobs=self.verifier.needs_logprobs,
            )
            t0 = self.generator.now()
            before = [len(b.token_ids) for b in children]
            extend_beams(self.generator, children, step_req, trace,
                         None if last else sbe)
            tree_tokens = max(tree_tokens, self._tree_tokens(children, before, own,
                                                             len(prompt_ids)))
            to_score = strategy.to_verify(children, iteration)
            rollouts = (lookahead_rollouts(self.generator, to_score, cfg.lookahead, step_req, trace)
                        if cfg.lookahead and not last else {})
            t1 = self.generator.now()
            lookahead = sbe.complete_branches() if sbe is not None and rt.lookahead_verification else []
            # The PRM always gets search-and-learn's round-robin order, with parents in the
            # order the PRM itself saw them (whatever the generator's order): its first wave
            # then references every parent's cached path in the order they were cached, before
            # new blocks evict any. Grouped order: prefix-cache hit rate 0.74 vs 0.94
            # (simulated 7B PRM, 0.75 GiB KV cache, n = 64); round-robin over parents in the
            # generator's grouped order: verifier 3.4x slower at n = 256 (default memory).
            prm_order = baseline_order(to_score, prm_previous)
            prm_previous = [b.beam_id for b in prm_order]
            num_lookahead += self._verify(problem, prm_order, lookahead,
                                          strategy.outcome_scoring, rollouts)
            t2 = self.generator.now()
            gen_time += t1 - t0
            ver_time += t2 - t1
            live, finished = [], []
            for beam in children:
                beam.generator_time += t1 - t0
                beam.verifier_time += t2 - t1
                if beam.finished:
                    beam.finish_time = t2
                    finished.append(beam)
                else:
                    live.append(beam)
            completed += finished
            if on_progress is not None:
                on_progress(IterationProgress(problem_id, iteration, strategy.num_iterations,
                                              len(live), len(completed), trace.tokens,
                                              t2 - start))
            if not live:
                break
            kept = strategy.select(live, finished)
            if self.on_select is not None:
                self.on_select(iteration, kept)
            if strategy.should_stop(completed):
                stopped_early = True
                break
        end = self.generator.now()
        verifier_cache = self.verifier.cache_stats()
        return SearchResult(
            problem_id=problem_id,
            completions=strategy.finalize(completed),
            num_iterations=iteration + 1,
            start_time=start,
            end_time=end,
            generator_time=gen_time,
            verifier_time=ver_time,
            tokens_generated=trace.tokens,
            num_sequences=num_sequences,
            prompt_tokens=len(prompt_ids),
            cache=self.generator.cache_stats().since(cache_before),
            verifier_cache=(verifier_cache.since(verifier_before)
                            if verifier_cache is not None and verifier_before is not None else None),
            occupancy=trace.samples,
            mean_occupancy=trace.mean_occupancy(),
            schedule_cost=cost,
            tree_tokens=tree_tokens,
            clock=self.generator.clock_kind,
            stopped_early=stopped_early,
            search_stats=strategy.stats(),
            answer_rule=strategy.answer_rule,
            spec={} if sbe is None else {
                "spec_tokens": sbe.spec_tokens, "head_start_tokens": sbe.used_tokens,
                "branches": sbe.num_branches, "preempted_phases": sbe.num_stopped,
                "truncated_head_starts": sbe.num_truncated,
                "lookahead_requests": num_lookahead, "lookahead_scores_used": sbe.num_prescored},
        )

    @staticmethod
    def _tree_tokens(children: list[Beam], before: list[int], own: dict[int, int],
                     prompt_tokens: int) -> int:
        """Record what each child generated this iteration (`before`: its token count before)
        in `own` and return the iteration's search tree size: the prompt plus every node on
        the children's lineages once (tokens)."""
        for beam, start in zip(children, before):
            own[beam.beam_id] = len(beam.token_ids) - start
        nodes = {node for beam in children for node in beam.lineage}
        return prompt_tokens + sum(own.get(node, 0) for node in nodes)

    def prompt_ids(self, problem: str, problem_id: str = "problem") -> list[int]:
        """The generator prompt of a problem, checked to fit the context.

        Raises:
            ValueError: the problem is empty.
            PromptTooLongError: the prompt leaves no room for one generated token.
        """
        ids = self.generator.encode_chat(build_messages(problem, self.cfg.system_prompt))
        if len(ids) >= self.generator.max_model_len:
            raise PromptTooLongError(
                f"the prompt of problem {problem_id!r} has {len(ids)} tokens but the model's "
                f"context is {self.generator.max_model_len} tokens; shorten the problem or "
                f"raise --max-model-len"
            )
        return ids

    def _verify(self, problem: str, beams: list[Beam], lookahead=(), outcome: bool = False,
                rollouts: dict[int, Beam] | None = None) -> int:
        """Score the steps each beam has not had scored yet, then set each beam's aggregated
        score. Returns the number of LookAhead Verification requests.

        With LookAhead Verification, complete speculative steps ride along
        (`fasttts.runtime.lookahead_verification`). With `outcome`, a finished beam is scored once as a
        whole (one request whose single step is its text) and that score is its score. A beam
        with a greedy rollout in `rollouts` is scored through it
        (`fasttts.runtime.lookahead_rollout`)."""
        if outcome:
            done = [b for b in beams if b.finished]
            scores = self.verifier.score([outcome_request(problem, b) for b in done]) if done else []
            for beam, sc in zip(done, scores):
                beam.score = sc[0]
            return 0
        rollouts = rollouts or {}
        scored = [rollouts.get(b.beam_id, b) for b in beams]
        plan = plan_requests(problem, scored, list(lookahead), self.cfg.step_delimiter)
        if plan.requests:
            plan.apply(self.verifier.score(plan.requests))
        for beam, src in zip(beams, scored):
            if src is not beam:
                beam.step_scores = src.step_scores[: len(beam.steps)]
            beam.score = aggregate(src.step_scores, self.agg_strategy) if src.step_scores else 0.0
        return plan.num_lookahead

