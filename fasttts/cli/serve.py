"""`fasttts serve`: the OpenAI-compatible TTS server (many requests, one engine), its flags
beyond the run's (address, auth, served names, request limits, admission, shutdown), and its
start, ready and goodbye lines (`fasttts.serve.shutdown`)."""

from __future__ import annotations

import argparse
import os
import threading
import time

from fasttts.cli.run_options import add_run_options, check_models, run_config
from fasttts.cli.sizes import parse_size

__all__ = ["add_parser", "server_limits"]

#: The `ServerLimits` fields with a flag (the served names are --served-model-name), and the
#: flags whose names differ from their fields'.
_LIMIT_FLAGS = ("max_n", "max_tokens", "max_prompt_chars", "max_body_bytes")
_LIMIT_NAMES = {"max_tokens": "--max-tokens-limit", "max_body_bytes": "--max-request-bytes"}


def add_parser(sub, parents: list) -> None:
    """Add `serve` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    p = sub.add_parser("serve", parents=parents,
                       help="OpenAI-compatible TTS server (many requests, one engine)")
    _add_serve_options(p)
    add_run_options(p, search=False)
    p.set_defaults(func=_cmd_serve)


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    """The options of `fasttts serve` beyond the run's: address, auth, served names, request
    limits (generated from `ServerLimits`), admission and shutdown."""
    from fasttts.options import add_flags
    from fasttts.serve.protocol import ServerLimits

    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None,
                   help="bearer token clients must send (default: $FASTTTS_API_KEY, else none)")
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="the model names clients may send, as vLLM's flag; responses name the "
                        "requested one (default: the --generator name)")
    add_flags(p, ServerLimits, _LIMIT_FLAGS, flags=_LIMIT_NAMES,
              dests={name: flag[2:].replace("-", "_") for name, flag in _LIMIT_NAMES.items()},
              types={"max_body_bytes": parse_size}, metavars={"max_body_bytes": "SIZE"},
              shown={"max_body_bytes": "1MiB"},
              prefixes=dict.fromkeys(_LIMIT_FLAGS, "request limit: "))
    p.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="on SIGTERM / Ctrl-C, seconds in-flight requests may finish before "
                        "they are cancelled (default: %(default)s)")
    p.add_argument("--max-active-requests", type=int, default=256,
                   help="most requests searching at once, a safety limit on the server's "
                        "memory; requests are admitted by free decode slots (SART's "
                        "branch-level admission) (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="most requests waiting; more get 429 (default: %(default)s)")
    p.add_argument("--request-timeout", type=float, default=1800,
                   help="seconds a request may search before it is cancelled (default: "
                        "%(default)s)")


#: Seconds uvicorn waits, after the drain limit, for the cancelled requests to answer.
_DRAIN_GRACE_S = 5.0


def server_limits(args: argparse.Namespace, cfg):
    """The `fasttts.serve.protocol.ServerLimits` of `fasttts serve`'s flags and its
    `RunConfig` `cfg`: the models are served under the --served-model-name names, else under
    the generator's name (vLLM's convention).

    Raises:
        pydantic.ValidationError: a limit out of range.
    """
    from fasttts.serve.protocol import ServerLimits

    return ServerLimits(served_model_names=tuple(args.served_model_name or (cfg.generator.model,)),
                        max_n=args.max_n, max_tokens=args.max_tokens_limit,
                        max_prompt_chars=args.max_prompt_chars,
                        max_body_bytes=args.max_request_bytes)


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from fasttts.engines.platform_info import describe_platform, run_platform
    from fasttts.serve import build_state
    from fasttts.serve.access_log import logger, start_line
    from fasttts.serve.app import create_app
    from fasttts.serve.shutdown import Shutdown, StoppingServer

    cfg = run_config(args)
    limits = server_limits(args, cfg)
    check_models(cfg)
    api_key = args.api_key or os.environ.get("FASTTTS_API_KEY") or None
    logger.info(start_line(cfg, list(limits.served_model_names), f"http://{args.host}:{args.port}",
                           describe_platform(run_platform(cfg))))
    started = time.monotonic()
    state = build_state(cfg, limits, api_key=api_key, max_active=args.max_active_requests,
                        max_queue=args.max_queue, request_timeout_s=args.request_timeout)
    stop = Shutdown(state.scheduler, args.shutdown_timeout)
    server = StoppingServer(uvicorn.Config(
        create_app(state), host=args.host, port=args.port, log_level="warning",
        timeout_graceful_shutdown=args.shutdown_timeout + _DRAIN_GRACE_S),
        on_ready=lambda url: logger.info(
            f"ready: engines up in {time.monotonic() - started:.1f} s; "
            f"listening on {url} (POST /v1/chat/completions; Ctrl-C stops)"), shutdown=stop)
    threading.Thread(target=stop.drain, args=(server,), name="fasttts-drain",
                     daemon=True).start()
    stop.install()
    try:
        server.run()
    finally:
        stop.cancel_rest()
        state.hub.close()
        state.scheduler.verifier.close()
    goodbye = stop.goodbye()
    if goodbye:
        logger.info(goodbye)
    return 0
