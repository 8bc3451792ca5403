"""The likely band `hwtune serve` prints beside its means: the predicted mean TTFT and TPOT times
the 10th-90th percentile band of measured/predicted over the published runs nearest the
simulation (`hwtune.serve.accuracy.likely_range`, written by `benchmarks/serve_validation.py`'s
`record`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.serve import accuracy
from hwtune.serve.accuracy import (
    ACCURACY_FILE,
    LIKELY_COVERAGE,
    accuracy_for,
    likely_line,
    likely_range,
)

BAND = "measured_over_predicted_80"


def _rows(ratios: list[float]) -> list[dict]:
    """Rows whose measured TTFT and TPOT are ``ratio`` x the predicted (prediction 1 s)."""
    return [{"backend": "vllm", "ttft_s": r, "pred_ttft_s": 1.0, "tpot_s": r, "pred_tpot_s": 1.0}
            for r in ratios]  # fmt: skip


def test_widening_moves_both_ends_out_by_the_factor(benchmark_module):
    """The same ten runs with a widening of 2: [1.9 / 2, 9.1 x 2]."""
    sv = benchmark_module("serve_validation")
    rec = sv.record(_rows([float(k) for k in range(1, 11)]), widen={"ttft": 2.0, "tpot": 1.0})
    assert rec["ttft"][BAND] == pytest.approx([0.95, 18.2])
    assert rec["tpot"][BAND] == pytest.approx([1.9, 9.1])


def test_band_is_the_10th_to_90th_percentile_of_measured_over_predicted(benchmark_module):
    """Measured 1..10 x the prediction: linear-interpolation percentiles at positions 0.9 and
    8.1 of the sorted ten are 1.9 and 9.1 (worked by hand, not by the code under test)."""
    sv = benchmark_module("serve_validation")
    rec = sv.record(_rows([float(k) for k in range(10, 0, -1)]))
    assert rec["ttft"][BAND] == pytest.approx([1.9, 9.1])
    assert rec["tpot"][BAND] == pytest.approx([1.9, 9.1])
    # the median ratio is the other way round, predicted over measured: (1/5 + 1/6) / 2
    assert rec["ttft"]["pred_over_meas"] == pytest.approx((1 / 5 + 1 / 6) / 2, abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.05, 20.0), min_size=20, max_size=200))
def test_band_holds_about_the_stated_share_of_runs(benchmark_module, ratios):
    sv = benchmark_module("serve_validation")
    lo, hi = sv.record(_rows(ratios), digits=None)["ttft"][BAND]
    inside = sum(lo <= r <= hi for r in ratios) / len(ratios)
    # percentiles interpolate: at most one run at each end is lost to the band's edges
    assert LIKELY_COVERAGE - 2 / len(ratios) - 1e-9 <= inside
    assert inside <= LIKELY_COVERAGE + 2 / len(ratios) + 1e-9 or len(set(ratios)) < len(ratios)
    assert lo <= 1 / sv.record(_rows(ratios), digits=None)["ttft"]["pred_over_meas"] <= hi


def test_shipped_bands_bracket_the_median():
    """In every shipped record the band is ordered and holds the median measured/predicted."""
    table = json.loads(ACCURACY_FILE.read_text())
    recs = [table["all"], *table["modes"].values(), *table["cells"].values()]
    recs += [r for by in table["engines"].values() for r in by.values()]
    for rec in recs:
        for m in ("ttft", "tpot"):
            lo, hi = rec[m][BAND]
            assert 0 < lo <= 1 / rec[m]["pred_over_meas"] <= hi


@given(st.floats(1e-3, 100.0), st.floats(1e-4, 1.0), st.sampled_from([1, 4, 16, 64, 300]),
       st.booleans())  # fmt: skip
def test_likely_range_scales_the_prediction_by_the_nearest_band(ttft, tpot, clients, moe):
    acc = accuracy_for(False, moe, clients)
    rec = acc.get("nearest") or acc
    got = likely_range(acc, ttft, tpot)
    assert got["runs"] == rec["rows"]
    for key, pred, m in (("ttft_mean_s", ttft, "ttft"), ("tpot_mean_s", tpot, "tpot")):
        lo, hi = rec[m][BAND]
        assert got[key] == pytest.approx([pred * lo, pred * hi])
        assert got[key][0] <= pred * (1 / rec[m]["pred_over_meas"]) <= got[key][1]


def test_open_loop_uses_the_mode_band():
    acc = accuracy_for(False)
    got = likely_range(acc, 1.0, 0.01)
    assert got["runs"] == acc["rows"] and got["basis"] == "agg runs"
    assert got["ttft_mean_s"] == pytest.approx(acc["ttft"][BAND])


def test_a_table_without_bands_gives_no_range(monkeypatch):
    rec = {"median_abs_error": 0.1, "p90_abs_error": 0.2, "pred_over_meas": 1.0}
    old = {"source": "t", "modes": {"agg": {"rows": 50, "backends": ["vllm"], "ttft": rec,
                                            "tpot": rec}}}  # fmt: skip
    monkeypatch.setattr(accuracy, "_table", lambda: old)
    assert likely_range(accuracy_for(False), 1.0, 0.01) is None


def test_line_names_the_range_and_its_basis():
    acc = accuracy_for(False, False, 16)
    likely = likely_range(acc, 0.2, 0.008)
    line = likely_line(likely)
    lo = likely["ttft_mean_s"][0] * 1e3
    assert f"{lo:.3g}" in line
    assert "held 80% of the runs of engines and models left out of it" in line
    assert f"{likely['runs']} published agg runs of dense models at 9-32 clients" in line


def test_validation_band_table_is_the_shipped_one():
    """VALIDATION.md's band table and the shipped record come from the same run."""
    table = json.loads(ACCURACY_FILE.read_text())
    text = (Path(__file__).resolve().parents[2] / "VALIDATION.md").read_text()
    sec = text[text.index("| record | runs | measured/predicted TTFT") :]
    sec = sec[: sec.index("\n\n")]
    rows = re.findall(r"^\| ([\w/<>\-]+) \| (\d+) \| ([\d.]+)-([\d.]+)x \| ([\d.]+)-([\d.]+)x \|$",
                      sec, re.M)  # fmt: skip
    assert len(rows) >= 10
    for key, n, t0, t1, p0, p1 in rows:
        rec = table["modes"][key] if key in table["modes"] else table["cells"][key]
        assert rec["rows"] == int(n)
        assert rec["ttft"][BAND] == pytest.approx([float(t0), float(t1)], abs=6e-3)
        assert rec["tpot"][BAND] == pytest.approx([float(p0), float(p1)], abs=6e-3)


