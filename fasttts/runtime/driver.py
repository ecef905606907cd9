"""One driver loop: searches are resumable state machines, the driver owns the engines.

A *search* (strategy + runtime techniques, e.g. `fasttts.runtime.loop.SearchRunner.search`)
is a Python generator. It never steps an engine: it yields a *wish*, what it needs next, and
is resumed with the result:

- `Generate(add, abort, step)`: add these sequences to the generator engine and abort those;
  with `step`, resume after the next engine step with this search's `SequenceUpdate`s (the
  ids as the search named them), else resume at once with [].
- `Score(requests)`: score these paths with the PRM; resume with one list of step scores per
  request (`Verifier.score`).

Its return value is the search's result. It reads engine state (context length, batch slots,
waiting sequences, KV statistics, the clock) directly, read-only.

`Driver.advance` is one turn of the loop (FastTTS section 3.1's generate -> verify -> select
rounds of every live search, interleaved):

1. every ready search runs until it wishes something it must wait for; its adds and aborts
   are applied to the engine as it wishes them (priorities: `fasttts.runtime.priorities`);
2. if any search waits for scores, one verifier call scores the requests of all of them
   (batching across searches); otherwise
3. if any search waits for generation, the engine steps once and each update goes to the
   search that owns its sequence.

The driver knows the engine sequences of every search: when a search ends (returns, raises,
is cancelled, or fails with the engine) all of its sequences are aborted before its end is
reported, so no KV block outlives its search.

`fasttts eval` / `solve` run the driver with one search (`Driver.run`); `fasttts serve` with
many (`fasttts.serve.hub`). Nothing assumes step barriers: a search may keep branches
decoding across engine steps and wish `Score` every T engine steps, the seam SART's
branch-level scheduling (SART Algorithm 1) needs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from fasttts.backends.base import GenerationParams, GeneratorBackend, SequenceUpdate
from fasttts.runtime.priorities import engine_priority
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["Driver", "EngineInfo", "Generate", "NewSequence", "Score", "Search", "Task"]


@dataclass(frozen=True)
class NewSequence:
    """A sequence a search wants in the generator engine.

    Attributes:
        seq_id: the search's name for it (unique within the search).
        prompt_token_ids: the whole input: the problem's prompt plus the path so far (tokens).
        params: its sampling parameters.
        rank: its rank within the search (`fasttts.runtime.priorities`).
        speculative: an SBE speculative sequence (ranks after every standard beam).
    """

    seq_id: str
    prompt_token_ids: list[int]
    params: GenerationParams
    rank: int = 0
    speculative: bool = False


@dataclass
class Generate:
    """Wish: add `add`, abort `abort` (seq ids); with `step`, wait for the next engine step.

    Resumed with the `SequenceUpdate`s of the search's sequences since it last got updates
    (with `step`), or [] at once (without)."""

    add: list[NewSequence] = field(default_factory=list)
    abort: list[str] = field(default_factory=list)
    step: bool = True


@dataclass
class Score:
    """Wish: score `requests` with the PRM; resumed with one list of scores per request."""

    requests: list[ScoreRequest]


#: A search as the driver runs it: yields wishes, gets their results, returns its result.
Search = Generator[Generate | Score, Any, Any]

_STEP, _SCORE = "step", "score"


@dataclass(eq=False)
class Task:
    """One live search in the driver.

    Attributes:
        search: the search's generator.
        prefix: put before its seq ids in the engine ("" alone; the request id on a server).
        on_done: called as on_done(task) once it ended (its sequences already aborted).
        arrival: its arrival index (set when the driver takes it).
        result, error: its return value, or the exception it ended with.
        done: whether it ended.

    The other fields are the driver's books: its engine ids, what it waits for, the
    updates it has not taken yet, and what it is resumed with next.
    """

    search: Search
    prefix: str = ""
    on_done: Callable[[Task], None] | None = None
    arrival: int = 0
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    live: set[str] = field(default_factory=set)  # its engine seq ids
    waiting: str | None = None  # _STEP, _SCORE, or None: ready to run
    wish: Any = None  # the Score wish it waits on
    inbox: list[SequenceUpdate] = field(default_factory=list)
    send: Any = None
    throw: BaseException | None = None


class EngineInfo:
    """A driver's generator engine as its searches read it: limits, state and clock; no
    adding, stepping or aborting. It follows the engine the driver holds now (a server
    rebuilds it after a failure); `num_arrivals` counts the driver's searches.

    Args:
        driver: the driver.
    """

    def __init__(self, driver: Driver):
        self._driver = driver

    @property
    def max_model_len(self) -> int:
        """Context limit (tokens)."""
        return self._driver.engine.max_model_len

    @property
    def max_num_seqs(self) -> int:
        """Batch slots of one engine step (sequences)."""
        return self._driver.engine.max_num_seqs

    @property
    def cost(self):
        """The engine's decode-step cost model (`GeneratorBackend.cost`), or None."""
        return self._driver.engine.cost

    @property
    def clock_kind(self) -> str:
        """"wall" or "simulated"."""
        return self._driver.engine.clock_kind

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a chat with the generation prompt appended."""
        return self._driver.engine.encode_chat(messages)

    def decode(self, token_ids: list[int]) -> str:
        """Text of `token_ids`."""
        return self._driver.engine.decode(token_ids)

    def num_waiting(self) -> int:
        """Sequences queued in the engine and not yet running."""
        return self._driver.engine.num_waiting()

    def num_arrivals(self) -> int:
        """Searches the driver has taken so far (SBE stops speculating when it grows)."""
        return self._driver.num_arrivals

    def cache_stats(self):
        """The engine's `CacheStats` (KV blocks, prefix-cache and preemption counters)."""
        return self._driver.engine.cache_stats()

    def now(self) -> float:
        """The engine's clock (s; wall or simulated)."""
        return self._driver.engine.now()


