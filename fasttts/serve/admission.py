"""Branch-level admission: SART's Algorithm 1, lines 11-19, as one rule.

The decode batch has B slots (`GeneratorBackend.max_num_seqs`: the engine's batch cap, or the
memory planner's B_dec once set). A free slot goes to a waiting branch first: while any
branch waits in the engine's queue, no request is admitted (the engine admits its waiting
sequences into free slots itself, earlier requests first, `fasttts.runtime.priorities`). Only
when no branch waits and a slot is free is the next queued request admitted: its prompt is
prefilled once and its n branches share it through the prefix cache; those that do not find
a slot wait, and are served before any later request.

A cap on the requests searching at once stays as a safety limit (each holds its search state
in the server's memory), not as the admission rule.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchState", "admits"]


@dataclass(frozen=True)
class BatchState:
    """What admission looks at (counts of sequences and requests).

    Attributes:
        slots: B, the decode batch's slots (sequences).
        in_engine: sequences of every running request in the engine (running or waiting).
        waiting: of those, sequences waiting for a slot (the branch queue).
        incoming: branches of requests admitted but not in the engine yet (their n each).
        active: requests searching now.
        max_active: the safety cap on `active`.
    """

    slots: int
    in_engine: int
    waiting: int
    incoming: int
    active: int
    max_active: int


def admits(state: BatchState) -> bool:
    """Whether the next queued request may be admitted now (module docstring): no branch
    waits, a decode slot is free after the branches already in or on their way, and the
    safety cap is not reached."""
    return (state.waiting == 0 and state.in_engine + state.incoming < state.slots
            and state.active < state.max_active)
