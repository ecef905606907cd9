"""`fasttts serve`: the OpenAI-compatible HTTP server (FastAPI).

Endpoints:

- `POST /v1/chat/completions`, `POST /v1/completions`: OpenAI requests plus a `tts` object
  (`fasttts.serve.protocol`). The response is OpenAI's, with the chosen path as the content
  and a `tts` block: the answer and how it was chosen, tokens, iterations, precise goodput,
  latency split into queue / generator / verifier time, and per-completion answers and scores.
  With `"stream": true` the server sends Server-Sent Events: one `chat.completion.chunk` per
  search iteration with a `tts.progress` block (iteration, live paths, best path so far), then
  the answer chunk with usage and the `tts` block, then `data: [DONE]`.
- `GET /v1/models`, `GET /health` (503 while the engine cannot be rebuilt), `GET /metrics`
  (Prometheus: queue length, running requests and sequences, KV blocks used and usage,
  prefix-cache hit rate, engine restarts, request and token counters, latency and goodput
  histograms).

Every error uses OpenAI's shape `{"error": {"message", "type", "param", "code"}}` (FastAPI's
own 404 / 405 too): 422 for a malformed body (each bad field named), 400 for a request the
server cannot serve, 401 without the bearer token (when one is configured; on every path
but `/health`, so `/docs` and `/openapi.json` too), 413 for a body over the size limit (both
checked before the body is read, `fasttts.serve.guard`), 429 when the queue is full, 503 when
the engine failed under the request (it is restarted), 504 past the request timeout, 500 for
a server bug (counted in `fasttts_requests_total` like every other status). A streaming
request that fails before its first search iteration gets the same error response as a
non-streaming one, not a 200 stream. A client that disconnects has its search cancelled and
its KV blocks freed within one engine step.

Models are served under vLLM's names: `--served-model-name` (one or more), else the
generator's name as configured; responses name the model the request asked for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)
from starlette.exceptions import HTTPException

from fasttts.eval.metrics import precise_goodput, problem_record
from fasttts.runtime.loop import PromptTooLongError, SearchResult
from fasttts.serve.access_log import AccessLog
from fasttts.serve.guard import RequestGuard
from fasttts.serve.hub import EngineFailure, EngineHub, RequestCancelled
from fasttts.serve.protocol import (BadRequest, ChatCompletionRequest, CompletionRequest,
                                    ServerLimits, error_body, to_search)
from fasttts.serve.scheduler import Job, QueueFull, Scheduler

__all__ = ["ServerState", "create_app"]


@dataclass
class ServerState:
    """What the app serves with.

    Attributes:
        hub: the shared generator engine.
        scheduler: the request scheduler.
        limits: per-request limits and the served model names.
        api_key: bearer token required on every path but /health (None = open; bind to
            127.0.0.1 then, the default).
    """

    hub: EngineHub
    scheduler: Scheduler
    limits: ServerLimits
    api_key: str | None = None


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message, kind, param))


#: `_wait`'s answer when the client went away.
_GONE = object()


def _completion_id(kind: str, job: Job) -> str:
    """The response id, the same for every chunk of a stream and the non-streaming body."""
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{job.id}"


def _metrics(state: ServerState) -> tuple[CollectorRegistry, dict]:
    reg = CollectorRegistry()
    hub, sched = state.hub, state.scheduler

    def cache(attr):
        def read():
            with hub.cv:
                st = hub.engine.cache_stats()
            return {"used": st.num_blocks_used,
                    "usage": st.num_blocks_used / st.num_blocks if st.num_blocks else 0.0,
                    "hit": st.prefix_cache_hit_rate}[attr]
        return read

    for name, doc, fn in (
        ("fasttts_queue_length", "requests waiting for admission", lambda: sched.queue_length),
        ("fasttts_running_requests", "requests searching now", lambda: sched.num_active),
        ("fasttts_running_sequences", "generator sequences (beams) in the engine",
         lambda: hub.num_sequences),
        ("fasttts_kv_blocks_used", "generator KV blocks held by sequences", cache("used")),
        ("fasttts_kv_cache_usage", "fraction of generator KV blocks held", cache("usage")),
        ("fasttts_prefix_cache_hit_rate", "generator prefix-cache hit rate (cumulative)",
         cache("hit")),
        ("fasttts_engine_restarts", "generator engines rebuilt after a failure",
         lambda: hub.num_restarts),
        ("fasttts_verifier_calls", "verifier batches run", lambda: hub.driver.num_score_calls),
        ("fasttts_verifier_merged_calls", "verifier calls served inside another request's batch",
         lambda: hub.driver.num_merged),
    ):
        Gauge(name, doc, registry=reg).set_function(fn)
    return reg, {
        "requests": Counter("fasttts_requests", "finished requests by HTTP status",
                            ["status"], registry=reg),
        "tokens": Counter("fasttts_generated_tokens", "tokens generated (all paths)",
                          registry=reg),
        "latency": Histogram("fasttts_request_latency_seconds", "end-to-end request latency",
                             buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200),
                             registry=reg),
        "goodput": Histogram("fasttts_request_goodput_tokens_per_second",
                             "precise goodput per request (tokens/s)",
                             buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=reg),
    }


def _answer_payload(job: Job, result: SearchResult) -> tuple[str, str, dict, dict]:
    """(content, finish_reason, usage, tts block) of a finished search."""
    rec = problem_record(result, None, job.problem)
    answer = rec["answer"]
    chosen = next((c for c in sorted(rec["completions"], key=lambda c: -c["score"])
                   if c["answer"] == answer), None)
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


def _install_error_handlers(app: FastAPI, count: Callable[[int], None]) -> None:
    """OpenAI-shaped errors for FastAPI's own 422 / 404 / 405 / 400 and for server bugs (500),
    each counted by status."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {err.get('msg')}")
        count(422)
        return _error(422, "invalid request: " + "; ".join(parts), "invalid_request_error",
                      parts[0].split(":")[0] if parts else None)

    @app.exception_handler(HTTPException)
    async def _http(req: Request, exc: HTTPException):
        count(exc.status_code)
        message = {404: f"no such endpoint: {req.method} {req.url.path}",
                   405: f"method {req.method} is not allowed on {req.url.path}"}.get(
            exc.status_code, str(exc.detail))
        resp = _error(exc.status_code, message, "invalid_request_error")
        resp.headers.update(exc.headers or {})
        return resp

    @app.exception_handler(Exception)
    async def _bug(_req: Request, exc: Exception):
        count(500)
        return _error(500, f"internal error: {type(exc).__name__}", "internal_error")


