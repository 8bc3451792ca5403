"""Findings of the before-stop review of the session d68ef10..c638cf5, each pinned by a test."""

from __future__ import annotations

import pytest

from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.replay import ReplayDevice


def test_replay_refuses_a_column_the_first_row_left_empty() -> None:
    """A trace whose first row leaves energy_j empty and a later row fills it: the columns
    are the first row's, so the later cell would be ignored; it is refused in one line (it
    used to raise KeyError from the energy_j monotonicity check)."""
    rows = [
        {"time_s": 0, "power_w": 1, "energy_j": ""},
        {"time_s": 1, "power_w": 1, "energy_j": 5},
    ]
    with pytest.raises(MeterError, match="energy_j"):
        ReplayDevice(rows)


def test_a_glitched_interval_does_not_end_a_recovery() -> None:
    """An interval whose counter went down (negative energy, `Interval.valid` False) reads as
    under the cap; it must not clear the tuner's over-the-cap state, which nothing measured
    contradicts (it used to: ``_recover = iv.over_cap`` for every interval)."""
    from hwtune.energy.meters.simulated import SimulatedDevice
    from hwtune.energy.power_model import PowerModel
    from hwtune.energy.step_model import StepTimeModel
    from hwtune.energy.tuner import OnlineTuner

    table = tuple(f * 1e6 for f in (306, 408, 510, 612, 714, 816, 918, 1020))
    power = PowerModel(static_w=8.0, dynamic_w=36.0, f_ref_hz=table[-1], memory_w=6.0)
    step = StepTimeModel(
        f_ref_hz=table[-1],
        compute_s=(0.004, 0.0065),
        memory_s=(0.013, 0.005),
        host_s=(0.03, 0.0005),
    )

    class Resetting(SimulatedDevice):
        offset = -1e6

        def energy_j(self) -> float:
            return self._e - self.offset

    sim = Resetting(step, power, table)
    tuner = OnlineTuner(
        sim, 20.0, batch_sizes=(8, 16, 32, 64), base_batch=64, b_noise=32.0,
        control_interval_s=2.0, refinements=0,
    )  # fmt: skip

    def run(n: int) -> None:
        for _ in range(n):
            plan = tuner.step_begin()
            sim.run_step(plan.batch_size)
            tuner.step_end()

    run(400)
    assert tuner.phase == "run"
    tuner._recover = True  # as after an interval over the cap
    sim.offset = sim._e  # the counter restarts from zero
    n = len(tuner.history)
    while len(tuner.history) == n:
        run(1)
    assert not tuner.history[-1].valid
    assert tuner._recover


def test_a_refused_new_cap_keeps_the_held_clocks() -> None:
    """`OnlineTuner.set_cap` with a cap nothing fits is refused and "changes nothing": the
    clocks held back after an overshoot stay held (they used to be forgotten)."""
    from hwtune.energy.meters.simulated import SimulatedDevice
    from hwtune.energy.power_model import PowerModel
    from hwtune.energy.step_model import StepTimeModel
    from hwtune.energy.tuner import OnlineTuner
    from hwtune.errors import HwtuneInputError

    table = tuple(f * 1e6 for f in (306, 408, 510, 612, 714, 816, 918, 1020))
    power = PowerModel(static_w=8.0, dynamic_w=36.0, f_ref_hz=table[-1], memory_w=6.0)
    step = StepTimeModel(f_ref_hz=table[-1], compute_s=(0.004, 0.0065), memory_s=(0.013, 0.005))
    sim = SimulatedDevice(step, power, table)
    tuner = OnlineTuner(sim, 20.0, batch_sizes=(8, 16, 32, 64), base_batch=64, b_noise=32.0)
    for _ in range(300):
        plan = tuner.step_begin()
        sim.run_step(plan.batch_size)
        tuner.step_end()
    assert tuner.phase == "run"
    tuner._held = {table[-1]: 3}  # as after the top clock overshot
    with pytest.raises(HwtuneInputError):
        tuner.set_cap(1.0)
    assert tuner.cap_w == 20.0
    # (closing the open interval first counts one interval of the hold down, as any close does)
    assert table[-1] in tuner._held


def test_study_rows_are_put_in_grid_order_whatever_order_they_were_written(tmp_path) -> None:  # noqa: ANN001
    """`test_study_order.py`'s two-worker case passes whenever the workers happen to finish in
    grid order; here the file is written out of order on purpose (and a row of another grid is
    added first), so the reordering itself is what is checked."""
    import csv

    from hwtune.train.study import COLUMNS, _in_grid_order, grid, run_study

    pts = grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [8, 16, 32], 16, 4096)
    path = run_study(pts, tmp_path, workers=1)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    foreign = dict(rows[0], n_gpus="64")  # a point outside this grid, from an earlier run
    fields = list(COLUMNS) + ["error"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows([foreign, *reversed(rows)])
    _in_grid_order(path, fields, [p.key for p in pts])
    with path.open(newline="") as f:
        assert [r["n_gpus"] for r in csv.DictReader(f)] == ["8", "16", "32", "64"]


@pytest.mark.parametrize("key", ["capturable", "differentiable"])
def test_an_unsupported_torch_group_option_set_true_is_refused(key: str) -> None:
    """README: capturable and differentiable are not supported. A parameter group that sets
    one to True used to be kept and silently ignored; it is refused in one line (False/None,
    which ask for nothing, are still kept)."""
    import torch

    from hwtune.errors import HwtuneInputError
    from hwtune.optim import AdamW

    opt = AdamW([torch.nn.Parameter(torch.randn(3))])
    with pytest.raises(HwtuneInputError) as ei:
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(2))], key: True})
    assert ei.value.field == f"param_groups[1][{key!r}]" and "\n" not in str(ei.value)
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(2))], key: False})
    assert len(opt.param_groups) == 2
