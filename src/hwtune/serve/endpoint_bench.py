"""Closed-loop benchmark of a live OpenAI-compatible streaming server: the measured runs that
`hwtune serve calibrate` fits (tier 3), taken the way the published serving benchmarks take them.

The protocol, chosen to match the clients behind ``../shared/validation/serving_measured.csv``
(genai-perf's concurrency mode and InferenceX's ``benchmark_serving.py``; VALIDATION.md, "Which
client measured which rows") and the closed loop `hwtune.serve.measured_runs.simulate_run`
replays:

- ``C`` client threads, each with its own keep-alive HTTP connection, send one request at a time
  and the next one as soon as the previous stream has ended (a closed loop).
- A warm-up phase (default ``2 C`` requests) runs first and is discarded; when it has drained,
  the measured phase starts with all ``C`` clients at once and runs ``num_requests`` requests
  (default ``10 C``), every one of them counted.
- A request is ``POST {url}/v1/completions`` with ``prompt`` a list of token ids (seeded per
  request; ids in `TOKEN_ID_RANGE`, inside every common vocabulary, so no two prompts share a
  prefix and no tokenizer is needed here), ``max_tokens`` = ``min_tokens`` = the output length,
  ``ignore_eos``, ``stream`` with ``stream_options.include_usage``, temperature 0. vLLM's,
  SGLang's and TensorRT-LLM's OpenAI servers accept token-id prompts and these fields.
- TTFT: from sending the request to the first streamed chunk that has ``choices`` (as
  ``benchmark_serving.py`` counts it); E2E: to the end of the stream; output tokens: the usage
  chunk's ``completion_tokens`` (else one per chunk with choices); TPOT = (E2E - TTFT) /
  (output tokens - 1), the definition of `hwtune.serve.metrics`.

Only the standard library talks to the server (``http.client``, one thread per client), so the
client adds no dependency; it parses JSON only for the first chunk and the usage chunk, which
keeps it off the critical path at a few thousand chunks per second.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from hwtune.errors import HwtuneInputError
from hwtune.serve.metrics import stats
from hwtune.serve.request import range_ratio_lengths, time_per_output_token

TOKEN_ID_RANGE = (1000, 20000)
"""Prompt token ids are drawn uniformly from these (half-open): below every common vocabulary's
size (Llama 3 128,256; Qwen 151,936; Mistral 32,768; GPT-2 50,257) and above the special ids."""

COMPLETIONS_PATH = "/v1/completions"
_ERR_CHARS = 200


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach the server."""

    url: str
    model: str = ""
    path: str = COMPLETIONS_PATH
    timeout_s: float = 600.0
    extra_body: tuple[tuple[str, object], ...] = ()
    """Request fields to add or replace (a value of None drops the field), e.g. for a server
    that rejects ``min_tokens``."""

    def __post_init__(self) -> None:
        try:
            parts = urlsplit(self.url)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 (raises on a port that is not a number in 0-65535)
        except ValueError:
            ok = False
        if not ok:
            raise HwtuneInputError(
                "url", self.url, "an http:// or https:// URL of an OpenAI-compatible server"
            )
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise HwtuneInputError("timeout", self.timeout_s, "a positive finite number of "
                                   "seconds (a wait for each read of a response)")  # fmt: skip
        if not self.path.startswith("/"):
            raise HwtuneInputError("endpoint", self.path, "a path starting with /")

    def connect(self) -> http.client.HTTPConnection:
        """A new keep-alive connection to the server (``http.client`` sets ``TCP_NODELAY``)."""
        p = urlsplit(self.url)
        cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
        return cls(p.hostname or "", p.port, timeout=self.timeout_s)

    def full_path(self, path: str) -> str:
        """``path`` under the URL's own path prefix (``http://h/prefix`` + ``/v1/...``)."""
        return urlsplit(self.url).path.rstrip("/") + path


