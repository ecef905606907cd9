"""`fasttts serve` says what it is doing: a start line (address, served model names, backend;
on the simulator that its texts are synthetic), a ready line, one access-log line per request."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time

import httpx
from fastapi.testclient import TestClient

from fasttts.serve.app import create_app
from tests.test_serve import _chat, state  # noqa: F401  (the simulated server fixture)

LINE = re.compile(r'^(\S+) "(GET|POST) (\S+)" (\d{3}) (\d+\.\d{3}) s request_id=(\S+)$')


def test_one_access_log_line_per_request_with_status_and_request_id(state, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, logger="fasttts.access")
    with TestClient(create_app(state)) as client:
        ok = client.post("/v1/chat/completions", json=_chat(), headers={"X-Request-ID": "abc-1"})
        bad = client.post("/v1/chat/completions", json=_chat(model="nope"))
        health = client.get("/health")
    lines = [LINE.match(r.getMessage()) for r in caplog.records if r.name == "fasttts.access"]
    assert len(lines) == 3 and all(lines)
    got = [(m[2], m[3], m[4], m[6]) for m in lines]
    assert got == [("POST", "/v1/chat/completions", "200", "abc-1"),
                   ("POST", "/v1/chat/completions", "400", bad.headers["x-request-id"]),
                   ("GET", "/health", "200", health.headers["x-request-id"])]
    assert ok.headers["x-request-id"] == "abc-1"
    assert bad.headers["x-request-id"] != health.headers["x-request-id"]


def _read_lines(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))


def test_serve_prints_start_ready_and_access_lines():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    proc = subprocess.Popen([sys.executable, "-m", "fasttts.cli", "serve", "--backend", "sim",
                             "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any("ready:" in x for x in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, lines
            time.sleep(0.1)
        start, ready = lines[0], next(x for x in lines if "ready:" in x)
        assert "fasttts serve: http://127.0.0.1:0, model qwen2.5-math-1.5b (generator qwen2.5-math-1.5b" \
               in start and "backend sim (simulated: texts are synthetic" in start
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", ready)[1]
        assert re.search(r"ready: engines up in \d+\.\d s", ready)
        assert httpx.get(f"{url}/v1/models").status_code == 200
        assert httpx.get(f"{url}/nope").status_code == 404
        deadline = time.monotonic() + 10
        while sum('" ' in x for x in lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    access = [x for x in lines if "request_id=" in x]
    assert len(access) == 2
    assert re.search(r'"GET /v1/models" 200 \d+\.\d{3} s request_id=\w+$', access[0])
    assert re.search(r'"GET /nope" 404 \d+\.\d{3} s request_id=\w+$', access[1])
