"""The request scheduler: SART's request queue over the shared-engine hub.

SART Algorithm 1 (section 4): requests wait in a request queue; the decode batch is filled
with waiting branches first, and only when no branch waits is a new request admitted
(prefilled). Here a request is admitted when fewer than `max_active` requests run and the
generator engine has nothing waiting (every branch of the running requests is in the batch);
the check runs on every submission, every completion and after every engine step. An admitted
request runs its search (any method, any FastTTS technique) in its own worker thread against
a `GeneratorView` of the shared engine (`fasttts.serve.hub`), so the engine batches the
branches of all running requests together; the verifier is shared under a lock.

A request runs at most `request_timeout_s`; past it, it is cancelled (its sequences aborted,
its blocks freed). The queue is bounded (`max_queue`; more requests are refused).

With the memory planner on (FastTTS section 4.3.1, re-planned "upon system state changes"),
the batch caps follow the requests searching now: when one starts or ends, the planner plans
for N = the sum of their n (the other workload terms from the one with the largest n, with the
path lengths and search trees measured on finished requests) and B_dec / B_pre are set between
two engine steps. The KV split stays as the server started: resizing would rebuild the engines
under running requests.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from pydantic import ValidationError

from fasttts.beam import Beam
from fasttts.config import RuntimeConfig, SearchConfig
from fasttts.runtime.loop import SearchRunner
from fasttts.runtime.memory_planner import PlanError
from fasttts.serve.hub import EngineHub, GeneratorView, RequestCancelled
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["Job", "LockedVerifier", "QueueFull", "Scheduler"]


class QueueFull(RuntimeError):
    """The request queue is full (HTTP 429)."""


class _Pending:
    def __init__(self, requests: list[ScoreRequest]):
        self.requests = requests
        self.scores: list[list[float]] | None = None
        self.error: BaseException | None = None


class LockedVerifier(Verifier):
    """The verifier shared by concurrent searches, with their calls batched together.

    One scoring call runs at a time, and none while the generator steps when given the hub's
    `device_lock`. Calls that arrive while the device is busy wait together; the first of
    them to get the device scores all of their requests in one batch (the verifier's own
    continuous batching across requests), and each caller gets its own scores back. `inner`
    can be replaced (an engine restart).

    Attributes:
        num_calls: scoring calls made on the inner verifier.
        num_merged: calls that were served by another caller's batch.
    """

    def __init__(self, inner: Verifier, lock: threading.Lock | None = None):
        self.inner = inner
        self.name = inner.name
        self.needs_logprobs = inner.needs_logprobs
        self._lock = lock or threading.Lock()
        self._mu = threading.Lock()
        self._pending: list[_Pending] = []
        self.num_calls = 0
        self.num_merged = 0

    def cache_stats(self):
        return self.inner.cache_stats()

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        mine = _Pending(requests)
        with self._mu:
            self._pending.append(mine)
        with self._lock:
            with self._mu:
                batch, self._pending = self._pending, []
            if batch:  # empty: an earlier caller's batch held ours
                flat = [r for p in batch for r in p.requests]
                try:
                    scores = self.inner.score(flat) if flat else []
                except BaseException as exc:  # noqa: BLE001 - every caller of the batch sees it
                    for p in batch:
                        p.error = exc
                else:
                    k = 0
                    for p in batch:
                        p.scores, k = scores[k:k + len(p.requests)], k + len(p.requests)
                self.num_calls += 1
                self.num_merged += len(batch) - 1
        if mine.error is not None:
            raise mine.error
        return mine.scores

    def now(self) -> float:
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()

@dataclass
class Job:
    """One request's search.

    Attributes:
        problem: the problem text.
        search: its search configuration.
        agg_strategy: step-score aggregation.
        on_progress: called as on_progress(iteration, kept beams) from the worker thread.
        future: resolves to the `SearchResult` (or the error).
        id: request id (set on submission).
        submitted, started: wall-clock times (s, time.monotonic).
        model: the served model name the request asked for (responses echo it).
    """

    problem: str
    search: SearchConfig
    agg_strategy: str = "last"
    on_progress: Callable[[int, list[Beam]], None] | None = None
    future: Future = field(default_factory=Future)
    id: str = ""
    submitted: float = 0.0
    started: float | None = None
    view: GeneratorView | None = None
    cancelled: bool = False
    model: str = ""


class Scheduler:
    """Admits queued requests onto the shared engine (module docstring).

    Args:
        hub: the shared generator engine.
        verifier: the shared verifier.
        runtime: FastTTS techniques every search uses.
        max_active: most requests searching at once.
        max_queue: most requests waiting; more are refused with QueueFull.
        request_timeout_s: most seconds a request may search (None = no limit).
        replanner: the memory planner's `Replanner` (None = caps fixed at start).
        config: the server's RunConfig (the replanner's workload is built from it).
        apply_plan: sets a plan's caps on the engines (called with the replanner's plan).
    """

    def __init__(self, hub: EngineHub, verifier: LockedVerifier, runtime: RuntimeConfig,
                 max_active: int = 4, max_queue: int = 64,
                 request_timeout_s: float | None = None, replanner=None, config=None,
                 apply_plan: Callable | None = None):
        self.replanner, self.config, self.apply_plan = replanner, config, apply_plan
        self._replan_lock = threading.Lock()
        self._planned_for: tuple = ()
        self.hub = hub
        self.verifier = verifier
        self.runtime = runtime
        self.max_active = max_active
        self.max_queue = max_queue
        self.request_timeout_s = request_timeout_s
        self._lock = threading.RLock()
        self._queue: deque[Job] = deque()
        self._active: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self.num_finished = 0
        self._closed = False
        hub.after_step = self.admit
        self._watchdog = threading.Thread(target=self._watch, name="fasttts-timeouts",
                                          daemon=True)
        self._watchdog.start()

    @property
    def closed(self) -> bool:
        """Whether `close` was called (new requests are refused, running ones cancelled)."""
        return self._closed

    @property
    def queue_length(self) -> int:
        """Requests waiting for admission."""
        return len(self._queue)

    @property
    def num_active(self) -> int:
        """Requests searching now."""
        return len(self._active)

    def submit(self, job: Job) -> Job:
        """Queue a request; it starts when admitted.

        Raises:
            QueueFull: `max_queue` requests already wait.
        """
        with self._lock:
            if self._closed:
                raise QueueFull("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are waiting (the limit); retry "
                                f"later")
            job.id = f"req-{next(self._ids)}"
            job.submitted = time.monotonic()
            self._queue.append(job)
        self.admit()
        return job

    def cancel(self, job: Job) -> None:
        """Cancel a queued or running request: a queued one never starts; a running one stops
        at its next engine step with all its sequences aborted."""
        with self._lock:
            job.cancelled = True
            if job in self._queue:
                self._queue.remove(job)
                job.future.set_exception(RequestCancelled(f"request {job.id} was cancelled"))
                return
            view = job.view
        if view is not None:
            view.cancel()

    def admit(self) -> None:
        """Start queued requests while there is room (module docstring)."""
        with self._lock:
            while (self._queue and len(self._active) < self.max_active
                   and (not self._active or self._engine_waiting() == 0)):
                job = self._queue.popleft()
                job.view = self.hub.view(job.id)
                job.started = time.monotonic()
                self._active[job.id] = job
                threading.Thread(target=self._work, args=(job,), name=f"fasttts-{job.id}",
                                 daemon=True).start()

    def _engine_waiting(self) -> int:
        with self.hub.cv:
            return self.hub.engine.num_waiting()

    def _replan(self, finished: Job | None = None, result=None) -> None:
        """Record a finished request's lengths and re-plan the caps for the requests
        searching now, when they changed (module docstring)."""
        if self.replanner is None:
            return
        with self._replan_lock:
            if result is not None:
                self.replanner.observe_result(result, finished.search)
            with self._lock:
                searches = {j.id: j.search for j in self._active.values()}
            if not searches or tuple(sorted(searches)) == self._planned_for:
                return
            self._planned_for = tuple(sorted(searches))
            big = max(searches.values(), key=lambda s: s.n)
            total = -(-sum(s.n for s in searches.values()) // big.beam_width) * big.beam_width
            try:
                cfg = self.config.model_copy(
                    update={"search": big.model_copy(update={"n": total})})
                self.replanner.update(cfg, resplit=False)
            except (PlanError, ValidationError):
                return  # the caps in force stay
            self.apply_plan(self.replanner.plan)  # also to an engine restarted meanwhile

    def _work(self, job: Job) -> None:
        result, error = None, None
        try:
            self._replan()
            if job.future.set_running_or_notify_cancel():  # else cancelled while queued
                runner = SearchRunner(job.view, self.verifier, job.search, job.agg_strategy,
                                      self.runtime, on_select=job.on_progress)
                result = runner.run(job.problem, job.id)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting client
            error = exc
        finally:
            # the books first, so a client that sees its answer sees them settled
            job.view.release()
            with self._lock:
                self._active.pop(job.id, None)
                self.num_finished += 1
        self._replan(job, result)
        if not job.future.cancelled():
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)
        self.admit()

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(0.5)
            if self.request_timeout_s is None:
                continue
            now = time.monotonic()
            with self._lock:
                late = [j for j in self._active.values()
                        if j.started is not None and now - j.started > self.request_timeout_s]
            for job in late:
                self.cancel(job)

    def close(self) -> None:
        """Refuse new requests and cancel every queued and running one."""
        with self._lock:
            self._closed = True
            jobs = list(self._queue) + list(self._active.values())
        for job in jobs:
            self.cancel(job)