class Driver:
    """The driver loop over one generator engine and one verifier (module docstring).

    Args:
        generator: the generator engine (the driver alone adds, steps and aborts).
        verifier: the PRM (None: searches that never wish `Score`).
        on_engine_error: called with the exception when an engine step raises (a server
            rebuilds the engine); default: every search using the engine ends with it.
        while_scoring: makes the context each verifier call runs in (a server releases its
            engine-state lock there: the generator engine is not touched meanwhile).

    Attributes:
        info: the engine as searches read it (`EngineInfo`).
        num_steps: engine steps run.
        num_arrivals: searches taken so far.
        num_score_calls: verifier calls made.
        num_merged: `Score` wishes served inside another search's verifier call.
        step_time_s, score_time_s: seconds (engine clock) spent in engine steps and in
            verifier calls; while a call runs no search decodes, so score_time_s /
            (step_time_s + score_time_s) is the share of engine time lost to scoring.
        overhead_s: wall seconds of the loop outside `engine.step()` and the verifier's
            calls: the runtime's own work between engine steps (resuming searches, their
            bookkeeping, building and adding requests, aborts, routing updates); see
            `runtime_overhead_frac`.
    """

    def __init__(self, generator: GeneratorBackend, verifier: Verifier | None = None,
                 on_engine_error: Callable[[Exception], None] | None = None,
                 while_scoring: Callable[[], AbstractContextManager] = nullcontext):
        self.engine = generator
        self.verifier = verifier
        self.on_engine_error = on_engine_error
        self.while_scoring = while_scoring
        self.tasks: list[Task] = []
        self._owner: dict[str, Task] = {}
        self._arrivals = itertools.count()
        self.num_steps = self.num_arrivals = self.num_score_calls = self.num_merged = 0
        self.step_time_s = self.score_time_s = 0.0
        self.overhead_s = 0.0
        self._inside_s = 0.0  # wall seconds of this turn inside engine.step() and scoring
        self.info = EngineInfo(self)

    @property
    def sequence_ids(self) -> list[str]:
        """Engine ids of every search's sequences in the engine now."""
        return list(self._owner)

    def add(self, task: Task) -> Task:
        """Take a search; it runs from the next `advance`."""
        task.arrival = next(self._arrivals)
        self.num_arrivals = task.arrival + 1
        self.tasks.append(task)
        return task

    def run(self, search: Search) -> Any:
        """Run one search to its end and return its result (`fasttts eval` / `solve`).

        Raises:
            whatever the search raised (its sequences are aborted first); on an interrupt
            (KeyboardInterrupt) every sequence is aborted and the search closed.
        """
        task = self.add(Task(search))
        try:
            while not task.done:
                self.advance()
        finally:
            if not task.done:
                self.abandon(task)
        if task.error is not None:
            raise task.error
        return task.result

    @property
    def runtime_overhead_frac(self) -> float | None:
        """The share of the generator's loop the runtime spends outside engine steps:
        overhead_s / (overhead_s + step_time_s), the runtime's wall seconds against the
        engine steps' seconds on the engine's clock (wall on vLLM; on the simulator the
        simulated device's, so the fraction is what the runtime would add to that device);
        None before any step."""
        total = self.overhead_s + self.step_time_s
        return self.overhead_s / total if self.num_steps and total > 0 else None

    def advance(self) -> bool:
        """One turn of the loop (module docstring). Returns False when no search had
        anything to do."""
        t0, self._inside_s = time.perf_counter(), 0.0
        try:
            return self._turn()
        finally:
            self.overhead_s += time.perf_counter() - t0 - self._inside_s

    def _turn(self) -> bool:
        ready = [t for t in self.tasks if t.waiting is None]
        for task in ready:
            self._resume(task)
        scoring = [t for t in self.tasks if t.waiting == _SCORE]
        if scoring:
            self._score(scoring)
            return True
        stepping = [t for t in self.tasks if t.waiting == _STEP]
        if stepping:
            self._step(stepping)
            return True
        return bool(ready)

    def cancel(self, task: Task, exc: BaseException) -> None:
        """End a search now with `exc` (thrown into it where it waits); its sequences are
        aborted before `on_done` runs. No-op for a search that already ended."""
        if task.done or task not in self.tasks:
            return
        task.waiting, task.throw = None, exc
        self._resume(task)
        if not task.done:  # it caught the exception and wished on
            task.search.close()
            self._finish(task, None, exc)

    def abandon(self, task: Task) -> None:
        """Close a search without resuming it (an interrupt); its sequences are aborted."""
        try:
            task.search.close()
        finally:
            self._finish(task, None, task.error)

    def fail_engine_users(self, exc: BaseException, abort: bool = True) -> None:
        """End every search with a sequence in the engine, or waiting for a step, with `exc`.
        `abort`: abort their sequences in the engine (False: the engine is gone)."""
        for task in [t for t in self.tasks if t.live or t.waiting == _STEP]:
            if not abort:
                self._forget(task)
            self.cancel(task, exc)

    # ---- the turn --------------------------------------------------------------------------

    def _resume(self, task: Task) -> None:
        """Run a ready search until it waits for a step or for scores, or ends."""
        while True:
            value, exc = task.send, task.throw
            task.send = task.throw = None
            try:
                wish = task.search.throw(exc) if exc is not None else task.search.send(value)
            except StopIteration as stop:
                self._finish(task, stop.value, None)
                return
            except BaseException as err:  # noqa: BLE001 - the search's own error: its result
                self._finish(task, None, err)
                return
            if isinstance(wish, Score):
                task.waiting, task.wish = _SCORE, wish
                return
            if not isinstance(wish, Generate):
                task.throw = TypeError(f"a search yielded {type(wish).__name__}, not a wish")
                continue
            try:
                self._apply(task, wish)
            except Exception as err:  # noqa: BLE001 - e.g. a prompt over the context
                task.throw = err
                continue
            if wish.step:
                task.waiting = _STEP
                return
            task.send = []

    def _apply(self, task: Task, wish: Generate) -> None:
        """Abort, then add, the sequences a search wished (engine ids get its prefix)."""
        gone = [task.prefix + s for s in wish.abort if task.prefix + s in task.live]
        if gone:
            self.engine.abort(gone)
            for eid in gone:
                task.live.discard(eid)
                self._owner.pop(eid, None)
            dropped = set(wish.abort)
            task.inbox = [u for u in task.inbox if u.seq_id not in dropped]
        for seq in wish.add:
            eid = task.prefix + seq.seq_id
            self.engine.add_sequence(eid, seq.prompt_token_ids, seq.params,
                                     priority=engine_priority(seq.rank, task.arrival,
                                                              seq.speculative))
            task.live.add(eid)
            self._owner[eid] = task

    def _score(self, tasks: list[Task]) -> None:
        """One verifier call for the `Score` wishes of `tasks`; each gets its own scores (or
        the call's error)."""
        flat = [r for t in tasks for r in t.wish.requests]
        t0 = self.engine.now() if self.engine is not None else 0.0
        w0 = time.perf_counter()
        try:
            with self.while_scoring():
                scores = self.verifier.score(flat) if flat else []
        except Exception as err:  # noqa: BLE001 - every search of the batch sees it
            for t in tasks:
                t.waiting, t.wish, t.throw = None, None, err
            return
        finally:
            self._inside_s += time.perf_counter() - w0
            self.num_score_calls += bool(flat)
            self.num_merged += max(0, len(tasks) - 1)
            if self.engine is not None:
                self.score_time_s += self.engine.now() - t0
        k = 0
        for t in tasks:
            n = len(t.wish.requests)
            t.waiting, t.wish, t.send, k = None, None, scores[k:k + n], k + n

    def _step(self, tasks: list[Task]) -> None:
        """Step the engine once and route its updates to the searches owning them."""
        t0, w0 = self.engine.now(), time.perf_counter()
        try:
            updates = self.engine.step()
            self._inside_s += time.perf_counter() - w0
            if not updates and self.engine.num_unfinished() == 0 and any(
                    t.live for t in tasks):
                raise RuntimeError("the engine lost its sequences")
        except Exception as exc:  # noqa: BLE001 - the engine failed under its searches
            if self.on_engine_error is None:
                self.fail_engine_users(exc)
            else:
                self.on_engine_error(exc)
            return
        self.num_steps += 1
        self.step_time_s += self.engine.now() - t0
        for up in updates:
            eid = up.seq_id
            task = self._owner.get(eid)
            if task is None:
                continue
            if up.finished:
                del self._owner[eid]
                task.live.discard(eid)
            if task.prefix:  # the engine's update object is the driver's to rename
                up.seq_id = eid[len(task.prefix):]
            task.inbox.append(up)
        for t in tasks:
            t.waiting, t.send, t.inbox = None, t.inbox, []

    def _finish(self, task: Task, result: Any, error: BaseException | None) -> None:
        """A search ended: abort what it left in the engine, then report it."""
        task.done, task.result, task.error = True, result, error
        task.waiting = None
        try:
            if task.live:
                self.engine.abort(sorted(task.live))
        finally:
            self._forget(task)
            if task in self.tasks:
                self.tasks.remove(task)
            if task.on_done is not None:
                task.on_done(task)

    def _forget(self, task: Task) -> None:
        """Drop the books of a search's sequences (they are no longer in the engine)."""
        for eid in task.live:
            self._owner.pop(eid, None)
        task.live.clear()
