"""Re-planning the memory split between requests (FastTTS section 4.3.1, "the workload
changes").

The roofline planner (`fasttts.runtime.memory_planner`) sizes the KV split and the batch caps
for one workload: N beams of about S tokens. Both change between requests: a request asks for
another n, and the paths' real lengths differ from the first guess (256 + max_tokens / 2).
`Replanner` keeps the plan in force and, before each request, plans for that request's n and
the mean path length measured over the last `window` requests (and, for best-of-N and
self-consistency, whose paths start together and end apart, their measured KV peak per
path, `fasttts.runtime.plan_workload.measured_peak_len`), and for the search tree size W
and the generator's peak of it W_dec (`PlanInput.decode_tree_len`) measured on the last
requests of the same search shape (method, n, beam_width, granularity;
else the planner's estimate; the `MAX_SHAPES` shapes used last are remembered, so clients
that vary their requests cannot grow the server's memory):

- the batch caps (B_pre: the verifier batch, B_dec: the generator's running sequences) change
  whenever the new plan's differ; that costs nothing (vLLM's scheduler admission limit
  `max_num_active_seqs`, the verifier's batch size);
- the KV split changes only when the optimum's verifier share moved by more than
  `min_shift` of the budget M (or offloading switched on or off); otherwise the best caps
  within the current split are used (`plan_within`). Resizing rebuilds real engines (seconds
  to minutes) and empties their prefix caches, so small moves are not worth it.

Why a threshold on the split and not on the predicted gain: a resize costs what T_tot does not
see (real engines are rebuilt, and both prefix caches start empty), and the prediction has
been wrong before: before T_tot had its prefix-reuse term, a split kept as "within 5 %" (a
512 MiB verifier cache at n = 64, 1.5B + 7B, 3 GiB) ran 1.22x slower on the simulator than
the re-split plan (`benchmarks/replan.py`).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass

from fasttts.perf.specs import HardwareSpec, ModelSpec
from fasttts.runtime.memory_planner import MemoryPlan, plan_within
from fasttts.runtime.plan_workload import measured_peak_len, one_pass, plan_for_run, plan_input

__all__ = ["MAX_SHAPES", "Replan", "Replanner"]

#: Search shapes whose measured tree sizes are remembered (the least recently used is
#: forgotten first).
MAX_SHAPES = 64


@dataclass(frozen=True)
class Replan:
    """A change of plan to apply before the next request.

    Attributes:
        plan: the plan now in force (its b_pre / b_dec are the new caps).
        generator_kv_bytes, verifier_kv_bytes: the KV-cache sizes under it (bytes).
        resplit: the KV split changed (the engines must be resized); False = only caps.
        num_requests, seq_len: the workload it was planned for (beams; tokens per path).
    """

    plan: MemoryPlan
    generator_kv_bytes: int
    verifier_kv_bytes: int
    resplit: bool
    num_requests: int
    seq_len: int


class Replanner:
    """Keeps the memory plan matched to the workload of each request.

    Args:
        budget: M, both KV caches together (bytes).
        generator, verifier: the model shapes.
        hardware: the roofline the plan is evaluated on.
        allow_offload: the planner may offload (section 4.3.2).
        verifier_min_tokens, generator_min_tokens: each KV cache holds at least this many
            tokens (one max_model_len sequence; for real engines plus vLLM's reserved block).
        current: the plan the engines were built with, and their KV sizes (bytes).
        min_shift: re-split only when the optimum's verifier KV size differs from the
            current one by more than this fraction of the budget (0..1; 0 = whenever it moves).
        window: requests whose measured mean path length sets S (>= 1).

    Raises:
        ValueError: min_shift not within 0..1 or window < 1.
    """

    def __init__(self, budget: int, generator: ModelSpec, verifier: ModelSpec,
                 hardware: HardwareSpec, allow_offload: bool, verifier_min_tokens: int,
                 current: MemoryPlan, generator_kv_bytes: int, verifier_kv_bytes: int,
                 min_shift: float = 0.1, window: int = 8, generator_min_tokens: int = 0):
        if not 0 <= min_shift <= 1 or window < 1:
            raise ValueError(f"need 0 <= min_shift <= 1 and window >= 1, got {min_shift}, "
                             f"{window}")
        self.budget, self.generator, self.verifier = budget, generator, verifier
        self.hardware, self.allow_offload = hardware, allow_offload
        self.verifier_min_tokens = verifier_min_tokens
        self.generator_min_tokens = generator_min_tokens
        self.plan = current
        self.generator_kv_bytes, self.verifier_kv_bytes = generator_kv_bytes, verifier_kv_bytes
        self.min_shift = min_shift
        self._lengths: deque[float] = deque(maxlen=window)
        self._peaks: deque[float] = deque(maxlen=window)
        self._trees: OrderedDict[tuple, deque[float]] = OrderedDict()
        self._window = window
        self.num_replans = self.num_resplits = 0

    @staticmethod
    def _shape(search) -> tuple:
        return (search.method, search.n, search.beam_width, search.granularity)

    def observe(self, prompt_tokens: int, path_tokens: list[int], tree_tokens: int = 0,
                search=None, decode_tree_tokens: int = 0) -> None:
        """Record one finished request: its prompt length and the generated length of each
        returned path (tokens), and the size of its largest search tree (`tree_tokens`,
        `SearchResult.tree_tokens`) and the generator's peak of it (`decode_tree_tokens`,
        `SearchResult.decode_tree_tokens`; 0 = not measured) under `search` (its
        SearchConfig); for a one-pass method (`one_pass`) also its paths' KV peak. A request
        that returned no path is ignored."""
        if not path_tokens:
            return
        self._lengths.append(prompt_tokens + statistics.fmean(path_tokens))
        if search is not None and one_pass(search):
            self._peaks.append(measured_peak_len(prompt_tokens, path_tokens))
        if tree_tokens and search is not None:
            shape = self._shape(search)
            trees = self._trees.setdefault(shape, deque(maxlen=self._window))
            trees.append((tree_tokens / search.n, decode_tree_tokens / search.n))
            self._trees.move_to_end(shape)
            while len(self._trees) > MAX_SHAPES:
                self._trees.popitem(last=False)

    def observe_result(self, result, search) -> None:
        """`observe` a finished search: its `SearchResult` (prompt, returned paths, largest
        tree) under `search` (its SearchConfig)."""
        self.observe(result.prompt_tokens, [len(b.token_ids) for b in result.completions],
                     result.tree_tokens, search, result.decode_tree_tokens)

    def measured_tree_len(self, search) -> int | None:
        """Mean measured tree size per path (tokens) of requests with the same method, n,
        beam_width and granularity as `search`; None before any (the planner estimates it)."""
        trees = self._trees.get(self._shape(search))
        return max(1, round(statistics.fmean(t for t, _ in trees))) if trees else None

    def measured_decode_tree_len(self, search) -> int | None:
        """Mean measured generator peak of the tree per path (tokens,
        `SearchResult.decode_tree_tokens`) of requests of the same shape as `search`; None
        before any that measured one (the planner estimates it)."""
        peaks = [d for _, d in self._trees.get(self._shape(search), ()) if d]
        return max(1, round(statistics.fmean(peaks))) if peaks else None

    @property
    def measured_peak_len(self) -> int | None:
        """Mean measured KV peak per path (tokens) of the one-pass requests in the window;
        None before any."""
        return round(statistics.fmean(self._peaks)) if self._peaks else None

    @property
    def measured_len(self) -> int | None:
        """Mean path length (tokens, prompt included) over the window; None before any."""
        return round(statistics.fmean(self._lengths)) if self._lengths else None

    def update(self, cfg, resplit: bool = True) -> Replan | None:
        """Plan for the next request (`cfg`: its RunConfig; N = cfg.search.n) and say what
        changes, or None when the caps and the split stay as they are. `runtime.plan_seq_len`,
        when set, wins over the measured length. `resplit=False` keeps the split whatever the
        optimum (a server changes only the caps while requests run).

        Raises:
            fasttts.runtime.memory_planner.PlanError: the workload does not fit the budget.
        """
        if not resplit and self.plan.offload:
            return None  # an offload plan's caps assume each model has all of M
        seq_len = None if cfg.runtime.plan_seq_len else self.measured_len
        tree_len, peak = self.measured_tree_len(cfg.search), self.measured_peak_len
        decode_tree = self.measured_decode_tree_len(cfg.search)
        inp = plan_input(cfg, self.budget, self.generator, self.verifier, self.hardware, seq_len,
                         tree_len=tree_len, peak_len=peak, decode_tree_len=decode_tree)
        best, ver_kv = plan_for_run(cfg, self.budget, self.generator, self.verifier,
                                    self.hardware, self.allow_offload, self.verifier_min_tokens,
                                    seq_len, self.generator_min_tokens, tree_len, peak,
                                    decode_tree)
        gen_kv = self.budget if best.offload else self.budget - ver_kv
        shift = abs(ver_kv - self.verifier_kv_bytes) / self.budget
        kept = None
        if not resplit or (not best.offload and not self.plan.offload
                           and shift <= self.min_shift):
            kept = plan_within(inp, self.generator_kv_bytes, self.verifier_kv_bytes)
            if kept is None and not resplit:
                return None
        if kept is not None:
            if (kept.b_pre, kept.b_dec) == (self.plan.b_pre, self.plan.b_dec):
                return None
            self.plan, resplit = kept, False
        else:
            resplit = (best.offload != self.plan.offload
                       or (gen_kv, ver_kv) != (self.generator_kv_bytes, self.verifier_kv_bytes))
            if not resplit and (best.b_pre, best.b_dec) == (self.plan.b_pre, self.plan.b_dec):
                return None
            self.plan = best
            self.generator_kv_bytes, self.verifier_kv_bytes = gen_kv, ver_kv
            self.num_resplits += resplit
        self.num_replans += 1
        return Replan(self.plan, self.generator_kv_bytes, self.verifier_kv_bytes, resplit,
                      inp.num_requests, inp.verifier_len)
