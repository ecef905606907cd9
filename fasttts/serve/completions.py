"""The completion endpoints' request path: validate and queue a request, wait for its search
(cancelling it when the client goes away), and answer it in OpenAI's shapes, whole or as
Server-Sent Events (`fasttts.serve.app` documents the endpoints and status codes)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fasttts.eval.metrics import answer_path, precise_goodput, problem_record
from fasttts.runtime.loop import PromptTooLongError, SearchResult
from fasttts.serve.hub import EngineFailure, EngineHub, RequestCancelled
from fasttts.serve.protocol import BadRequest, ServerLimits, error_body, to_search
from fasttts.serve.scheduler import Job, QueueFull, Scheduler

__all__ = ["CompletionHandler", "ServerState", "answer_payload", "error_response"]


@dataclass
class ServerState:
    """What the app serves with.

    Attributes:
        hub: the shared generator engine.
        scheduler: the request scheduler.
        limits: per-request limits and the served model names.
        api_key: bearer token required on every path but /health (None = open; bind to
            127.0.0.1 then, the default).
        allowed_hosts: the host names a request's Host header may name (None = any;
            `fasttts.serve.guard`).
    """

    hub: EngineHub
    scheduler: Scheduler
    limits: ServerLimits
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] | None = None


def error_response(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    """An OpenAI-shaped error response (`fasttts.serve.protocol.error_body`)."""
    return JSONResponse(status_code=status, content=error_body(status, message, kind, param))


#: `CompletionHandler.wait`'s answer when the client went away.
_GONE = object()


def completion_id(kind: str, job: Job) -> str:
    """The response id, the same for every chunk of a stream and the non-streaming body."""
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{job.id}"


def answer_payload(job: Job, result: SearchResult) -> tuple[str, str, dict, dict]:
    """(content, finish_reason, usage, tts block) of a finished search."""
    rec = problem_record(result, None, job.problem)
    answer = rec["answer"]
    chosen = answer_path(rec)
    content = chosen["text"] if chosen else ""
    finish = "stop" if chosen and chosen["finish_reason"] != "length" else "length"
    usage = {"prompt_tokens": result.prompt_tokens,
             "completion_tokens": result.tokens_generated,
             "total_tokens": result.prompt_tokens + result.tokens_generated}
    tts = {
        "method": job.search.method, "n": job.search.n, "answer": answer,
        "answer_rule": rec["answer_rule"], "num_completions": rec["num_completions"],
        "iterations": rec["num_iterations"], "tokens_generated": rec["tokens_generated"],
        "precise_goodput_tok_s": rec["precise_goodput_tok_s"], "clock": rec["clock"],
        "latency_s": rec["latency_s"], "queue_s": (job.started or job.submitted) - job.submitted,
        "generator_time_s": rec["generator_time_s"], "verifier_time_s": rec["verifier_time_s"],
        "stopped_early": rec["stopped_early"], "search_stats": rec["search_stats"],
        "completions": [{k: c[k] for k in ("answer", "score", "num_tokens", "finish_reason")}
                        for c in rec["completions"]],
    }
    return content, finish, usage, tts


class CompletionHandler:
    """The request path of `POST /v1/chat/completions` and `/v1/completions`.

    Args:
        state: the hub, scheduler and limits the app serves with.
        count: counts a finished request by HTTP status.
        metrics: the app's Prometheus metrics (`latency`, `tokens`, `goodput`).
    """

    def __init__(self, state: ServerState, count: Callable[[int], None], metrics: dict):
        self.state, self.count, self.metrics = state, count, metrics

    def fail(self, exc: BaseException, job: Job) -> JSONResponse:
        """The OpenAI error response of a request's failure (status by the error's kind)."""
        scheduler = self.state.scheduler
        if isinstance(exc, (BadRequest, PromptTooLongError)):
            return error_response(400, str(exc), "invalid_request_error",
                                  getattr(exc, "param", None))
        if isinstance(exc, EngineFailure):
            return error_response(503, str(exc), "service_unavailable")
        if isinstance(exc, RequestCancelled) and scheduler.closed:
            return error_response(503, "the server is shutting down; the request was "
                                       "cancelled, retry it elsewhere or later",
                                  "service_unavailable")
        if isinstance(exc, RequestCancelled):
            return error_response(504, f"request timed out after {scheduler.request_timeout_s} "
                                       f"s and was cancelled", "timeout")
        if isinstance(exc, ValueError):
            return error_response(400, str(exc), "invalid_request_error")
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}",
                              "internal_error")

    def start(self, req, on_progress=None) -> Job | JSONResponse:
        """Validate and queue a request: its Job, or the error response (400, 429, 503)."""
        state = self.state
        if not state.hub.available:
            return error_response(503, f"generator engine unavailable: {state.hub.last_error}",
                                  "service_unavailable")
        try:
            problem, search, agg = to_search(req, state.limits)
            return state.scheduler.submit(Job(problem, search, agg, on_progress=on_progress,
                                              model=req.model))
        except BadRequest as e:
            return error_response(400, str(e), "invalid_request_error", e.param)
        except QueueFull as e:
            return error_response(429, str(e), "rate_limit_error")

    def finish(self, job: Job, status: int, result: SearchResult | None = None) -> None:
        """Count an ended request: status, latency (s), tokens and precise goodput."""
        count, m = self.count, self.metrics
        count(status)
        m["latency"].observe(time.monotonic() - job.submitted)
        if result is not None:
            m["tokens"].inc(result.tokens_generated)
            if result.completions:
                m["goodput"].observe(precise_goodput(result.completions))

    @staticmethod
    def body(kind: str, job: Job, content: str, finish: str, usage: dict, tts: dict) -> dict:
        """The non-streaming OpenAI response body (`kind`: "chat" or "text")."""
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": content},
                      "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
            obj = "text_completion"
        return {"id": completion_id(kind, job), "object": obj, "created": int(time.time()),
                "model": job.model, "choices": [choice], "usage": usage, "tts": tts}

    async def serve(self, req, request: Request, kind: str):
        """Answer one completion request (`kind`: "chat" or "text"), streaming or not."""
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def progress(iteration, kept):
            best = max(kept, key=lambda b: b.score, default=None)
            loop.call_soon_threadsafe(events.put_nowait, {
                "iteration": iteration, "live_paths": len(kept),
                "best_score": best.score if best else None,
                "best_path": best.text if best else None})

        started = self.start(req, progress if req.stream else None)
        if isinstance(started, JSONResponse):
            self.count(started.status_code)
            return started
        job = started
        if req.stream:
            job.future.add_done_callback(
                lambda _f: loop.call_soon_threadsafe(events.put_nowait, None))
            # the first iteration's event, or the end: a search that fails before its first
            # iteration (e.g. a prompt over the context) gets an error response, not a stream
            first = await self.wait(asyncio.ensure_future(events.get()), request, job)
            if first is _GONE:
                return Response(status_code=499)
            if first is not None or job.future.exception() is None:
                return StreamingResponse(self.stream(job, kind, events, first),
                                         media_type="text/event-stream")
        elif await self.wait(asyncio.wrap_future(job.future), request, job) is _GONE:
            return Response(status_code=499)
        exc = job.future.exception()
        if exc is not None:
            resp = self.fail(exc, job)
            self.finish(job, resp.status_code)
            return resp
        result = job.future.result()
        content, finish, usage, tts = answer_payload(job, result)
        self.finish(job, 200, result)
        return self.body(kind, job, content, finish, usage, tts)

    async def wait(self, fut: asyncio.Future, request: Request, job: Job):
        """The future's result, or `_GONE` once the client disconnects (the search is then
        cancelled and counted as 499)."""
        while True:
            done, _ = await asyncio.wait({fut}, timeout=0.1)
            if done:
                return fut.result() if fut.exception() is None else None
            if await request.is_disconnected():
                self.state.scheduler.cancel(job)
                fut.cancel()  # nobody will read the result
                self.finish(job, 499)
                return _GONE

    async def stream(self, job: Job, kind: str, queue: asyncio.Queue, event: dict | None):
        """The Server-Sent Events of a streaming request: progress per iteration, the
        answer (or the error), `[DONE]`; a client gone mid-stream cancels the search."""
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

        def chunk(delta: dict, finish=None, **extra) -> str:
            choice = ({"index": 0, "delta": delta, "finish_reason": finish} if kind == "chat"
                      else {"index": 0, "text": delta.get("content", ""),
                            "finish_reason": finish, "logprobs": None})
            body = {"id": completion_id(kind, job), "object": obj, "created": int(time.time()),
                    "model": job.model, "choices": [choice], **extra}
            return f"data: {json.dumps(body)}\n\n"

        try:
            yield chunk({"role": "assistant", "content": ""} if kind == "chat" else {})
            while event is not None:
                yield chunk({}, tts={"progress": event})
                event = await queue.get()
            exc = job.future.exception()
            if exc is not None:
                resp = self.fail(exc, job)
                self.finish(job, resp.status_code)
                yield f"data: {resp.body.decode()}\n\n"
            else:
                result = job.future.result()
                content, finish, usage, tts = answer_payload(job, result)
                self.finish(job, 200, result)
                yield chunk({"content": content}, finish, usage=usage, tts=tts)
            yield "data: [DONE]\n\n"
        finally:
            if not job.future.done():  # the client went away mid-stream
                self.state.scheduler.cancel(job)
                self.finish(job, 499)

