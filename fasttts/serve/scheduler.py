"""The request scheduler: SART's request queue over the shared-engine hub.

SART Algorithm 1 (section 4, lines 11-19): requests wait in a request queue; a free decode
slot goes to a waiting branch first, and only when no branch waits and a slot is free is a
new request admitted (prefilled): `fasttts.serve.admission`. The rule runs in the driver
thread after every turn of the driver loop (so after every engine step, submission and
completion), over the engine's decode slots B (its batch cap, or the memory planner's B_dec).
`max_active` caps the requests searching at once as a safety limit on the server's memory,
not as the admission rule. An admitted request's search (any method, any
FastTTS technique) becomes one more state machine in the server's driver loop
(`fasttts.serve.hub`), so the engine batches the branches of all running requests together
and the verifier scores all of their paths in shared calls; no thread per request.

A request waits and runs at most `request_timeout_s` from its submission; past it, it is
cancelled (taken off the queue, or its sequences aborted and its blocks freed). The queue is
bounded (`max_queue`; more requests are refused).

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
from fasttts.runtime.driver import Task
from fasttts.runtime.loop import DEFAULT_PROBLEM_ID, SearchRunner
from fasttts.runtime.memory_planner import PlanError
from fasttts.serve.admission import BatchState, admits
from fasttts.serve.hub import EngineHub, RequestCancelled
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["Job", "QueueFull", "Scheduler", "SharedVerifier"]


class QueueFull(RuntimeError):
    """The request queue is full (HTTP 429)."""


class SharedVerifier(Verifier):
    """The verifier every search of the server scores with, through the driver loop (which
    batches the scoring of all searches waiting for it into one call, `fasttts.runtime.driver`).
    `inner` is the PRM; a simulated device that restarts whole replaces it.

    Args:
        inner: the PRM.
    """

    def __init__(self, inner: Verifier):
        self.inner = inner
        self.name = inner.name
        self.needs_logprobs = inner.needs_logprobs

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        return self.inner.score(requests)

    def cache_stats(self):
        return self.inner.cache_stats()

    def set_batch_size(self, batch_size: int) -> None:
        self.inner.set_batch_size(batch_size)

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
        on_progress: called as on_progress(iteration, kept beams) from the driver thread.
        future: resolves to the `SearchResult` (or the error).
        id: request id (set on submission).
        submitted, started: wall-clock times (s, time.monotonic).
        model: the served model name the request asked for (responses echo it).
        task: its search in the driver loop, once admitted.
        cancelled: whether it was cancelled.
    """

    problem: str
    search: SearchConfig
    agg_strategy: str = "last"
    on_progress: Callable[[int, list[Beam]], None] | None = None
    future: Future = field(default_factory=Future)
    id: str = ""
    submitted: float = 0.0
    started: float | None = None
    task: Task | None = None
    cancelled: bool = False
    model: str = ""


def _seed_key(job: Job) -> str:
    """The problem id that keys a request's random streams: with a `seed` in the request, the
    library's default id, so the same request and seed give the same answer every time, the
    same as `fasttts solve --seed` with the same options (as vLLM's `seed` makes a request
    reproducible); without one, the request id, so repeated requests sample afresh."""
    return DEFAULT_PROBLEM_ID if "seed" in job.search.model_fields_set else job.id


class Scheduler:
    """Admits queued requests onto the shared engine (module docstring).

    Args:
        hub: the shared generator engine.
        verifier: the shared verifier.
        runtime: FastTTS techniques every search uses.
        max_active: most requests searching at once (a safety limit; admission is by free
            decode slots, `fasttts.serve.admission`).
        max_queue: most requests waiting; more are refused with QueueFull.
        request_timeout_s: most seconds a request may wait and search, from its submission
            (None = no limit).
        replanner: the memory planner's `Replanner` (None = caps fixed at start).
        config: the server's RunConfig (the replanner's workload is built from it).
        apply_plan: sets a plan's caps on the engines (called with the replanner's plan).
    """

    def __init__(self, hub: EngineHub, verifier: SharedVerifier, runtime: RuntimeConfig,
                 max_active: int = 256, max_queue: int = 64,
                 request_timeout_s: float | None = None, replanner=None, config=None,
                 apply_plan: Callable | None = None):
        self.replanner, self.config, self.apply_plan = replanner, config, apply_plan
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
        """Queue a request; it starts when admitted (in the driver thread, within one turn).

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
        self.hub.poke()
        return job

    def cancel(self, job: Job) -> None:
        """Cancel a queued or running request: a queued one never starts; a running one stops
        before the next engine step with all its sequences aborted."""
        with self._lock:
            job.cancelled = True
            if job in self._queue:
                self._queue.remove(job)
                job.future.set_exception(RequestCancelled(f"request {job.id} was cancelled"))
                return
            task = job.task
        if task is not None:
            self.hub.cancel(task, RequestCancelled(f"request {job.id} was cancelled"))

    def admit(self) -> None:
        """Start queued requests while there is room (module docstring); runs in the driver
        thread (`EngineHub.after_step`)."""
        if not self._queue:  # the common case after an engine step: no lock taken
            return
        with self._lock:
            incoming = 0
            while self._queue and admits(self._batch_state(incoming)):
                job = self._queue.popleft()
                incoming += job.search.n
                job.started = time.monotonic()
                self._active[job.id] = job
                if not job.future.set_running_or_notify_cancel():  # cancelled while queued
                    self._settle(job)
                    continue
                runner = SearchRunner(self.hub.info, self.verifier, job.search,
                                      job.agg_strategy, self.runtime, on_select=job.on_progress)
                job.task = self.hub.start(job.id, runner.search(job.problem, _seed_key(job)),
                                          on_start=self._replan,
                                          on_done=lambda task, job=job: self._done(job, task))

    def _batch_state(self, incoming: int) -> BatchState:
        """The engine's slots and sequences now (read under the hub's lock), with `incoming`
        branches of requests admitted in this round (not in the engine yet)."""
        with self.hub.cv:
            engine = self.hub.engine
            return BatchState(slots=engine.max_num_seqs, in_engine=engine.num_unfinished(),
                              waiting=engine.num_waiting(), incoming=incoming,
                              active=len(self._active), max_active=self.max_active)

    def _replan(self, finished: Job | None = None, result=None) -> None:
        """Record a finished request's lengths and re-plan the caps for the requests
        searching now, when they changed (module docstring); runs in the driver thread."""
        if self.replanner is None:
            return
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

    def _settle(self, job: Job) -> None:
        """Take an ended request off the books."""
        with self._lock:
            self._active.pop(job.id, None)
            self.num_finished += 1

    def _done(self, job: Job, task: Task) -> None:
        """A request's search ended in the driver (its sequences already aborted): the
        books first, so a client that sees its answer sees them settled; then the answer."""
        self._settle(job)
        result = task.result if task.error is None else None
        self._replan(job, result)
        if not job.future.cancelled():
            if task.error is not None:
                job.future.set_exception(task.error)
            else:
                job.future.set_result(result)

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(0.5)
            if self.request_timeout_s is None:
                continue
            now = time.monotonic()
            with self._lock:
                late = [j for j in (*self._queue, *self._active.values())
                        if now - j.submitted > self.request_timeout_s]
            for job in late:
                self.cancel(job)

    def close(self) -> None:
        """Refuse new requests and cancel every queued and running one."""
        with self._lock:
            self._closed = True
            jobs = list(self._queue) + list(self._active.values())
        for job in jobs:
            self.cancel(job)