@dataclass
class StreamState:
    """What one streamed response has shown so far (server-sent events, ``data:`` lines)."""

    first: float | None = None
    end: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    error: str = ""

    def feed(self, line: str, now: float) -> bool:
        """Take one line of the stream read at ``now``; True once the stream has ended."""
        line = line.strip()
        if not line.startswith("data:"):
            return False  # blank separators, ": keep-alive" comments, event: lines
        data = line[5:].strip()
        if data == "[DONE]":
            self.end = now
            return True
        if self.first is None or "completion_tokens" in data or '"error"' in data:
            try:
                doc = json.loads(data)
            except json.JSONDecodeError:
                self.error = f"not JSON: {data[:_ERR_CHARS]}"
                self.end = now
                return True
            if isinstance(doc, dict) and doc.get("error"):
                self.error = str(doc["error"])[:_ERR_CHARS]
                self.end = now
                return True
            usage = doc.get("usage") if isinstance(doc, dict) else None
            if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                self.usage_tokens = int(usage["completion_tokens"])
            has_choices = isinstance(doc, dict) and bool(doc.get("choices"))
        else:
            has_choices = '"choices"' in data and '"choices":[]' not in data.replace(" ", "")
        if has_choices:
            self.chunks += 1
            if self.first is None:
                self.first = now
        return False

    def feed_block(self, block: bytes, now: float) -> bool:
        """Take whole lines read together at ``now``: `feed` each only when the block has an
        end, a usage or an error line (once per stream); otherwise count its ``data:`` lines."""
        if b"[DONE]" in block or b"completion_tokens" in block or b'"error"' in block:
            lines = block.split(b"\n")
            return any(self.feed(ln.decode(errors="replace"), now) for ln in lines)
        self.chunks += block.count(b"\ndata:") + block.startswith(b"data:")
        return False

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.chunks


@dataclass(frozen=True)
class RequestRecord:
    """One measured request (seconds; ``error`` set when it failed)."""

    prompt_tokens: int
    requested_tokens: int
    output_tokens: int
    ttft_s: float
    e2e_s: float
    error: str = ""

    @property
    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1); NaN for one output token or a failure."""
        if self.error:
            return math.nan
        return time_per_output_token(self.e2e_s - self.ttft_s, self.output_tokens)


def prompt_ids(seed: int, index: int, length: int) -> list[int]:
    """The token ids of request ``index``'s prompt (deterministic in ``seed`` and ``index``)."""
    rng = np.random.default_rng([seed, index])
    return rng.integers(TOKEN_ID_RANGE[0], TOKEN_ID_RANGE[1], size=length).tolist()


@dataclass(frozen=True)
class Job:
    """One request to send: its lengths and its JSON body, encoded before the clock starts."""

    prompt_tokens: int
    output: int
    body: bytes

    @classmethod
    def make(cls, ep: Endpoint, prompt: list[int], output: int) -> Job:
        return cls(len(prompt), output, _payload(ep, prompt, output))


def _payload(ep: Endpoint, prompt: list[int], output: int) -> bytes:
    body: dict[str, object] = {
        "prompt": prompt, "max_tokens": output, "min_tokens": output, "ignore_eos": True,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    if ep.model:
        body["model"] = ep.model
    for k, v in ep.extra_body:
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body).encode()


class ServerError(Exception):
    """The server refused a request (HTTP status and the start of its answer)."""


