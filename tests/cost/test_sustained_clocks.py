"""Sustained clocks of power-limited GPUs (`cost.power.power_limited`, the catalog's
``sustained_gemm_fraction``): what one H200 measured at its 700 W limit, and how it composes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.power import clock_fraction, power_limited
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster
from hwtune.train.estimator import estimate


def test_h200_measurement_is_the_catalog_figure():
    # BENCHMARKS.md "The NVML meter on a real GPU": 657 TFLOP/s sustained vs 800 in bursts
    assert get_device("h200").sustained_gemm_fraction == pytest.approx(657 / 800, abs=0.005)


def test_sustained_scales_every_peak_and_burst_keeps_them():
    dev = get_device("h200")
    s = power_limited(dev)
    assert s.peak_tflops.bf16 == pytest.approx(dev.peak_tflops.bf16 * 0.82)
    assert s.peak_tflops.fp8 == pytest.approx(dev.peak_tflops.fp8 * 0.82)
    assert s.memory_bandwidth_tbps == dev.memory_bandwidth_tbps  # HBM runs on its own clock
    assert power_limited(dev, sustained=False) == dev


def test_devices_without_a_figure_are_unchanged():
    for name in ("a100-80gb", "gb200"):
        dev = get_device(name)
        assert dev.sustained_gemm_fraction is None
        assert power_limited(dev) == dev


@settings(max_examples=50, deadline=None)
@given(cap=st.floats(250.0, 700.0))
def test_a_power_cap_scales_from_the_sustained_point(cap):
    # the cube law runs from the clock held at the limit, so the two factors multiply
    dev = get_device("h100")
    got = power_limited(dev, cap).peak_tflops.bf16
    assert got == pytest.approx(dev.peak_tflops.bf16 * 0.82 * clock_fraction(dev, cap))
    assert got <= power_limited(dev, cap, sustained=False).peak_tflops.bf16


def test_estimate_slows_compute_but_keeps_the_nominal_mfu_reference():
    kw = dict(gpu="h100-sxm-80gb", gpus=8, global_batch=8, seq=4096)
    sus = estimate("llama3.1-8b", **kw)
    cl = make_cluster("h100-sxm-80gb", 8).model_copy(update={"sustained_clocks": False})
    burst = estimate("llama3.1-8b", cl, global_batch=8, seq=4096)
    assert sus.peak_flops_used == burst.peak_flops_used  # MFU against the data sheet
    # GEMMs and attention dominate a dense 8B step: slower by nearly 1/0.82, never by more
    ratio = sus.step_time_s / burst.step_time_s
    assert 1.10 < ratio <= 1 / 0.82 + 1e-9
    assert any("sustained clock" in n for n in sus.notes)
    assert not any("sustained clock" in n for n in burst.notes)


def test_tier2_profile_burst_rates_take_the_sustained_clock():
    """A measured profile's GEMM and attention rates are what `hwtune bench` timed, bursts: the
    sustained fraction applies to them as to the spec sheet's, and the estimate says so (it
    said "not applied in tier 2" before session 49; tests/calibrate/test_calibration_review_s49.py
    checks the numbers)."""
    from pathlib import Path

    prof = Path(__file__).resolve().parents[2] / "src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml"
    est = estimate("llama3.1-8b", gpu=str(prof), gpus=8, global_batch=8, seq=4096)
    assert any("compute at the sustained clock" in n and "burst rates" in n for n in est.notes)
    assert not any("not applied in tier 2" in n for n in est.notes)
