"""`fasttts serve`: the OpenAI-compatible TTS server (many requests, one engine), its flags
beyond the run's (address, auth, served names, request limits, admission, shutdown), and its
start, ready and goodbye lines (`fasttts.serve.shutdown`).

Every flag is checked when it is parsed (one `error:` line, exit 2): no value switches a
guard off (`--api-key ""`, `--max-queue 0`, a timeout of 0 or nan) or binds another address
than the one given (`--host ""`, `--port 99999`). The address is bound before the engines
start, so an address in use or a host that does not resolve is reported at once.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time

from fasttts.cli.run_options import add_run_options, check_models, run_config, techniques_on
from fasttts.cli.sizes import PORT, POSITIVE_INT, number, parse_size

__all__ = ["add_parser", "server_limits"]

#: The `ServerLimits` fields with a flag (the served names are --served-model-name), and the
#: flags whose names differ from their fields'.
_LIMIT_FLAGS = ("max_n", "max_tokens", "max_prompt_chars", "max_body_bytes")
_LIMIT_NAMES = {"max_tokens": "--max-tokens-limit", "max_body_bytes": "--max-request-bytes"}

#: Addresses that bind every interface: any Host header is allowed there by default.
_WILDCARDS = ("0.0.0.0", "::")
#: Names of this machine every server answers to (besides its --host).
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
#: Seconds, finite: > 0 (a timeout) or >= 0 (a grace period).
_SECONDS = number(float, 0, low_open=True)
_SECONDS_OR_ZERO = number(float, 0)


def _text(flag: str, why: str):
    """An argparse type: a non-empty string (an empty one is refused, saying `why`)."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"an empty {flag} {why}")
        return text
    return parse


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
                   type=_text("--host", "would bind every address; give 0.0.0.0 or :: for "
                                        "every interface, or an address"),
                   help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=PORT, default=8000, help="TCP port (0: any free port)")
    p.add_argument("--api-key", default=None,
                   type=_text("--api-key", "would switch authentication off; give a token, or "
                                           "leave the flag out for none"),
                   help="bearer token clients must send (default: $FASTTTS_API_KEY, else none)")
    p.add_argument("--allowed-hosts", nargs="+", default=None, metavar="HOST",
                   type=_text("--allowed-hosts", "name allows no host"),
                   help="host names a request's Host header may name, against DNS rebinding; "
                        "'*' allows any (default without --api-key: the --host address, "
                        "localhost, 127.0.0.1 and ::1, or any host when --host binds every "
                        "interface; with --api-key: any host)")
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="the model names clients may send, as vLLM's flag; responses name the "
                        "requested one (default: the --generator name)")
    add_flags(p, ServerLimits, _LIMIT_FLAGS, flags=_LIMIT_NAMES,
              dests={name: flag[2:].replace("-", "_") for name, flag in _LIMIT_NAMES.items()},
              types={"max_body_bytes": parse_size}, metavars={"max_body_bytes": "SIZE"},
              shown={"max_body_bytes": "1MiB"},
              prefixes=dict.fromkeys(_LIMIT_FLAGS, "request limit: "))
    p.add_argument("--shutdown-timeout", type=_SECONDS_OR_ZERO, default=30.0, metavar="SECONDS",
                   help="on SIGTERM / Ctrl-C, seconds in-flight requests may finish before "
                        "they are cancelled (default: %(default)s)")
    p.add_argument("--max-active-requests", type=POSITIVE_INT, default=256,
                   help="most requests searching at once, a safety limit on the server's "
                        "memory; requests are admitted by free decode slots (SART's "
                        "branch-level admission) (default: %(default)s)")
    p.add_argument("--max-queue", type=POSITIVE_INT, default=64,
                   help="most requests waiting; more get 429 (default: %(default)s)")
    p.add_argument("--request-timeout", type=_SECONDS, default=1800, metavar="SECONDS",
                   help="seconds a request may wait and search before it is cancelled "
                        "(default: %(default)s)")


def _allowed_hosts(args: argparse.Namespace, api_key: str | None) -> tuple[str, ...] | None:
    """The Host allow-list of the flags (None = any host): --allowed-hosts as given ('*' =
    any); else, without a token, the bound address and this machine's names (any host when
    the address binds every interface); with a token, any host."""
    if args.allowed_hosts is not None:
        return None if "*" in args.allowed_hosts else tuple(args.allowed_hosts)
    if api_key is not None or args.host in _WILDCARDS:
        return None
    return (args.host, *_LOCAL_NAMES)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port`, before the engines start (uvicorn serves on it).

    Raises:
        ValueError: the host does not resolve, or the address cannot be bound (in use, not
            this machine's); the message names the flags.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise ValueError(f"--host {host!r} does not resolve to an address ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on --host {host} --port {port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


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
    from fasttts.serve.access_log import logger, server_url, start_line
    from fasttts.serve.app import create_app
    from fasttts.serve.connection import LimitedHttpToolsProtocol
    from fasttts.serve.shutdown import Shutdown, StoppingServer

    cfg = run_config(args)
    limits = server_limits(args, cfg)
    check_models(cfg)
    api_key = args.api_key or os.environ.get("FASTTTS_API_KEY") or None
    sock = _listen(args.host, args.port)
    logger.info(start_line(cfg, list(limits.served_model_names), server_url(args.host, args.port),
                           describe_platform(run_platform(cfg)), techniques_on(cfg.runtime)))
    started = time.monotonic()
    try:
        state = build_state(cfg, limits, api_key=api_key, max_active=args.max_active_requests,
                            max_queue=args.max_queue, request_timeout_s=args.request_timeout)
    except BaseException:
        sock.close()
        raise
    state.allowed_hosts = _allowed_hosts(args, api_key)
    stop = Shutdown(state.scheduler, args.shutdown_timeout)
    server = StoppingServer(uvicorn.Config(
        create_app(state), host=args.host, port=args.port, log_level="warning",
        http=LimitedHttpToolsProtocol,
        timeout_graceful_shutdown=args.shutdown_timeout + _DRAIN_GRACE_S),
        on_ready=lambda url: logger.info(
            f"ready: engines up in {time.monotonic() - started:.1f} s; "
            f"listening on {url} (POST /v1/chat/completions; Ctrl-C stops)"), shutdown=stop)
    threading.Thread(target=stop.drain, args=(server,), name="fasttts-drain",
                     daemon=True).start()
    stop.install()
    try:
        server.run(sockets=[sock])
    finally:
        stop.cancel_rest()
        state.hub.close()
        state.scheduler.verifier.close()
    goodbye = stop.goodbye()
    if goodbye:
        logger.info(goodbye)
    return 0
