"""The search-policy interface over the shared generate -> verify -> select loop.

A strategy decides *what*: which beams to extend and how many children each gets (`expand`),
which unfinished beams survive an iteration (`select`), and which completions are returned
(`finalize`). The runtime (`fasttts.runtime.loop`) decides *how and when* and never changes
these decisions (FastTTS section 4.1, algorithmic equivalence).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from fasttts.beam import Beam
from fasttts.config import SearchConfig

__all__ = ["SearchConfigError", "SearchStrategy", "by_score", "fan_out"]


class SearchConfigError(ValueError):
    """A search configuration the method cannot run (the message says what is allowed)."""


def _text_rank(beam: Beam) -> bytes:
    return hashlib.blake2b(beam.text.encode(), digest_size=8).digest()


def by_score(beams: list[Beam]) -> list[Beam]:
    """Beams sorted by aggregated score, best first.

    Equal scores are common (PRM probabilities from bf16 logits take few distinct values), so
    ties are broken by a hash of the beam's text, then by beam_id: deterministic and
    independent of submission order, without the bias of an index tie-break towards the
    children of the first kept parent (which collapses beam search onto one lineage).
    """
    return sorted(beams, key=lambda b: (-b.score, _text_rank(b), b.beam_id))


class SearchStrategy(ABC):
    """One search method.

    Args:
        cfg: the search configuration; validated by `validate`.

    Raises:
        SearchConfigError: the configuration is invalid for this method.
    """

    name: ClassVar[str]

    def __init__(self, cfg: SearchConfig):
        self.cfg = cfg
        self.validate()

    def validate(self) -> None:
        """Check method-specific constraints; raise SearchConfigError with the rule."""

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

    @abstractmethod
    def select(self, live: list[Beam]) -> list[Beam]:
        """The unfinished beams (scored, `Beam.score` set) that survive to the next iteration."""

    def finalize(self, completed: list[Beam]) -> list[Beam]:
        """The completions returned: at most n, best aggregated score first."""
        return by_score(completed)[: self.cfg.n]


def fan_out(kept: list[Beam], total: int, new_id: Callable[[], int]) -> list[Beam]:
    """`total` children spread round-robin over `kept` (search-and-learn's duplication of the
    active beams up to n): beam i gets total // K children, plus one if i < total % K.

    Children are returned grouped by parent, parents in their given order.
    """
    if not kept:
        return []
    counts = [total // len(kept) + (1 if i < total % len(kept) else 0) for i in range(len(kept))]
    return [parent.child(new_id()) for parent, c in zip(kept, counts) for _ in range(c)]