def send_request(ep: Endpoint, conn: http.client.HTTPConnection, job: Job) -> RequestRecord:
    """Send one streamed completion on ``conn`` and time it; raises `ServerError` on an HTTP
    error status and ``OSError`` / ``http.client.HTTPException`` when the connection fails."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    t0 = time.perf_counter()
    conn.request("POST", ep.full_path(ep.path), body=job.body, headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        text = resp.read().decode(errors="replace").strip().replace("\n", " ")
        raise ServerError(f"HTTP {resp.status}: {text[:_ERR_CHARS]}")
    st = StreamState()
    while st.first is None and st.end is None:  # line by line until the first token
        raw = resp.readline()
        now = time.perf_counter()
        if not raw:
            st.end = now
        elif st.feed(raw.decode(errors="replace"), now):
            break
    tail = b""
    while st.end is None:  # then in blocks: only the count, the usage and the end matter
        buf = resp.read1(65536)
        now = time.perf_counter()
        if not buf:
            st.end = now
            break
        data = tail + buf
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if cut and st.feed_block(data[:cut], now):
            break
    if not resp.isclosed():
        resp.read()  # drain the rest (usually the chunked terminator) to reuse the connection
    end = st.end if st.end is not None else time.perf_counter()
    if st.first is None and not st.error:
        st.error = "the stream ended without a token"
    ttft = (st.first - t0) if st.first is not None else math.nan
    return RequestRecord(job.prompt_tokens, job.output, st.output_tokens, ttft, end - t0,
                         st.error)  # fmt: skip


DISCOVERY_TIMEOUT_S = 10.0
"""Seconds `discover_model` and the reachability check wait for the server."""


def discover_model(ep: Endpoint) -> str:
    """The first model id the server lists at ``/v1/models`` (within
    `DISCOVERY_TIMEOUT_S`: a server that does not answer fails quickly, not after the
    per-request timeout)."""
    _check_reachable(ep)
    conn = ep.connect()
    conn.timeout = min(ep.timeout_s, DISCOVERY_TIMEOUT_S)
    try:
        conn.request("GET", ep.full_path("/v1/models"))
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        raise HwtuneInputError(
            "url", ep.url, f"a reachable OpenAI-compatible server ({e})"
        ) from None
    finally:
        conn.close()
    try:
        models = [m["id"] for m in json.loads(text)["data"]]
    except (ValueError, KeyError, TypeError):
        models = []
    if resp.status != 200 or not models:
        raise HwtuneInputError(
            "served-model", "(not given)",
            f"a model name: {ep.url}/v1/models answered HTTP {resp.status} "
            f"{text[:_ERR_CHARS]!r}; pass --served-model",
        )  # fmt: skip
    return str(models[0])


@dataclass
class RunResult:
    """One closed-loop run: the measured phase's requests, in the order they were issued."""

    concurrency: int
    input_len: int
    output_len: int
    range_ratio: float
    warmup: int
    records: list[RequestRecord]
    wall_s: float
    seed: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.error]

    def summary(self) -> dict[str, object]:
        """Mean and percentiles of TTFT, TPOT and E2E (seconds) and the throughputs; the keys
        of ``hwtune serve --json``."""
        ok = self.ok

        def col(xs: Iterable[float]) -> np.ndarray:
            return np.fromiter(xs, dtype=float)

        out_tokens = sum(r.output_tokens for r in ok)
        return {
            "concurrency": self.concurrency, "input_len": self.input_len,
            "output_len": self.output_len, "range_ratio": self.range_ratio,
            "num_requests": len(self.records), "failed": len(self.records) - len(ok),
            "warmup_requests": self.warmup, "wall_s": self.wall_s,
            "ttft_s": stats(col(r.ttft_s for r in ok)), "tpot_s": stats(col(r.tpot_s for r in ok)),
            "e2e_s": stats(col(r.e2e_s for r in ok)),
            "mean_output_tokens": out_tokens / len(ok) if ok else math.nan,
            "requests_per_s": len(ok) / self.wall_s if self.wall_s > 0 else math.nan,
            "throughput_tokens_per_s": out_tokens / self.wall_s if self.wall_s > 0 else math.nan,
            "input_tokens_per_s": (sum(r.prompt_tokens for r in ok) / self.wall_s
                                   if self.wall_s > 0 else math.nan),
            "errors": sorted(set(self.failures))[:5],
        }  # fmt: skip


