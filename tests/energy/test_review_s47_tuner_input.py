"""OnlineTuner's argument checks (base_lr, non-number arguments, a single profile batch), its
step_begin()/step_end() call order, and what `hwtune energy tune` says when the run ends before
the tuner chose, or when --batches gives it one batch to profile."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.profiles import get_profile
from hwtune.energy.tuner import OnlineTuner
from hwtune.energy.workloads import edge_step_model
from hwtune.errors import HwtuneInputError

PROF = get_profile("jetson-agx-orin-64gb")
BATCHES = [1, 4, 16, 64]


def _sim() -> SimulatedDevice:
    return SimulatedDevice(
        edge_step_model(PROF), PROF.default_power_model(), PROF.frequencies_hz, seed=0
    )


def _tuner(**kw: object) -> OnlineTuner:
    args: dict[str, object] = {"batch_sizes": BATCHES, "base_batch": 16, "b_noise": 16.0}
    args.update(kw)
    cap = args.pop("cap_w", 20.0)
    return OnlineTuner(_sim(), cap, **args)


@pytest.mark.parametrize("lr", [math.nan, math.inf, -math.inf, -0.1, 0.0, "0.1", True, None])
def test_base_lr_that_is_no_positive_finite_number_is_refused(lr):
    # StepPlan.lr is base_lr scaled by the batch ratio: a NaN/inf/negative base gives the user's
    # training loop a learning rate it cannot use, so it must be refused up front
    with pytest.raises(HwtuneInputError) as err:
        _tuner(base_lr=lr)
    assert err.value.field == "base_lr"
    assert "positive finite" in err.value.expected


def test_a_good_base_lr_reaches_the_plan_scaled_by_the_batch():
    # sqrt rule (the default): lr x sqrt(batch / base_batch), the first probe at the smallest batch
    plan = _tuner(base_lr=0.4).step_begin()
    assert plan.lr == pytest.approx(0.4 * math.sqrt(plan.batch_size / 16))


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"cap_w": "20"}, "power cap"),
        ({"cap_w": True}, "power cap"),
        ({"margin": "0.1"}, "margin"),
        ({"headroom": None}, "headroom"),
        ({"eta": "0.5"}, "eta"),
        ({"b_noise": "16"}, "b_noise"),
        ({"max_power_w": "30"}, "max power"),
        ({"recommit_ratio": "2"}, "recommit ratio"),
        ({"control_interval_s": "1"}, "control interval"),
        ({"hold_intervals": True}, "hold intervals"),
        ({"refinements": 1.0}, "refinements"),
        ({"warmup_steps": True}, "warmup steps, profile steps"),
        ({"batch_sizes": 8}, "batch sizes"),
        ({"profile_batches": [4, 0]}, "profile batches"),
    ],
)
def test_a_non_number_argument_gets_one_error_naming_it(kw, field):
    # before the fix: a raw TypeError from a comparison ('>' between str and int), or a bool
    # taken as the number 1
    with pytest.raises(HwtuneInputError) as err:
        _tuner(**kw)
    assert err.value.field == field


def test_set_cap_refuses_a_non_number():
    t = _tuner()
    with pytest.raises(HwtuneInputError) as err:
        t.set_cap("15")
    assert err.value.field == "power cap"
    assert t.cap_w == 20.0  # unchanged


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"batch_sizes": [8]}, "batch sizes"),
        ({"batch_sizes": [8, 8]}, "batch sizes"),
        ({"profile_batches": [16, 16]}, "profile batches"),
    ],
)
def test_one_distinct_profile_batch_is_refused_up_front(kw, field):
    # profiling measures one point per profile batch and the models need two: before, the run
    # raised 'profiling: got 1; expected at least two measured points' after the first probe
    with pytest.raises(HwtuneInputError) as err:
        _tuner(**kw)
    assert err.value.field == field
    assert "at least two distinct batch sizes" in err.value.expected


def test_two_batches_get_past_profiling():
    # the lower bound of the check above is the right one: two distinct batches do commit
    sim = _sim()
    t = OnlineTuner(sim, 20.0, [4, 64], base_batch=64, b_noise=16.0)
    for _ in range(200):
        plan = t.step_begin()
        sim.run_step(plan.batch_size)
        t.step_end()
    assert t.phase == "run" and t.choice is not None


def test_step_end_without_step_begin_is_refused_and_not_counted():
    t = _tuner()
    with pytest.raises(HwtuneInputError) as err:
        t.step_end()
    assert err.value.field == "step_end()"
    assert "step_begin()" in str(err.value)
    assert t.profile_step_count == 0  # before the fix: counted as a profile step


def test_step_begin_twice_is_refused_and_the_order_recovers():
    sim = _sim()
    t = OnlineTuner(sim, 20.0, BATCHES, base_batch=16, b_noise=16.0)
    plan = t.step_begin()
    with pytest.raises(HwtuneInputError) as err:
        t.step_begin()
    assert err.value.field == "step_begin()"
    sim.run_step(plan.batch_size)
    t.step_end()  # the pending step still ends normally
    assert t.profile_step_count == 1
    with pytest.raises(HwtuneInputError):
        t.step_end()  # and a second end is refused


def _tune(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["energy", "tune", *args])


def test_cli_tune_ending_mid_profiling_says_so():
    # --json is the independent record: phase profile and no choice after one step
    doc = _tune("--steps", "1", "--json")
    assert doc.exit_code == 0, doc.output
    assert '"phase": "profile"' in doc.output and '"choice": null' in doc.output
    r = _tune("--steps", "1")
    assert r.exit_code == 0, r.output
    assert "still profiling after 1 step " in r.output
    assert "no choice yet" in r.output and "--steps" in r.output
    assert "at 306 MHz after" not in r.output  # the old line, read as a tuned result


def test_cli_tune_that_commits_still_reports_the_choice():
    r = _tune("--steps", "150")
    assert r.exit_code == 0, r.output
    assert "still profiling" not in r.output and "profiling steps" in r.output


@pytest.mark.parametrize("batches", ["1000000", "8", "8,8"])
def test_cli_tune_with_one_batch_names_batches(batches):
    r = _tune("--batches", batches)
    assert r.exit_code == 2
    line = r.output.strip()
    assert line.count("\n") == 0
    assert line.startswith(f"error: --batches: got '{batches}'; expected at least two distinct")
