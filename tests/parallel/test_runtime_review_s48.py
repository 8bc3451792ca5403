"""A user's review of ``hwtune compile --run`` and ``python -m hwtune.parallel.runtime``: an
explicit order whose loss stage runs its forwards out of micro-batch order is refused before any
process starts (torch's runtime finds micro-batch i's loss at position i)."""

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
