"""Quiet by default: the one place that decides what library noise a user sees.

The entry points (`fasttts` CLI, the Python API `FastTTS`) call `configure` before any engine
is built. By default ("quiet") it hides what a user cannot act on:

- vLLM's INFO and WARNING lines (engine internals, e.g. "This model does not officially support
  disabling chunked prefill", which fasttts does on purpose on the CPU build), including the
  ones vLLM logs before it configures its own logging ("Triton is installed, but doesn't
  include CPU backend");
- torch's C++ warnings (`TORCH_CPP_LOG_LEVEL`: the CPU build's "NUMA binding" notes);
- transformers' GGUF dtype hint while `fasttts models prepare` converts a model;
- Python FutureWarnings and DeprecationWarnings from library internals (also in vLLM's
  tensor-parallel rank processes, through `PYTHONWARNINGS`);
- vLLM's weight-loading bar when stderr is not a terminal (`fasttts.backends.vllm_engine`).

Errors are never hidden: every filter lets ERROR and above through, and a library's own
exceptions propagate as before. `FASTTTS_LOG_LEVEL=warning|info|debug` (or `-v`, `-vv` on the
command line) turns the filters off and shows the libraries' own output at that level;
`FASTTTS_LOG_LEVEL=quiet` is the default. Settings the user made (`VLLM_LOGGING_LEVEL`,
`TORCH_CPP_LOG_LEVEL`) are kept.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

__all__ = ["ENV_VAR", "HARMLESS", "LEVELS", "configure", "log_to_stderr", "resolve_level"]

#: The environment variable that sets the level.
ENV_VAR = "FASTTTS_LOG_LEVEL"

#: Accepted levels, quietest first ("quiet": the default filtering).
LEVELS = ("error", "quiet", "warning", "info", "debug")

#: Known-harmless messages below ERROR, as (logger name, message start), hidden when quiet
#: even if that logger's level lets them through.
HARMLESS = (
    ("transformers.quantizers.quantizer_gguf", "Loading a GGUF checkpoint with its weights packed"),
    ("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend"),
    ("vllm.engine.arg_utils", "This model does not officially support disabling chunked prefill"),
)

_FILTER_ATTR = "_fasttts_harmless_filter"


class _Harmless(logging.Filter):
    """Drops records below ERROR whose message starts with a known-harmless text."""

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.getMessage().startswith(self.starts)


def resolve_level(verbose: int = 0) -> str:
    """The level in force: `-v` gives "info", `-vv` "debug"; without it `$FASTTTS_LOG_LEVEL`,
    else "quiet".

    Raises:
        ValueError: `$FASTTTS_LOG_LEVEL` is not one of `LEVELS`.
    """
    if verbose:
        return "info" if verbose == 1 else "debug"
    level = os.environ.get(ENV_VAR, "quiet").strip().lower() or "quiet"
    if level not in LEVELS:
        raise ValueError(f"{ENV_VAR}={level!r}; use one of {', '.join(LEVELS)}")
    return level


def configure(verbose: int = 0) -> str:
    """Apply the level (`resolve_level`) to vLLM, torch, transformers and Python warnings;
    returns it. Safe to call more than once: a later call replaces what an earlier one set
    (never what the user set)."""
    level = resolve_level(verbose)
    quiet = level in ("quiet", "error")
    _set_env("VLLM_LOGGING_LEVEL", "ERROR" if quiet else level.upper())
    _set_env("TORCH_CPP_LOG_LEVEL", "ERROR" if quiet else "INFO" if level == "debug" else "WARNING")
    # vLLM logs a few lines before it sets up its own logging; its logger's level covers them.
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
    _set_harmless_filters(quiet)
    # vLLM's tensor-parallel ranks are new processes: they inherit the environment only
    _set_env("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning" if quiet else "")
    for category in (FutureWarning, DeprecationWarning):
        # Deprecation notices from torch/vLLM/transformers internals: not the user's to act on.
        entry = ("ignore", None, category, None, 0)
        if entry in warnings.filters:
            warnings.filters.remove(entry)
        if quiet:
            warnings.filterwarnings("ignore", category=category)
    return level


_ours: dict[str, str] = {}  # environment variables `configure` set, and their values


def _set_env(name: str, value: str) -> None:
    """Set an environment variable unless the user set it (it differs from what we set)."""
    if os.environ.get(name, _ours.get(name)) == _ours.get(name):
        os.environ[name] = _ours[name] = value


def _set_harmless_filters(on: bool) -> None:
    """Add (or remove) the `HARMLESS` filters on the loggers that emit those messages."""
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, start in HARMLESS:
        by_logger[name] = by_logger.get(name, ()) + (start,)
    for name, starts in by_logger.items():
        logger = logging.getLogger(name)
        old = getattr(logger, _FILTER_ATTR, None)
        if old is not None:
            logger.removeFilter(old)
            setattr(logger, _FILTER_ATTR, None)
        if on:
            new = _Harmless(starts)
            logger.addFilter(new)
            setattr(logger, _FILTER_ATTR, new)


class _Stderr(logging.StreamHandler):
    """A handler that writes to the current `sys.stderr` (also after it is replaced)."""

    stream = property(lambda self: sys.stderr, lambda self, _value: None)


def log_to_stderr(level: str = "quiet") -> None:
    """Show fasttts's own INFO lines (the server's start, ready and access-log lines) on
    stderr, with the time: only errors at level "error", DEBUG lines too at "debug". The
    command line calls it; a Python program configures `logging` itself."""
    logger = logging.getLogger("fasttts")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel({"error": logging.ERROR, "debug": logging.DEBUG}.get(level, logging.INFO))