def _phase(
    ep: Endpoint,
    concurrency: int,
    jobs: list[Job],
    done: Callable[[], None] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Run ``jobs`` in a closed loop of ``concurrency`` clients that
    all start at once; the records in job order and the phase's wall time."""
    records: list[RequestRecord | None] = [None] * len(jobs)
    lock = threading.Lock()
    state = {"next": 0}
    start = threading.Barrier(min(concurrency, len(jobs)))

    def client() -> None:
        conn = ep.connect()
        # connect before the start: TTFT counts from the request, not the TCP handshake (a
        # failure here is retried by the first request, which records it)
        with contextlib.suppress(OSError):
            conn.connect()
        start.wait()
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= len(jobs):
                break
            job = jobs[i]
            for attempt in (0, 1):
                try:
                    rec = send_request(ep, conn, job)
                    break
                except ServerError as e:
                    rec = RequestRecord(job.prompt_tokens, job.output, 0, math.nan, math.nan,
                                        str(e))  # fmt: skip
                    break
                except (ValueError, KeyError, TypeError) as e:  # a stream it could not read
                    conn.close()
                    conn = ep.connect()
                    rec = RequestRecord(job.prompt_tokens, job.output, 0, math.nan, math.nan,
                                        f"unreadable answer: {e!r}"[:_ERR_CHARS])  # fmt: skip
                    break
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    conn = ep.connect()
                    rec = RequestRecord(job.prompt_tokens, job.output, 0, math.nan, math.nan,
                                        f"connection: {e!r}"[:_ERR_CHARS])  # fmt: skip
                    if attempt:
                        break
            records[i] = rec
            if done is not None:
                done()
        conn.close()

    threads = [threading.Thread(target=client, daemon=True)
               for _ in range(min(concurrency, len(jobs)))]  # fmt: skip
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return [r for r in records if r is not None], wall


def _check_reachable(ep: Endpoint) -> None:
    p = urlsplit(ep.url)
    try:
        socket.create_connection((p.hostname, p.port or (443 if p.scheme == "https" else 80)),
                                 timeout=min(ep.timeout_s, DISCOVERY_TIMEOUT_S)).close()  # fmt: skip
    except OSError as e:
        raise HwtuneInputError(
            "url", ep.url, f"a reachable OpenAI-compatible server ({e.strerror or e})"
        ) from None


def run_closed_loop(
    ep: Endpoint,
    concurrency: int,
    input_len: int,
    output_len: int,
    num_requests: int | None = None,
    warmup: int | None = None,
    range_ratio: float = 1.0,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
) -> RunResult:
    """Measure one closed-loop configuration (see the module docstring): a warm-up of
    ``warmup`` requests (default 2 C), then ``num_requests`` (default 10 C) from a burst of C.
    ``progress`` is called after every request of either phase. Raises `HwtuneInputError` when
    the server cannot be reached or refuses the first warm-up request."""
    for name, v in (("concurrency", concurrency), ("input_len", input_len),
                    ("output_len", output_len)):  # fmt: skip
        if not isinstance(v, int) or v < 1:
            raise HwtuneInputError(name, v, "a positive integer")
    n = 10 * concurrency if num_requests is None else num_requests
    w = 2 * concurrency if warmup is None else warmup
    if not isinstance(n, int) or n < 1:
        raise HwtuneInputError("num_requests", num_requests, "a positive integer")
    if not isinstance(w, int) or w < 0:
        raise HwtuneInputError("warmup", warmup, "a non-negative integer")
    p, o = range_ratio_lengths(w + n, input_len, output_len, range_ratio, seed)
    jobs = [Job.make(ep, prompt_ids(seed, i, int(p[i])), int(o[i])) for i in range(w + n)]
    _check_reachable(ep)
    # one request alone first: a wrong model name or endpoint fails here, with the server's words
    conn = ep.connect()
    try:
        first = send_request(ep, conn, jobs[0]) if w else None
    except ServerError as e:
        raise HwtuneInputError(  # the model, the endpoint or the lengths: the server's words say
            "request", f"{ep.model or '(no model)'} at {ep.url}{ep.path}, a prompt of "
            f"{int(p[0])} tokens and {int(o[0])} out",
            f"one the server accepts (--served-model, --endpoint, --input-len, --output-len); "
            f"it answered {e}",
        ) from None  # fmt: skip
    except (OSError, http.client.HTTPException) as e:
        raise HwtuneInputError("url", ep.url, f"a server that answers ({e!r})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise HwtuneInputError("url", ep.url, f"a readable streamed completion ({e!r})") from None
    finally:
        conn.close()
    if first is not None and first.error:
        raise HwtuneInputError("url", ep.url, f"a streamed completion; got: {first.error}")
    if progress is not None and w:
        progress()
    if w > 1:
        _phase(ep, concurrency, jobs[1:w], progress)
    recs, wall = _phase(ep, concurrency, jobs[w:], progress)
    return RunResult(concurrency, input_len, output_len, range_ratio, w, recs, wall, seed,
                     [r.error for r in recs if r.error])  # fmt: skip


CSV_COLUMNS = ("concurrency", "input_len", "output_len", "ttft_ms", "tpot_ms", "tp", "pp", "ep",
               "dp_attention", "range_ratio", "num_requests", "ttft_p90_ms", "tpot_p90_ms",
               "requests_per_s", "output_tokens_per_s", "mean_output_tokens")  # fmt: skip
"""The runs CSV `hwtune.serve.measured_runs.load_runs` reads (its required and optional
columns), and for the record a few more it ignores."""


def csv_row(res: RunResult, tp: int = 1, pp: int = 1, ep: int = 1, dp_attention: int = 1) -> dict:
    """One line of the runs CSV for ``res`` (the layout the server ran is the user's to say)."""
    s = res.summary()
    ttft, tpot = s["ttft_s"], s["tpot_s"]
    assert isinstance(ttft, dict) and isinstance(tpot, dict)
    return {"concurrency": res.concurrency, "input_len": res.input_len,
            "output_len": res.output_len, "ttft_ms": round(ttft["mean"] * 1e3, 3),
            "tpot_ms": round(tpot["mean"] * 1e3, 4), "tp": tp, "pp": pp, "ep": ep,
            "dp_attention": dp_attention, "range_ratio": res.range_ratio,
            "num_requests": len(res.records), "ttft_p90_ms": round(ttft["p90"] * 1e3, 3),
            "tpot_p90_ms": round(tpot["p90"] * 1e3, 4),
            "requests_per_s": round(float(s["requests_per_s"]), 4),  # type: ignore[arg-type]
            "output_tokens_per_s": round(float(s["throughput_tokens_per_s"]), 2),  # type: ignore[arg-type]
            "mean_output_tokens": round(float(s["mean_output_tokens"]), 2)}  # type: ignore[arg-type]  # fmt: skip


__all__ = [
    "COMPLETIONS_PATH", "CSV_COLUMNS", "Endpoint", "Job", "RequestRecord", "RunResult", "ServerError",
    "StreamState", "TOKEN_ID_RANGE", "csv_row", "discover_model", "prompt_ids",
    "run_closed_loop", "send_request",
]  # fmt: skip
