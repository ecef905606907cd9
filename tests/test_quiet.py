"""Quiet by default (`fasttts.logging_setup`): known-harmless library warnings are hidden at
the entry points, `-v` / `FASTTTS_LOG_LEVEL` shows them, errors always show."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fasttts.cli import build_parser, main

# Imports vLLM's Triton check (it warns on the CPU build before vLLM configures its logging),
# then logs the transformers GGUF hint, an unknown transformers warning and a vLLM error.
PROBE = """
import logging, sys
from fasttts.logging_setup import configure
configure(int(sys.argv[1]))
import vllm.triton_utils
logging.getLogger("transformers.quantizers.quantizer_gguf").warning(
    "Loading a GGUF checkpoint with its weights packed is fastest in float32, and this one ...")
logging.getLogger("transformers.modeling_utils").warning("an unknown transformers warning")
logging.getLogger("vllm.engine.arg_utils").error("a vLLM error")
"""
TRITON = "Triton is installed, but doesn't include CPU backend"
GGUF = "Loading a GGUF checkpoint with its weights packed"


def _probe(verbose: int, **env) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FASTTTS_LOG_LEVEL", "VLLM_LOGGING_LEVEL")} | env
    out = subprocess.run([sys.executable, "-c", PROBE, str(verbose)], capture_output=True,
                         text=True, timeout=300, env=env, check=True)
    return out.stderr


@pytest.mark.skipif(not __import__("importlib").util.find_spec("vllm"), reason="needs vLLM")
def test_known_warnings_are_hidden_by_default_and_shown_with_v():
    quiet = _probe(0)
    assert TRITON not in quiet and GGUF not in quiet
    assert "an unknown transformers warning" in quiet and "a vLLM error" in quiet
    for loud in (_probe(1), _probe(0, FASTTTS_LOG_LEVEL="warning")):
        assert TRITON in loud and GGUF in loud and "a vLLM error" in loud


def test_v_is_accepted_before_and_after_the_command():
    parser = build_parser()
    assert parser.parse_args(["plan"]).verbose == 0
    assert parser.parse_args(["-v", "plan"]).verbose == 1
    assert parser.parse_args(["eval", "--dataset", "x", "--output-dir", "y", "-vv"]).verbose == 2


def test_a_bad_log_level_is_one_clear_error(monkeypatch, capsys):
    monkeypatch.setenv("FASTTTS_LOG_LEVEL", "loud")
    assert main(["plan"]) == 2
    assert capsys.readouterr().err.startswith("error: FASTTTS_LOG_LEVEL='loud'; use one of error,")
