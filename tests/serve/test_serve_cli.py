"""`hwtune serve` and `hwtune serve plan` as a user runs them (a child process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hwtune.serve.accuracy import ACCURACY_FILE

BAND = "measured_over_predicted_80"

KEYS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s", "requests_per_s",
        "kv_utilization", "prefix_hit_rate")  # fmt: skip


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwtune.cli.serve", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_json_has_the_documented_keys(tmp_path):
    r = serve("--model", "llama3.1-8b", "--gpu", "h100", "--concurrency", "8", "--input-len",
              "512", "--output-len", "64", "--num-requests", "32", "--json", "--trace-out",
              str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for k in KEYS:
        assert k in doc
    for k in ("ttft_s", "tpot_s"):
        assert set(doc[k]) >= {"mean", "p50", "p90", "p99"}
        assert doc[k]["p50"] <= doc[k]["p90"] <= doc[k]["p99"]
    assert doc["requests"] == 32
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "gemm" in names and "attention_decode" in names
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_same_seed_prints_the_same():
    args = ("--rate", "4", "--num-requests", "60", "--seed", "5", "--json")
    a, b = serve(*args), serve(*args)
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    da.pop("wall_s"), db.pop("wall_s")
    assert da == db


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--model", "llama3.1-70b", "--gpu", "h100"), "short by"),
        (("--model", "nosuchmodel"), "model"),
        (("--scheduler", "fifo"), "scheduler"),
        (("--tp", "3"), "tp"),
        (("--rate", "-1"), "rate"),
        (("--range-ratio", "1.5", "--input-len", "100"), "range-ratio"),
        (("--range-ratio", "0.8"), "range-ratio"),  # nothing to sample around
        (("--weight-only-kernel", "machete2"), "--weight-only-kernel"),
        (("--adp-balance-timeout-iters", "-3"), "--adp-balance-timeout-iters"),
        (("--frontend-tokens-per-s", "0"), "--frontend-tokens-per-s"),
        (("--output-len", "0", "--input-len", "100"), "output-len"),  # not the default 256
        (("--input-len", "0"), "input-len"),
        (("--prefix-len", "-5", "--prefix-groups", "2"), "--prefix-len"),
        (("--prefix-len", "512"), "--prefix-groups"),  # would be ignored without groups
        (("--frontend-tokens-per-s", "inf"), "--frontend-tokens-per-s"),
        (("--rate", "inf"), "rate"),
        (("--dp-attention", "2"), "dense model"),
        (("--weight-only-kernel", "marlin"), "weight-only-kernel"),  # bf16 weights: native
        (("--disagg", "--prefill-tp", "0"), "prefill-tp"),
        (("--router", "foo", "--replicas", "2"), "router: got 'foo'"),
        (("--adp-balance-timeout-iters", "5"), "adp-balance-timeout-iters"),
        (("--batch-wait-timeout-iters", "5"), "batch-wait-timeout-iters"),
        (("--batch-wait-max-tokens-ratio", "0.5"), "batch-wait-max-tokens-ratio"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, field):
    r = serve(*args, "--num-requests", "16")
    assert r.returncode == 2
    assert field in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1


def test_malformed_trace_names_the_line(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n0,10,3\n0.5,abc,3\n")
    r = serve("--trace", str(f))
    assert r.returncode == 2 and "bad.csv line 3" in r.stderr


def test_plan_finds_a_layout_and_impossible_slos_say_the_best():
    common = ("--model", "llama3.1-8b", "--gpu", "h100", "--max-gpus", "2", "--rate", "2",
              "--num-requests", "40", "--input-len", "512", "--output-len", "64",
              "--no-disagg", "--processes", "2")  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "plan", *common,
                        "--ttft-p90", "1.0", "--tpot-p90", "0.05", "--json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["best"] and doc["best"][0]["gpus"] == 1  # one H100 serves 2 req/s of 8B easily
    assert doc["best"][0]["ttft_p90_s"] <= 1.0
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "plan", *common,
                        "--ttft-p90", "1.0", "--tpot-p90", "0.05"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    band = json.loads(ACCURACY_FILE.read_text())["modes"]["agg"]["ttft"][BAND]
    text = " ".join(r.stdout.split())  # rich wraps the notes
    assert f"likely measured {band[0]:.2f}-{band[1]:.2f}x the predicted TTFT" in text
    assert "held 80% of the runs of engines and models left out of it" in text
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "plan", *common,
                        "--tpot-p90", "0.0005"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2
    assert "best achievable" in r.stderr and "TPOT" in r.stderr


def test_range_ratio_reproduces_an_inferencex_row():
    """InferenceX's client samples lengths in [0.8 L, L]. Its Llama-3.1-70B fp8 run on 8 H100s at
    4 clients, 8k in / 1k out (serving_measured.csv, measured TTFT 300.8 ms) is predicted within
    15% with that ratio; fixed lengths keep the four clients in lock-step, so each round's prompts
    queue behind one another and TTFT doubles."""
    args = ("--model", "llama3.1-70b", "--gpu", "h100-sxm-80gb", "--precision", "fp8", "--tp",
            "8", "--concurrency", "4", "--input-len", "8192", "--output-len", "1024", "--json")  # fmt: skip
    fixed = json.loads(serve(*args).stdout)["ttft_s"]["mean"]
    r = serve(*args, "--range-ratio", "0.8")
    assert r.returncode == 0, r.stderr
    sampled = json.loads(r.stdout)["ttft_s"]["mean"]
    assert abs(sampled / 0.3008 - 1) < 0.15
    assert sampled < 0.6 * fixed


def test_eager_prefill_and_marlin_flags_reach_the_simulation():
    """A short prompt on a large MoE model is launch-bound when prefill runs eagerly; Marlin
    slows an fp4 model's prefill on Hopper (compute at mma.sync's share)."""

    def ttft(*extra: str) -> float:
        r = serve("--model", "qwen3-235b-a22b", "--gpu", "h200", "--tp", "8", "--precision",
                  "fp8", "--concurrency", "2", "--input-len", "128", "--output-len", "8",
                  "--num-requests", "6", "--json", *extra)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["ttft_s"]["mean"]

    assert ttft("--eager-prefill") > 1.5 * ttft()
    r = [serve("--model", "gpt-oss-120b", "--gpu", "h200", "--precision", "fp4", "--concurrency",
               "1", "--input-len", "8192", "--output-len", "2", "--num-requests", "2", "--json",
               *k) for k in ((), ("--weight-only-kernel", "marlin"))]  # fmt: skip
    a, b = (json.loads(x.stdout)["ttft_s"]["mean"] for x in r)
    assert b > 1.2 * a


def test_front_end_limit_caps_the_streamed_tokens():
    """256 clients of Llama-3.1-8B on an H100 stream well over 5,000 output tokens/s; with a
    front end of 5,000 tokens/s the output throughput stays at or under it and TPOT rises."""

    def run(*extra: str) -> dict:
        r = serve("--model", "llama3.1-8b", "--gpu", "h100", "--concurrency", "256",
                  "--input-len", "200", "--output-len", "200", "--num-requests", "512", "--json",
                  *extra)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    free, capped = run(), run("--frontend-tokens-per-s", "5000")
    assert free["throughput_tokens_per_s"]["output"] > 5000
    assert capped["throughput_tokens_per_s"]["output"] <= 5000 * (1 + 1e-9)
    assert capped["tpot_s"]["mean"] > free["tpot_s"]["mean"]
    assert capped["frontend_tokens_per_s"] == 5000
