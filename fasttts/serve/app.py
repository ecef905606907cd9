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

Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`: 422 for a
malformed body (each bad field named), 400 for a request the server cannot serve, 401 without
the bearer token (when one is configured), 429 when the queue is full, 503 when the engine
failed under the request (it is restarted), 504 past the request timeout. A client that
disconnects has its search cancelled and its KV blocks freed within one engine step.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)

from fasttts.eval.metrics import problem_record
from fasttts.runtime.loop import PromptTooLongError, SearchResult
from fasttts.serve.access_log import AccessLog
from fasttts.serve.hub import EngineFailure, EngineHub, RequestCancelled
from fasttts.serve.protocol import (BadRequest, ChatCompletionRequest, CompletionRequest,
                                    ServerLimits, to_search)
from fasttts.serve.scheduler import Job, QueueFull, Scheduler

__all__ = ["ServerState", "create_app"]


@dataclass
class ServerState:
    """What the app serves with.

    Attributes:
        hub: the shared generator engine.
        scheduler: the request scheduler.
        limits: per-request limits and the served model name.
        api_key: bearer token required on /v1/* and /metrics (None = open; bind to
            127.0.0.1 then, the default).
    """

    hub: EngineHub
    scheduler: Scheduler
    limits: ServerLimits
    api_key: str | None = None


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": kind, "param": param, "code": status}})


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
        ("fasttts_verifier_calls", "verifier batches run", lambda: sched.verifier.num_calls),
        ("fasttts_verifier_merged_calls", "verifier calls served inside another request's batch",
         lambda: sched.verifier.num_merged),
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


def _answer_payload(job: Job, result: SearchResult, served: str) -> tuple[str, str, dict, dict]:
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


def create_app(state: ServerState) -> FastAPI:
    """The FastAPI app over a running hub and scheduler (module docstring)."""
    app = FastAPI(title="fasttts", description="test-time scaling server (OpenAI-compatible)")
    app.add_middleware(AccessLog)  # one log line per request (fasttts.serve.access_log)
    registry, m = _metrics(state)
    served = state.limits.served_model_name

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {err.get('msg')}")
        m["requests"].labels("422").inc()
        return _error(422, "invalid request: " + "; ".join(parts), "invalid_request_error",
                      parts[0].split(":")[0] if parts else None)

    class _Unauthorized(Exception):
        pass

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(_req: Request, _exc: _Unauthorized):
        m["requests"].labels("401").inc()
        return _error(401, "missing or wrong bearer token (Authorization: Bearer KEY)",
                      "authentication_error")

    async def authorized(request: Request) -> None:
        # A dependency, not an HTTP middleware: Starlette's BaseHTTPMiddleware hides client
        # disconnects from the endpoint, and cancellation on disconnect needs them.
        if state.api_key and not secrets.compare_digest(
                request.headers.get("authorization", ""), f"Bearer {state.api_key}"):
            raise _Unauthorized()

    guard = [Depends(authorized)]

    @app.get("/health")
    async def health():
        if not state.hub.available:
            return _error(503, f"generator engine unavailable: {state.hub.last_error}",
                          "service_unavailable")
        return {"status": "ok", "engine_restarts": state.hub.num_restarts,
                "running_requests": state.scheduler.num_active,
                "queue_length": state.scheduler.queue_length}

    @app.get("/v1/models", dependencies=guard)
    async def models():
        return {"object": "list", "data": [{"id": served, "object": "model", "created": 0,
                                            "owned_by": "fasttts"}]}

    @app.get("/metrics", dependencies=guard)
    async def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def _fail(exc: BaseException, job: Job) -> JSONResponse:
        if isinstance(exc, (BadRequest, PromptTooLongError)):
            return _error(400, str(exc), "invalid_request_error", getattr(exc, "param", None))
        if isinstance(exc, EngineFailure):
            return _error(503, str(exc), "service_unavailable")
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
            return state.scheduler.submit(Job(problem, search, agg, on_progress=on_progress))
        except BadRequest as e:
            return _error(400, str(e), "invalid_request_error", e.param)
        except QueueFull as e:
            return _error(429, str(e), "rate_limit_error")

    def _finish(job: Job, status: int, result: SearchResult | None = None) -> None:
        m["requests"].labels(str(status)).inc()
        m["latency"].observe(time.monotonic() - job.submitted)
        if result is not None:
            m["tokens"].inc(result.tokens_generated)
            if result.completions:
                from fasttts.eval.metrics import precise_goodput

                m["goodput"].observe(precise_goodput(result.completions))

    def _body(kind: str, job: Job, content: str, finish: str, usage: dict, tts: dict) -> dict:
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": content},
                      "finish_reason": finish}
            obj, prefix = "chat.completion", "chatcmpl"
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
            obj, prefix = "text_completion", "cmpl"
        return {"id": f"{prefix}-{job.id}", "object": obj, "created": int(time.time()),
                "model": served, "choices": [choice], "usage": usage, "tts": tts}

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
            m["requests"].labels(str(started.status_code)).inc()
            return started
        job = started
        if req.stream:
            job.future.add_done_callback(
                lambda _f: loop.call_soon_threadsafe(events.put_nowait, None))
            return StreamingResponse(_stream(job, kind, events), media_type="text/event-stream")
        fut = asyncio.wrap_future(job.future)
        while True:
            done, _ = await asyncio.wait({fut}, timeout=0.1)
            if done:
                break
            if await request.is_disconnected():
                state.scheduler.cancel(job)
                fut.cancel()  # nobody will read the result
                _finish(job, 499)
                return Response(status_code=499)
        exc = fut.exception()
        if exc is not None:
            resp = _fail(exc, job)
            _finish(job, resp.status_code)
            return resp
        result = fut.result()
        content, finish, usage, tts = _answer_payload(job, result, served)
        _finish(job, 200, result)
        return _body(kind, job, content, finish, usage, tts)

    async def _stream(job: Job, kind: str, queue: asyncio.Queue):
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

        def chunk(delta: dict, finish=None, **extra) -> str:
            choice = ({"index": 0, "delta": delta, "finish_reason": finish} if kind == "chat"
                      else {"index": 0, "text": delta.get("content", ""),
                            "finish_reason": finish, "logprobs": None})
            body = {"id": f"{kind}-{job.id}", "object": obj, "created": int(time.time()),
                    "model": served, "choices": [choice], **extra}
            return f"data: {json.dumps(body)}\n\n"

        try:
            yield chunk({"role": "assistant", "content": ""} if kind == "chat" else {})
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield chunk({}, tts={"progress": event})
            exc = job.future.exception()
            if exc is not None:
                resp = _fail(exc, job)
                _finish(job, resp.status_code)
                yield f"data: {resp.body.decode()}\n\n"
            else:
                result = job.future.result()
                content, finish, usage, tts = _answer_payload(job, result, served)
                _finish(job, 200, result)
                yield chunk({"content": content}, finish, usage=usage, tts=tts)
            yield "data: [DONE]\n\n"
        finally:
            if not job.future.done():  # the client went away mid-stream
                state.scheduler.cancel(job)
                _finish(job, 499)

    @app.post("/v1/chat/completions", dependencies=guard)
    async def chat(req: ChatCompletionRequest, request: Request):
        return await _serve(req, request, "chat")

    @app.post("/v1/completions", dependencies=guard)
    async def completions(req: CompletionRequest, request: Request):
        return await _serve(req, request, "text")

    return app
