"""SART: redundant sampling with early stopping and two-phase PRM pruning.

Source: SART paper (`sart-paper.txt`), sections 3-4 and Algorithm 1, for one request:

- sample N = n branches; the request is answered once M of them completed (redundant
  sampling with early stopping), or when every branch completed or was pruned;
- pruning checks run every T decode steps. Phase 1 ("explore", threshold alpha, at most beta
  pruned in total): a live branch whose PRM reward is below alpha is pruned. Once a branch has
  completed, phase 2 ("exploit") starts with threshold alpha' = that branch's reward and the
  cap N - 1 (if several complete in the same step, alpha' is the highest of their rewards);
- the answer is the completion with the highest reward (the `best` prediction of the
  record); completions are returned best first.

How it maps onto the shared step loop (FastTTS section 3.1):

- one iteration extends every live branch by one reasoning step (all branches in one engine
  batch; SBE, when on, fills the slots of branches that end their step early);
- the decode steps of an iteration are the most tokens any branch generated in it; a check is
  due at the first step boundary after at least T decode steps since the last one. The PRM
  scores every live branch at a check, and a completed branch as soon as it completes;
- a branch's reward is its aggregated step score (`agg_strategy`; "last" = its newest step);
- within a check, the lowest-reward branches below the threshold are pruned first (the cap
  then keeps the better ones; Algorithm 1 walks the batch in order);
- completions are counted at every step boundary, not only at checks, so the request stops
  as soon as M have completed;
- a pruned, completed or early-stopped branch holds no KV blocks afterwards: every iteration's
  sequences end with the step, and the runtime extends only the live branches.

Paper defaults: M = N / 2, alpha = 0.5, beta = N / 2, T = 400. T defaults to 64 tokens here:
the embedded generator's steps have a median of 34 tokens and GSM8K / MATH solutions run to
200-600 tokens, so T = 400 would allow at most one check before most branches complete, while
64 checks about every second step.
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchConfigError, SearchStrategy, by_score

__all__ = ["SART"]


class SART(SearchStrategy):
    """SART for one request (module docstring).

    Attributes:
        m, alpha, beta, t: M, alpha, beta, T of the paper (from `SearchConfig.sart_*`).
        phase: "explore" or "exploit".
        threshold: the current pruning threshold (alpha, then alpha').
        max_pruned: the current cap on pruned branches (beta, then N - 1).
        pruned: (decode steps since the search started, beam ids) of every pruning.
        num_checks: checks run.

    Raises:
        SearchConfigError: M > N or beta > N.
    """

    name = "sart"
    own_params = ("sart_m", "sart_alpha", "sart_beta", "sart_t")
    answer_rule = "best"
    selects_paths = False

    def __init__(self, cfg):
        super().__init__(cfg)
        n = cfg.n
        self.m = cfg.sart_m if cfg.sart_m is not None else max(1, n // 2)
        self.alpha = cfg.sart_alpha
        self.beta = cfg.sart_beta if cfg.sart_beta is not None else n // 2
        self.t = cfg.sart_t
        self.phase, self.threshold, self.max_pruned = "explore", self.alpha, self.beta
        self.num_pruned = 0
        self.num_checks = 0
        self.pruned: list[tuple[int, list[int]]] = []
        self._decode_steps = 0
        self._since_check = 0
        self._check_due = False
        self._start_tokens: dict[int, int] = {}

    @classmethod
    def check(cls, cfg) -> None:
        """M and beta at most N."""
        n, m, beta = cfg.n, cfg.sart_m, cfg.sart_beta
        if m is not None and m > n:
            raise SearchConfigError(f"sart needs M <= N: sart_m={m} but n={n}; use "
                                    f"1 <= sart_m <= {n} (default n // 2)")
        if beta is not None and beta > n:
            raise SearchConfigError(f"sart needs beta <= N: sart_beta={beta} but n={n}; use "
                                    f"0 <= sart_beta <= {n} (default n // 2)")

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        if iteration == 0:
            children = [kept[0].child(new_id()) for _ in range(self.cfg.n)]
        else:
            children = [b.child(new_id()) for b in kept]
        self._start_tokens = {c.beam_id: c.num_tokens for c in children}
        return children

    def to_verify(self, children: list[Beam], iteration: int) -> list[Beam]:
        steps = max(c.num_tokens - self._start_tokens[c.beam_id] for c in children)
        self._decode_steps += steps
        self._since_check += steps
        self._check_due = self._since_check >= self.t
        if self._check_due:
            self._since_check = 0
            return children
        return [c for c in children if c.finished]

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        if finished and self.phase == "explore":
            self.phase = "exploit"
            self.threshold = max(b.score for b in finished)
            self.max_pruned = self.cfg.n - 1
        if not self._check_due:
            return live
        self.num_checks += 1
        below = [b for b in reversed(by_score(live)) if b.score < self.threshold]
        cut = below[: max(0, self.max_pruned - self.num_pruned)]
        if cut:
            self.num_pruned += len(cut)
            self.pruned.append((self._decode_steps, sorted(b.beam_id for b in cut)))
        gone = {b.beam_id for b in cut}
        return [b for b in live if b.beam_id not in gone]

    def should_stop(self, completed: list[Beam]) -> bool:
        return len(completed) >= self.m

    def stats(self) -> dict:
        return {"phase": self.phase, "threshold": self.threshold, "num_checks": self.num_checks,
                "num_pruned": self.num_pruned, "pruned": self.pruned,
                "decode_steps": self._decode_steps}
