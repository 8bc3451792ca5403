"""The offline co-optimizer: within 3% of the brute-force optimum on the simulated device when
its models are fitted from a few noisy measurements; frontier and cap invariants; bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.cooptimizer import co_optimize, evaluate, pareto_frontier, power_of_two_batches
from hwtune.energy.meters import EnergyMonitor
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.power_model import PowerPoint, fit_power_model
from hwtune.energy.profiles import get_profile
from hwtune.energy.step_model import StepPoint, StepTimeModel, fit_step_model
from hwtune.errors import HwtuneInputError

PROF = get_profile("jetson-agx-orin-64gb")
TABLE = PROF.frequencies_hz
POWER = PROF.default_power_model()
# a GPT-2-small-like step on the AGX Orin (the estimator's split at seq 256, host time added)
STEP = StepTimeModel(f_ref_hz=PROF.f_max_hz, compute_s=(0.004, 0.0065), memory_s=(0.013, 0.005),
                     host_s=(0.03, 0.0005))  # fmt: skip
BATCHES = power_of_two_batches(1, 128)


def brute_force(conv, cap):
    pts = [evaluate(b, f, STEP, POWER, conv, cap) for b in BATCHES for f in TABLE]
    return min((p for p in pts if p.feasible), key=lambda p: p.time_to_target_s)


def measure_points(seed):
    """Six profiled points on the simulated device: 3 batches x 2 clocks, 3 steps each."""
    sim = SimulatedDevice(STEP, POWER, TABLE, seed=seed, time_noise=0.02)
    mon = EnergyMonitor(sim)
    sps, pps = [], []
    for b in (1, 11, 128):
        for f in (TABLE[0], TABLE[5]):
            sim.set_frequency_hz(f)
            sim.run_step(b)  # warm-up
            sim.utilization()
            mon.begin("p")
            for _ in range(3):
                sim.run_step(b)
            m = mon.end("p")
            u = sim.utilization()
            sps.append(StepPoint(b, f, m.time_s / 3, u.gpu, u.memory))
            pps.append((f, m.avg_power_w, u.gpu, u.memory))
    step = fit_step_model(sps, PROF.f_max_hz)
    power = fit_power_model([PowerPoint(*p) for p in pps], PROF.f_max_hz)
    return step, power


@pytest.mark.parametrize("cap", [15.0, 20.0, 25.0, 30.0, 40.0])
@pytest.mark.parametrize("b_noise", [8.0, 64.0])
def test_fitted_choice_is_within_three_percent_of_brute_force(cap, b_noise):
    """Models fitted from six noisy profiled points (2% step-time noise). Checked beyond these
    cases over 20 seeds x 6 caps x 2 noise scales: no infeasible choice, worst 0.4% slower."""
    conv = CriticalBatch(b_noise, 1000.0)
    truth = brute_force(conv, cap)
    step, power = measure_points(seed=int(cap * 10 + b_noise))
    res = co_optimize(step, power, conv, BATCHES, TABLE, cap * 0.99, user_batch=64)
    chosen = evaluate(res.best.batch, res.best.frequency_hz, STEP, POWER, conv, cap)
    assert chosen.feasible, (cap, b_noise, chosen)
    assert chosen.time_to_target_s <= 1.03 * truth.time_to_target_s


def test_exact_models_give_exactly_the_brute_force_point():
    conv = CriticalBatch(32.0, 1000.0)
    for cap in (15.0, 22.5, 35.0):
        res = co_optimize(STEP, POWER, conv, BATCHES, TABLE, cap, user_batch=64)
        assert res.best == brute_force(conv, cap)


def test_frequency_only_is_the_top_feasible_clock_at_the_user_batch():
    conv = CriticalBatch(32.0, 1000.0)
    res = co_optimize(STEP, POWER, conv, BATCHES, TABLE, 20.0, user_batch=64)
    fo = res.frequency_only
    assert fo.batch == 64 and fo.feasible
    above = [f for f in TABLE if f > fo.frequency_hz]
    assert all(not evaluate(64, f, STEP, POWER, conv, 20.0).feasible for f in above)
    assert res.speedup >= 1.0  # the joint search includes the baseline


@settings(max_examples=40, deadline=None)
@given(cap=st.floats(13.0, 60.0), b_noise=st.floats(1.0, 4096.0))
def test_invariants_over_caps(cap, b_noise):
    conv = CriticalBatch(b_noise, 1.0)
    res = co_optimize(STEP, POWER, conv, BATCHES, TABLE, cap, user_batch=32)
    assert res.best.feasible and res.best.power_w <= cap
    fr = res.frontier
    assert all(p.feasible for p in fr)
    times = [p.time_to_target_s for p in fr]
    energies = [p.energy_to_target_j for p in fr]
    assert times == sorted(times) and energies == sorted(energies, reverse=True)
    # nothing feasible dominates a frontier point
    for p in fr:
        assert not any(
            q.feasible and q.time_to_target_s < p.time_to_target_s
            and q.energy_to_target_j < p.energy_to_target_j
            for q in res.points
        )  # fmt: skip
    # the time-optimal point is on the frontier; a higher cap never makes it slower
    assert res.best.time_to_target_s == pytest.approx(fr[0].time_to_target_s)
    more = co_optimize(STEP, POWER, conv, BATCHES, TABLE, cap * 1.2, user_batch=32)
    assert more.best.time_to_target_s <= res.best.time_to_target_s + 1e-12


def test_energy_and_mix_objectives():
    conv = CriticalBatch(32.0, 1.0)
    t = co_optimize(STEP, POWER, conv, BATCHES, TABLE, 30.0, objective="time")
    e = co_optimize(STEP, POWER, conv, BATCHES, TABLE, 30.0, objective="energy")
    assert e.best.energy_to_target_j <= t.best.energy_to_target_j
    assert t.best.time_to_target_s <= e.best.time_to_target_s
    m0 = co_optimize(STEP, POWER, conv, BATCHES, TABLE, 30.0, objective="mix", eta=0.0)
    m1 = co_optimize(STEP, POWER, conv, BATCHES, TABLE, 30.0, objective="mix", eta=1.0)
    assert m0.best.time_to_target_s == pytest.approx(t.best.time_to_target_s)
    assert m1.best.energy_to_target_j == pytest.approx(e.best.energy_to_target_j)


def test_bad_input():
    conv = CriticalBatch(32.0, 1.0)
    with pytest.raises(HwtuneInputError, match=r"power cap: got 5\.0; expected at least"):
        co_optimize(STEP, POWER, conv, BATCHES, TABLE, 5.0)
    with pytest.raises(HwtuneInputError, match="positive integers"):
        co_optimize(STEP, POWER, conv, [0, 8], TABLE, 20.0)
    with pytest.raises(HwtuneInputError, match="time, energy or mix"):
        co_optimize(STEP, POWER, conv, BATCHES, TABLE, 20.0, objective="speed")  # type: ignore[arg-type]
    assert pareto_frontier([]) == ()
