"""Tensor parallelism on the real vLLM CPU engine: `fasttts eval` and `fasttts serve` with
`--tensor-parallel-size 2` (both engines, generator and OVM verifier, sharded over two ranks of
one core each, all-reduced through shared memory) find the same paths and answers as TP = 1
in float32. Kept small for a 2-core machine: one GSM8K problem, best-of-2, 48 tokens."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

from fasttts.backends.parallel import allowed_cores
from fasttts.cli import main
from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RunConfig,
                            SearchConfig, VerifierConfig)
from fasttts.eval.datasets import load_dataset
from tests.servers import Server, chat_body

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(len(allowed_cores()) < 2, reason="TP = 2 needs 2 cores")]

PROBLEM = load_dataset("gsm8k", limit=1)[0]
SEARCH = {"method": "best_of_n", "n": 2, "beam_width": 1, "max_tokens": 48}
MiB = 1 << 20
ENGINE = {"dtype": "float32", "kv_cache_memory_bytes": 256 * MiB, "max_model_len": 1024}
FLAGS = ["--dtype", "float32", "--generator-kv-cache", "256MiB", "--verifier-kv-cache", "256MiB",
         "--max-model-len", "1024"]


@pytest.fixture(scope="module")
def reference():
    """TP = 1: the eval's search of the problem (its id keys the seeds) and a seeded request's
    (the default problem id, as the server keys a request with a seed)."""
    from fasttts.api import FastTTS

    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **ENGINE),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_VERIFIER, **ENGINE)),
                    search=SearchConfig(**SEARCH))
    with FastTTS(cfg) as tts:
        return tts.solve(PROBLEM.problem, PROBLEM.id), tts.solve(PROBLEM.problem)


def _paths(completions) -> list[tuple[str, float]]:
    return [(c["text"], c["score"]) for c in completions]


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [text for text, _ in got] == [text for text, _ in want]  # token for token
    assert [score for _, score in got] == pytest.approx([s for _, s in want], abs=1e-4)


def test_eval_at_tp2_finds_the_tp1_paths_and_answer(reference, tmp_path, capsys):
    from fasttts.eval.datasets import numeric_answers
    from fasttts.eval.metrics import problem_record

    argv = ["eval", "--dataset", "gsm8k", "--limit", "1", "--tensor-parallel-size", "2",
            "--method", "best_of_n", "--n", "2", "--max-tokens", "48", *FLAGS,
            "--output-dir", str(tmp_path / "tp2")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table header may wrap
    assert "generator float32, TP 2 x 1 thread; verifier float32, TP 2 x 1 thread" in out
    got = json.loads((tmp_path / "tp2" / "results.jsonl").read_text())
    want = problem_record(reference[0], PROBLEM.answer, PROBLEM.problem,
                          numeric_answers(load_dataset("gsm8k")))
    _same(_paths(got["completions"]), _paths(want["completions"]))
    assert got["pred"] == want["pred"] and got["answer"] == want["answer"]
    platform = json.loads((tmp_path / "tp2" / "config.json").read_text())["platform"]
    assert platform["generator"] == {"dtype": "float32", "threads": 1, "tensor_parallel_size": 2}


def test_serve_at_tp2_answers_as_tp1(reference):
    from fasttts.eval.metrics import problem_record

    body = chat_body(DEFAULT_GENERATOR, PROBLEM.problem, **{k: v for k, v in SEARCH.items()
                                                            if k != "max_tokens"})
    body.update(max_tokens=SEARCH["max_tokens"], temperature=0.8, seed=0)
    with Server("--tensor-parallel-size", "2", *FLAGS) as server:
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=600)
        assert server.stop(signal.SIGTERM, timeout_s=120) == 0
    assert r.status_code == 200, r.text
    assert "TP 2 x 1 thread" in server.lines[0]  # the start line says what runs
    assert "stopped by SIGTERM: 0 requests in flight" in server.lines[-1]
    want = problem_record(reference[1], None, PROBLEM.problem)
    tts = r.json()["tts"]
    assert tts["answer"] == want["answer"]
    assert [(c["answer"], c["num_tokens"]) for c in tts["completions"]] == \
        [(c["answer"], c["num_tokens"]) for c in want["completions"]]
    assert [c["score"] for c in tts["completions"]] == pytest.approx(
        [c["score"] for c in want["completions"]], abs=1e-4)
