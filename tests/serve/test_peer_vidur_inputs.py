"""The inputs `benchmarks/serve_peer_vidur.py` hands to Vidur follow Vidur's own rules, so that
both simulators get the same requests: its trace loader shortens a prompt by whatever prompt +
output exceeds the context (``TraceReplayRequestGenerator``), and its profiler's attention
inputs are prefills of one sequence with a positive chunk and decodes with a zero chunk and a
positive cache (``AttentionInput.is_valid``), filtered on the model's shape and block size
(``SklearnExecutionTimePredictor._load_attention_df``)."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest

from hwtune.serve.request import sharegpt_like_lengths


@pytest.fixture(scope="module")
def peer(benchmark_module):
    return benchmark_module("serve_peer_vidur")


def test_requests_are_capped_as_vidurs_trace_loader_caps_them(peer, tmp_path):
    wl = peer.workload(2000, 20.0)
    p, o = sharegpt_like_lengths(2000, seed=0)
    excess = np.clip(p + o - 4096, 0, None)  # Vidur: diff_tokens = total - max_tokens, >= 0
    assert list(wl.prompts) == list(p - excess)
    assert list(wl.outputs) == list(o)
    assert max(a + b for a, b in zip(wl.prompts, wl.outputs, strict=True)) <= 4096
    assert excess.max() > 0  # the mix does reach the cap, so the rule is exercised
    trace = tmp_path / "t.csv"
    peer.write_trace(wl, trace)
    rows = list(csv.DictReader(trace.open()))
    assert [int(r["num_prefill_tokens"]) for r in rows] == list(wl.prompts)
    assert [float(r["arrived_at"]) for r in rows] == list(wl.arrivals)


def test_attention_profile_rows_are_valid_vidur_inputs(peer, tmp_path):
    out = tmp_path / "attention.csv"
    n = peer.attention_profile(out, [1, 2])
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == n > 0
    for r in rows:
        q, c, b = int(r["prefill_chunk_size"]), int(r["kv_cache_size"]), int(r["batch_size"])
        # Llama-2-7B: 4096 wide, 32 query and 32 KV heads (multi-head attention), block 16
        assert (r["n_embd"], r["n_q_head"], r["n_kv_head"], r["block_size"]) == (
            "4096", "32", "32", "16")  # fmt: skip
        if r["is_prefill"] == "True":
            assert b == 1 and q > 0 and q + c <= 4096
            assert float(r["time_stats.attn_prefill.median"]) > 0
        else:
            assert q == 0 and 0 < c <= 4096
            assert float(r["time_stats.attn_decode.median"]) > 0
    # both tensor-parallel degrees, and a TP 2 rank does half the heads' work at long prefills
    by = {(r["num_tensor_parallel_workers"], r["prefill_chunk_size"], r["kv_cache_size"]): r
          for r in rows if r["is_prefill"] == "True"}  # fmt: skip
    t1 = float(by[("1", "4096", "0")]["time_stats.attn_prefill.median"])
    t2 = float(by[("2", "4096", "0")]["time_stats.attn_prefill.median"])
    assert t2 == pytest.approx(t1 / 2, rel=0.05)


def test_a_directory_that_is_not_a_vidur_checkout_is_refused(peer, tmp_path, monkeypatch):
    monkeypatch.setattr(
        sys, "argv", ["x", "--vidur-src", str(tmp_path), "--vidur-python", "python"]
    )
    with pytest.raises(SystemExit) as e:
        peer.main()
    assert "--vidur-src" in str(e.value) and "vidur/simulator.py" in str(e.value)
