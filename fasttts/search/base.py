"""The search-policy interface over the shared generate -> verify -> select loop.

A strategy decides *what*: which beams to extend and how many children each gets (`expand`),
which new steps the PRM scores (`to_verify`), which unfinished beams survive an iteration
(`select`), when the search stops early (`should_stop`), and which completions are returned
(`finalize`). The runtime (`fasttts.runtime.loop`) decides *how and when* and never changes
these decisions (FastTTS section 4.1, algorithmic equivalence). A strategy object serves one
problem: the runner makes a fresh one per search, so strategies may keep per-search state.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from fasttts.beam import Beam
from fasttts.config import SearchConfig

__all__ = ["TREE_LINEAGE_DIVISOR", "SearchConfigError", "SearchStrategy", "by_score", "fan_out",
           "has_near_tie", "require_multiple", "tie_bin"]

#: c in the memory planner's estimate of a tree search's lineages, n / (c x beam_width)
#: (`SearchStrategy.planned_lineages`): fitted to the trees the runtime measured on the
#: simulator (1.5B + 7B PRM, beam_width 4) with `benchmarks/lineage_fit.py`: on 10 MATH-500
#: problems at n = 16-256, and out of sample on AIME 2024 (docs/benchmarks.md, "The planner's
#: lineage constant").
TREE_LINEAGE_DIVISOR = 4


class SearchConfigError(ValueError):
    """A search configuration the method cannot run (the message says what is allowed)."""


def _text_rank(beam: Beam) -> bytes:
    return hashlib.blake2b(beam.text.encode(), digest_size=8).digest()


def tie_bin(score: float, width: float) -> float:
    """The bin of an aggregated score on a grid of `width` logits (log(s / (1 - s))), the
    ranking key of `by_score` under a tie tolerance: scores in one bin rank as tied. Binned in
    logits because a verifier's rounding noise is about constant there (a score s moves by
    about s (1 - s) x the logit's noise), so one width holds for scores near 0, 1/2 and 1.
    A width of 0 returns the score itself (exact ranking); a score of 0 or 1 (or outside
    [0, 1]) gets the bin -inf or +inf.
    """
    if width <= 0:
        return score
    if score <= 0.0 or score >= 1.0:
        return math.inf if score >= 1.0 else -math.inf
    return float(math.floor((math.log(score) - math.log1p(-score)) / width))


def by_score(beams: list[Beam], tie_tolerance: float = 0.0) -> list[Beam]:
    """Beams sorted by aggregated score, best first.

    Equal scores are common (PRM probabilities from bf16 logits take few distinct values), so
    ties are broken by a hash of the beam's text, then by beam_id: deterministic and
    independent of submission order, without the bias of an index tie-break towards the
    children of the first kept parent (which collapses beam search onto one lineage).

    Args:
        beams: the beams to rank (`Beam.score` set).
        tie_tolerance: `SearchConfig.tie_tolerance` (logits): scores in one `tie_bin` of this
            width rank as tied, so by the text's hash; 0 ranks by exact scores
            (search-and-learn).
    """
    return sorted(beams, key=lambda b: (-tie_bin(b.score, tie_tolerance), _text_rank(b),
                                        b.beam_id))


def has_near_tie(beams: list[Beam], tolerance: float) -> bool:
    """Whether two of `beams` have aggregated scores closer than `tolerance` (the verifier's
    `score_tolerance`): then a scoring that differs by less than the verifier's numerical
    noise (incremental vs whole-path verification in bfloat16) can order them otherwise, and a
    selection among them is not guaranteed to be the same search's. False for a tolerance of
    0 (exact scores)."""
    if tolerance <= 0:
        return False
    scores = sorted(b.score for b in beams)
    return any(hi - lo < tolerance for lo, hi in zip(scores, scores[1:]))


class SearchStrategy(ABC):
    """One search method.

    Args:
        cfg: the search configuration (checked against `check` when it was built).
    """

    name: ClassVar[str]
    #: The PRM scores each finished solution once as a whole (an outcome score: one "step"
    #: holding the whole text) instead of every step.
    outcome_scoring: ClassVar[bool] = False
    #: Which vote gives the method's answer (`fasttts.eval.voting`): "weighted" (PRM-weighted
    #: vote, search-and-learn), "majority" or "best" (the highest-scored completion).
    answer_rule: ClassVar[str] = "weighted"
    #: The method compares paths with the PRM, so greedy lookahead (`SearchConfig.lookahead`)
    #: can apply to it (checked by `fasttts.search.check_search`).
    selects_paths: ClassVar[bool] = True
    #: The paths of one iteration are children of kept paths: each shares all but its newest
    #: steps with its beam_width siblings (a search tree, whose prefix reuse the memory planner
    #: prices); False = independent paths.
    shares_prefixes: ClassVar[bool] = False
    #: The `SearchConfig` fields that belong to this method alone (setting one for another
    #: method is an error: `fasttts.search.check_search`).
    own_params: ClassVar[tuple[str, ...]] = ()
    #: A branch-level method (SART section 4): its n branches are n engine sequences that
    #: decode to their end with no step barrier, checked every `check_interval` decode steps
    #: (`fasttts.runtime.branches`); False = the generate -> verify -> select loop.
    branch_level: ClassVar[bool] = False
    #: The method runs speculative beam extension when it is on (FastTTS section 4.1): a
    #: step-level search of more than one iteration, whose beams finish a step before the
    #: straggler does and have a next step to speculate into; False for single-pass and
    #: branch-level methods (a `branch_level` class gets False unless it says otherwise),
    #: which ignore the technique.
    speculates: ClassVar[bool] = True
    #: The method's default for `RuntimeConfig.incremental_verification` when the run does
    #: not set it and does not ask for the FastTTS bundle (`fasttts.search.runtime_defaults`).
    incremental_default: ClassVar[bool] = False
    #: The method calls the PRM (False: self-consistency's majority vote); the FastTTS
    #: bundle turns incremental verification on for the methods that do.
    uses_verifier: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.branch_level and "speculates" not in cls.__dict__:
            cls.speculates = False

    def __init__(self, cfg: SearchConfig):
        self.cfg = cfg

    def rank(self, beams: list[Beam]) -> list[Beam]:
        """`beams` best first under the search's tie tolerance (`by_score` with
        `SearchConfig.tie_tolerance`)."""
        return by_score(beams, self.cfg.tie_tolerance)

    @classmethod
    def check(cls, cfg: SearchConfig) -> None:
        """Check the method's own rules on `cfg` (run when a SearchConfig is built:
        `fasttts.search.check_search`).

        Raises:
            SearchConfigError: a rule is broken; the message says what is allowed.
        """

    @property
    def steps_per_level(self) -> int:
        """Steps a path grows between two branchings: one level of the search tree (steps)."""
        return 1

    def planned_lineages(self, share: int) -> int:
        """Distinct paths the search keeps at every depth of its tree, at least: the memory
        planner's estimate (`fasttts.runtime.memory_planner.PlanInput.lineages`) for paths
        that share their prefixes `share` ways. Independent paths: n. Trees:
        n / (`TREE_LINEAGE_DIVISOR` share)."""
        n = self.cfg.n
        return max(1, n // (TREE_LINEAGE_DIVISOR * share)) if self.shares_prefixes else n

    @property
    def check_interval(self) -> int | None:
        """Engine decode steps of the request between two checks of a branch-level method
        (its live branches scored and `select`ed); None = no checks."""
        return None

    @property
    def num_iterations(self) -> int:
        """Most iterations; the last one generates each path to its end."""
        return self.cfg.num_iterations

    @abstractmethod
    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        """The beams to generate one step for in `iteration` (children of `kept`).

        Args:
            kept: the beams kept by the last `select` (the root alone in iteration 0).
            iteration: 0-based iteration index.
            new_id: returns a fresh beam id each call.
        """

    def to_verify(self, children: list[Beam], iteration: int) -> list[Beam]:
        """The beams of this iteration whose new steps the PRM scores now (after generation).

        Default: all of them. Beams left out keep their unscored steps; a later call scores
        them (a step's score depends only on its prefix)."""
        return children

    @abstractmethod
    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        """The unfinished beams that survive to the next iteration.

        Args:
            live: this iteration's unfinished beams (`Beam.score` set if they were verified).
            finished: the beams that finished in this iteration.
        """

    def should_stop(self, completed: list[Beam]) -> bool:
        """Stop the search now although paths are still live (early stopping); `completed` is
        every completion so far. Default: never."""
        return False

    def stats(self) -> dict:
        """What the method decided beyond its completions, for reports (JSON-able)."""
        return {}

    def finalize(self, completed: list[Beam]) -> list[Beam]:
        """The completions returned: at most n, best aggregated score first."""
        return self.rank(completed)[: self.cfg.n]

    def num_kept(self, completed: list[Beam]) -> int:
        """How many of the paths `completed` so far `finalize` would return now, deciding
        nothing (for progress reports): at most n. A method may finish more paths than it
        returns (beam search refills n live paths every iteration, as search-and-learn)."""
        return min(len(completed), self.cfg.n)


def require_multiple(name: str, n: int, beam_width: int) -> None:
    """Raise SearchConfigError unless n is a positive multiple of beam_width (methods that keep
    n // beam_width paths or subtrees)."""
    if beam_width > n or n % beam_width:
        raise SearchConfigError(
            f"{name} needs n to be a positive multiple of beam_width; got n={n}, "
            f"beam_width={beam_width} (e.g. n={max(beam_width, n - n % beam_width)} or a "
            f"beam_width dividing {n})"
        )


def fan_out(kept: list[Beam], total: int, new_id: Callable[[], int]) -> list[Beam]:
    """`total` children spread round-robin over `kept` (search-and-learn's duplication of the
    active beams up to n): beam i gets total // K children, plus one if i < total % K.

    Children are returned grouped by parent, parents in their given order.
    """
    if not kept:
        return []
    counts = [total // len(kept) + (1 if i < total % len(kept) else 0) for i in range(len(kept))]
    return [parent.child(new_id()) for parent, c in zip(kept, counts) for _ in range(c)]
