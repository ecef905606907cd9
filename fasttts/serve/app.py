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
own 404 / 405 too; a path with a trailing slash is a 404, not a redirect): 400 for a
malformed body (each bad field named; a body that is not JSON says where it stops being
JSON), as vLLM's OpenAI server answers request validation errors, and 400 for a request the
server cannot serve, 401 without the bearer token (when one is
configured; on every path but `/health`, so `/docs` and `/openapi.json` too), 403 for a Host
header outside the allowed hosts, 413 for a body over the size limit (all checked before the
body is read, `fasttts.serve.guard`), 429 when the queue is full, 503 when
the engine failed under the request (it is restarted), 504 past the request timeout, 500 for
a server bug (counted in `fasttts_requests_total` like every other status). A streaming
request that fails before its first search iteration gets the same error response as a
non-streaming one, not a 200 stream. A client that disconnects has its search cancelled and
its KV blocks freed within one engine step.

Models are served under vLLM's names: `--served-model-name` (one or more), else the
generator's name as configured; responses name the model the request asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)
from starlette.exceptions import HTTPException

from fasttts.serve.access_log import AccessLog
from fasttts.serve.completions import CompletionHandler, ServerState, error_response
from fasttts.serve.guard import RequestGuard
from fasttts.serve.protocol import ChatCompletionRequest, CompletionRequest

__all__ = ["ServerState", "create_app"]


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
        ("fasttts_runtime_overhead_fraction", "the driver loop's wall seconds outside engine "
         "steps and verifier calls over those plus engine-step seconds, since start (NaN "
         "before the first step)", lambda: _or_nan(hub.driver.runtime_overhead_frac)),
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


def _or_nan(value: float | None) -> float:
    """A gauge's value: NaN for "not measured yet" (Prometheus' convention)."""
    return float("nan") if value is None else value


def _install_error_handlers(app: FastAPI, count: Callable[[int], None]) -> None:
    """OpenAI-shaped errors for FastAPI's own 404 / 405 / 400, its request validation errors
    (400, as vLLM's server: FastAPI's own would be 422) and for server bugs (500), each counted
    by status."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError):
        count(400)
        errors = exc.errors()
        if errors and errors[0].get("type") == "json_invalid":  # loc: ("body", char offset)
            why = (errors[0].get("ctx") or {}).get("error", "not JSON")
            return error_response(400, f"invalid request: the body is not valid JSON ({why} "
                                       f"at character {errors[0]['loc'][-1]})",
                                  "invalid_request_error")
        parts = []
        for err in errors:
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {err.get('msg')}")
        return error_response(400, "invalid request: " + "; ".join(parts), "invalid_request_error",
                              parts[0].split(":")[0] if parts else None)

    @app.exception_handler(HTTPException)
    async def _http(req: Request, exc: HTTPException):
        count(exc.status_code)
        message = {404: f"no such endpoint: {req.method} {req.url.path}",
                   405: f"method {req.method} is not allowed on {req.url.path}"}.get(
            exc.status_code, str(exc.detail))
        resp = error_response(exc.status_code, message, "invalid_request_error")
        resp.headers.update(exc.headers or {})
        return resp

    @app.exception_handler(Exception)
    async def _bug(_req: Request, exc: Exception):
        count(500)
        return error_response(500, f"internal error: {type(exc).__name__}", "internal_error")


def create_app(state: ServerState) -> FastAPI:
    """The FastAPI app over a running hub and scheduler (module docstring), behind the
    Host, body-size and token guard (`fasttts.serve.guard`)."""
    app = FastAPI(title="fasttts", description="test-time scaling server (OpenAI-compatible)",
                  redirect_slashes=False)
    registry, m = _metrics(state)
    names = state.limits.served_model_names

    def count(status: int) -> None:
        m["requests"].labels(str(status)).inc()

    _install_error_handlers(app, count)
    app.add_middleware(RequestGuard, max_body_bytes=state.limits.max_body_bytes,
                       api_key=state.api_key, allowed_hosts=state.allowed_hosts,
                       on_reject=count)
    app.add_middleware(AccessLog)  # outermost: one log line per request, 401 / 413 included

    @app.get("/health")
    async def health():
        if not state.hub.available:
            return error_response(503, f"generator engine unavailable: {state.hub.last_error}",
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

    handler = CompletionHandler(state, count, m)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest, request: Request):
        return await handler.serve(req, request, "chat")

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        return await handler.serve(req, request, "text")

    return app
