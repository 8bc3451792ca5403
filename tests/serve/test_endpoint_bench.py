"""`hwtune serve measure`: the closed-loop client against a local mock OpenAI server whose
timing is known, so what the client measures can be checked against what the server did."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.endpoint_bench import (
    TOKEN_ID_RANGE,
    Endpoint,
    StreamState,
    prompt_ids,
    run_closed_loop,
)
from hwtune.serve.measured_runs import load_runs
from hwtune.serve.mock_server import MODEL, MockServer, free_port


@pytest.fixture
def mock_server():
    servers: list[MockServer] = []

    def start(**kw: object) -> MockServer:
        srv = MockServer(record_bodies=True, **kw)  # type: ignore[arg-type]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def close(a: float, b: float, rel: float = 0.15, abs_s: float = 0.004) -> bool:
    return abs(a - b) <= rel * b + abs_s


def test_latencies_are_the_servers(mock_server):
    """Independent requests: TTFT = base + per-token x prompt and TPOT = the token interval.
    The server's delays are long (150 ms, 40 ms) so that the client's own wall-clock overhead,
    which grows on a loaded machine, stays inside the tolerance."""
    srv = mock_server(base=0.1, per_token=1e-4, itl=0.04)
    res = run_closed_loop(Endpoint(srv.url, MODEL), concurrency=4, input_len=500, output_len=6,
                          num_requests=8, warmup=4)  # fmt: skip
    s = res.summary()
    assert s["num_requests"] == 8 and s["failed"] == 0
    assert s["mean_output_tokens"] == 6
    assert close(s["ttft_s"]["mean"], 0.1 + 1e-4 * 500)
    assert min(r.ttft_s for r in res.records) >= 0.1 + 1e-4 * 500 - 0.002  # none before sent
    assert close(s["tpot_s"]["mean"], 0.04)
    assert len(srv.bodies) == 12  # warm-up and measured requests all reached the server
    b = srv.bodies[-1]
    assert b["max_tokens"] == b["min_tokens"] == 6 and b["ignore_eos"] and b["stream"]
    assert len(b["prompt"]) == 500
    assert all(TOKEN_ID_RANGE[0] <= t < TOKEN_ID_RANGE[1] for t in b["prompt"])


def test_a_closed_loop_starts_with_a_burst(mock_server):
    """A batch-1 server and four clients: the measured phase starts with all four at once
    (waits 0, S, 2S, 3S), then every request queues behind the other three (3S): a mean
    queueing of (0 + 1 + 2 + 3 + 4 x 3) / 8 = 2.25 service times (3 without the burst), the
    closed loop that `simulate_run` replays."""
    base, itl, out = 0.02, 0.01, 4
    service = base + (out - 1) * itl
    srv = mock_server(base=base, per_token=0.0, itl=itl, serial=True)
    res = run_closed_loop(Endpoint(srv.url, MODEL), concurrency=4, input_len=16, output_len=out,
                          num_requests=8, warmup=4)  # fmt: skip
    ttfts = [r.ttft_s for r in res.records]
    assert close(sum(ttfts) / 8, base + 2.25 * service, rel=0.08)
    assert close(min(ttfts), base, rel=0.5)  # the first of the burst waits for no one
    assert close(res.summary()["tpot_s"]["mean"], itl)


def test_without_usage_tokens_are_counted_by_chunk(mock_server):
    srv = mock_server(base=0.005, per_token=0.0, itl=0.002, usage=False)
    res = run_closed_loop(Endpoint(srv.url, MODEL), 2, 8, 5, num_requests=4, warmup=0)
    assert [r.output_tokens for r in res.records] == [5, 5, 5, 5]


def test_extra_body_adds_replaces_and_drops_fields(mock_server):
    srv = mock_server(base=0.0, per_token=0.0, itl=0.0)
    ep = Endpoint(srv.url, MODEL, extra_body=(("min_tokens", None), ("temperature", 0.7),
                                              ("top_p", 0.9)))  # fmt: skip
    run_closed_loop(ep, 1, 8, 2, num_requests=1, warmup=0)
    b = srv.bodies[-1]
    assert "min_tokens" not in b and b["temperature"] == 0.7 and b["top_p"] == 0.9
    assert b["max_tokens"] == 2


def test_prompts_are_seeded_and_distinct():
    assert prompt_ids(3, 7, 64) == prompt_ids(3, 7, 64)
    assert prompt_ids(3, 7, 64) != prompt_ids(3, 8, 64)
    assert prompt_ids(3, 7, 64) != prompt_ids(4, 7, 64)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="ab ", max_size=3), min_size=1, max_size=12),
    noise=st.lists(st.sampled_from(["", ": keep-alive", "event: message"]), max_size=12),
    usage=st.one_of(st.none(), st.integers(1, 50)),
)
def test_stream_parser(texts, noise, usage):
    """Whatever blank lines and comments the server interleaves: TTFT is the first chunk with
    choices, the token count is the usage chunk's (else one per chunk), [DONE] ends it."""
    lines: list[str] = []
    for i, t in enumerate(texts):
        if i < len(noise):
            lines.append(noise[i])
        lines.append("data: " + json.dumps({"choices": [{"index": 0, "text": t}]}))
    if usage is not None:
        lines.append("data: " + json.dumps({"choices": [], "usage": {"completion_tokens": usage}}))
    lines.append("data: [DONE]")
    stt = StreamState()
    first_data = next(i for i, ln in enumerate(lines) if ln.startswith("data:"))
    ended = [stt.feed(ln, float(i)) for i, ln in enumerate(lines)]
    assert ended[-1] and not any(ended[:-1])
    assert stt.first == float(first_data)
    assert stt.output_tokens == (usage if usage is not None else len(texts))


