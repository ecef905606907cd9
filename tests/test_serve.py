"""`fasttts serve` on the simulated backend: the OpenAI API, validation (bad-input suite),
auth, concurrency, cancellation within one engine step, engine failure -> 503 -> recovery."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from fasttts.api import FastTTS
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.eval.metrics import problem_record
from fasttts.serve import build_state
from fasttts.serve.app import create_app
from fasttts.serve.hub import RequestCancelled
from fasttts.serve.protocol import ServerLimits
from fasttts.serve.scheduler import Job

PROBLEM = "What is 6 times 7?"
MODEL = "qwen2.5-math-1.5b"  # the generator: served under its name, as vLLM does


def _cfg() -> RunConfig:
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     sim=SimConfig(hardware="rtx4090"))


@pytest.fixture
def state():
    st = build_state(_cfg(), ServerLimits(max_n=64, max_tokens=2048, max_prompt_chars=500),
                     max_active=3, max_queue=8, request_timeout_s=60)
    yield st
    st.scheduler.close()
    st.hub.close()


@pytest.fixture
def client(state):
    with TestClient(create_app(state)) as c:
        yield c


def _chat(**kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROBLEM}],
            "tts": {"method": "beam_search", "n": 8, "beam_width": 4}, "max_tokens": 512}
    body.update(kw)
    return body


def _blocks(state) -> int:
    with state.hub.cv:
        return state.hub.engine.cache_stats().num_blocks_used


def _library_record(seed: int) -> dict:
    """What `FastTTS.solve` returns for PROBLEM with `_chat()`'s options and `seed`."""
    search = SearchConfig(method="beam_search", n=8, beam_width=4, max_tokens=512, seed=seed)
    with FastTTS(_cfg().model_copy(update={"search": search})) as tts:
        return problem_record(tts.solve(PROBLEM), None, PROBLEM)


def test_chat_completion_is_the_library_search(client, state):
    """A seeded request answers exactly what the library's search of the same problem, options
    and seed returns: the same completions, scores, answer and tokens, every time."""
    lib = _library_record(seed=3)
    for _ in range(2):  # a repeat of the same seeded request is the same search
        r = client.post("/v1/chat/completions", json=_chat(seed=3))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "chat.completion" and body["model"] == MODEL
        msg, tts = body["choices"][0]["message"], body["tts"]
        assert msg["role"] == "assistant" and tts["clock"] == "simulated"
        assert tts["method"] == "beam_search" and tts["n"] == 8 and tts["answer_rule"] == "weighted"
        assert [(c["answer"], c["score"], c["num_tokens"]) for c in tts["completions"]] == \
            [(c["answer"], c["score"], c["num_tokens"]) for c in lib["completions"]]
        assert tts["answer"] == lib["answer"] is not None and tts["answer"] in msg["content"]
        assert msg["content"] in [c["text"] for c in lib["completions"]]
        assert body["usage"]["completion_tokens"] == tts["tokens_generated"] == \
            lib["tokens_generated"] > 0
        assert _blocks(state) == 0 and state.hub.num_sequences == 0


def test_unseeded_requests_sample_afresh(client):
    """Without a seed, each request draws its own random streams (as vLLM without `seed`)."""
    runs = [client.post("/v1/chat/completions", json=_chat()).json()["tts"] for _ in range(2)]
    assert [c["num_tokens"] for c in runs[0]["completions"]] != \
        [c["num_tokens"] for c in runs[1]["completions"]]


