"""Power at a frequency (cost/power.py), the fitted power and step-time models, statistical
efficiency (McCandlish et al. 2018) and the learning-rate rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.power import (
    clock_fraction,
    dynamic_power_fraction,
    frequency_ratio_for_power,
    power_at_frequency,
    step_energy_j,
)
from hwtune.energy.convergence import CriticalBatch, NoiseScaleEstimator, scale_learning_rate
from hwtune.energy.power_model import PowerModel, PowerPoint, fit_power_model
from hwtune.energy.step_model import StepPoint, StepTimeModel, fit_step_model
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device

# --- cost/power.py ---------------------------------------------------------------------------


def test_power_shape_cube_above_floor_linear_below():
    # above the floor P_dyn ~ f^3: halving f from 1.0 to 0.5 with floor 0.4 divides it by 8
    assert dynamic_power_fraction(0.5, 0.4) == pytest.approx(0.125)
    # below the floor voltage is flat: power is linear in f
    assert dynamic_power_fraction(0.2, 0.6) == pytest.approx(0.2 * 0.36)
    assert dynamic_power_fraction(0.1, 0.6) * 2 == pytest.approx(dynamic_power_fraction(0.2, 0.6))
    assert dynamic_power_fraction(0.7, 1.0) == pytest.approx(0.7)  # constant voltage


def test_zero_floor_inverse_is_the_existing_cube_law():
    dev = get_device("h100-sxm-80gb")
    static = dev.idle_w if dev.idle_w is not None else 0.12 * dev.tdp_w
    for cap in (300.0, 450.0, 600.0):
        r = frequency_ratio_for_power(static, dev.tdp_w - static, cap, 1.0, 0.0)
        assert r == pytest.approx(clock_fraction(dev, cap))


@settings(max_examples=200, deadline=None)
@given(
    static=st.floats(0.0, 50.0),
    dyn=st.floats(1.0, 500.0),
    u=st.floats(0.05, 1.0),
    v_floor=st.floats(0.0, 1.0),
    f=st.floats(0.01, 1.0),
)
def test_frequency_for_power_inverts_power_at_frequency(static, dyn, u, v_floor, f):
    p = power_at_frequency(static, dyn, f, u, v_floor)
    r = frequency_ratio_for_power(static, dyn, p, u, v_floor)
    assert r == pytest.approx(f, rel=1e-6, abs=1e-9)
    # and power is non-decreasing in the clock
    assert power_at_frequency(static, dyn, min(1.0, f * 1.1), u, v_floor) >= p - 1e-12


def test_step_energy_integrates_power():
    e = step_energy_j(2.0, 1.5, static_w=10, dynamic_max_w=40, f_ratio=1.0, memory_busy_s=0.5,
                      memory_w=4)  # fmt: skip
    assert e == pytest.approx(10 * 2 + 40 * 1.5 + 4 * 0.5)
    with pytest.raises(ValueError, match="busy time"):
        step_energy_j(1.0, 1.5, 10, 40, 1.0)


# --- power model fit --------------------------------------------------------------------------
TRUE = PowerModel(static_w=8.0, dynamic_w=36.0, f_ref_hz=1300.5e6, v_floor=0.6, memory_w=6.6)
CLOCKS = (306e6, 612e6, 918e6, 1300.5e6)


def test_fit_recovers_the_model_from_exact_points():
    pts = [
        PowerPoint(f, TRUE.power_w(f, u, m), u, m)
        for f in CLOCKS
        for u, m in ((0.5, 0.1), (0.95, 0.4))
    ]
    fit = fit_power_model(pts, TRUE.f_ref_hz)
    assert fit.static_w == pytest.approx(8.0, abs=1e-6)
    assert fit.dynamic_w == pytest.approx(36.0, rel=1e-6)
    assert fit.memory_w == pytest.approx(6.6, rel=1e-6)
    assert fit.v_floor == pytest.approx(0.6)


def test_fit_with_noise_predicts_within_two_percent():
    rng = np.random.default_rng(7)
    pts = []
    for f in CLOCKS:
        for u, m in ((0.55, 0.15), (0.8, 0.3), (0.95, 0.4)):
            pts.append(
                PowerPoint(f, TRUE.power_w(f, u, m) * (1 + 0.01 * rng.standard_normal()), u, m)
            )
    fit = fit_power_model(pts, TRUE.f_ref_hz)
    for f in (408e6, 714e6, 1224e6):
        assert fit.power_w(f, 0.7, 0.25) == pytest.approx(TRUE.power_w(f, 0.7, 0.25), rel=0.02)


def test_fit_rejects_too_few_points_and_one_clock():
    with pytest.raises(HwtuneInputError, match="at least"):
        fit_power_model([PowerPoint(1e9, 20.0)], 1e9)
    one = [PowerPoint(1e9, 20.0 + i, 0.5 + 0.1 * i) for i in range(4)]
    with pytest.raises(HwtuneInputError, match="two or more clocks"):
        fit_power_model(one, 1e9)
    with pytest.raises(HwtuneInputError, match="utilization"):
        fit_power_model([PowerPoint(1e9, 20, 1.5), PowerPoint(5e8, 10), PowerPoint(6e8, 11)], 1e9)


def test_max_frequency_respects_the_cap():
    table = (306e6, 612e6, 918e6, 1300.5e6)
    f = TRUE.max_frequency_hz(20.0, table, 0.9, 0.2)
    assert f == 612e6
    assert TRUE.power_w(612e6, 0.9, 0.2) <= 20.0 < TRUE.power_w(918e6, 0.9, 0.2)
    assert TRUE.max_frequency_hz(5.0, table) is None


# --- step model ------------------------------------------------------------------------------
STEP = StepTimeModel(f_ref_hz=1300.5e6, compute_s=(0.004, 0.0065), memory_s=(0.013, 0.005),
                     host_s=(0.03, 0.0005))  # fmt: skip


def test_step_parts_scale_with_their_clocks():
    a, b = STEP.parts(8, 1300.5e6), STEP.parts(8, 650.25e6)
    assert b.compute_s == pytest.approx(2 * a.compute_s)
    assert (b.memory_s, b.host_s) == (a.memory_s, a.host_s)
    assert a.utilization == pytest.approx((a.memory_s + a.compute_s) / a.total_s)


def test_step_fit_with_utilization_recovers_each_part():
    pts = []
    for bt in (1, 8, 64):
        for f in (306e6, 918e6):
            p = STEP.parts(bt, f)
            pts.append(StepPoint(bt, f, p.total_s, p.utilization, p.mem_utilization))
    fit = fit_step_model(pts, STEP.f_ref_hz)
    for name in ("compute_s", "memory_s", "host_s"):
        assert getattr(fit, name) == pytest.approx(getattr(STEP, name), rel=1e-6, abs=1e-9)


def test_step_fit_without_utilization_predicts_time_and_books_the_rest_as_busy():
    pts = [StepPoint(bt, f, STEP.step_time_s(bt, f)) for bt in (1, 8, 64) for f in (306e6, 918e6)]
    fit = fit_step_model(pts, STEP.f_ref_hz)
    for bt, f in ((4, 612e6), (32, 1300.5e6)):
        assert fit.step_time_s(bt, f) == pytest.approx(STEP.step_time_s(bt, f), rel=1e-6)
    assert fit.parts(4, 612e6).utilization == pytest.approx(1.0)  # conservative for power


def test_step_model_from_estimator_matches_the_estimator():
    from hwtune.energy.step_model import step_model_from_estimator
    from hwtune.energy.workloads import GPT2_SMALL
    from hwtune.hardware.cluster import make_cluster
    from hwtune.train.estimator import estimate

    dev = get_device("jetson-agx-orin-64gb")
    m = step_model_from_estimator(GPT2_SMALL, dev, 256, batches=(1, 2, 4, 8, 16))
    for bt in (2, 16):
        t = estimate(GPT2_SMALL, make_cluster(dev, 1), micro_batch=bt, seq=256, zero=0).step_time_s
        assert m.step_time_s(bt, m.f_ref_hz) == pytest.approx(t, rel=0.05)
    p = m.parts(16, m.f_ref_hz)
    assert p.compute_s > 0 and p.memory_s > 0  # both regimes present in a small transformer


def test_bad_step_inputs():
    with pytest.raises(HwtuneInputError, match="batch size"):
        STEP.parts(0, 1e9)
    with pytest.raises(HwtuneInputError, match="at least two"):
        fit_step_model([StepPoint(1, 1e9, 0.1)], 1e9)
    with pytest.raises(HwtuneInputError, match="two or more clocks"):
        fit_step_model([StepPoint(1, 1e9, 0.1), StepPoint(2, 1e9, 0.2)], 1e9)


# --- statistical efficiency ------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(b_noise=st.floats(1.0, 1e5), s_min=st.floats(1.0, 1e6), b=st.floats(1.0, 1e6))
def test_steps_examples_tradeoff_is_the_mccandlish_hyperbola(b_noise, s_min, b):
    cb = CriticalBatch(b_noise, s_min)
    s, e = cb.steps(b), cb.examples(b)
    assert (s / cb.s_min - 1) * (e / cb.e_min - 1) == pytest.approx(1.0, rel=1e-9)
    assert s >= s_min and e >= cb.e_min


def test_at_the_critical_batch_twice_the_minimum_steps_and_examples():
    cb = CriticalBatch(b_noise=512, s_min=1000)
    assert cb.steps(512) == pytest.approx(2000)
    assert cb.examples(512) == pytest.approx(2 * cb.e_min)
    assert CriticalBatch.from_run(batch=64, steps=9000, b_noise=512).s_min == pytest.approx(1000)
    with pytest.raises(HwtuneInputError, match="b_noise"):
        CriticalBatch(0, 10)


def test_noise_scale_estimator_recovers_b_simple_from_sampled_gradients():
    # per-example gradients g ~ N(G, Σ) in d dims: B_simple = tr(Σ) / |G|^2 is known exactly
    rng = np.random.default_rng(0)
    d = 50
    g_true = rng.standard_normal(d) * 0.1
    sigma = np.abs(rng.standard_normal(d)) * 0.5
    b_true = float(np.sum(sigma**2) / np.sum(g_true**2))
    est = NoiseScaleEstimator(b_small=8, b_big=64, ema=0.99)
    for _ in range(3000):
        ex = g_true + sigma * rng.standard_normal((64, d))
        g_small = ex[:8].mean(axis=0)
        g_big = ex.mean(axis=0)
        est.update(float(g_small @ g_small), float(g_big @ g_big))
    assert est.b_simple == pytest.approx(b_true, rel=0.15)


def test_noise_scale_exact_expectations_give_the_exact_ratio():
    g2, tr = 2.0, 300.0  # B_simple = 150
    est = NoiseScaleEstimator(16, 256, ema=0.0)
    assert est.update(g2 + tr / 16, g2 + tr / 256) == pytest.approx(150.0)
    with pytest.raises(HwtuneInputError, match="b_small < b_big"):
        NoiseScaleEstimator(64, 8)


def test_learning_rate_rules():
    assert scale_learning_rate(0.1, 256, 1024, "linear") == pytest.approx(0.4)
    assert scale_learning_rate(1e-3, 16, 64, "sqrt") == pytest.approx(2e-3)
    assert scale_learning_rate(1e-3, 16, 64, "none") == 1e-3
    with pytest.raises(HwtuneInputError, match="linear, sqrt or none"):
        scale_learning_rate(1.0, 1, 2, "cubic")  # type: ignore[arg-type]
    assert math.isclose(scale_learning_rate(1.0, 4, 1, "sqrt"), 0.5)
