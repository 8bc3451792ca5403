"""A user's review of ``hwtune compile --run`` and ``python -m hwtune.parallel.runtime``: an
explicit order whose loss stage runs its forwards out of micro-batch order is refused before any
process starts (torch's runtime finds micro-batch i's loss at position i); ZeRO-3 with dp > 1
under a split backward (I and W) is refused, as the run's gradients went unreduced."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hwtune.errors import HwtuneInputError
from hwtune.parallel.spec import make_spec

pytest.importorskip("torch")


def _invoke(args: list[str]):
    from hwtune.cli.main import app

    return CliRunner().invoke(app, ["compile", *args])


# ---- 1. an explicit order the compiler accepts but torch's runtime cannot run ------------------
OUT_OF_ORDER = {0: ["0F0", "0F1", "0B0", "0B1"], 1: ["1F1", "1B1", "1F0", "1B0"]}


def test_loss_stage_forwards_out_of_order_are_refused_before_a_run(monkeypatch):
    from hwtune.parallel.runtime import launch

    spec = make_spec({"mesh": {"pp": 2}, "global_batch": 2, "schedule": {"actions": OUT_OF_ORDER}})
    monkeypatch.setattr(launch, "launch", lambda cfg: pytest.fail("processes were started"))
    with pytest.raises(HwtuneInputError) as e:
        launch.run_spec(spec, steps=1)
    msg = str(e.value)
    assert "schedule.actions.1" in msg and "1F1 1B1 1F0 1B0" in msg
    assert "micro-batch order" in msg and "\n" not in msg


def test_loss_stage_forwards_out_of_order_exit_2_at_the_cli(tmp_path):
    s = tmp_path / "c8.yaml"
    s.write_text(
        "mesh: {pp: 2}\nglobal_batch: 2\n"
        "schedule: {actions: {0: [0F0, 0F1, 0B0, 0B1], 1: [1F1, 1B1, 1F0, 1B0]}}\n"
    )
    r = _invoke(["--strategy", str(s), "--run", "--steps", "1"])
    assert r.exit_code == 2, r.output
    assert "c8.yaml.schedule.actions.1" in r.output
    assert "Traceback" not in r.output


def test_an_in_order_explicit_order_still_runs():
    from hwtune.parallel.runtime.launch import run_config

    ok = {0: ["0F0", "0F1", "0B0", "0B1"], 1: ["1F0", "1B0", "1F1", "1B1"]}
    cfg = run_config(make_spec({"mesh": {"pp": 2}, "global_batch": 2, "schedule": {"actions": ok}}))
    assert cfg.orders[1] == ok[1]


# ---- 2. FSDP2 (ZeRO-3) stages under a split backward: refused before a run --------------------
@pytest.mark.parametrize("schedule", ["zb-h1", "zbv"])
def test_zero3_with_dp_under_a_split_backward_is_refused(monkeypatch, schedule):
    # torch's schedule runtime reshards a stage between a micro-batch's I and its W, and W's
    # gradients then land on the sharded parameters: the last stage issued no reduce-scatter
    # and the losses drifted from the reference (5.7e-4 under zb-h1, 1.3e-3 under zbv)
    from hwtune.parallel.runtime import launch

    spec = make_spec(pp=2, dp=2, zero=3, schedule=schedule, global_batch=8, micro_batch=2)
    monkeypatch.setattr(launch, "launch", lambda cfg: pytest.fail("processes were started"))
    with pytest.raises(HwtuneInputError) as e:
        launch.run_spec(spec, steps=1)
    assert e.value.field == "zero" and "splits the backward into I and W" in str(e.value)


def test_zero3_over_context_parallel_ranks_under_a_split_backward_is_refused(monkeypatch):
    # FSDP2 shards over dp x cp (`train.py`: the cp mesh when dp = 1): the same lost gradients
    from hwtune.parallel.runtime import launch

    spec = make_spec(pp=2, cp=2, zero=3, schedule="zbv", global_batch=8, micro_batch=2)
    monkeypatch.setattr(launch, "launch", lambda cfg: pytest.fail("processes were started"))
    with pytest.raises(HwtuneInputError, match="dp x cp > 1"):
        launch.run_spec(spec, steps=1)


def test_zero2_and_1f1b_under_zero3_still_build_a_run():
    from hwtune.parallel.runtime.launch import run_config

    assert run_config(make_spec(pp=2, dp=2, zero=2, schedule="zb-h1", global_batch=8)).zero == 2
    assert run_config(make_spec(pp=2, dp=2, zero=3, schedule="1f1b", global_batch=8)).zero == 3
