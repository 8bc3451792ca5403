"""A mock OpenAI-compatible streaming server whose timing is set, not measured: for testing
benchmark clients (`hwtune serve measure` and its tests, ``benchmarks/serve_measure_client.py``)
and for trying the measure -> calibrate workflow on a machine without a GPU::

    python -m hwtune.serve.mock_server --port 8000 --base 0.05 --per-token 2e-5 --itl 0.01
    hwtune serve measure --url http://127.0.0.1:8000 --concurrency 1,8 --out runs.csv

``POST /v1/completions`` (model `MODEL`, ``prompt`` a list of token ids, ``max_tokens``,
``stream``) answers with server-sent events: the first token ``base + per_token x prompt``
seconds after the request, then one token every ``itl`` seconds, then a usage chunk (unless
``usage`` is off) and ``data: [DONE]``. Requests run independently (unbounded batch) or, with
``serial``, one at a time (a batch-1 engine: clients queue). ``GET /v1/models`` lists `MODEL`.
Not an engine model: no batching effects, no KV cache; `hwtune.serve.simulator` is that.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

MODEL = "mock-model"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for a server started next)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Stream(Protocol):
    """One request's token clock: ``wait(k)`` returns when token ``k`` (0-based) is due."""

    def wait(self, k: int) -> None: ...

    def close(self) -> None: ...


class Timing(Protocol):
    """Where a server's token times come from: `FixedTiming`, or a simulated deployment
    (`hwtune.serve.emulator.EmulatedTiming`). ``start`` raises `ValueError` (HTTP 400) for a
    request it cannot serve."""

    def start(self, prompt: int, output: int) -> Stream: ...


class _FixedStream:
    def __init__(self, first: float, itl: float, lock: threading.Lock | None) -> None:
        self.first, self.itl, self.lock = first, itl, lock

    def wait(self, k: int) -> None:
        # token k is due at first + k x itl (absolute deadlines: the time spent writing a chunk
        # does not accumulate into the interval)
        left = self.first + k * self.itl - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()


class FixedTiming:
    """The first token ``base + per_token x prompt`` seconds after the request (after the
    requests ahead of it, with ``serial``), then one every ``itl`` seconds."""

    def __init__(self, base: float, per_token: float, itl: float, serial: bool = False) -> None:
        for name, v in (("base", base), ("per_token", per_token), ("itl", itl)):
            if not v >= 0:
                raise ValueError(f"{name}: got {v!r}; expected seconds >= 0")
        self.base, self.per_token, self.itl = base, per_token, itl
        self.lock = threading.Lock() if serial else None

    def start(self, prompt: int, output: int) -> Stream:
        if self.lock is not None:
            self.lock.acquire()
        first = time.perf_counter() + self.base + self.per_token * prompt
        return _FixedStream(first, self.itl, self.lock)


class MockServer(ThreadingHTTPServer):
    """The server (see the module docstring); ``port`` 0 picks a free one. ``timing`` replaces
    the fixed timing of ``base``, ``per_token``, ``itl`` and ``serial``. A request it cannot
    serve (not JSON, no token-id prompt, a bad ``max_tokens``, too long for an emulated
    deployment) gets HTTP 400; a client that leaves mid-stream is let go."""

    daemon_threads = True
    request_queue_size = 4096  # a burst of clients connects at once (the default backlog is 5)

    def __init__(self, base: float = 0.0, per_token: float = 0.0, itl: float = 0.0,
                 serial: bool = False, usage: bool = True, host: str = "127.0.0.1",
                 port: int = 0, timing: Timing | None = None, model: str = MODEL,
                 record_bodies: bool = False) -> None:  # fmt: skip
        self.timing: Timing = timing or FixedTiming(base, per_token, itl, serial)
        super().__init__((host, port), Handler)
        self.usage, self.model = usage, model
        self.record_bodies = record_bodies
        self.bodies: list[dict] = []
        """The requests' JSON bodies, with ``record_bodies`` (tests)."""

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: MockServer

    def setup(self) -> None:
        super().setup()  # stream each chunk at once, as serving engines' HTTP servers do
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, doc: dict) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            doc = {"object": "list", "data": [{"id": self.server.model, "object": "model"}]}
            self._json(200, doc)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def _bad(self, message: str) -> None:
        self._json(400, {"error": {"message": message, "type": "BadRequestError"}})

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            self._bad("the body is not JSON")
            return
        if self.path != "/v1/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        if not isinstance(body, dict) or body.get("model") != self.server.model:
            model = body.get("model") if isinstance(body, dict) else None
            self._json(404, {"error": {"message": f"The model `{model}` does not exist."}})
            return
        prompt, n = body.get("prompt"), body.get("max_tokens", 16)  # OpenAI's default is 16
        if not (isinstance(prompt, list) and prompt
                and all(type(t) is int and t >= 0 for t in prompt)):  # fmt: skip
            self._bad("prompt: expected a non-empty list of token ids >= 0 (no tokenizer here)")
            return
        if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:  # one choice per request
            self._bad(f"n: got {body.get('n', 1)!r} (best_of {body.get('best_of', 1)!r}); "
                      "expected 1: this server streams one choice per request")  # fmt: skip
            return
        if type(n) is not int or n < 1:
            self._bad(f"max_tokens: got {n!r}; expected a positive integer")
            return
        s = self.server
        if s.record_bodies:
            s.bodies.append(body)
        try:
            stream = s.timing.start(len(prompt), n)
        except ValueError as e:
            self._bad(str(e))
            return
        try:  # from here on the stream's resources are released whatever happens
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            doc = {"choices": [{"index": 0, "text": " t", "finish_reason": None}]}
            chunk = f"data: {json.dumps(doc)}\n\n"
            for i in range(n):
                stream.wait(i)
                self._chunk(chunk)
            stream.close()
            stream = None
            if s.usage:
                doc = {"choices": [], "usage": {"prompt_tokens": len(prompt),
                                                "completion_tokens": n}}  # fmt: skip
                self._chunk(f"data: {json.dumps(doc)}\n\n")
            self._chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left; nothing to answer
        finally:
            if stream is not None:
                stream.close()


def serve_until_interrupted(srv: ThreadingHTTPServer) -> None:
    """Serve until Ctrl-C, then close the socket."""
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m hwtune.serve.mock_server",
                                 description="mock OpenAI-compatible streaming server")  # fmt: skip
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--base", type=float, default=0.05, help="seconds to the first token")
    ap.add_argument("--per-token", type=float, default=2e-5, help="more seconds per prompt token")
    ap.add_argument("--itl", type=float, default=0.01, help="seconds between tokens")
    ap.add_argument("--serial", action="store_true", help="one request at a time")
    a = ap.parse_args(argv)
    try:
        srv = MockServer(a.base, a.per_token, a.itl, a.serial, host=a.host, port=a.port)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
    sys.stderr.write(f"mock server at {srv.url} (model {MODEL!r})\n")
    serve_until_interrupted(srv)


if __name__ == "__main__":
    main()
