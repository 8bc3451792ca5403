"""Review of hwtune.energy: Zeus's cost metric with a cap-independent MAXPOWER, the cap as a
hard bound at its boundary, monotonicity in the cap and in eta, bad library input as one-line
errors, meters whose counters reset or whose clocks run backwards, and the online tuner when
the meter misbehaves."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.cooptimizer import co_optimize, cost, evaluate
from hwtune.energy.power_model import PowerModel
from hwtune.energy.step_model import StepTimeModel
from hwtune.errors import HwtuneInputError

# A small hand-made device (not a profile): 8 clocks, a GPT-2-small-like step.
TABLE = tuple(f * 1e6 for f in (306, 408, 510, 612, 714, 816, 918, 1020))
F_MAX = TABLE[-1]
POWER = PowerModel(static_w=8.0, dynamic_w=36.0, f_ref_hz=F_MAX, v_floor=0.6, memory_w=6.0)
STEP = StepTimeModel(f_ref_hz=F_MAX, compute_s=(0.004, 0.0065), memory_s=(0.013, 0.005),
                     host_s=(0.03, 0.0005))  # fmt: skip
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CONV = CriticalBatch(32.0, 1.0)


def _grid(cap):
    return [evaluate(b, f, STEP, POWER, CONV, cap) for b in BATCHES for f in TABLE]


# -- Zeus's cost metric (You, Chung & Chowdhury, NSDI'23, §3.1, Eq. 2) ---------------------------


def test_mix_cost_is_zeus_eta_energy_plus_maxpower_time():
    """Cost = eta * ETA + (1 - eta) * MAXPOWER * TTA, with MAXPOWER the device's maximum power
    — a hand-computed point: 100 J, 2 s, MAXPOWER 300 W, eta 0.25 -> 25 + 450 = 475."""
    p = SimpleNamespace(energy_to_target_j=100.0, time_to_target_s=2.0)
    assert cost(p, "mix", 300.0, 0.25) == pytest.approx(0.25 * 100.0 + 0.75 * 300.0 * 2.0)


@settings(max_examples=30, deadline=None)
@given(cap=st.floats(14.0, 50.0), looser=st.floats(1.0, 2.0), eta=st.floats(0.0, 1.0))
def test_a_looser_cap_never_gives_a_worse_mix_optimum(cap, looser, eta):
    """The metric must not depend on the cap: otherwise a looser cap re-weights time and can
    choose a point that is worse by the metric the tighter cap optimized (it did at cap 50 W,
    eta 0.3 on the Orin profile when the cap stood in for MAXPOWER)."""
    try:
        tight = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap, objective="mix", eta=eta,
                            max_power_w=60.0)  # fmt: skip
    except HwtuneInputError:
        return  # nothing fits the tighter cap
    loose = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap * looser, objective="mix",
                        eta=eta, max_power_w=60.0)  # fmt: skip
    c_tight = cost(tight.best, "mix", 60.0, eta)
    c_loose = cost(loose.best, "mix", 60.0, eta)
    assert c_loose <= c_tight * (1 + 1e-12)


def test_default_maxpower_does_not_move_with_the_cap():
    """Without max_power_w the same point must win at two caps that both admit it and the
    same grid: the metric is a property of the device, not of the cap."""
    grid = _grid(1e9)
    # the unconstrained mix optimum under the default MAXPOWER (top clock, fully busy)
    p_max = POWER.power_w(F_MAX, 1.0, 1.0)
    best = min(grid, key=lambda p: (cost(p, "mix", p_max, 0.5), -p.frequency_hz))
    for cap in (best.power_w, best.power_w * 1.3, 1e6):
        got = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap, objective="mix", eta=0.5).best
        assert (got.batch, got.frequency_hz) == (best.batch, best.frequency_hz)


@pytest.mark.parametrize("cap", [16.0, 20.0, 30.0])
def test_eta_one_minimizes_energy_and_eta_zero_time(cap):
    pts = [p for p in _grid(cap) if p.feasible]
    e = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap, objective="mix", eta=1.0).best
    t = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap, objective="mix", eta=0.0).best
    assert e.energy_to_target_j == min(p.energy_to_target_j for p in pts)
    assert t.time_to_target_s == min(p.time_to_target_s for p in pts)


# -- the cap is a hard bound ---------------------------------------------------------------------


def test_a_point_at_the_cap_fits_and_one_a_hair_above_does_not():
    unconstrained = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, 1e9).best
    cap = unconstrained.power_w
    at = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap).best
    assert (at.batch, at.frequency_hz) == (unconstrained.batch, unconstrained.frequency_hz)
    below = math.nextafter(cap, 0.0) * (1 - 1e-13)
    res = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, below)
    assert res.best.power_w <= below
    assert all(p.power_w <= below for p in res.points if p.feasible)


@settings(max_examples=40, deadline=None)
@given(cap=st.floats(14.0, 60.0), objective=st.sampled_from(["time", "energy", "mix"]))
def test_the_choice_never_exceeds_the_cap_and_a_looser_cap_is_never_slower(cap, objective):
    try:
        res = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap, objective=objective)
    except HwtuneInputError:
        return
    assert res.best.power_w <= cap
    if objective != "mix":
        more = co_optimize(STEP, POWER, CONV, BATCHES, TABLE, cap * 1.1, objective=objective)
        key = "time_to_target_s" if objective == "time" else "energy_to_target_j"
        assert getattr(more.best, key) <= getattr(res.best, key)


# -- bad library input: one-line HwtuneInputError naming field, value and expectation ----------


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"frequencies_hz": [math.nan, *TABLE]}, "frequencies"),
        ({"frequencies_hz": [math.inf, *TABLE]}, "frequencies"),
        ({"batch_sizes": [math.inf]}, "batch sizes"),
        ({"batch_sizes": [math.nan]}, "batch sizes"),
        ({"batch_sizes": [2.5, 4]}, "batch sizes"),
        ({"user_batch": 2.5}, "user batch"),
        ({"user_batch": 0}, "user batch"),
        ({"max_power_w": -1.0}, "max power"),
        ({"max_power_w": math.nan}, "max power"),
    ],
)
def test_co_optimize_bad_arguments(kw, field):
    args = {"batch_sizes": BATCHES, "frequencies_hz": TABLE, **kw}
    with pytest.raises(HwtuneInputError) as ei:
        co_optimize(STEP, POWER, CONV, cap_w=30.0, **args)
    assert ei.value.field == field
    assert "\n" not in str(ei.value)
