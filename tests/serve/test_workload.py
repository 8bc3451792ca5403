"""Workloads: arrivals, lengths and trace files (CSV, JSONL, Azure LLM inference columns)."""

from __future__ import annotations

import numpy as np
import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.request import (
    closed_loop,
    fixed_lengths,
    load_trace,
    open_loop,
    range_ratio_lengths,
    sharegpt_like_lengths,
)


def test_poisson_arrivals_have_the_rate():
    p, o = fixed_lengths(20000, 10, 10)
    wl = open_loop(5.0, p, o, seed=1)
    gaps = np.diff(wl.arrivals)
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1


def test_gamma_arrivals_have_the_burstiness():
    p, o = fixed_lengths(20000, 10, 10)
    gaps = np.diff(open_loop(5.0, p, o, seed=1, cv=3.0).arrivals)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_sharegpt_like_lengths_are_seeded_and_chat_shaped():
    a = sharegpt_like_lengths(5000, seed=7)
    b = sharegpt_like_lengths(5000, seed=7)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    p, o = a
    assert 150 < np.median(p) < 400 and 120 < np.median(o) < 300
    assert p.min() >= 4 and p.max() <= 4096


def test_range_ratio_lengths_are_inferencex_uniform():
    """InferenceX's client: lengths uniform over the integers [int(0.8 L), L], seeded."""
    p, o = range_ratio_lengths(20000, 1024, 8192, 0.8, seed=3)
    assert p.min() == 819 and p.max() == 1024
    assert o.min() == 6553 and o.max() == 8192
    assert abs(p.mean() - (819 + 1024) / 2) < 2
    again = range_ratio_lengths(20000, 1024, 8192, 0.8, seed=3)
    assert (again[0] == p).all() and (again[1] == o).all()
    one = range_ratio_lengths(5, 100, 10, 1.0)
    assert (one[0] == 100).all() and (one[1] == 10).all()
    for bad in (0.0, 1.5):
        with pytest.raises(HwtuneInputError, match="range_ratio"):
            range_ratio_lengths(5, 100, 10, bad)
    # int(2 * 0.3) = 0: the script would send 0-token outputs; an error, not a silent 1
    with pytest.raises(HwtuneInputError, match="range_ratio.*output length"):
        range_ratio_lengths(5, 100, 2, 0.3)


def test_closed_loop_rejects_zero_clients():
    p, o = fixed_lengths(4, 10, 10)
    with pytest.raises(HwtuneInputError, match="concurrency"):
        closed_loop(0, p, o)


def test_csv_trace(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens,prefix_group,prefix_len\n"
                 "1.5,100,20,a,32\n0.5,50,10,,\n2.0,70,5,a,32\n")  # fmt: skip
    wl = load_trace(f)
    assert wl.arrivals == (0.0, 1.0, 1.5)  # sorted, shifted to start at 0
    assert wl.prompts == (50, 100, 70)
    assert wl.prefix_groups[0] == -1 and wl.prefix_groups[1] == wl.prefix_groups[2] >= 0
    assert wl.prefix_lens == (0, 32, 32)


def test_trace_group_without_length_is_an_error(tmp_path):
    """A prefix group with no prefix_len would share nothing (the length is per row)."""
    f = tmp_path / "g.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens,prefix_group\n0,100,20,a\n")
    with pytest.raises(HwtuneInputError, match="g.csv line 2: prefix_len"):
        load_trace(f)


def test_azure_trace_columns_as_they_are(tmp_path):
    f = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n")  # fmt: skip
    wl = load_trace(f)
    assert wl.prompts == (374, 396) and wl.outputs == (44, 109)
    assert wl.arrivals[1] == pytest.approx(4.314579, abs=1e-5)


def test_jsonl_trace_and_malformed_rows_name_the_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 3}\n'
                 '{"arrival": 1, "prompt_tokens": 10}\n')  # fmt: skip
    with pytest.raises(HwtuneInputError, match="t.jsonl line 2"):
        load_trace(f)
    g = tmp_path / "t.csv"
    g.write_text("arrival_time,prompt_tokens,output_tokens\n0,10,3\n1,ten,3\n2,5,0\n")
    with pytest.raises(HwtuneInputError, match="t.csv line 3"):
        load_trace(g)
    g.write_text("arrival_time,prompt_tokens,output_tokens\n0,10,3\n2,5,0\n")
    with pytest.raises(HwtuneInputError, match="t.csv line 3"):
        load_trace(g)