def _cell_rows(backend: str, model: str, ratios: list[float]) -> list[dict]:
    return [{"backend": backend, "model": model, "mode": "agg", "concurrency": 16,
             "ttft_s": r, "pred_ttft_s": 1.0, "tpot_s": 1.0, "pred_tpot_s": 1.0}
            for r in ratios]  # fmt: skip


def test_band_coverage_held_out_sees_a_shifted_deployment(benchmark_module):
    """Two engines in one cell (dense, 9-32 clients), 20 runs each. Alike: each one's runs fall
    in the other's band as often as in their own. Ten times slower: none do."""
    sv = benchmark_module("serve_validation")
    spread = [1.0 + 0.05 * i for i in range(20)]
    model = "meta-llama/Llama-3.1-70B"
    alike = sv.band_coverage(
        _cell_rows("vllm", model, spread) + _cell_rows("sglang", model, spread)
    )
    # the band of 1.00..1.95 is [1.095, 1.855]: 16 of the 20 runs (1.10..1.85) lie inside
    assert alike["ttft"]["held_out"] == pytest.approx(16 / 20)
    assert alike["ttft"]["in_sample"] == pytest.approx(32 / 40)
    assert alike["tpot"]["held_out"] == 1.0  # every TPOT exact: a zero-width band holds them all
    far = sv.band_coverage(
        _cell_rows("vllm", model, spread) + _cell_rows("sglang", model, [10 * r for r in spread])
    )
    assert far["ttft"]["held_out"] == 0.0 and far["ttft"]["runs"] == 40


def test_line_switches_to_seconds_for_long_ttfts():
    """A 20 s prediction in a cell whose band reaches 3x: 'ms' with an exponent would read
    badly, so the range is in seconds."""
    acc = accuracy_for(False)
    lo, hi = acc["ttft"][BAND]
    line = likely_line(likely_range(acc, 20.0, 0.05))
    assert f"mean TTFT {20 * lo:.3g}-{20 * hi:.3g} s" in line and "e+" not in line


def test_widening_on_three_deployments_worked_by_hand(benchmark_module):
    """One cell, three engines with ten runs each: two measure exactly the prediction, the third
    twice it. Left out, each of the first two lies inside the band of the others ([1, 2]); the
    third lies a factor 2 above the band of the first two ([1, 1]). Misses: twenty 0s and ten
    log 2, whose 80% quantile (the next order statistic up) is log 2: widening 2. Nested, the
    third's widening without it is 1 (the first two agree), so it stays outside; the first two
    lie inside [1, 2] widened by 2 (the others then disagree by 2): 20 of 30 held."""
    sv = benchmark_module("serve_validation")
    model = "meta-llama/Llama-3.1-70B"
    rows = (_cell_rows("vllm", model, [1.0] * 10) + _cell_rows("sglang", model, [1.0] * 10)
            + _cell_rows("trtllm", model, [2.0] * 10))  # fmt: skip
    assert sv.band_widening(rows)["ttft"] == pytest.approx(2.0)
    assert sv.band_widening(rows)["tpot"] == 1.0
    cov = sv.band_coverage(rows)["ttft"]
    assert cov["held_out"] == pytest.approx(20 / 30)
    assert cov["calibrated"] == pytest.approx(20 / 30)
    assert cov["widening"] == pytest.approx(2.0)
    # in its own cell the band is [1, 2]: every run inside, widened or not
    assert cov["in_sample"] == cov["shipped_in_sample"] == 1.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0.2, 5.0), min_size=3, max_size=15), min_size=3, max_size=6))
def test_widened_band_holds_the_stated_share_of_left_out_runs(benchmark_module, groups):
    """Whatever the deployments, the widening makes the pooled left-out runs fall inside the band
    computed without them at least `LIKELY_COVERAGE` of the time, and never narrows it."""
    sv = benchmark_module("serve_validation")
    model = "meta-llama/Llama-3.1-70B"
    rows = [o for i, g in enumerate(groups) for o in _cell_rows(f"engine{i}", model, g)]
    misses = sv.held_out_misses(rows, "ttft", min_rows=3)
    f = sv.band_widening(rows, min_rows=3)["ttft"]
    assert f >= 1.0
    if misses:
        held = sum(m <= np.log(f) + 1e-12 for m in misses) / len(misses)
        assert held >= LIKELY_COVERAGE


def test_shipped_table_records_its_widening():
    """The shipped track record carries the factors its bands were widened by, at least 1."""
    w = json.loads(ACCURACY_FILE.read_text())["likely_widening"]
    assert set(w) == {"ttft", "tpot"} and min(w.values()) >= 1.0
