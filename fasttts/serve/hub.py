"""One generator engine shared by many concurrent searches (continuous batching across
requests).

`EngineHub` owns the engine and steps it in one thread whenever any request has a sequence in
it. Each request's search runs unchanged (`fasttts.runtime.loop.SearchRunner`) in its own
thread against a `GeneratorView`: a `GeneratorBackend` whose `add_sequence` / `abort` go to the
shared engine (sequence ids prefixed by the request) and whose `step` waits for the hub's next
engine step and returns that request's updates. So the engine's batch always holds the
branches of every running request, as in SART's Algorithm 1 (lines 10-20), and:

- priorities: a request's sequences get engine priority (arrival index, then the runtime's own
  priority), so waiting branches of earlier requests are admitted before those of later ones
  ("fill the batch with waiting branches first"); speculative sequences (SBE) rank after every
  standard sequence of every request;
- cancellation: `GeneratorView.cancel` makes the request's next `step` raise
  `RequestCancelled`; the generation phase then aborts all the request's sequences, so their
  KV blocks are free within one engine step;
- faults: if the engine raises, every request with a sequence in it gets `EngineFailure`
  (the server answers 503), the engine is closed and rebuilt, and stepping resumes; requests
  admitted later use the new engine. Engines run in-process: a crash that kills the process
  (not an exception) takes the server down with it.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable

from fasttts.backends.base import (CacheStats, GenerationParams, GeneratorBackend,
                                   SequenceUpdate)
from fasttts.runtime.spec_beam_extension import SPEC_PRIORITY

__all__ = ["EngineFailure", "EngineHub", "GeneratorView", "RequestCancelled"]

#: Most seconds the hub waits for a request thread to come back for the next engine step.
PARK_TIMEOUT_S = 5.0
_REQUEST_STRIDE = 1 << 21
_SPECULATIVE = 1 << 40


class RequestCancelled(Exception):
    """The request was cancelled (client disconnect, timeout or explicit cancel)."""


class EngineFailure(RuntimeError):
    """The engine failed while the request had sequences in it (it is being restarted)."""


class EngineHub:
    """The shared generator engine and its stepping thread (module docstring).

    Args:
        build: makes a fresh generator engine (called once now, again after each failure).
        after_step: called in the hub thread after each engine step (admission control).
        device_lock: held around each engine step; share it with the verifier.

    Attributes:
        engine: the current engine.
        num_steps: engine steps run.
        num_arrivals: requests admitted so far.
        num_restarts: engines rebuilt after a failure.
        last_error: the last engine failure (text), None if none.
    """

    def __init__(self, build: Callable[[], GeneratorBackend],
                 after_step: Callable[[], None] | None = None,
                 device_lock: threading.Lock | None = None):
        self._build = build
        self.engine = build()
        self.after_step = after_step
        self.cv = threading.Condition(threading.RLock())
        #: Held around every engine step and every verifier call (`LockedVerifier`): the two
        #: models share one device, and vLLM's in-process engines keep per-process state
        #: during a forward pass (two forward passes at once crash the process).
        self.device_lock = device_lock or threading.Lock()
        self._owner: dict[str, GeneratorView] = {}
        self._arrivals = itertools.count()
        self.num_steps = 0
        self.num_arrivals = 0
        self.num_restarts = 0
        self.last_error: str | None = None
        self.available = True
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fasttts-engine", daemon=True)
        self._thread.start()

    def view(self, request_id: str) -> GeneratorView:
        """A generator view for one request (its arrival fixes its priority)."""
        with self.cv:
            view = GeneratorView(self, request_id, next(self._arrivals))
            self.num_arrivals = view.arrival + 1
            return view

    @property
    def num_sequences(self) -> int:
        """Sequences of all requests in the engine now."""
        with self.cv:
            return len(self._owner)

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self._stop and not self._owner:
                    self.cv.wait()
                if self._stop:
                    return
                # Lockstep: every request with sequences in the engine first takes the last
                # step's updates and parks in step() (at most PARK_TIMEOUT_S), so a cancel or
                # a new step of any request applies before the next engine step.
                deadline = time.monotonic() + PARK_TIMEOUT_S
                while not self._stop and self._owner and not all(
                        v._parked for v in set(self._owner.values())):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cv.wait(left)
            # The device first (a verifier call may hold it), then the state: requests keep
            # taking updates and adding sequences while the verifier runs.
            with self.device_lock, self.cv:
                if self._stop:
                    return
                if not self._owner:
                    continue
                try:
                    updates = self.engine.step()
                except Exception as exc:  # the engine failed: fail its requests, rebuild it
                    self._fail(exc)
                    continue
                self.num_steps += 1
                for up in updates:
                    view = self._owner.get(up.seq_id)
                    if view is None:
                        continue
                    view._deliver(up)
                    if up.finished:
                        del self._owner[up.seq_id]
                if not updates and self.engine.num_unfinished() == 0:
                    # The engine holds none of the sequences we think it does.
                    self._fail(RuntimeError("the engine lost its sequences"))
                    continue
                for view in set(self._owner.values()):
                    view._parked = False
                self.cv.notify_all()
            if self.after_step is not None:
                self.after_step()

    def _fail(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        for view in set(self._owner.values()):
            view.error = EngineFailure(f"the generator engine failed ({self.last_error}); "
                                       f"it is being restarted, retry the request")
            view._live.clear()
        self._owner.clear()
        try:
            self.engine.close()
        except Exception:  # noqa: BLE001 - a broken engine may fail to close too
            pass
        try:
            self.engine = self._build()
            self.num_restarts += 1
            self.available = True
        except Exception as build_exc:  # noqa: BLE001
            self.available = False
            self.last_error = f"restart failed: {type(build_exc).__name__}: {build_exc}"
            self._stop = True
        self.cv.notify_all()

    def close(self) -> None:
        """Stop the stepping thread and close the engine."""
        with self.cv:
            self._stop = True
            self.cv.notify_all()
        self._thread.join(timeout=30)
        self.engine.close()


class GeneratorView(GeneratorBackend):
    """One request's view of the shared engine (module docstring).

    Raises (from `step` and `add_sequence`):
        RequestCancelled: after `cancel`.
        EngineFailure: the engine failed while this request had sequences in it.
    """

    def __init__(self, hub: EngineHub, request_id: str, arrival: int):
        self.hub = hub
        self.request_id = request_id
        self.arrival = arrival
        self._inbox: list[SequenceUpdate] = []
        self._live: set[str] = set()
        self.cancelled = False
        self.error: EngineFailure | None = None
        self._parked = False

    # -- routing ---------------------------------------------------------------------------
    def _eid(self, seq_id: str) -> str:
        return f"{self.request_id}::{seq_id}"

    def _deliver(self, up: SequenceUpdate) -> None:
        self._inbox.append(dataclasses.replace(up, seq_id=up.seq_id.split("::", 1)[1]))
        if up.finished:
            self._live.discard(up.seq_id)

    def _check(self) -> None:
        if self.cancelled:
            raise RequestCancelled(f"request {self.request_id} was cancelled")
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Cancel the request: its next engine interaction raises RequestCancelled."""
        with self.hub.cv:
            self.cancelled = True
            self._parked = False  # the hub waits for this request to abort its sequences
            self.hub.cv.notify_all()

    def release(self) -> None:
        """Abort whatever the request still has in the engine (normally nothing)."""
        with self.hub.cv:
            if self._live:
                self.hub.engine.abort(sorted(self._live))
                for eid in self._live:
                    self.hub._owner.pop(eid, None)
                self._live.clear()

    # -- GeneratorBackend ------------------------------------------------------------------
    @property
    def max_model_len(self) -> int:  # type: ignore[override]
        return self.hub.engine.max_model_len

    @property
    def max_num_seqs(self) -> int:  # type: ignore[override]
        return self.hub.engine.max_num_seqs

    @property
    def clock_kind(self) -> str:  # type: ignore[override]
        return self.hub.engine.clock_kind

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        with self.hub.cv:
            return self.hub.engine.encode_chat(messages)

    def decode(self, token_ids: list[int]) -> str:
        with self.hub.cv:
            return self.hub.engine.decode(token_ids)

    def add_sequence(self, seq_id: str, prompt_token_ids: list[int], params: GenerationParams,
                     priority: int = 0) -> None:
        with self.hub.cv:
            self._check()
            eid = self._eid(seq_id)
            base = _SPECULATIVE if priority >= SPEC_PRIORITY else 0
            self.hub.engine.add_sequence(
                eid, prompt_token_ids, params,
                priority=base + self.arrival * _REQUEST_STRIDE + priority % _REQUEST_STRIDE)
            self.hub._owner[eid] = self
            self._live.add(eid)
            self.hub.cv.notify_all()

    def step(self) -> list[SequenceUpdate]:
        with self.hub.cv:
            target = self.hub.num_steps + 1
            try:
                while (not self._inbox and not self.cancelled and self.error is None
                       and self._live and self.hub.num_steps < target):
                    self._parked = True
                    self.hub.cv.notify_all()
                    self.hub.cv.wait()
            finally:
                self._parked = False
            self._check()
            out, self._inbox = self._inbox, []
            return out

    def abort(self, seq_ids: list[str]) -> None:
        with self.hub.cv:
            eids = [e for e in map(self._eid, seq_ids) if e in self._live]
            if eids:
                self.hub.engine.abort(eids)
            for eid in eids:
                self._live.discard(eid)
                self.hub._owner.pop(eid, None)
            self._inbox = [u for u in self._inbox if u.seq_id not in set(seq_ids)]

    def num_unfinished(self) -> int:
        with self.hub.cv:
            return len(self._live)

    def num_waiting(self) -> int:
        with self.hub.cv:
            return self.hub.engine.num_waiting()

    def num_arrivals(self) -> int:
        return self.hub.num_arrivals

    def cache_stats(self) -> CacheStats:
        with self.hub.cv:
            return self.hub.engine.cache_stats()

    def now(self) -> float:
        return self.hub.engine.now()