def test_completions_endpoint_and_sart(client):
    r = client.post("/v1/completions", json={
        "model": MODEL, "prompt": PROBLEM, "max_tokens": 512,
        "tts": {"method": "sart", "n": 8, "sart_m": 2, "sart_t": 32}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"]
    stats = body["tts"]["search_stats"]
    assert body["tts"]["answer_rule"] == "best" and body["tts"]["n"] == 8
    # T = 32 tokens between checks: a path of more than 32 tokens passes at least one check
    assert stats["num_checks"] >= 1 and 0 <= stats["num_pruned"] <= 7  # phase 2's cap N - 1
    assert body["tts"]["answer"] in body["choices"][0]["text"]


def test_streaming_sends_progress_then_the_answer(client):
    with client.stream("POST", "/v1/chat/completions", json=_chat(stream=True)) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    progress = [c["tts"]["progress"] for c in chunks if "progress" in c.get("tts", {})]
    assert progress and [p["iteration"] for p in progress] == list(range(len(progress)))
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] in ("stop", "length")
    assert final["choices"][0]["delta"]["content"] and final["tts"]["answer"] is not None


def test_models_health_and_metrics(client):
    assert client.get("/v1/models").json()["data"][0]["id"] == MODEL
    assert client.get("/health").json()["status"] == "ok"
    client.post("/v1/chat/completions", json=_chat())
    text = client.get("/metrics").text
    for name in ("fasttts_queue_length", "fasttts_running_sequences", "fasttts_kv_blocks_used",
                 "fasttts_prefix_cache_hit_rate", "fasttts_request_latency_seconds_bucket",
                 'fasttts_requests_total{status="200"} 1.0'):
        assert name in text
    overhead = next(float(line.split()[-1]) for line in text.splitlines()
                    if line.startswith("fasttts_runtime_overhead_fraction "))
    assert 0.0 < overhead < 1.0  # measured once a request has run engine steps


BAD = [
    ("not json", None, 400, "JSON"),
    ("empty body", {}, 400, "model: Field required"),
    ("no messages", {"model": MODEL}, 400, "messages: Field required"),
    ("empty messages", _chat(messages=[]), 400, "messages: List should have at least 1 item"),
    ("bad role", _chat(messages=[{"role": "robot", "content": "x"}]), 400, "role"),
    ("content not text", _chat(messages=[{"role": "user", "content": 5}]), 400, "content"),
    ("unknown field", _chat(frequency_penalty=1.0), 400, "frequency_penalty: Extra inputs"),
    ("unknown tts field", _chat(tts={"beams": 4}), 400, "tts.beams: Extra inputs"),
    ("negative temperature", _chat(temperature=-1), 400, "temperature"),
    ("top_p zero", _chat(top_p=0), 400, "top_p"),
    ("max_tokens zero", _chat(max_tokens=0), 400, "max_tokens"),
    ("tts.n zero", _chat(tts={"n": 0}), 400, "tts.n"),
    ("bad agg", _chat(tts={"agg_strategy": "max"}), 400, "tts.agg_strategy"),
    ("sart alpha > 1", _chat(tts={"method": "sart", "sart_alpha": 2}), 400, "tts.sart_alpha"),
    ("sart alpha < 0", _chat(tts={"method": "sart", "sart_alpha": -0.1}), 400,
     "tts.sart_alpha: Input should be greater than or equal to 0"),
    ("sart T = 0", _chat(tts={"method": "sart", "sart_t": 0}), 400,
     "tts.sart_t: Input should be greater than 0"),
    ("beta > N", _chat(tts={"method": "sart", "n": 4, "sart_beta": 5}), 400,
     "sart needs beta <= N"),
    ("n string", _chat(tts={"n": "many"}), 400, "tts.n"),
    ("unknown model", _chat(model="gpt-4"), 400, "model 'gpt-4' is not served here; use one "
     "of 'qwen2.5-math-1.5b'"),
    ("openai n > 1", _chat(n=3), 400, "one answer per request"),
    ("stop list", _chat(stop=["\n"]), 400, "stop is not supported"),
    ("two user messages", _chat(messages=[{"role": "user", "content": "a"},
                                          {"role": "user", "content": "b"}]), 400,
     "exactly one user message"),
    ("assistant turn", _chat(messages=[{"role": "user", "content": "a"},
                                       {"role": "assistant", "content": "b"}]), 400,
     "multi-turn"),
    ("empty problem", _chat(messages=[{"role": "user", "content": "   "}]), 400,
     "the problem is empty"),
    ("problem too long", _chat(messages=[{"role": "user", "content": "x" * 501}]), 400,
     "at most 500 are allowed"),
    ("n over limit", _chat(tts={"n": 128, "beam_width": 4}), 400, "over this server's limit of 64"),
    ("max_tokens over limit", _chat(max_tokens=100000), 400, "max_tokens=100000 is over"),
    ("unknown method", _chat(tts={"method": "mcts"}), 400, "unknown search method 'mcts'"),
    ("n not multiple", _chat(tts={"n": 6, "beam_width": 4}), 400, "multiple of beam_width"),
    ("M > N", _chat(tts={"method": "sart", "n": 4, "sart_m": 8}), 400, "sart needs M <= N"),
    ("param of another method", _chat(tts={"method": "beam_search", "sart_m": 2}), 400,
     "sart_m is a parameter of method sart"),
    ("lookahead on sart", _chat(tts={"method": "sart", "lookahead": 1}), 400,
     "lookahead=1 applies to methods"),
]


@pytest.mark.parametrize("name, body, status, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_4xx_with_a_message_and_the_server_stays_up(client, state, name, body,
                                                                   status, fragment):
    if body is None:
        r = client.post("/v1/chat/completions", content=b"{not json",
                        headers={"content-type": "application/json"})
    else:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert fragment in err["message"] and err["code"] == status
    assert client.get("/health").status_code == 200
    assert state.hub.num_sequences == 0 and state.scheduler.num_active == 0


def test_prompt_list_on_completions_is_refused(client):
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": ["a", "b"]})
    assert r.status_code == 400 and "one problem per request" in r.json()["error"]["message"]


def test_bearer_token_is_required_when_configured(state):
    state.api_key = "s3cret"
    with TestClient(create_app(state)) as c:
        assert c.post("/v1/chat/completions", json=_chat()).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/health").status_code == 200  # probes need no token


def test_concurrent_requests_share_the_engine_and_free_every_block(client, state):
    results = []

    def one(i):
        results.append(client.post("/v1/chat/completions", json=_chat(
            seed=i, tts={"method": ["beam_search", "sart", "self_consistency"][i % 3], "n": 8,
                         "beam_width": 4})).status_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 6
    assert state.scheduler.num_finished == 6 and state.scheduler.queue_length == 0
    assert _blocks(state) == 0 and state.hub.num_sequences == 0


def test_cancel_aborts_every_sequence_within_one_engine_step(state):
    from fasttts.config import SearchConfig

    job = state.scheduler.submit(Job(PROBLEM, SearchConfig(method="beam_search", n=32,
                                                           beam_width=4, max_tokens=2048)))
    deadline = time.monotonic() + 30
    while state.hub.num_sequences == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert state.hub.num_sequences > 0
    step_at_cancel = state.hub.num_steps  # (a step in flight now still counts)
    state.scheduler.cancel(job)
    with pytest.raises(RequestCancelled):
        job.future.result(timeout=30)
    assert state.hub.num_sequences == 0 and _blocks(state) == 0
    assert state.hub.num_steps - step_at_cancel <= 1


def test_engine_failure_gives_503_then_the_server_recovers(client, state):
    engine = state.hub.engine
    real_step, calls = engine.step, []

    def failing_step():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected engine crash")
        return real_step()

    engine.step = failing_step
    r = client.post("/v1/chat/completions", json=_chat())
    assert r.status_code == 503, r.text
    assert "the generator engine failed" in r.json()["error"]["message"]
    assert state.hub.num_restarts == 1 and state.hub.engine is not engine
    assert client.get("/health").json()["engine_restarts"] == 1
    assert client.post("/v1/chat/completions", json=_chat()).status_code == 200
    assert _blocks(state) == 0


def test_full_queue_is_429(state):
    state.scheduler.max_queue = 0
    with TestClient(create_app(state)) as c:
        r = c.post("/v1/chat/completions", json=_chat())
    assert r.status_code == 429 and "requests are waiting" in r.json()["error"]["message"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _live_server(state):
    """The app on a real socket (uvicorn in a thread); yields its base URL."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port,
                                           log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_client_disconnect_cancels_the_search_and_frees_blocks(state):
    with _live_server(state) as url:
        body = _chat(tts={"method": "beam_search", "n": 64, "beam_width": 4}, max_tokens=2048)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/chat/completions", json=body, timeout=1.0)
        deadline = time.monotonic() + 30
        while (state.scheduler.num_active or state.hub.num_sequences) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.scheduler.num_active == 0 and state.hub.num_sequences == 0
        assert _blocks(state) == 0
        metrics = httpx.get(f"{url}/metrics").text
        assert 'fasttts_requests_total{status="499"} 1.0' in metrics


def test_the_openai_client_works_with_extra_body(state):
    from openai import OpenAI

    with _live_server(state) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused")
        assert [m.id for m in client.models.list()] == [MODEL]
        out = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROBLEM}], max_tokens=512,
            extra_body={"tts": {"method": "dvts", "n": 8, "beam_width": 4}})
        assert out.choices[0].message.content and out.usage.completion_tokens > 0
        assert out.model_extra["tts"]["method"] == "dvts"
        assert out.model_extra["tts"]["num_completions"] == 2
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROBLEM}], max_tokens=512,
            stream=True, extra_body={"tts": {"method": "self_consistency", "n": 4}})
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert "\\boxed{" in text


def test_a_new_request_stops_running_speculation():
    from fasttts.config import RuntimeConfig, SearchConfig

    cfg = _cfg().model_copy(update={"runtime": RuntimeConfig(spec_beam_extension=True)})
    st = build_state(cfg, ServerLimits(), max_active=2)
    try:
        a = st.scheduler.submit(Job(PROBLEM, SearchConfig(method="beam_search", n=16,
                                                          beam_width=4, max_tokens=2048)))

        def speculative():
            return [e for e in st.hub.driver.sequence_ids if "/spec" in e]

        deadline = time.monotonic() + 60
        while not speculative() and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert speculative(), "speculation never started"
        # the new request arrives when it is admitted (the scheduler may hold it back while
        # the engine has waiting sequences): count engine steps from that moment
        admitted_at = []
        start = st.hub.start

        def admit_start(request_id, *args, **kw):
            admitted_at.append(st.hub.num_steps)  # (the driver thread: between two steps)
            return start(request_id, *args, **kw)

        st.hub.start = admit_start
        # ... to the step at which request a aborts its speculative sequences
        aborted_at = []
        abort = st.hub.engine.abort

        def record_abort(seq_ids):
            if any(s.startswith(f"{a.id}::") and "/spec" in s for s in seq_ids) \
                    and not aborted_at:
                aborted_at.append(st.hub.num_steps)
            abort(seq_ids)

        st.hub.engine.abort = record_abort
        b = st.scheduler.submit(Job(PROBLEM, SearchConfig(method="self_consistency", n=8,
                                                          max_tokens=256)))
        deadline = time.monotonic() + 60
        while speculative() and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert not speculative()
        assert admitted_at and aborted_at and aborted_at[0] - admitted_at[0] <= 2
        ra, rb = a.future.result(timeout=120), b.future.result(timeout=120)
        assert ra.spec["preempted_phases"] >= 1 and rb.completions
    finally:
        st.scheduler.close()
        st.hub.close()


def test_verifier_calls_that_wait_for_the_device_are_batched():
    # the driver loop scores the Score wishes of every search waiting for the verifier in
    # one call, each search getting its own scores back
    from fasttts.runtime.driver import Driver, Score, Task
    from fasttts.verifiers.base import ScoreRequest, Verifier

    class Recording(Verifier):
        def __init__(self):
            self.calls = []

        def score(self, requests):
            self.calls.append([r.problem for r in requests])
            return [[float(len(r.problem))] for r in requests]

    def search(p):
        return (yield Score([ScoreRequest(p, ("s",)), ScoreRequest(p + p, ("s",))]))

    ver = Recording()
    driver = Driver(None, ver)
    tasks = [driver.add(Task(search(p))) for p in ("a", "bb", "ccc")]
    while driver.advance():
        pass
    assert len(ver.calls) == 1 and sorted(ver.calls[0]) == sorted(
        ["a", "aa", "bb", "bbbb", "ccc", "cccccc"])
    assert [t.result for t in tasks] == [[[1.0], [2.0]], [[2.0], [4.0]], [[3.0], [6.0]]]
    assert driver.num_score_calls == 1 and driver.num_merged == 2


def test_the_planner_sets_the_caps_for_the_requests_searching_now():
    from fasttts.config import RuntimeConfig, SearchConfig

    cfg = _cfg().model_copy(update={"runtime": RuntimeConfig(memory_planner=True)})
    st = build_state(cfg, ServerLimits(), max_active=2)
    try:
        rp = st.scheduler.replanner
        split = (rp.generator_kv_bytes, rp.verifier_kv_bytes)
        seen = []

        def progress(iteration, kept):
            seen.append((st.hub.engine.max_num_seqs, st.scheduler.verifier.inner.batch_size))

        for n in (64, 8):
            search = SearchConfig(method="beam_search", n=n, beam_width=4, max_tokens=256)
            job = st.scheduler.submit(Job(PROBLEM, search, on_progress=progress))
            job.future.result(timeout=120)
            # the caps the search ran under are the planner's for this n, within the split
            # the server started with
            assert seen[-1] == (rp.plan.b_dec, rp.plan.b_pre)
            assert rp.plan.kind == "fixed" and rp.plan.b_dec <= n
            assert (rp.generator_kv_bytes, rp.verifier_kv_bytes) == split
            if n == 64:
                first = seen[-1]
        assert first[0] > seen[-1][0]  # 64 beams get a larger decode batch than 8
        assert rp.num_resplits == 0 and rp.measured_len is not None
        assert _blocks(st) == 0
    finally:
        st.scheduler.close()
        st.hub.close()
