"""The server's driver loop: one generator engine and one verifier shared by many concurrent
searches (continuous batching across requests).

`EngineHub` runs one `fasttts.runtime.driver.Driver` in one thread ("fasttts-engine"). Every
admitted request's search is a state machine inside that driver, not a thread: each turn
resumes the searches that are ready, then scores the `Score` wishes of all of them in one
verifier call, or steps the engine once and routes its updates. So the engine's batch always
holds the branches of every running request, as in SART's Algorithm 1 (lines 10-20), and:

- priorities (`fasttts.runtime.priorities`): the sequences of earlier requests are admitted
  before those of later ones ("fill the batch with waiting branches first"); speculative
  sequences (SBE) rank after every standard sequence of every request;
- requests reach the driver thread through a command list (`start`, `cancel`, `poke`), taken
  at the start of every turn; after each turn `after_step` runs there (admission control);
- cancellation: `cancel` ends the search with `RequestCancelled` before the next engine step;
  the driver aborts its sequences, so their KV blocks are free within one engine step;
- faults: if the engine raises, every search with a sequence in it (or waiting for a step)
  ends with `EngineFailure` (the server answers 503), the engine is closed and rebuilt, and
  stepping resumes; requests admitted later use the new engine. Engines run in-process: a
  crash that kills the process (not an exception) takes the server down with it.

Threads: the driver thread holds `cv` during each turn (engine steps, search code) but not
during verifier calls, so other threads read the generator engine's state under `cv`;
commands take only a short lock of their own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable

from fasttts.backends.base import GeneratorBackend
from fasttts.runtime.driver import Driver, EngineInfo, Search, Task
from fasttts.verifiers.base import Verifier

__all__ = ["EngineFailure", "EngineHub", "RequestCancelled"]

logger = logging.getLogger(__name__)


class RequestCancelled(Exception):
    """The request was cancelled (client disconnect, timeout or explicit cancel)."""


class EngineFailure(RuntimeError):
    """The engine failed while the request had sequences in it (it is being restarted)."""


def _logged(callback: Callable | None) -> Callable | None:
    """`callback`, with its exceptions logged instead of raised (they must not stop the
    driver thread)."""
    if callback is None:
        return None

    def call(*args):
        try:
            callback(*args)
        except Exception:  # noqa: BLE001 - a bookkeeping bug must not stop every request
            logger.exception("a driver-thread callback failed")

    return call


class EngineHub:
    """The shared engines and the driver thread that runs every request's search (module
    docstring).

    Args:
        build: makes a fresh generator engine (called once now, again after each failure).
        verifier: the shared verifier (the driver batches every search's scoring into it).
        after_step: called in the driver thread after each turn (admission control).

    Attributes:
        driver: the driver loop (`fasttts.runtime.driver.Driver`).
        cv: held by the driver thread during each turn but its verifier calls; hold it to
            read the generator engine's state.
        num_restarts: engines rebuilt after a failure.
        last_error: the last engine failure (text), None if none.
        available: False once an engine could not be rebuilt (the hub stopped).
    """

    def __init__(self, build: Callable[[], GeneratorBackend], verifier: Verifier | None = None,
                 after_step: Callable[[], None] | None = None):
        self._build = build
        self.cv = threading.Condition(threading.RLock())
        self.driver = Driver(build(), verifier, on_engine_error=self._engine_failed,
                             while_scoring=self._released)
        self.after_step = after_step
        self._wake = threading.Condition(threading.Lock())
        self._commands: deque[tuple[str, Task, object]] = deque()
        self._poked = False
        self.num_restarts = 0
        self.last_error: str | None = None
        self.available = True
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fasttts-engine", daemon=True)
        self._thread.start()

    @property
    def engine(self) -> GeneratorBackend:
        """The current generator engine."""
        return self.driver.engine

    @property
    def info(self) -> EngineInfo:
        """The engine as searches read it (give it to `SearchRunner`)."""
        return self.driver.info

    @property
    def num_steps(self) -> int:
        """Engine steps run."""
        return self.driver.num_steps

    @property
    def num_sequences(self) -> int:
        """Sequences of all requests in the engine now."""
        return len(self.driver.sequence_ids)

    # ---- commands (any thread) -------------------------------------------------------------

    def start(self, request_id: str, search: Search, on_start: Callable[[], None] | None = None,
              on_done: Callable[[Task], None] | None = None) -> Task:
        """Hand a request's search to the driver thread; it arrives at the next turn, after
        `on_start()` ran there. `on_done(task)` runs there once it ended (its sequences
        aborted). Returns the task (for `cancel`)."""
        task = Task(search, prefix=f"{request_id}::", on_done=_logged(on_done))
        self._command("start", task, _logged(on_start))
        return task

    def cancel(self, task: Task, exc: BaseException) -> None:
        """End a started search with `exc` before the next engine step (no-op once ended)."""
        self._command("cancel", task, exc)

    def poke(self) -> None:
        """Run `after_step` soon even if no search is running (a request was queued)."""
        with self._wake:
            self._poked = True
            self._wake.notify()

    def _command(self, kind: str, task: Task, arg) -> None:
        with self._wake:
            self._commands.append((kind, task, arg))
            self._wake.notify()

    # ---- the driver thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._stop or self._commands or self._poked or self.driver.tasks):
                    self._wake.wait()
                self._poked = False
                commands, self._commands = list(self._commands), deque()
                stopping = self._stop
            with self.cv:
                self._apply(commands, stopping)
                if stopping:
                    self._cancel_all(RequestCancelled("the server is shutting down"))
                    return
                try:
                    self.driver.advance()
                except Exception as exc:  # noqa: BLE001 - e.g. an abort on a broken engine
                    logger.exception("the driver loop failed; restarting the engine")
                    self._engine_failed(exc)
            if self.after_step is not None:
                self.after_step()

    def _apply(self, commands: list[tuple[str, Task, object]], stopping: bool) -> None:
        """Start and cancel searches as asked (a start while stopping is refused)."""
        for kind, task, arg in commands:
            if kind == "cancel":
                self.driver.cancel(task, arg)
            elif stopping or not self.available:
                task.done, task.error = True, (
                    RequestCancelled("the server is shutting down") if self.available else
                    EngineFailure(f"generator engine unavailable: {self.last_error}"))
                if task.on_done is not None:
                    task.on_done(task)
            else:
                if arg is not None:
                    arg()
                self.driver.add(task)

    @contextlib.contextmanager
    def _released(self):
        """`cv` released around a verifier call (readers of the generator engine need not
        wait for the PRM)."""
        self.cv.release()
        try:
            yield
        finally:
            self.cv.acquire()

    def _cancel_all(self, exc: BaseException) -> None:
        for task in list(self.driver.tasks):
            self.driver.cancel(task, exc)

    def _engine_failed(self, exc: Exception) -> None:
        """The engine raised in a step: close it, rebuild it, then end the searches that
        were using it (module docstring), so a client that hears of the failure finds the
        new engine in place."""
        self.last_error = f"{type(exc).__name__}: {exc}"
        failure = EngineFailure(f"the generator engine failed ({self.last_error}); it is "
                                f"being restarted, retry the request")
        try:
            self.driver.engine.close()
        except Exception:  # noqa: BLE001 - a broken engine may fail to close too
            pass
        try:
            self.driver.engine = self._build()
            self.num_restarts += 1
            self.available = True
        except Exception as build_exc:  # noqa: BLE001
            self.available = False
            self.last_error = f"restart failed: {type(build_exc).__name__}: {build_exc}"
        self.driver.fail_engine_users(failure, abort=False)
        if not self.available:
            self._cancel_all(failure)
            with self._wake:
                self._stop = True

    def close(self) -> None:
        """Stop the driver thread (searches still running end with RequestCancelled) and
        close the engine."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout=30)
        self.engine.close()
