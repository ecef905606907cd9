"""The workload the memory planner (`fasttts.runtime.memory_planner`) sizes a run for, from
its configuration: N, S and S_dec from the search and the runtime, the prefix sharing and the
iterations from the search method's traits (`fasttts.search.SearchStrategy`), the verifier's
cache reads from its scoring mode; and the plan a run applies (`plan_for_run`)."""

from __future__ import annotations

from fasttts.perf.specs import HardwareSpec, ModelSpec
from fasttts.runtime.memory_planner import PLAN_STEP_LEN, MemoryPlan, PlanInput, plan_memory
from fasttts.search import make_strategy
from fasttts.verifiers import paged_prefix_cache, reads_prefix_cache

__all__ = ["GUESSED_PROMPT_LEN", "measured_peak_len", "one_pass", "plan_for_run", "plan_input",
           "search_shape", "uniform_peak_len"]

#: The prompt length (tokens) the planner guesses before a run has measured one.
GUESSED_PROMPT_LEN = 256


def uniform_peak_len(prompt_len: int, max_new: int) -> int:
    """Tokens one sequence holds at the KV peak of sequences that start together with
    `prompt_len` prompt tokens and generate lengths spread uniformly over 0..`max_new` tokens,
    each freeing its KV when it ends (vLLM frees a finished request's blocks at once).

    At decode step t the fraction 1 - t / max_new still runs, each holding prompt_len + t, so
    the KV per sequence started is (p + t)(1 - t / L); its maximum over 0 <= t <= L is
    (L + p)^2 / (4 L) at t = (L - p) / 2, or p when p >= L (tokens, rounded up). It is at
    most p + L / 2, the mean length (for p <= L), which is what every sequence holding the
    mean at once would need.

    Raises:
        ValueError: prompt_len < 1 or max_new < 1.
    """
    if prompt_len < 1 or max_new < 1:
        raise ValueError(f"prompt_len and max_new must be >= 1 token, got {prompt_len}, "
                         f"{max_new}")
    if prompt_len >= max_new:
        return prompt_len
    return -(-(max_new + prompt_len) ** 2 // (4 * max_new))


def measured_peak_len(prompt_len: int, generated: list[int]) -> float:
    """Tokens per path at the KV peak of one request whose paths started together with
    `prompt_len` prompt tokens and generated `generated` tokens each, each freeing its KV
    when it ended: the maximum over decode steps t of (prompt_len + t) * (share of paths still
    running), taken where a path ends (t = its length). At most the mean path length
    prompt_len + mean(generated), equal to it when all lengths are equal.

    Raises:
        ValueError: no path, or a length below 0.
    """
    if not generated or min(generated) < 0:
        raise ValueError(f"need one or more lengths >= 0 tokens, got {generated!r}")
    ordered, n = sorted(generated), len(generated)
    return max((prompt_len + g) * (n - i) / n for i, g in enumerate(ordered))


def _one_pass(strategy) -> bool:
    """The method generates each path in one pass to its end (best-of-N, self-consistency)."""
    return strategy.num_iterations == 1 and not strategy.branch_level


def one_pass(search) -> bool:
    """Whether the search configuration's method generates each path in one pass to its end
    (its paths start together and end apart: sized at their KV peak, `plan_input`)."""
    return _one_pass(make_strategy(search))


def search_shape(search, seq_len: int) -> dict:
    """The prefix-sharing fields of `PlanInput` (shared_len, share, iterations, step_len,
    lineages) for a search configuration (`search`: a SearchConfig) on paths of `seq_len`
    tokens.

    The traits are asked of the method's strategy (`fasttts.search.SearchStrategy`). A step
    adds `PLAN_STEP_LEN` tokens, and a tree level is `steps_per_level` steps (VG-search: its
    granularity). Methods that share prefixes (`shares_prefixes`) share all but the newest
    level with the beam_width children of one parent, and keep `planned_lineages` distinct
    paths at every depth (DVTS: its n / beam_width subtrees; the others n / (4 beam_width),
    fitted to measured trees). Other methods' paths are independent (lineages n, nothing
    shared). A method that generates each path in one pass (best-of-N, self-consistency) runs
    one iteration; a branch-level method (SART) is scored every `check_interval` decode steps,
    which is its "step" here (at most `seq_len`). Measured trees (`SearchResult.tree_tokens`)
    replace the estimate when re-planning (`PlanInput.tree_len`).
    """
    strategy = make_strategy(search)
    single_pass = _one_pass(strategy)
    tree = strategy.shares_prefixes
    share = min(search.beam_width, search.n) if tree else 1
    step = (min(strategy.check_interval, seq_len) if strategy.branch_level
            else PLAN_STEP_LEN * strategy.steps_per_level)
    lineages = strategy.planned_lineages(share)
    return dict(shared_len=max(0, seq_len - step) if tree else 0, share=share,
                iterations=1 if single_pass else max(1, -(-seq_len // step)),
                step_len=step, lineages=lineages)


def plan_input(cfg, budget: int, generator: ModelSpec, verifier: ModelSpec,
               hardware: HardwareSpec, seq_len: int | None = None,
               verifier_floor: int = 0, generator_floor: int = 0,
               tree_len: int | None = None, peak_len: int | None = None,
               decode_tree_len: int | None = None) -> PlanInput:
    """The workload the planner sizes a run for.

    N = search n beams; S = S_dec = `seq_len` if given (a measured mean path length), else
    `runtime.plan_seq_len`, else a guess: `GUESSED_PROMPT_LEN` + max_tokens / 2 tokens (the
    mean of lengths spread uniformly up to max_tokens), at most the generator's context;
    S_cache = S_dec / 2. Under the guess, a method whose paths decode to their end in one pass
    (best-of-N, self-consistency: they start together and end apart) is sized at the KV peak
    of such lengths (`PlanInput.decode_peak_len` = `uniform_peak_len`), not at every path
    holding the mean at once; with a measured length, at `peak_len` (a measured peak,
    `measured_peak_len`) when given; a length given in `runtime.plan_seq_len` is taken as
    every path's. Prefix sharing and the reuse term follow the method (`search_shape`);
    `tree_len`, `decode_tree_len`: the measured tree size and the generator's measured
    peak of it per path (tokens; `PlanInput`); a verifier run by
    transformers keeps the static split's memory (`PlanInput.verifier_paged`). `verifier_floor`,
    `generator_floor`: see `PlanInput` (bytes).

    Raises:
        ValueError: a size below 1 (see `PlanInput`).
        fasttts.search.SearchConfigError: the search configuration is invalid.
    """
    given = cfg.runtime.plan_seq_len
    guessed = not (seq_len or given)
    max_new = cfg.search.max_tokens
    seq_len = min(seq_len or given or GUESSED_PROMPT_LEN + max_new // 2,
                  cfg.generator.max_model_len)
    shape = search_shape(cfg.search, seq_len)
    peak = None
    if not given and one_pass(cfg.search):
        peak = uniform_peak_len(GUESSED_PROMPT_LEN, max_new) if guessed else peak_len
    peak = None if peak is None else max(1, min(seq_len, peak))
    return PlanInput(memory_bytes=budget, generator=generator, verifier=verifier,
                     hardware=hardware, num_requests=cfg.search.n, verifier_len=seq_len,
                     decode_len=seq_len, decode_peak_len=peak, verifier_floor=verifier_floor,
                     generator_floor=generator_floor, tree_len=tree_len,
                     decode_tree_len=decode_tree_len,
                     verifier_reuse=reads_prefix_cache(cfg),
                     verifier_paged=paged_prefix_cache(cfg.verifier), **shape)


def plan_for_run(cfg, budget: int, generator: ModelSpec, verifier: ModelSpec,
                 hardware: HardwareSpec, allow_offload: bool,
                 verifier_min_tokens: int, seq_len: int | None = None,
                 generator_min_tokens: int = 0, tree_len: int | None = None,
                 peak_len: int | None = None,
                 decode_tree_len: int | None = None) -> tuple[MemoryPlan, int]:
    """The plan a run applies, and the verifier's KV-cache size under it (bytes).

    The workload is `plan_input(cfg, budget, ..., seq_len, tree_len=tree_len,
    peak_len=peak_len, decode_tree_len=decode_tree_len)`. Without
    offloading the verifier gets what B_pre sequences need, but at least
    `verifier_min_tokens` tokens (one longest sequence; the plan's B_dec counts that floor),
    plus the share of the leftover memory the reuse term gives it, and the generator the rest
    of `budget`, at least `generator_min_tokens` tokens; with offloading each gets all of it.

    Raises:
        PlanError: nothing fits.
    """
    floor = verifier_min_tokens * verifier.kv_bytes_per_token
    plan = plan_memory(plan_input(cfg, budget, generator, verifier, hardware, seq_len, floor,
                                  generator_min_tokens * generator.kv_bytes_per_token,
                                  tree_len, peak_len, decode_tree_len),
                       allow_offload)
    return plan, budget if plan.offload else plan.verifier_kv_bytes
