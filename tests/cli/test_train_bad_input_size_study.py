"""`hwtune size` and `hwtune study`: bad numbers, names, option combinations and output paths
are one line naming the option (exit 2), never a traceback, a silently ignored option or a
grid point quietly recorded as "no fit"."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--tp", "0"], "tp", ("0",)),  # was ZeroDivisionError
        (["--tp", "-1"], "tp", ("-1",)),  # was a table of negative shapes
        (["--micro-batch", "0"], "micro_batch", ("0",)),  # was ZeroDivisionError
        (["--micro-batch", "-2"], "micro_batch", ("-2",)),  # was a table
        (["--seq", "0"], "seq", ("0",)),  # was ZeroDivisionError
        (["--seq", "-5"], "seq", ("-5",)),  # was ZeroDivisionError
        (["--precision", "FP8"], "precision", ("FP8", "fp8")),  # was KeyError
        (["--precision", "fp4"], "precision", ("fp4",)),
        (["--gpu", "a100-sxm4-80gb", "--precision", "fp8"], "precision", ("a100",)),
        (["--target", "nan"], "target", ("nan", "finite")),  # was "not reachable"
        (["--target", "inf"], "target", ("inf", "finite")),
        (["--target", "7B", "--micro-batch", "-1", "--seq", "-1"], "micro_batch", ()),  # 1 token
        (["--target", "7B", "--tp", "2"], "--tp", ("--target",)),  # tp was ignored
        (["--tolerance", "0.1"], "--tolerance", ("--target",)),  # was ignored
    ],
)
def test_size_bad_values_are_named(rejects, args, field, words):
    rejects(["size", *args], field, *words)


def test_size_target_with_tolerance_still_runs():
    r = CliRunner().invoke(app, ["size", "--target", "7B", "--tolerance", "0.05", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["proposals"]
