"""A stop request for a running benchmark, kept until the run has stopped.

`fasttts bench` turns SIGTERM into KeyboardInterrupt at once (`fasttts.cli.bench`), as Ctrl-C
does. But Python drops an exception raised while a finalizer or `__del__` runs, printing
"Exception ignored in ..." (vLLM's engines hold many `weakref.finalize` objects, and a signal
can land inside one), and the run would go on. So the handler also records the request here
(`request`), and `fasttts.bench.store.RowStore.append` calls `check` after each row is saved:
a request whose first interrupt was lost stops the run at the end of the row it was running.
"""

from __future__ import annotations

__all__ = ["check", "clear", "request"]

_requested: str | None = None


def request(reason: str) -> None:
    """Record a stop request (e.g. "signal SIGTERM")."""
    global _requested
    _requested = reason


def clear() -> None:
    """Forget the stop request (the run has stopped, or a new one starts)."""
    global _requested
    _requested = None


def check() -> None:
    """Raise KeyboardInterrupt(reason) if a stop was requested and not cleared.

    Raises:
        KeyboardInterrupt: a stop was requested.
    """
    if _requested is not None:
        raise KeyboardInterrupt(_requested)
