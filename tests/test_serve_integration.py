"""`fasttts serve` over the real vLLM CPU engines (embedded default models): a request end to
end, cancellation within one engine step, and an engine failure -> 503 -> a rebuilt engine."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RunConfig,
                            SearchConfig, VerifierConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.serve import build_state
from fasttts.serve.app import create_app
from fasttts.serve.hub import RequestCancelled
from fasttts.serve.protocol import ServerLimits
from fasttts.serve.scheduler import Job

pytestmark = pytest.mark.integration

MiB = 1 << 20
PROBLEM = load_dataset("gsm8k", limit=1)[0].problem


@pytest.fixture(scope="module")
def state():
    eng = dict(kv_cache_memory_bytes=256 * MiB, max_model_len=2048)
    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **eng),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_VERIFIER, **eng),
                                            batch_size=8))
    st = build_state(cfg, ServerLimits(max_n=8, max_tokens=256), max_active=2)
    yield st
    st.scheduler.close()
    st.hub.close()
    st.scheduler.verifier.close()


def _blocks(state) -> int:
    with state.hub.cv:
        return state.hub.engine.cache_stats().num_blocks_used


def _chat(method="sart"):
    return {"model": DEFAULT_GENERATOR, "max_tokens": 64,
            "messages": [{"role": "user", "content": PROBLEM}],
            "tts": {"method": method, "n": 4, "beam_width": 2}}


def test_request_cancel_and_engine_restart_on_vllm(state):
    with TestClient(create_app(state)) as client:
        r = client.post("/v1/chat/completions", json=_chat())
        assert r.status_code == 200, r.text
        assert r.json()["tts"]["num_completions"] >= 1
        assert _blocks(state) == 0 and state.hub.num_sequences == 0

        job = state.scheduler.submit(Job(PROBLEM, SearchConfig(
            method="self_consistency", n=4, max_tokens=256)))
        while state.hub.num_sequences == 0 and not job.future.done():
            pass
        at_cancel = state.hub.num_steps
        state.scheduler.cancel(job)
        with pytest.raises(RequestCancelled):
            job.future.result(timeout=120)
        assert state.hub.num_steps - at_cancel <= 1
        assert _blocks(state) == 0 and state.hub.num_sequences == 0

        engine, real_step, calls = state.hub.engine, state.hub.engine.step, []

        def failing_step():
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("injected engine crash")
            return real_step()

        engine.step = failing_step
        r = client.post("/v1/chat/completions", json=_chat("beam_search"))
        assert r.status_code == 503 and "being restarted" in r.json()["error"]["message"]
        assert state.hub.engine is not engine and state.hub.num_restarts == 1
        r = client.post("/v1/chat/completions", json=_chat("beam_search"))
        assert r.status_code == 200, r.text
        assert _blocks(state) == 0


def test_concurrent_requests_on_vllm(state):
    """Generator steps and verifier calls of different requests interleave on the real
    engines (they must never run a forward pass at the same time)."""
    jobs = [state.scheduler.submit(Job(PROBLEM, SearchConfig(method=m, n=4, beam_width=2,
                                                             max_tokens=64, seed=i)))
            for i, m in enumerate(["beam_search", "sart", "best_of_n", "self_consistency"])]
    results = [j.future.result(timeout=600) for j in jobs]
    assert all(r.completions for r in results)
    assert _blocks(state) == 0 and state.hub.num_sequences == 0
