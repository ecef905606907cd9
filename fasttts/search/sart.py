"""SART: redundant sampling with early stopping and two-phase PRM pruning (the policy).

Source: SART paper (`sart-paper.txt`), sections 3-4 and Algorithm 1, for one request. SART is
a branch-level method (`SearchStrategy.branch_level`): its N = n branches are N engine
sequences that decode to their end (EOS or `max_tokens`) with no stop at the step delimiter,
and the runtime (`fasttts.runtime.branches`) checks them every T engine decode steps of the
request. This class makes the decisions; the runtime never changes them:

- `expand`: the N branches, all children of the prompt (one prefill, shared through the
  prefix cache);
- `select`, at a check (Algorithm 1, lines 31-45): the branches completed since the last
  check switch phase 1 ("explore": threshold alpha, at most beta pruned in all) to phase 2
  ("exploit": threshold alpha' = the reward of the first completion, the highest one's if
  several completed since the last check, and the cap N - 1); then every live branch whose
  reward is below the threshold is pruned while the cap allows, lowest reward first (so the
  cap keeps the better ones; Algorithm 1 walks the batch in its order). A branch's reward is
  its aggregated step score (`agg_strategy`; "last" = its newest complete step); a branch
  with no complete step has no reward yet and is not pruned. With `sart_prune` off nothing
  is pruned (early stopping alone);
- `should_stop`: the request stops at M completions (redundant sampling with early stopping;
  the runtime counts a completion the moment its branch completes, mid-check-interval);
- the answer is the completion with the highest reward (`answer_rule` "best"); completions are
  returned best first.

Paper defaults (section 5.1): M = N / 2, alpha = 0.5, beta = N / 2, T = 400.
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchConfigError, SearchStrategy

__all__ = ["SART"]


class SART(SearchStrategy):
    """SART's decisions for one request (module docstring).

    Attributes:
        m, alpha, beta, t: M, alpha, beta, T of the paper (from `SearchConfig.sart_*`).
        prune: whether two-phase pruning is on (`SearchConfig.sart_prune`).
        phase: "explore" or "exploit".
        threshold: the current pruning threshold (alpha, then alpha').
        max_pruned: the current cap on pruned branches (beta, then N - 1).
        num_pruned: branches pruned so far.
        num_checks: checks run.
        pruned: (check index, pruned beam ids) of every check that pruned.

    Raises:
        SearchConfigError: M > N or beta > N (`check`).
    """

    name = "sart"
    own_params = ("sart_m", "sart_alpha", "sart_beta", "sart_t", "sart_prune")
    answer_rule = "best"
    selects_paths = False
    branch_level = True
    incremental_default = True

    def __init__(self, cfg):
        super().__init__(cfg)
        n = cfg.n
        self.m = cfg.sart_m if cfg.sart_m is not None else max(1, n // 2)
        self.alpha = cfg.sart_alpha
        self.beta = cfg.sart_beta if cfg.sart_beta is not None else n // 2
        self.t = cfg.sart_t
        self.prune = cfg.sart_prune
        self.phase, self.threshold, self.max_pruned = "explore", self.alpha, self.beta
        self.num_pruned = 0
        self.num_checks = 0
        self.pruned: list[tuple[int, list[int]]] = []

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

    @property
    def check_interval(self) -> int | None:
        """T: engine decode steps of the request between two checks; None without pruning
        (a check would score live branches for nothing: only completions are scored)."""
        return self.t if self.prune else None

    @property
    def num_iterations(self) -> int:
        """One: the branches are generated to their end in one go (checks are not
        iterations)."""
        return 1

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        """The N branches, children of the root (`kept[0]`)."""
        return [kept[0].child(new_id()) for _ in range(self.cfg.n)]

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        """One check (module docstring): `finished` are the branches completed since the last
        check (scored), `live` the branches still decoding (scored up to their last complete
        step, `Beam.step_scores`). Returns the live branches that go on."""
        self.num_checks += 1
        if finished and self.phase == "explore":
            self.phase = "exploit"
            self.threshold = max(b.score for b in finished)
            self.max_pruned = self.cfg.n - 1
        if not self.prune:
            return live
        rewarded = [b for b in live if b.step_scores]
        below = [b for b in reversed(self.rank(rewarded)) if b.score < self.threshold]
        cut = below[: max(0, self.max_pruned - self.num_pruned)]
        if cut:
            self.num_pruned += len(cut)
            self.pruned.append((self.num_checks, sorted(b.beam_id for b in cut)))
        gone = {b.beam_id for b in cut}
        return [b for b in live if b.beam_id not in gone]

    def should_stop(self, completed: list[Beam]) -> bool:
        """M completions stop the request."""
        return len(completed) >= self.m

    def stats(self) -> dict:
        return {"phase": self.phase, "threshold": self.threshold, "num_checks": self.num_checks,
                "num_pruned": self.num_pruned, "pruned": self.pruned}
