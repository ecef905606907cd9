"""Scaling out without vLLM's data parallelism: independent `fasttts serve` replicas behind a
load balancer. The round-robin example of docs/serving.md ("Scaling out") runs as written
against two simulated replicas on loopback, and a seeded request answers the same on either
replica (requests are independent)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import httpx

from tests.servers import Server, chat_body

MODEL = "qwen2.5-math-1.5b"  # the simulator's generator spec (what the replicas serve)
DOC = Path(__file__).resolve().parents[1] / "docs" / "serving.md"


def _example() -> str:
    """The Python block of the "Scaling out" section."""
    section = DOC.read_text().split("## Scaling out", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_round_robin_spreads_requests_over_two_replicas():
    with Server("--backend", "sim") as a, Server("--backend", "sim") as b:
        code = _example()
        assert "(8001, 8002)" in code and '"qwen2.5-coder-0.5b-instruct"' in code
        port = lambda s: s.url.rsplit(":", 1)[1]  # noqa: E731
        code = code.replace("(8001, 8002)", f"({port(a)}, {port(b)})").replace(
            '"qwen2.5-coder-0.5b-instruct"', f'"{MODEL}"')
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(DOC), "exec"), {})
        lines = printed.getvalue().splitlines()
        assert [line.split("?")[0] for line in lines] == ["What is 6 times 7",
                                                           "What is 15% of 80"]
        assert all(line.split("? ", 1)[1] not in ("", "None") for line in lines)
        post = '"POST /v1/chat/completions" 200'
        assert (a.count(post, 1), b.count(post, 1)) == (1, 1)  # one request each


def test_a_seeded_request_answers_the_same_on_either_replica():
    body = chat_body(MODEL, "What is 15% of 80?") | {"seed": 7}
    with Server("--backend", "sim") as a, Server("--backend", "sim") as b:
        ra, rb = (httpx.post(f"{s.url}/v1/chat/completions", json=body, timeout=60).json()
                  for s in (a, b))
    assert ra["choices"][0]["message"]["content"] == rb["choices"][0]["message"]["content"]
    assert ra["tts"]["completions"] == rb["tts"]["completions"]
