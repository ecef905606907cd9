"""`fasttts serve` as a user runs it: a subprocess on a free loopback port, its log lines read
as they come (for the shutdown and scale-out tests)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time

__all__ = ["Server", "chat_body", "free_port"]


def chat_body(model: str, content: str = "What is 2+3?", **tts) -> dict:
    """An OpenAI chat request with a fasttts `tts` object (beam search n = 8 by default)."""
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": 512, "tts": {"method": "beam_search", "n": 8, "beam_width": 4, **tts}}


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m fasttts.cli serve --port PORT ARGS` (the worktree's fasttts) on a free port,
    started and ready on entry, killed on exit if still running.

    Attributes:
        url: "http://127.0.0.1:PORT", as its ready line says.
        lines: its stderr lines so far.
    """

    def __init__(self, *args: str, ready_s: float = 600):
        self.args, self.ready_s = args, ready_s
        self.lines: list[str] = []
        self.url = ""

    def __enter__(self) -> Server:
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        self.proc = subprocess.Popen([sys.executable, "-m", "fasttts.cli", "serve", "--port",
                                      str(free_port()), *self.args], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + self.ready_s
        while not self.url:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("fasttts serve did not start:\n" + "\n".join(self.lines))
            time.sleep(0.1)
        return self

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            ready = re.search(r"listening on (http://\S+)", line)
            if ready:
                self.url = ready.group(1)

    def count(self, text: str, want: int, timeout_s: float = 10) -> int:
        """How many log lines hold `text`, waiting up to `timeout_s` for `want` of them (a
        request's access-log line is written after its response is sent)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = sum(text in line for line in self.lines)
            if got >= want or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def stop(self, sig, timeout_s: float = 60) -> int:
        """Send `sig`, wait for the exit and the last log line; returns the exit code."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout_s)
        self.reader.join(timeout=10)  # it ends at the end of the server's stderr
        return code

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
