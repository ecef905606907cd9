"""Engine priorities of every generator sequence, defined in one place.

Engines schedule the lowest value first and preempt the highest value first under memory
pressure (vLLM's priority scheduling; the simulator does the same,
`fasttts.backends.sim.engine`). Only the order matters. A sequence's priority has three
parts, most significant first:

1. class: standard beams before speculative sequences. Speculative beam extension (FastTTS
   section 4.1.2) only fills batch slots no standard beam of any search wants, and its
   sequences are the first to be preempted.
2. request arrival: on an engine shared by many searches (`fasttts serve`), the sequences of
   earlier requests before those of later ones, so the waiting branches of running requests
   fill the batch before a new request's (SART Algorithm 1, lines 10-20). One search alone
   has arrival 0.
3. rank within the search: with prefix-aware scheduling (FastTTS section 4.2) a beam's
   position in the submission order, so a memory-bound engine admits beams in that order;
   else 0 (ties are broken by the engine's own arrival order).

The driver loop (`fasttts.runtime.driver`) computes every sequence's priority here from what
the search wished (`NewSequence.rank`, `NewSequence.speculative`) and the search's arrival.
"""

from __future__ import annotations

__all__ = ["RANK_SLOTS", "REQUEST_SLOTS", "SPECULATIVE", "STANDARD", "engine_priority"]

#: Distinct ranks within one search's class; larger ranks share the last one.
RANK_SLOTS = 1 << 20
#: Distinct request arrivals; later arrivals share the last one (then the engine's arrival
#: order decides among them).
REQUEST_SLOTS = 1 << 20
#: Class offsets: every speculative sequence ranks after every standard one.
STANDARD = 0
SPECULATIVE = RANK_SLOTS * REQUEST_SLOTS


def engine_priority(rank: int = 0, arrival: int = 0, speculative: bool = False) -> int:
    """The engine priority of a sequence (module docstring).

    Args:
        rank: the sequence's rank within its search (>= 0; prefix-aware position, else 0).
        arrival: its search's arrival index on the engine (>= 0; 0 for one search alone).
        speculative: an SBE speculative sequence rather than a standard beam.

    Returns:
        An int >= 0; lower runs first.
    """
    base = SPECULATIVE if speculative else STANDARD
    return base + min(arrival, REQUEST_SLOTS - 1) * RANK_SLOTS + min(rank, RANK_SLOTS - 1)
