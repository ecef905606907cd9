"""Hostile and careless clients of `fasttts serve` (simulated backend): strict types, size
limits before parsing, the token compared as bytes, OpenAI's error shape everywhere, errors of
a stream before it starts, served model names as vLLM names them, 500s counted.

Together with `test_serve.BAD` this is the server's bad-input suite: every kind gets a clean
4xx in OpenAI's shape, and afterwards the server is alive with 0 sequences and 0 KV blocks."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fasttts.config import EngineConfig
from fasttts.serve import build_state
from fasttts.serve.app import create_app
from fasttts.serve.protocol import ServerLimits
from tests.test_serve import (MODEL, PROBLEM, _blocks, _cfg, _chat, _free_port, client,  # noqa: F401
                              state)

KEY = "s3cret-ключ"  # a non-ASCII key must work too


def _user(content):
    return [{"role": "user", "content": content}]


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


#: (kind, request keyword arguments, status, message fragment); the body limit is 1 MiB.
CHAT = "/v1/chat/completions"
KINDS = [
    ("stream is a string", dict(json=_chat(stream="yes")), 400,
     "stream: Input should be a valid boolean"),
    ("tts.n is a bool", dict(json=_chat(tts={"n": True})), 400,
     "tts.n: Input should be a valid integer"),
    ("tts.n is a numeric string", dict(json=_chat(tts={"n": "2"})), 400,
     "tts.n: Input should be a valid integer"),
    ("temperature is a string", dict(json=_chat(temperature="0.5")), 400,
     "temperature: Input should be a valid number"),
    ("max_tokens is a float", dict(json=_chat(max_tokens=1.5)), 400, "max_tokens"),
    ("seed is a string", dict(json=_chat(seed="1")), 400, "seed: Input should be a valid integer"),
    ("model is null", dict(json=_chat(model=None)), 400, "model: Input should be a valid string"),
    ("model is a number", dict(json=_chat(model=5)), 400, "model"),
    ("messages is a string", dict(json=_chat(messages="hi")), 400, "messages"),
    ("message without content", dict(json=_chat(messages=[{"role": "user"}])), 400,
     "messages.0.content: Field required"),
    ("name too long", dict(json=_chat(messages=[{"role": "user", "content": "x",
                                                 "name": "n" * 257}])), 400,
     "messages.0.name: String should have at most 256 characters"),
    ("user too long", dict(json=_chat(user="u" * 257)), 400,
     "user: String should have at most 256 characters"),
    ("system prompt over the prompt limit",
     dict(json=_chat(messages=[{"role": "system", "content": "s" * 490}, *_user(PROBLEM)])), 400,
     "the problem and the system prompt have 508 characters; at most 500"),
    ("two system messages",
     dict(json=_chat(messages=[{"role": "system", "content": "a"},
                               {"role": "system", "content": "b"}, *_user(PROBLEM)])), 400,
     "at most one system message"),
    ("stop as a string", dict(json=_chat(stop="\n")), 400, "stop is not supported"),
    ("body is an array", dict(json=[_chat()]), 400, "Input should be a valid dictionary"),
    ("body is a string", dict(json="hello"), 400, "Input should be a valid dictionary"),
    ("body is null", dict(content=b"null", headers={"content-type": "application/json"}), 400,
     "Field required"),
    ("tts is a number", dict(json=_chat(tts=5)), 400, "tts"),
    ("beam_width zero", dict(json=_chat(tts={"beam_width": 0})), 400, "tts.beam_width"),
    ("lookahead negative", dict(json=_chat(tts={"lookahead": -1})), 400, "tts.lookahead"),
    ("deeply nested JSON", dict(content=_nested(200_000),
                                headers={"content-type": "application/json"}), 400,
     "error parsing the body"),
    ("body not UTF-8", dict(content=b"\xff\xfe{}", headers={"content-type": "application/json"}),
     400, "JSON"),
    ("body over the size limit", dict(content=b" " * ((1 << 20) + 1),
                                      headers={"content-type": "application/json"}), 413,
     "at most 1048576 bytes are allowed"),
    ("chunked body over the size limit",
     dict(content=iter([b" " * (1 << 19)] * 3), headers={"content-type": "application/json"}),
     413, "at most 1048576 bytes are allowed"),
    ("GET on a POST endpoint", dict(method="GET"), 405,
     "method GET is not allowed on /v1/chat/completions"),
    ("unknown endpoint", dict(url="/v1/embeddings", json={}), 404,
     "no such endpoint: POST /v1/embeddings"),
    ("completions prompt is a number", dict(url="/v1/completions",
                                            json={"model": MODEL, "prompt": 5}), 400, "prompt"),
    ("completions without prompt", dict(url="/v1/completions", json={"model": MODEL}), 400,
     "prompt: Field required"),
    ("completions prompt too long", dict(url="/v1/completions",
                                         json={"model": MODEL, "prompt": "x" * 501}), 400,
     "the problem has 501 characters; at most 500"),
    ("trailing slash", dict(url=CHAT + "/", json=_chat()), 404,
     "no such endpoint: POST /v1/chat/completions/"),  # was a 307 redirect
    ("branch_temperature Infinity (not JSON)",
     dict(content=json.dumps(_chat(tts={"method": "dynamic_branching", "n": 8, "beam_width": 4,
                                        "branch_temperature": float("inf")})).encode(),
          headers={"content-type": "application/json"}), 400,
     "tts.branch_temperature: Input should be a finite number"),  # was 200
    ("temperature NaN", dict(content=json.dumps(_chat(temperature=float("nan"))).encode(),
                             headers={"content-type": "application/json"}), 400,
     "temperature: Input should be a finite number"),
    ("tts.n over the largest budget", dict(json=_chat(tts={"n": 5000})), 400,
     "tts.n: Input should be less than or equal to 4096"),
    ("problem with a lone surrogate",
     dict(content=b'{"model": "%s", "messages": [{"role": "user", "content": "x\\udc80"}], '
                  b'"tts": {"method": "best_of_n", "n": 2}}' % MODEL.encode(),
          headers={"content-type": "application/json"}), 400,
     "the problem: not valid UTF-8 text"),
]


def _send(c: TestClient, kw: dict):
    kw = dict(kw)
    return c.request(kw.pop("method", "POST"), kw.pop("url", CHAT), **kw)


def _assert_clean(r, status: int, fragment: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] == status and fragment in err["message"], err


def _assert_idle(c: TestClient, st) -> None:
    assert c.get("/health").status_code == 200
    assert st.hub.num_sequences == 0 and _blocks(st) == 0 and st.scheduler.num_active == 0


@pytest.mark.parametrize("kind, kw, status, fragment", KINDS, ids=[k[0] for k in KINDS])
def test_bad_input_kinds_get_a_clean_openai_error(client, state, kind, kw, status, fragment):
    _assert_clean(_send(client, kw), status, fragment)
    _assert_idle(client, state)


@pytest.fixture
def guarded(state):
    state.api_key = KEY
    with TestClient(create_app(state)) as c:
        yield c


GOOD = {"Authorization": f"Bearer {KEY}".encode()}
AUTH_KINDS = [
    ("no token", dict(json=_chat()), 401, "missing or wrong bearer token"),
    ("wrong token", dict(json=_chat(), headers={"Authorization": "Bearer nope"}), 401,
     "missing or wrong bearer token"),
    ("non-ASCII token", dict(json=_chat(), headers={"Authorization": "Bearer clé-ü".encode()}),
     401, "missing or wrong bearer token"),
    ("token without Bearer", dict(json=_chat(), headers={"Authorization": KEY.encode()}), 401,
     "missing or wrong bearer token"),
    ("docs without token", dict(method="GET", url="/docs"), 401, "bearer token"),
    ("openapi.json without token", dict(method="GET", url="/openapi.json"), 401, "bearer token"),
    ("metrics without token", dict(method="GET", url="/metrics"), 401, "bearer token"),
    ("models without token", dict(method="GET", url="/v1/models"), 401, "bearer token"),
    ("body over the limit without token", dict(content=b"x" * (2 << 20)), 413,
     "at most 1048576 bytes"),
    ("body over the limit with token", dict(content=b"x" * (2 << 20), headers=GOOD), 413,
     "at most 1048576 bytes"),
    ("bad body with token", dict(content=b"{", headers={**GOOD, "content-type":
                                                        "application/json"}), 400, "JSON"),
]


@pytest.mark.parametrize("kind, kw, status, fragment", AUTH_KINDS,
                         ids=[k[0] for k in AUTH_KINDS])
def test_guarded_server_refuses_before_reading_the_body(guarded, state, kind, kw, status,
                                                        fragment):
    _assert_clean(_send(guarded, kw), status, fragment)
    _assert_idle(guarded, state)


def test_a_non_ascii_key_is_accepted_when_sent(guarded):
    assert guarded.get("/v1/models", headers=GOOD).status_code == 200
    assert guarded.get("/openapi.json", headers=GOOD).status_code == 200
    r = guarded.post(CHAT, json=_chat(), headers=GOOD)
    assert r.status_code == 200, r.text


def test_stream_and_body_share_the_chatcmpl_id_prefix(client):
    assert client.post(CHAT, json=_chat()).json()["id"].startswith("chatcmpl-")
    with client.stream("POST", CHAT, json=_chat(stream=True)) as r:
        ids = {json.loads(line[6:])["id"] for line in r.iter_lines()
               if line.startswith("data: {")}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    body = {"model": MODEL, "prompt": PROBLEM, "max_tokens": 256, "stream": True,
            "tts": {"method": "self_consistency", "n": 2}}
    with client.stream("POST", "/v1/completions", json=body) as r:
        ids = {json.loads(line[6:])["id"] for line in r.iter_lines()
               if line.startswith("data: {")}
    assert len(ids) == 1 and ids.pop().startswith("cmpl-")


def test_a_stream_that_fails_before_its_first_iteration_is_a_400_like_without_stream():
    cfg = _cfg()
    cfg = cfg.model_copy(update={"generator": EngineConfig(model=MODEL, max_model_len=256)})
    st = build_state(cfg, ServerLimits(max_prompt_chars=8000, max_tokens=128))
    try:
        with TestClient(create_app(st)) as c:
            body = _chat(messages=_user("What is 6 times 7? " * 100), max_tokens=64)
            plain = c.post(CHAT, json=body)
            streamed = c.post(CHAT, json={**body, "stream": True})
            _assert_clean(plain, 400, "context is 256 tokens")
            _assert_clean(streamed, 400, "context is 256 tokens")  # not a 200 stream
            _assert_idle(c, st)
    finally:
        st.scheduler.close()
        st.hub.close()


def test_server_errors_are_500_in_openai_shape_and_counted(state):
    def broken(_job):
        raise RuntimeError("bug")

    state.scheduler.submit = broken
    with TestClient(create_app(state), raise_server_exceptions=False) as c:
        _assert_clean(c.post(CHAT, json=_chat()), 500, "internal error: RuntimeError")
        assert 'fasttts_requests_total{status="500"} 1.0' in c.get("/metrics").text


def test_served_model_names_follow_vllm():
    st = build_state(_cfg(), ServerLimits(served_model_names=("math", "tts-alias")))
    try:
        with TestClient(create_app(st)) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["math", "tts-alias"]
            r = c.post(CHAT, json=_chat(model="tts-alias"))
            assert r.status_code == 200 and r.json()["model"] == "tts-alias"
            # given names replace the generator's, as vLLM's --served-model-name does
            _assert_clean(c.post(CHAT, json=_chat(model=MODEL)), 400,
                          "use one of 'math', 'tts-alias'")
    finally:
        st.scheduler.close()
        st.hub.close()


def test_the_cli_serves_the_generator_name_by_default():
    from fasttts.cli import _run_config, _server_limits, build_parser

    def limits(args):
        return _server_limits(args, _run_config(args))

    args = build_parser().parse_args(["serve", "--backend", "sim", "--generator",
                                      "qwen2.5-math-7b"])
    assert limits(args).served_model_names == ("qwen2.5-math-7b",)
    args = build_parser().parse_args(["serve", "--backend", "sim", "--served-model-name", "a",
                                      "b", "--max-request-bytes", "2MiB", "--shutdown-timeout",
                                      "5"])
    got = limits(args)
    assert got.served_model_names == ("a", "b") and got.max_body_bytes == 2 << 20
    assert args.shutdown_timeout == 5


def test_sigterm_cancels_in_flight_requests_after_the_drain_limit(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    import httpx

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim", "--port", str(port),
         "--shutdown-timeout", "1", "--max-n", "512"],
        env={**os.environ, "PYTHONPATH": os.getcwd()}, stderr=subprocess.DEVNULL)
    base, got = f"http://127.0.0.1:{port}", {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        long = _chat(max_tokens=4096, tts={"method": "beam_search", "n": 512, "beam_width": 4,
                                           "num_iterations": 200})
        t = threading.Thread(target=lambda: got.update(
            r=httpx.post(f"{base}{CHAT}", json=long, timeout=60)))
        t.start()
        time.sleep(1.5)
        start = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        t.join(timeout=30)
        assert time.monotonic() - start < 6  # 1 s drain limit, not the 1800 s request timeout
        _assert_clean(got["r"], 503, "the server is shutting down")
    finally:
        server.kill()


@pytest.mark.slow
def test_memory_stays_flat_under_large_bodies_and_headers_without_a_token():
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "benchmarks/memory_flat.py", "--bodies", "10",
                          "--headers", "10", "--mib", "100", "--max-growth-mib", "50",
                          "--max-health-s", "1"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "10 x 413, 10 x 401" in out.stdout
    assert "10 headers of 100 MiB: 10 x 431" in out.stdout  # was buffered whole before a 401


def test_a_json_syntax_error_says_where_and_names_no_param(client, state):
    r = client.post(CHAT, content=b'{"model": 1,,}', headers={"content-type": "application/json"})
    _assert_clean(r, 400, "invalid request: the body is not valid JSON (Expecting property name "
                          "enclosed in double quotes at character 12)")
    assert r.json()["error"]["param"] is None  # was "12", a character offset
    _assert_idle(client, state)


@pytest.fixture
def local_only(state):
    state.allowed_hosts = ("127.0.0.1", "localhost", "::1")
    with TestClient(create_app(state), base_url="http://localhost") as c:
        yield c


@pytest.mark.parametrize("host, status", [
    ("evil.example", 403), ("evil.example:8000", 403), ("127.0.0.1.evil.example", 403),
    ("localhost", 200), ("LocalHost:8000", 200), ("127.0.0.1:8000", 200), ("[::1]:8000", 200),
])
def test_without_a_key_only_the_allowed_hosts_are_answered(local_only, state, host, status):
    r = local_only.get("/v1/models", headers={"Host": host})
    assert r.status_code == status, r.text
    if status == 403:
        _assert_clean(r, 403, f"Host {host!r} is not served here")
        assert r.json()["error"]["type"] == "permission_error"
    _assert_idle(local_only, state)


def test_the_cli_allow_list_follows_the_key_and_the_address():
    from fasttts.cli import build_parser
    from fasttts.cli.serve import _allowed_hosts

    def hosts(*argv, key=None):
        return _allowed_hosts(build_parser().parse_args(["serve", *argv]), key)

    assert hosts() == ("127.0.0.1", "localhost", "127.0.0.1", "::1")
    assert hosts("--host", "10.0.0.5") == ("10.0.0.5", "localhost", "127.0.0.1", "::1")
    assert hosts("--host", "0.0.0.0") is None and hosts("--host", "::") is None
    assert hosts(key="k") is None
    assert hosts("--allowed-hosts", "tts.example.org", key="k") == ("tts.example.org",)
    assert hosts("--allowed-hosts", "*") is None


def test_the_access_log_cannot_be_forged(client, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="fasttts.access")
    client.get("/x%0D%0AFORGED%20127.0.0.1:1%20%22POST%20/v1/chat/completions%22%20200")
    client.get("/y%1b%5b31m%22%5C")
    lines = [r.getMessage() for r in caplog.records if r.name == "fasttts.access"]
    assert len(lines) == 2
    assert all("\r" not in x and "\n" not in x and "\x1b" not in x for x in lines), lines
    assert ('"GET /x%0D%0AFORGED%20127.0.0.1:1%20%22POST%20/v1/chat/completions%22%20200" 404'
            in lines[0])
    assert '"GET /y%1b%5b31m%22%5C" 404' in lines[1]


def test_a_queued_request_is_cancelled_at_the_request_timeout():
    import threading
    import time

    st = build_state(_cfg(), ServerLimits(max_n=512, max_tokens=4096), max_active=1,
                     request_timeout_s=1.0)
    long = _chat(max_tokens=4096, tts={"method": "beam_search", "n": 512, "beam_width": 4,
                                       "num_iterations": 200})
    got = {}
    try:
        with TestClient(create_app(st)) as c:
            first = threading.Thread(target=lambda: got.update(first=c.post(CHAT, json=long)))
            first.start()
            while st.scheduler.num_active == 0:
                time.sleep(0.01)
            start = time.monotonic()
            # waits behind the first (max_active 1); long too, so it cannot finish between
            # the first's cancellation and the watchdog's next look (0.5 s), whichever of
            # queueing or searching it is doing when its second runs out
            queued = c.post(CHAT, json=long)
            waited = time.monotonic() - start
            first.join(timeout=60)
            _assert_clean(queued, 504, "request timed out after 1.0 s")
            assert waited < 3  # was: until the first one ended
            _assert_clean(got["first"], 504, "request timed out after 1.0 s")
            _assert_idle(c, st)
    finally:
        st.scheduler.close()
        st.hub.close()
