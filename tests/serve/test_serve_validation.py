"""Accuracy against published serving measurements (shared/validation/serving_measured.csv).

The full comparison (every expressible row, 10 x concurrency requests each) is
``benchmarks/serve_validation.py``, reported in VALIDATION-serve.md. Here a fixed, deterministic
subset runs inside the test budget: the expressible aggregated rows whose concurrency x output
length is at most 16,384 (the cost of a run), every fourth in file order: 128 rows.

Full run (1004 expressible rows, VALIDATION-serve.md): median TTFT error 43.4% (p90 98.8%),
median TPOT error 12.1% (p90 39.6%). This subset: TTFT 37.8%, TPOT 14.2% (5 of its rows were
measured by InferenceX and draw its sampled lengths; 37.6% / 13.9% with fixed lengths).
"""

from __future__ import annotations

import numpy as np
import pytest

from hwtune.serve.published import default_csv, load_rows, predict_all

pytestmark = pytest.mark.skipif(not default_csv().is_file(), reason="validation data absent")

TTFT_TARGET = 0.15  # issue 4: median relative TTFT error
TPOT_TARGET = 0.12  # issue 4: median relative TPOT error
GUARD_TTFT = 0.41  # reached: 0.378 on this subset
GUARD_TPOT = 0.15  # reached: 0.142 on this subset
XFAIL_REASON = (
    "issue-4 targets not met: median TTFT error 43.4% (target 15%) and TPOT 12.1% (target 12%) "
    "over all 1004 expressible rows; 37.8% / 14.2% on this 128-row subset. TTFT depends on the "
    "benchmark client's arrival pattern and engine admission details the data does not record "
    "(see VALIDATION-serve.md, 'What is missing')"
)


@pytest.fixture(scope="module")
def rows():
    return load_rows()


@pytest.fixture(scope="module")
def subset_errors(rows):
    small = [r for r in rows if r.deployment is not None and r.mode == "agg"
             and r.concurrency * r.osl <= 16384]  # fmt: skip
    pick = small[::4]
    pred = predict_all(pick, processes=2)
    e_ttft, e_tpot = [], []
    for r in pick:
        t, p, _w, err = pred[r.id]
        assert not err, err
        e_ttft.append(abs(t - r.ttft_s) / r.ttft_s)
        e_tpot.append(abs(p - r.tpot_s) / r.tpot_s)
    return len(pick), np.array(e_ttft), np.array(e_tpot)


def test_most_rows_are_expressible_and_the_rest_say_why(rows):
    ok = [r for r in rows if r.deployment is not None]
    bad = [r for r in rows if r.deployment is None]
    assert len(rows) == 1267
    assert len(ok) == 1004
    assert all(r.reason for r in bad)
    pools = [r for r in bad if "pool sizes are not in the data" in r.reason]
    assert len(pools) == 248  # disaggregated rows without prefill/decode worker counts
    assert sum("short by" in r.reason for r in bad) == 13  # Qwen3-235B fp8 on one H200


def test_errors_stay_at_the_level_reached(subset_errors):
    """Guard: the accuracy reached so far must not regress (numbers in VALIDATION-serve.md)."""
    n, et, ep = subset_errors
    assert n == 128
    assert np.median(et) <= GUARD_TTFT, np.median(et)
    assert np.median(ep) <= GUARD_TPOT, np.median(ep)


@pytest.mark.xfail(strict=True, reason=XFAIL_REASON)
def test_issue_target_ttft(subset_errors):
    _, et, _ = subset_errors
    assert np.median(et) <= TTFT_TARGET


@pytest.mark.xfail(strict=True, reason=XFAIL_REASON)
def test_issue_target_tpot(subset_errors):
    _, _, ep = subset_errors
    assert np.median(ep) <= TPOT_TARGET