def create_app(state: ServerState) -> FastAPI:
    """The FastAPI app over a running hub and scheduler (module docstring), behind the
    body-size and token guard (`fasttts.serve.guard`)."""
    app = FastAPI(title="fasttts", description="test-time scaling server (OpenAI-compatible)")
    registry, m = _metrics(state)
    names = state.limits.served_model_names

    def count(status: int) -> None:
        m["requests"].labels(str(status)).inc()

    _install_error_handlers(app, count)
    app.add_middleware(RequestGuard, max_body_bytes=state.limits.max_body_bytes,
                       api_key=state.api_key, on_reject=count)
    app.add_middleware(AccessLog)  # outermost: one log line per request, 401 / 413 included

    @app.get("/health")
    async def health():
        if not state.hub.available:
            return _error(503, f"generator engine unavailable: {state.hub.last_error}",
                          "service_unavailable")
        return {"status": "ok", "engine_restarts": state.hub.num_restarts,
                "running_requests": state.scheduler.num_active,
                "queue_length": state.scheduler.queue_length}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                            "owned_by": "fasttts"} for name in names]}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def _fail(exc: BaseException, job: Job) -> JSONResponse:
        if isinstance(exc, (BadRequest, PromptTooLongError)):
            return _error(400, str(exc), "invalid_request_error", getattr(exc, "param", None))
        if isinstance(exc, EngineFailure):
            return _error(503, str(exc), "service_unavailable")
        if isinstance(exc, RequestCancelled) and state.scheduler.closed:
            return _error(503, "the server is shutting down; the request was cancelled, retry "
                               "it elsewhere or later", "service_unavailable")
        if isinstance(exc, RequestCancelled):
            return _error(504, f"request timed out after {state.scheduler.request_timeout_s} s "
                               f"and was cancelled", "timeout")
        if isinstance(exc, ValueError):
            return _error(400, str(exc), "invalid_request_error")
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    def _start(req, on_progress=None) -> Job | JSONResponse:
        if not state.hub.available:
            return _error(503, f"generator engine unavailable: {state.hub.last_error}",
                          "service_unavailable")
        try:
            problem, search, agg = to_search(req, state.limits)
            return state.scheduler.submit(Job(problem, search, agg, on_progress=on_progress,
                                              model=req.model))
        except BadRequest as e:
            return _error(400, str(e), "invalid_request_error", e.param)
        except QueueFull as e:
            return _error(429, str(e), "rate_limit_error")

    def _finish(job: Job, status: int, result: SearchResult | None = None) -> None:
        count(status)
        m["latency"].observe(time.monotonic() - job.submitted)
        if result is not None:
            m["tokens"].inc(result.tokens_generated)
            if result.completions:
                m["goodput"].observe(precise_goodput(result.completions))

    def _body(kind: str, job: Job, content: str, finish: str, usage: dict, tts: dict) -> dict:
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": content},
                      "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
            obj = "text_completion"
        return {"id": _completion_id(kind, job), "object": obj, "created": int(time.time()),
                "model": job.model, "choices": [choice], "usage": usage, "tts": tts}

    async def _serve(req, request: Request, kind: str):
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def progress(iteration, kept):
            best = max(kept, key=lambda b: b.score, default=None)
            loop.call_soon_threadsafe(events.put_nowait, {
                "iteration": iteration, "live_paths": len(kept),
                "best_score": best.score if best else None,
                "best_path": best.text if best else None})

        started = _start(req, progress if req.stream else None)
        if isinstance(started, JSONResponse):
            count(started.status_code)
            return started
        job = started
        if req.stream:
            job.future.add_done_callback(
                lambda _f: loop.call_soon_threadsafe(events.put_nowait, None))
            # the first iteration's event, or the end: a search that fails before its first
            # iteration (e.g. a prompt over the context) gets an error response, not a stream
            first = await _wait(asyncio.ensure_future(events.get()), request, job)
            if first is _GONE:
                return Response(status_code=499)
            if first is not None or job.future.exception() is None:
                return StreamingResponse(_stream(job, kind, events, first),
                                         media_type="text/event-stream")
        elif await _wait(asyncio.wrap_future(job.future), request, job) is _GONE:
            return Response(status_code=499)
        exc = job.future.exception()
        if exc is not None:
            resp = _fail(exc, job)
            _finish(job, resp.status_code)
            return resp
        result = job.future.result()
        content, finish, usage, tts = _answer_payload(job, result)
        _finish(job, 200, result)
        return _body(kind, job, content, finish, usage, tts)

    async def _wait(fut: asyncio.Future, request: Request, job: Job):
        """The future's result, or `_GONE` once the client disconnects (the search is then
        cancelled and counted as 499)."""
        while True:
            done, _ = await asyncio.wait({fut}, timeout=0.1)
            if done:
                return fut.result() if fut.exception() is None else None
            if await request.is_disconnected():
                state.scheduler.cancel(job)
                fut.cancel()  # nobody will read the result
                _finish(job, 499)
                return _GONE

    async def _stream(job: Job, kind: str, queue: asyncio.Queue, event: dict | None):
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

        def chunk(delta: dict, finish=None, **extra) -> str:
            choice = ({"index": 0, "delta": delta, "finish_reason": finish} if kind == "chat"
                      else {"index": 0, "text": delta.get("content", ""),
                            "finish_reason": finish, "logprobs": None})
            body = {"id": _completion_id(kind, job), "object": obj, "created": int(time.time()),
                    "model": job.model, "choices": [choice], **extra}
            return f"data: {json.dumps(body)}\n\n"

        try:
            yield chunk({"role": "assistant", "content": ""} if kind == "chat" else {})
            while event is not None:
                yield chunk({}, tts={"progress": event})
                event = await queue.get()
            exc = job.future.exception()
            if exc is not None:
                resp = _fail(exc, job)
                _finish(job, resp.status_code)
                yield f"data: {resp.body.decode()}\n\n"
            else:
                result = job.future.result()
                content, finish, usage, tts = _answer_payload(job, result)
                _finish(job, 200, result)
                yield chunk({"content": content}, finish, usage=usage, tts=tts)
            yield "data: [DONE]\n\n"
        finally:
            if not job.future.done():  # the client went away mid-stream
                state.scheduler.cancel(job)
                _finish(job, 499)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest, request: Request):
        return await _serve(req, request, "chat")

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        return await _serve(req, request, "text")

    return app