def test_bad_endpoint_inputs(mock_server):
    for url in ("ftp://example.com", "http://h:abc", "http://h:99999", "http://[::1"):
        with pytest.raises(HwtuneInputError, match="url"):
            Endpoint(url)
    with pytest.raises(HwtuneInputError, match="timeout"):
        Endpoint("http://h", timeout_s=math.inf)
    with pytest.raises(HwtuneInputError, match="url.*reachable"):
        run_closed_loop(Endpoint(f"http://127.0.0.1:{free_port()}", MODEL), 1, 8, 2)
    srv = mock_server(base=0.0, per_token=0.0, itl=0.0)
    with pytest.raises(HwtuneInputError, match="does not exist"):
        run_closed_loop(Endpoint(srv.url, "other-model"), 1, 8, 2)
    with pytest.raises(HwtuneInputError, match="concurrency"):
        run_closed_loop(Endpoint(srv.url, MODEL), 0, 8, 2)
    with pytest.raises(HwtuneInputError, match="range_ratio"):
        run_closed_loop(Endpoint(srv.url, MODEL), 1, 8, 2, range_ratio=1.5)


def measure(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "measure", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_measure_writes_the_runs_calibrate_reads(mock_server, tmp_path):
    srv = mock_server(base=0.01, per_token=1e-5, itl=0.004)
    out = tmp_path / "runs.csv"
    r = measure("--url", srv.url, "--concurrency", "1,2", "--input-len", "64",
                "--output-len", "4", "--tp", "2", "--num-requests", "4", "--out", str(out),
                "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["served_model"] == MODEL  # discovered from /v1/models
    assert [d["concurrency"] for d in doc["runs"]] == [1, 2]
    runs = load_runs(out)
    assert [(x.concurrency, x.input_len, x.output_len, x.tp) for x in runs] == [
        (1, 64, 4, 2), (2, 64, 4, 2)]  # fmt: skip
    for x, d in zip(runs, doc["runs"], strict=True):
        assert math.isclose(x.ttft_s, d["ttft_s"]["mean"], rel_tol=1e-3)
        assert close(x.tpot_s, 0.004)
    r = measure("--url", srv.url, "--concurrency", "3", "--input-len", "64", "--output-len",
                "4", "--num-requests", "3", "--out", str(out), "--append")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [x.concurrency for x in load_runs(out)] == [1, 2, 3]
    cal = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "calibrate", "--runs",
                          str(out), "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert cal.returncode == 0, cal.stderr
    doc = json.loads(cal.stdout)
    assert [r["concurrency"] for r in doc["runs"]] == [1, 2, 3] and doc["correction"]


@pytest.mark.parametrize(
    "args, field",
    [
        (("--concurrency", "0,4"), "concurrency"),
        (("--input-len", "x"), "input-len"),
        (("--range-ratio", "1.5"), "range-ratio"),
        (("--served-model", "nope"), "served-model"),
        (("--extra-body", "[1]"), "extra-body"),
        (("--timeout", "inf"), "timeout"),
        (("--num-requests", "0"), "--num-requests"),
    ],
)
def test_measure_bad_input_is_one_line(mock_server, args, field):
    srv = mock_server(base=0.0, per_token=0.0, itl=0.0)
    r = measure("--url", srv.url, "--concurrency", "1", "--num-requests", "1", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0]
    assert "Traceback" not in r.stderr


def test_measure_unreachable_url_is_one_line():
    r = measure("--url", f"http://127.0.0.1:{free_port()}", "--served-model", MODEL)
    assert r.returncode == 2 and "url" in r.stderr and "Traceback" not in r.stderr


class BadUsageHandler(BaseHTTPRequestHandler):
    """Streams one token, then a usage chunk whose count is not a number."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
                b'data: {"choices": [], "usage": {"completion_tokens": "many"}}\n\n'
                b"data: [DONE]\n\n")  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_block_reads_count_the_events():
    """After the first token the stream is read in blocks (`StreamState.feed_block`): a block of
    whole lines counts its data events, and one with the usage line or [DONE] is read line by
    line."""
    stt = StreamState()
    stt.feed('data: {"choices": [{"text": "a"}]}', 0.1)
    ev = 'data: {"choices": [{"text": "b"}]}\n\n'
    assert not stt.feed_block((ev * 5).encode(), 0.2)
    assert stt.chunks == 6
    tail = 'data: {"choices": [], "usage": {"completion_tokens": 7}}\n\ndata: [DONE]\n\n'
    assert stt.feed_block((ev + tail).encode(), 0.3)
    assert stt.chunks == 7 and stt.output_tokens == 7 and stt.end == 0.3


def test_an_unreadable_answer_is_a_failed_request_not_a_crash():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BadUsageHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        res = run_closed_loop(Endpoint(url, MODEL), 2, 8, 2, num_requests=4, warmup=0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(res.records) == 4 and res.summary()["failed"] == 4
    assert all("unreadable" in r.error for r in res.records)


def test_an_unreadable_first_answer_is_one_line_from_the_cli():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BadUsageHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = measure("--url", f"http://127.0.0.1:{srv.server_address[1]}", "--served-model", "m",
                    "--concurrency", "1", "--num-requests", "1")  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 2 and "readable" in r.stderr and "Traceback" not in r.stderr


def test_measure_unwritable_out_fails_before_measuring(mock_server, tmp_path):
    srv = mock_server(base=0.0, per_token=0.0, itl=0.0)
    r = measure("--url", srv.url, "--out", str(tmp_path / "no" / "such" / "dir.csv"))
    assert r.returncode == 2 and r.stderr.startswith("error: --out") and not srv.bodies
