"""The shared generate -> verify -> select loop that runs every search method.

FastTTS section 3.1: each iteration extends the active beams by one step (generation), scores
the new steps with the PRM (verification), and lets the search keep the best (selection),
until every path is finished or the iteration budget is spent (the last iteration generates
to the end). Times are read from the generator backend's clock, so the same loop reports
wall-clock seconds on vLLM and virtual seconds on the simulator.

The loop is a resumable state machine (`SearchRunner.search`): it wishes sequences and scores
from the driver loop (`fasttts.runtime.driver`), which owns the engines and runs one search
(`SearchRunner.run`, `fasttts eval` / `solve`) or many (`fasttts serve`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from fasttts.backends.base import CacheStats, GeneratorBackend
from fasttts.beam import Beam
from fasttts.config import RuntimeConfig, SearchConfig
from fasttts.progress import IterationProgress
from fasttts.runtime.branches import run_branches
from fasttts.runtime.driver import Driver, Generate, Score, Search
from fasttts.runtime.generation import GenerationTrace, StepRequest, generate_step
from fasttts.runtime.lookahead_verification import plan_requests
from fasttts.runtime.lookahead_rollout import lookahead_rollouts
from fasttts.runtime.plan_workload import measured_peak_len
from fasttts.runtime.prefix_scheduling import baseline_order, prefix_aware_order, schedule_cost
from fasttts.runtime.spec_beam_extension import SpeculativeBeamExtension
from fasttts.runtime.spec_cost import SpeculationCost, SpeculationHistory
from fasttts.runtime.token_logprobs import outcome_request
from fasttts.search import make_strategy
from fasttts.search.base import SearchStrategy, has_near_tie
from fasttts.steps import build_messages
from fasttts.verifiers.base import Verifier, aggregate

__all__ = ["DEFAULT_PROBLEM_ID", "PromptTooLongError", "SearchResult", "SearchRunner"]

#: The problem id of a search given none (`fasttts solve`, the library, a seeded server
#: request): with the seed it keys every random stream of the search
#: (`fasttts.runtime.generation.beam_seed`), so the same problem, options and seed give the same
#: search wherever it runs.
DEFAULT_PROBLEM_ID = "problem"


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
        finished_paths: paths that finished, the ones `completions` leaves out included (a
            method may finish more than n: `SearchStrategy.num_kept`).
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
        decode_tree_tokens: the generator's KV peak of the largest iteration's tree had its
            paths run in one batch: each iteration's newest level held at the peak of steps
            that start together and end apart (tokens; the planner's W_dec, measured; 0 for
            a branch-level method).
        spec: speculative beam extension counters (empty when off): tokens generated
            speculatively, tokens adopted as head starts, branches launched, phases stopped by
            preemption, truncated copies adopted, running branches continued by their child,
            stopped branches refused under `exact` (and their tokens), free slots the cost
            model left empty, lookahead requests sent and lookahead scores used.
        stopped_early: the method stopped the search with paths still live (SART's M).
        search_stats: the method's own decisions worth reporting (SART: checks, prunings).
        answer_rule: the vote that gives the method's answer ("weighted", "majority", "best").
        selections: selections made (step-level methods: one per iteration that went on).
        near_tie_selections: of those, selections among beams two of whose scores were
            closer than the verifier's `score_tolerance` (`fasttts.search.base.has_near_tie`):
            decisions a scoring within the verifier's numerical noise (incremental vs
            whole-path verification in bfloat16) could have made otherwise; 0 with exact
            scores (the simulator).
        runtime_overhead_s: wall seconds the driver loop spent outside engine steps and
            verifier calls while running this search alone (`Driver.overhead_s`); 0 when a
            shared driver ran it (a server's: `Driver.runtime_overhead_frac` is its whole
            loop's).
        engine_step_s: seconds of the generator's engine steps (engine clock), the
            denominator's other part of `runtime_overhead_frac`.
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
    decode_tree_tokens: int = 0
    clock: str = "wall"
    spec: dict[str, int] = field(default_factory=dict)
    stopped_early: bool = False
    search_stats: dict = field(default_factory=dict)
    answer_rule: str = "weighted"
    finished_paths: int = 0
    selections: int = 0
    near_tie_selections: int = 0
    runtime_overhead_s: float = 0.0
    engine_step_s: float = 0.0

    @property
    def latency(self) -> float:
        """End-to-end search time of the problem (s)."""
        return self.end_time - self.start_time

    @property
    def runtime_overhead_frac(self) -> float | None:
        """The runtime's share of the generator loop: runtime_overhead_s / (runtime_overhead_s
        + engine_step_s) (`Driver.runtime_overhead_frac`); None when not measured."""
        total = self.runtime_overhead_s + self.engine_step_s
        return self.runtime_overhead_s / total if self.engine_step_s > 0 and total > 0 else None


@dataclass
class _SearchState:
    """One problem's search as it runs: its strategy and the counters of its `SearchResult`
    (see there for their meaning)."""

    problem: str
    problem_id: str
    prompt_ids: list[int]
    strategy: SearchStrategy
    start: float
    cache_before: CacheStats
    verifier_before: CacheStats | None
    sbe: SpeculativeBeamExtension | None = None
    trace: GenerationTrace = field(default_factory=GenerationTrace)
    gen_time: float = 0.0
    ver_time: float = 0.0
    num_sequences: int = 0
    num_lookahead: int = 0
    num_lookahead_declined: int = 0
    cost: int = 0
    tree_tokens: int = 0
    decode_tree_tokens: int = 0
    own: dict[int, int] = field(default_factory=dict)  # tokens each node generated
    previous: list[int] = field(default_factory=list)  # generator's last submission order
    prm_previous: list[int] = field(default_factory=list)  # and the PRM's
    selections: int = 0
    near_ties: int = 0


class SearchRunner:
    """Runs one search configuration over problems with a generator and a verifier.

    The search of a problem is a state machine (`search`) that wishes its generation and
    scoring from the driver loop (`fasttts.runtime.driver`); `run` drives it alone. The
    runner only reads `generator` (context, clock, state) and `verifier` (cache counters).

    Args:
        generator: the generator backend, or a driver's read-only `EngineInfo` (server).
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
        self.spec_history = SpeculationHistory()  # what its searches' phases showed

    def run(self, problem: str, problem_id: str = DEFAULT_PROBLEM_ID, on_progress=None) -> SearchResult:
        """Search for solutions of one problem, driving `generator` and `verifier` with a
        driver of one search (`fasttts.runtime.driver.Driver.run`); see `search`.

        Raises:
            ValueError: the problem is empty.
            PromptTooLongError: the prompt does not leave room for one generated token.
        """
        driver = Driver(self.generator, self.verifier)
        result = driver.run(self.search(problem, problem_id, on_progress))
        result.runtime_overhead_s, result.engine_step_s = driver.overhead_s, driver.step_time_s
        return result

    def search(self, problem: str, problem_id: str = DEFAULT_PROBLEM_ID, on_progress=None) -> Search:
        """The search of one problem for a driver loop (FastTTS section 3.1): iterations of
        generate -> verify -> select until every path finished, the method stops early, or
        the iteration budget is spent (the last iteration generates to the end). A
        branch-level method (SART) runs the branch-level loop instead
        (`fasttts.runtime.branches`; its checks count as iterations).

        `on_progress`, if given, is called with an `IterationProgress` after each iteration
        (`fasttts.progress`). Returns (as the generator's return value) the `SearchResult`.

        Raises (when driven):
            ValueError: the problem is empty.
            PromptTooLongError: the prompt does not leave room for one generated token.
        """
        st = self._start(problem, problem_id)
        if st.strategy.branch_level:
            completed, checks, stopped = yield from run_branches(self, st, on_progress)
            return self._result(st, completed, checks - 1, stopped)
        ids = itertools.count()
        kept, completed = [Beam(beam_id=next(ids), start_time=st.start)], []
        iteration, stopped_early = -1, False
        for iteration in range(st.strategy.num_iterations):
            children = st.strategy.expand(kept, iteration, lambda: next(ids))
            if not children:
                iteration -= 1
                break
            live, finished = yield from self._iteration(st, children, iteration)
            completed += finished
            if on_progress is not None:
                on_progress(IterationProgress(problem_id, iteration, st.strategy.num_iterations,
                                              len(live), len(completed), st.trace.tokens,
                                              self.generator.now() - st.start,
                                              st.strategy.num_kept(completed)))
            if not live:
                break
            kept = st.strategy.select(live, finished)
            st.selections += 1
            st.near_ties += has_near_tie(live, self.verifier.score_tolerance)
            if self.on_select is not None:
                self.on_select(iteration, kept)
            if st.strategy.should_stop(completed):
                stopped_early = True
                break
        return self._result(st, completed, iteration, stopped_early)

    def _start(self, problem: str, problem_id: str) -> _SearchState:
        """A fresh search state: the prompt checked, a fresh strategy, the counters read."""
        prompt_ids = self.prompt_ids(problem, problem_id)
        rt, sbe = self.runtime, None
        if rt.spec_beam_extension:
            cost = self.generator.cost
            sbe = SpeculativeBeamExtension(
                self.cfg.beam_width, rt.spec_truncation_ratio, self.cfg.seed, problem_id,
                exact=rt.exact is not False,
                cost=None if cost is None else SpeculationCost(cost, self.cfg.beam_width,
                                                               rt.spec_truncation_ratio),
                history=self.spec_history)
        return _SearchState(problem, problem_id, prompt_ids,
                            make_strategy(self.cfg),  # per-search state starts fresh
                            start=self.generator.now(),
                            cache_before=self.generator.cache_stats(),
                            verifier_before=self.verifier.cache_stats(), sbe=sbe)

    def _iteration(self, st: _SearchState, children: list[Beam], iteration: int):
        """One generate -> verify round over `children` (a search part). Returns (as the
        generator's return value) (live, finished): the children that go on, that finished."""
        cfg, rt = self.cfg, self.runtime
        last = iteration == st.strategy.num_iterations - 1
        order = prefix_aware_order if rt.prefix_aware_scheduling else baseline_order
        children = order(children, st.previous)
        st.previous = [b.beam_id for b in children]
        st.cost += schedule_cost([b.lineage for b in children])
        if st.sbe is not None:
            drop = st.sbe.adopt(children, self.generator.decode)
            if drop:  # parked branches no kept child took
                yield Generate(abort=drop, step=False)
        st.num_sequences += len(children)
        step_req = self._step_request(st, iteration, last)
        t0 = self.generator.now()
        before = [len(b.token_ids) for b in children]
        yield from generate_step(self.generator, children, step_req, st.trace,
                                 None if last else st.sbe)
        tree, decode_tree = self._tree_tokens(children, before, st.own, len(st.prompt_ids))
        st.tree_tokens = max(st.tree_tokens, tree)
        st.decode_tree_tokens = max(st.decode_tree_tokens, decode_tree)
        to_score = st.strategy.to_verify(children, iteration)
        if cfg.lookahead and not last and st.sbe is not None and st.sbe.parked():
            # the rollouts step the engine: parked branches would generate unseen
            yield Generate(abort=st.sbe.unpark(), step=False)
        rollouts = ((yield from lookahead_rollouts(self.generator, to_score, cfg.lookahead,
                                                   step_req, st.trace))
                    if cfg.lookahead and not last else {})
        t1 = self.generator.now()
        lookahead = (st.sbe.complete_branches()
                     if st.sbe is not None and rt.lookahead_verification else [])
        # The PRM always gets search-and-learn's round-robin order, with parents in the
        # order the PRM itself saw them (whatever the generator's order), so its first requests
        # reference every parent's cached path before new blocks evict any (the measurements
        # behind this: docs/techniques.md, "Prefix-aware scheduling").
        prm_order = baseline_order(to_score, st.prm_previous)
        st.prm_previous = [b.beam_id for b in prm_order]
        rode, declined = yield from self._verify(st.problem, prm_order, lookahead,
                                                 st.strategy.outcome_scoring, rollouts)
        st.num_lookahead += rode
        st.num_lookahead_declined += declined
        return self._settle(st, children, t0, t1, self.generator.now())

    def _step_request(self, st: _SearchState, iteration: int, last: bool) -> StepRequest:
        """How the beams of `iteration` are extended (the last one: to the end)."""
        cfg = self.cfg
        return StepRequest(
            prompt_ids=st.prompt_ids,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_tokens,
            stop=() if last else (cfg.step_delimiter,),
            next_stop=() if iteration + 1 == st.strategy.num_iterations - 1 else None,
            seed=cfg.seed,
            problem_id=st.problem_id,
            iteration=iteration,
            step_delimiter=cfg.step_delimiter,
            ordered_priorities=self.runtime.prefix_aware_scheduling,
            logprobs=self.verifier.needs_logprobs,
        )

    @staticmethod
    def _settle(st: _SearchState, children: list[Beam], t0: float, t1: float,
                t2: float) -> tuple[list[Beam], list[Beam]]:
        """Book an iteration's generation (t0..t1) and verification (t1..t2) time (s) on
        the search and its children, finish the finished ones at t2; (live, finished)."""
        st.gen_time += t1 - t0
        st.ver_time += t2 - t1
        live, finished = [], []
        for beam in children:
            beam.generator_time += t1 - t0
            beam.verifier_time += t2 - t1
            if beam.finished:
                beam.finish_time = t2
                finished.append(beam)
            else:
                live.append(beam)
        return live, finished

    def _result(self, st: _SearchState, completed: list[Beam], iteration: int,
                stopped_early: bool) -> SearchResult:
        """The `SearchResult` of a search that ran `iteration + 1` iterations."""
        verifier_cache = self.verifier.cache_stats()
        sbe = st.sbe
        return SearchResult(
            problem_id=st.problem_id,
            completions=st.strategy.finalize(completed),
            num_iterations=iteration + 1,
            start_time=st.start,
            end_time=self.generator.now(),
            generator_time=st.gen_time,
            verifier_time=st.ver_time,
            tokens_generated=st.trace.tokens,
            num_sequences=st.num_sequences,
            prompt_tokens=len(st.prompt_ids),
            cache=self.generator.cache_stats().since(st.cache_before),
            verifier_cache=(verifier_cache.since(st.verifier_before)
                            if verifier_cache is not None and st.verifier_before is not None
                            else None),
            occupancy=st.trace.samples,
            mean_occupancy=st.trace.mean_occupancy(),
            schedule_cost=st.cost,
            tree_tokens=st.tree_tokens,
            decode_tree_tokens=st.decode_tree_tokens,
            clock=self.generator.clock_kind,
            stopped_early=stopped_early,
            search_stats=st.strategy.stats(),
            answer_rule=st.strategy.answer_rule,
            finished_paths=len(completed),
            selections=st.selections,
            near_tie_selections=st.near_ties,
            spec={} if sbe is None else {
                "spec_tokens": sbe.spec_tokens, "head_start_tokens": sbe.used_tokens,
                "branches": sbe.num_branches, "preempted_phases": sbe.num_stopped,
                "truncated_head_starts": sbe.num_truncated,
                "continued_head_starts": sbe.num_continued,
                "refused_head_starts": sbe.num_refused, "refused_tokens": sbe.refused_tokens,
                "declined_slots": sbe.num_declined,
                "lookahead_requests": st.num_lookahead,
                "lookahead_declined": st.num_lookahead_declined,
                "lookahead_scores_used": sbe.num_prescored},
        )

    @staticmethod
    def _tree_tokens(children: list[Beam], before: list[int], own: dict[int, int],
                     prompt_tokens: int) -> tuple[int, int]:
        """Record what each child generated this iteration (`before`: its token count before)
        in `own` and return the iteration's search tree size (the prompt plus every node on
        the children's lineages once) and the generator's KV peak of it had all the children
        run in one batch from the start: the newest level (what the children generated) held
        at the peak of lengths that start together and end apart (`measured_peak_len`; the
        memory planner's W and W_dec, tokens)."""
        new = []
        for beam, start in zip(children, before):
            own[beam.beam_id] = len(beam.token_ids) - start
            new.append(own[beam.beam_id])
        nodes = {node for beam in children for node in beam.lineage}
        tree = prompt_tokens + sum(own.get(node, 0) for node in nodes)
        peak = round(len(new) * measured_peak_len(0, new)) if new else 0
        return tree, tree - sum(new) + peak

    def prompt_ids(self, problem: str, problem_id: str = DEFAULT_PROBLEM_ID) -> list[int]:
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
                rollouts: dict[int, Beam] | None = None) -> Search:
        """Score the steps each beam has not had scored yet, then set each beam's aggregated
        score (a search part: it wishes one `Score` from the driver). Returns (as the
        generator's return value) the numbers of LookAhead Verification requests and of
        complete speculative steps it declined.

        With LookAhead Verification, complete speculative steps ride along where they are
        worth the verifier's work (`fasttts.runtime.lookahead_verification`; the verifier's
        `incremental` attribute says whether it reads its prefix cache). With `outcome`, a finished beam is scored once as a
        whole (one request whose single step is its text) and that score is its score. A beam
        with a greedy rollout in `rollouts` is scored through it
        (`fasttts.runtime.lookahead_rollout`)."""
        if outcome:
            done = [b for b in beams if b.finished]
            scores = (yield Score([outcome_request(problem, b) for b in done])) if done else []
            for beam, sc in zip(done, scores):
                beam.score = sc[0]
            return 0, 0
        rollouts = rollouts or {}
        scored = [rollouts.get(b.beam_id, b) for b in beams]
        plan = plan_requests(problem, scored, list(lookahead), self.cfg.step_delimiter,
                             prefix_cached=self.verifier.incremental)
        if plan.requests:
            plan.apply((yield Score(plan.requests)))
        for beam, src in zip(beams, scored):
            if src is not beam:
                beam.step_scores = src.step_scores[: len(beam.steps)]
            beam.score = aggregate(src.step_scores, self.agg_strategy) if src.step_scores else 0.0
        return plan.num_lookahead, plan.num_declined

