"""Tier-3 correction (`hwtune.serve.correction`) and measured runs (`hwtune.serve.measured_runs`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwtune.cli.serve import serve_app
from hwtune.errors import HwtuneInputError
from hwtune.serve.correction import (
    ServeCorrection,
    corrected_stats,
    fit_affine,
    fit_correction,
    held_out_errors,
    load_correction,
    save_correction,
)
from hwtune.serve.measured_runs import load_runs

# Distinct to 1e-3 s: two runs that differ in the 16th digit leave a leave-one-out fit of the
# others with one point in effect, which no affine map is determined by.
sims = st.lists(st.floats(0.001, 10.0).map(lambda x: round(x, 3)), min_size=3, max_size=12,
                unique=True)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(sims, st.floats(0.2, 5.0), st.floats(0.0, 1.0))
def test_noiseless_affine_runs_are_recovered(s, scale, offset):
    """measured = scale * simulated + offset exactly: the fit returns that map (any offset >= 0)
    and every held-out run is predicted without error."""
    s = np.array(s)
    m = scale * s + offset
    f = fit_affine(s, m)
    assert f.scale == pytest.approx(scale, rel=1e-6, abs=1e-9)
    assert f.offset_s == pytest.approx(offset, rel=1e-6, abs=1e-9)
    assert np.all(held_out_errors(s, m) < 1e-6)


@settings(max_examples=40, deadline=None)
@given(sims, st.floats(0.5, 3.0), st.floats(0.01, 0.5))
def test_offset_is_never_negative(s, scale, cut):
    """A latency offset below zero is not a latency: the constraint binds and the scale alone
    is refitted (least squares on the ratios: sum(x) / sum(x^2) with x = simulated/measured)."""
    s = np.array(s) + 1.0
    m = scale * (s - 0.9 * cut)  # positive, but the best unconstrained offset is negative
    f = fit_affine(s, m)
    assert f.offset_s >= 0.0
    x = s / m
    if f.offset_s == 0.0:
        assert f.scale == pytest.approx(x.sum() / (x * x).sum())


def test_one_run_fixes_the_scale():
    f = fit_affine([0.05], [0.08])
    assert (f.scale, f.offset_s) == (pytest.approx(1.6), 0.0)


@pytest.mark.parametrize(
    "sim,meas,field",
    [([], [], "runs"), ([0.1, 0.2], [0.1, 0.0], "measured latency"),
     ([0.1, float("nan")], [0.1, 0.2], "simulated latency")],
)  # fmt: skip
def test_bad_pairs_name_the_field(sim, meas, field):
    with pytest.raises(HwtuneInputError, match=field):
        fit_affine(sim, meas)


def test_held_out_needs_more_runs_than_it_fits_on():
    assert held_out_errors([0.1, 0.2, 0.3], [0.2, 0.3, 0.5], k=3).size == 0
    assert held_out_errors([0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.5, 0.6], k=3, draws=4).size == 4
    with pytest.raises(HwtuneInputError, match="k"):
        held_out_errors([0.1, 0.2], [0.1, 0.2], k=0)


def test_corrected_stats_follow_the_maps_and_e2e_adds_up():
    corr = fit_correction([0.1, 0.2, 0.4], [0.15, 0.25, 0.45], [0.01, 0.02, 0.03],
                          [0.012, 0.022, 0.032])  # fmt: skip
    assert corr.ttft.scale == pytest.approx(1.0) and corr.ttft.offset_s == pytest.approx(0.05)
    ttft = np.array([0.1, 0.3])
    tpot = np.array([0.01, np.nan])  # the second request produced a single token
    out = np.array([101, 1])
    st_ = corrected_stats(corr, ttft, tpot, out)
    assert st_["ttft_s"]["mean"] == pytest.approx(0.25)
    assert st_["tpot_s"]["mean"] == pytest.approx(0.012)
    assert st_["e2e_s"]["mean"] == pytest.approx(((0.15 + 100 * 0.012) + 0.35) / 2)


def test_correction_file_round_trips_and_bad_files_are_named(tmp_path):
    corr = fit_correction([0.1, 0.2, 0.4], [0.15, 0.25, 0.5], [0.01, 0.02, 0.03],
                          [0.012, 0.022, 0.035], source="unit")  # fmt: skip
    p = tmp_path / "c.yaml"
    save_correction(corr, p)
    assert load_correction(p) == corr
    (tmp_path / "bad.yaml").write_text("ttft: {scale: -1}\ntpot: {scale: 1}\nruns: 2\n")
    with pytest.raises(HwtuneInputError, match="ttft.scale"):
        load_correction(tmp_path / "bad.yaml")
    assert isinstance(corr, ServeCorrection) and corr.loo_ttft_error is not None


def test_runs_csv_bad_cells_name_line_and_column(tmp_path):
    ok = tmp_path / "runs.csv"
    ok.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms,tp,range_ratio\n"
                  "8,1024,512,62.5,7.9,2,0.8\n\n16,1024,512,90,9.5,,\n")  # fmt: skip
    runs = load_runs(ok)
    assert [(r.concurrency, r.tp, r.range_ratio) for r in runs] == [(8, 2, 0.8), (16, 1, 1.0)]
    assert runs[0].ttft_s == pytest.approx(0.0625)
    bad = tmp_path / "bad.csv"
    bad.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n8,1024,512,62,7\n"
                   "8,1024,-5,62,7\n")  # fmt: skip
    with pytest.raises(HwtuneInputError, match="line 3: output_len"):
        load_runs(bad)
    bad.write_text("concurrency,ttft_ms\n8,62\n")
    with pytest.raises(HwtuneInputError, match="header"):
        load_runs(bad)
    bad.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n")
    with pytest.raises(HwtuneInputError, match="at least one run"):
        load_runs(bad)
    # TPOT needs two output tokens in every request, at a sampled range's low end too
    bad.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n8,1024,1,62,7\n")
    with pytest.raises(HwtuneInputError, match="line 2: output_len"):
        load_runs(bad)
    bad.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms,range_ratio\n"
                   "8,1024,512,62,7,0.8\n8,1024,4,62,7,0.3\n")  # fmt: skip
    with pytest.raises(HwtuneInputError, match="line 3: range_ratio"):
        load_runs(bad)


def three_runs(tmp_path: Path) -> Path:
    """A runs CSV of three closed loops (2, 4, 8 clients; 512 in, 32 out)."""
    runs = tmp_path / "runs.csv"
    runs.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n"
                    "2,512,32,40,8\n4,512,32,55,9\n8,512,32,90,11\n")  # fmt: skip
    return runs


def test_cli_calibrate_then_serve_with_the_correction(tmp_path):
    """`serve calibrate` simulates each run, fits, writes the YAML; `serve --correction` prints
    the corrected latencies beside the simulation (mean TTFT = scale x simulated + offset)."""
    runs, out, cli = three_runs(tmp_path), tmp_path / "corr.yaml", CliRunner()
    r = cli.invoke(serve_app, ["calibrate", "--runs", str(runs), "--model", "llama3.1-8b",
                               "--gpu", "h100-sxm-80gb", "--out", str(out), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert len(doc["runs"]) == 3 and out.is_file()
    corr = load_correction(out)
    r = cli.invoke(serve_app, ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb",
                               "--concurrency", "4", "--input-len", "512", "--output-len", "32",
                               "--correction", str(out), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    sim, cal = doc["ttft_s"]["mean"], doc["calibrated"]["ttft_s"]["mean"]
    assert cal == pytest.approx(corr.ttft.scale * sim + corr.ttft.offset_s)
    bad = tmp_path / "bad.csv"
    bad.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n2,512,32,x,8\n")
    r = cli.invoke(serve_app, ["calibrate", "--runs", str(bad)])
    assert r.exit_code == 2 and "line 2: ttft_ms" in r.output


def test_a_correction_is_refused_for_another_deployment(tmp_path):
    """A correction fitted to Llama-3.1-8B on an H100 in bf16 at tier 1 is refused, with a
    one-line error naming each difference, by `serve` and `serve plan` on another GPU, model,
    precision or engine; the same deployment at another TP takes it; a file written before
    corrections recorded their deployment is taken as it is."""
    runs, out, cli = three_runs(tmp_path), tmp_path / "corr.yaml", CliRunner()
    r = cli.invoke(serve_app, ["calibrate", "--runs", str(runs), "--model", "llama3.1-8b",
                               "--gpu", "h100-sxm-80gb", "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    fitted = load_correction(out).fitted_to
    assert fitted is not None and (fitted.precision, fitted.engine, fitted.tier) == (
        "bf16",
        None,
        1,
    )
    base = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--concurrency", "2",
            "--input-len", "256", "--output-len", "8", "--correction", str(out)]  # fmt: skip
    for args, named in (
        (["--gpu", "h200-sxm-141gb"], "gpu"),
        (["--model", "qwen3-8b"], "model"),
        (["--precision", "fp8"], "precision"),
        (["--engine", "vllm"], "engine"),
    ):
        r = cli.invoke(serve_app, [*base, *args])
        assert r.exit_code == 2, r.output
        assert r.output.count("\n") == 1 and r.output.startswith("error: --correction: ")
        assert f"fitted to {named} " in r.output and "Traceback" not in r.output
    assert cli.invoke(serve_app, [*base, "--tp", "2"]).exit_code == 0
    r = cli.invoke(serve_app, ["plan", "--model", "llama3.1-8b", "--gpu", "h200-sxm-141gb",
                               "--correction", str(out)])  # fmt: skip
    assert r.exit_code == 2 and "gpu 'h100-sxm-80gb', not 'h200-sxm-141gb'" in r.output
    old = tmp_path / "old.yaml"
    old.write_text("ttft: {scale: 1.5}\ntpot: {scale: 1.1}\nruns: 3\n")
    assert cli.invoke(serve_app, [*base[:-1], str(old), "--gpu", "h200-sxm-141gb"]).exit_code == 0


def test_plan_checks_the_slos_on_the_corrected_latencies():
    """A correction that adds 0.5 s to every TTFT turns a met TTFT SLO into an unmet one, and the
    reported p90 is the corrected one (scale 1: simulated + 0.5 s)."""
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.correction import AffineMap
    from hwtune.serve.plan import SLO, plan
    from hwtune.serve.request import closed_loop, fixed_lengths

    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(4, *fixed_lengths(16, 512, 16))
    slo = SLO(ttft_p90_s=0.4)
    plain = plan(base, wl, slo, max_gpus=1, disagg=False, processes=1)
    assert plain[0].meets and plain[0].ttft_p90_s < 0.4
    late = ServeCorrection(ttft=AffineMap(scale=1.0, offset_s=0.5), tpot=AffineMap(scale=1.0),
                           runs=3)  # fmt: skip
    with pytest.raises(HwtuneInputError, match="best achievable p90 TTFT"):
        plan(base, wl, slo, max_gpus=1, disagg=False, processes=1, correction=late)
    shifted = plan(base, wl, SLO(ttft_p90_s=10.0), max_gpus=1, disagg=False, processes=1,
                   correction=late)  # fmt: skip
    same = {r.describe(): r.ttft_p90_s for r in plain}
    for r in shifted:
        assert r.ttft_p90_s == pytest.approx(same[r.describe()] + 0.5)
