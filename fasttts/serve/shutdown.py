"""The graceful stop of `fasttts serve` on SIGTERM or SIGINT (Ctrl-C), and its goodbye line.

uvicorn stops accepting connections at the signal and waits for the open ones; the requests in
flight (searching or queued) get `drain_s` seconds to finish, then every one left is cancelled
(its client gets a 503, its sequences are aborted) so the server exits. The last line the
server logs says what happened:

    fasttts serve: stopped by SIGTERM: 1 request in flight, 0 finished, 1 cancelled after the 1 s drain limit; shut down in 1.6 s

uvicorn re-raises the signal it caught once it has shut down (so that the process would die
of it); `Shutdown.install` answers that re-raise instead, so the engines are closed and the
goodbye is logged before `fasttts serve` exits (0: a requested stop is not a failure).
"""

from __future__ import annotations

import signal
import threading
import time

from fasttts.serve.access_log import ReadyServer

__all__ = ["Shutdown", "StoppingServer"]


class Shutdown:
    """Counts and times the stop of a server (module docstring).

    Args:
        scheduler: the server's `fasttts.serve.scheduler.Scheduler`.
        drain_s: seconds in-flight requests may finish after the signal (s).
    """

    def __init__(self, scheduler, drain_s: float):
        self.scheduler, self.drain_s = scheduler, drain_s
        self.signal: str | None = None
        self.started: float | None = None
        self.in_flight = 0
        self.cancelled = 0
        self._lock = threading.Lock()

    def _pending(self) -> int:
        return self.scheduler.num_active + self.scheduler.queue_length

    def begin(self, sig: int) -> None:
        """The first stop signal: note it, when, and the requests in flight."""
        with self._lock:
            if self.signal is None:
                self.signal = signal.Signals(sig).name
                self.started = time.monotonic()
                self.in_flight = self._pending()

    def cancel_rest(self) -> None:
        """Cancel every request still searching or queued (they answer 503), once."""
        with self._lock:
            if not self.scheduler.closed:
                self.cancelled += self._pending()
                self.scheduler.close()

    def drain(self, server) -> None:
        """Thread body: once `server` is told to stop, wait until no request is in flight or
        `drain_s` passed, then `cancel_rest`, so the server exits."""
        while not server.should_exit:
            time.sleep(0.1)
        deadline = time.monotonic() + self.drain_s
        while self._pending() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.cancel_rest()

    def install(self) -> None:
        """Answer SIGTERM and SIGINT in this (main) thread by noting them: uvicorn replaces
        these handlers while it serves and re-raises its signal at the end, which then lands
        here instead of killing the process before the engines are closed."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda s, _frame: self.begin(s))

    def goodbye(self) -> str | None:
        """The server's last line, or None if no signal stopped it."""
        if self.signal is None:
            return None
        finished = max(self.in_flight - self.cancelled, 0)
        plural = "" if self.in_flight == 1 else "s"
        limit = f" after the {self.drain_s:g} s drain limit" if self.cancelled else ""
        return (f"fasttts serve: stopped by {self.signal}: {self.in_flight} request{plural} in "
                f"flight, {finished} finished, {self.cancelled} cancelled{limit}; shut down in "
                f"{time.monotonic() - self.started:.1f} s")


class StoppingServer(ReadyServer):
    """A `ReadyServer` that tells its `Shutdown` of the stop signal it receives."""

    def __init__(self, config, on_ready, shutdown: Shutdown):
        super().__init__(config, on_ready)
        self.shutdown_state = shutdown

    def handle_exit(self, sig, frame) -> None:
        self.shutdown_state.begin(sig)
        super().handle_exit(sig, frame)
