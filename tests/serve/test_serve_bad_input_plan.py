"""`hwtune serve plan`: options it cannot honour are errors, and an impossible SLO says the best
of every metric."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

PLAN = ["serve", "plan", "--max-gpus", "1", "--concurrency", "2", "--input-len", "64",
        "--num-requests", "4", "--processes", "1", "--no-disagg"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--output-len", "8", "--top", "0"], "top"),
        (["--output-len", "8", "--top", "-2"], "top"),
        (["--output-len", "1", "--tpot-p90", "0.05"], "--tpot-p90"),  # TPOT undefined: always met
    ],
)
def test_plan_rejects(args, field):
    r = CliRunner().invoke(app, [*PLAN, *args])
    assert r.exit_code == 2, r.output
    assert field in r.output and "Traceback" not in r.output
    assert r.output.count("\n") == 1, r.output


def test_an_impossible_e2e_says_the_best_e2e():
    r = CliRunner().invoke(app, [*PLAN, "--output-len", "8", "--e2e-p90", "1e-6"])
    assert r.exit_code == 2, r.output
    assert "best p90 E2E" in r.output and "Traceback" not in r.output
