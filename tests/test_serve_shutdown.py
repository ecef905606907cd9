"""`fasttts serve` says goodbye: on SIGTERM or SIGINT its last line counts the requests in
flight, finished during the drain, and cancelled after it, and the time the stop took; the
process exits 0 after closing its engines (uvicorn's re-raised signal no longer kills it)."""

from __future__ import annotations

import re
import signal
import threading
import time

import httpx
import pytest

from fasttts.serve.shutdown import Shutdown
from tests.servers import Server, chat_body

MODEL = "qwen2.5-math-1.5b"
GOODBYE = re.compile(r"fasttts serve: stopped by (SIGTERM|SIGINT): (\d+) requests? in flight, "
                     r"(\d+) finished, (\d+) cancelled( after the [\d.]+ s drain limit)?; shut "
                     r"down in (\d+\.\d) s$")


def _goodbye(server: Server) -> re.Match:
    last = server.lines[-1]
    got = GOODBYE.search(last)
    assert got, server.lines[-3:]
    return got


def test_sigterm_with_a_request_in_flight_cancels_it_after_the_drain_and_says_so():
    with Server("--backend", "sim", "--shutdown-timeout", "1", "--max-n", "512") as server:
        got = {}
        long = chat_body(MODEL, n=512, num_iterations=200)
        long["max_tokens"] = 4096
        t = threading.Thread(target=lambda: got.update(
            r=httpx.post(f"{server.url}/v1/chat/completions", json=long, timeout=60)))
        t.start()
        time.sleep(1.5)  # searching by now (n = 512 runs for many seconds)
        assert server.stop(signal.SIGTERM) == 0
        t.join(timeout=30)
    assert got["r"].status_code == 503
    m = _goodbye(server)
    assert m.group(1, 2, 3, 4) == ("SIGTERM", "1", "0", "1")
    assert m.group(5) == " after the 1 s drain limit" and float(m.group(6)) < 6


def test_sigint_lets_a_request_finish_within_the_drain_limit():
    with Server("--backend", "sim", "--shutdown-timeout", "60") as server:
        got = {}
        t = threading.Thread(target=lambda: got.update(r=httpx.post(
            f"{server.url}/v1/chat/completions", json=chat_body(MODEL, n=64), timeout=60)))
        t.start()
        time.sleep(0.5)
        assert server.stop(signal.SIGINT) == 0
        t.join(timeout=60)
    assert got["r"].status_code == 200 and got["r"].json()["tts"]["answer"] is not None
    assert _goodbye(server).group(1, 2, 3, 4) == ("SIGINT", "1", "1", "0")


def test_an_idle_server_stops_at_once():
    with Server("--backend", "sim") as server:
        assert server.stop(signal.SIGTERM) == 0
    m = _goodbye(server)
    assert m.group(2, 3, 4) == ("0", "0", "0") and float(m.group(6)) < 3


class _Scheduler:
    """The scheduler's counters and close, as `Shutdown` reads them."""

    def __init__(self, active: int, queued: int):
        self.num_active, self.queue_length, self.closed = active, queued, False

    def close(self):
        self.closed = True
        self.num_active = self.queue_length = 0


@pytest.mark.parametrize("left, line", [
    (0, "stopped by SIGTERM: 3 requests in flight, 3 finished, 0 cancelled; shut down in"),
    (2, "stopped by SIGTERM: 3 requests in flight, 1 finished, 2 cancelled after the 30 s "
        "drain limit; shut down in"),
])
def test_the_goodbye_counts_what_the_drain_left(left, line):
    scheduler = _Scheduler(2, 1)
    stop = Shutdown(scheduler, 30)
    assert stop.goodbye() is None  # no signal, no goodbye
    stop.begin(signal.SIGTERM)
    scheduler.num_active, scheduler.queue_length = left, 0
    stop.cancel_rest()
    stop.cancel_rest()  # once: the second finds the scheduler closed
    assert line in stop.goodbye() and scheduler.closed
