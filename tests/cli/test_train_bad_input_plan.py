"""`hwtune plan`: bad numbers, constraints and option combinations are one line naming the
option (exit 2), never a traceback; options the chosen mode would ignore are errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

JOB = ["plan", "-m", "llama3.1-8b", "--gpus", "8", "--global-batch", "16", "--seq", "2048"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--seq", "0"], "seq"),  # was ZeroDivisionError
        (["--seq", "-1"], "seq"),  # was "constraints: got 'none'"
        (["--top", "0"], "top"),  # was IndexError
        (["--top", "-1"], "top"),
        (["--precision", "fp4"], "precision"),  # was a pydantic traceback
        (["--fix", "tp=0"], "--fix tp"),
        (["--fix", "tp=abc"], "--fix tp"),
        (["--fix", "recompute=foo"], "--fix recompute"),  # was IndexError
        (["--fix", "zero=7"], "--fix zero"),  # was IndexError
        (["--fix", "schedule=foo"], "--fix schedule"),  # was "no strategy fits"
        (["--max", "pp=abc"], "--max pp"),  # was ValueError traceback
        (["--max", "pp=0"], "--max pp"),
        (["--max", "foo=2"], "--max"),  # was ignored
        (["--objective", "cost", "--price-per-gpu-hour", "-1"], "--price-per-gpu-hour"),
        (
            ["--objective", "cost", "--price-per-gpu-hour", "nan"],
            "--price-per-gpu-hour",
        ),  # NaN JSON
        (["--objective", "time-to-train", "--tokens", "-1"], "tokens"),
        (["--objective", "time-to-train", "--tokens", "inf"], "tokens"),  # Infinity in JSON
        (["--what-if", "nic=100,abc"], "--what-if"),  # was ValueError traceback
        (["--what-if", "nic=-100"], "--what-if nic"),  # was a multi-line pydantic message
        (["--what-if", "nic=nan"], "--what-if nic"),
        (["--what-if", "domain=7.5"], "--what-if domain"),  # was truncated to 7
    ],
)
def test_bad_values_are_named(rejects, args, field):
    rejects([*JOB, *args], field)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--target-efficiency", "0.5"], "--target-efficiency"),  # no --what-if
        (["--price-per-gpu-hour", "2"], "--price-per-gpu-hour"),  # ranked by throughput
        (["--tokens", "1e9"], "--tokens"),
        (["--gpu", "h100,a100", "--what-if", "nic=100,200"], "--gpu"),  # a100 was dropped
        (["--fp8-recipe", "current"], "--fp8-recipe"),  # bf16
    ],
)
def test_ignored_options_are_errors(rejects, args, field):
    rejects([*JOB, *args], field)


def test_cluster_file_replaces_gpu_options(tmp_path, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 8\n")
    rejects([*JOB, "--cluster", str(f)], "--gpus")
    r = CliRunner().invoke(app, [*JOB[:3], *JOB[5:], "--cluster", str(f), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["n_gpus"] == 8


def test_used_options_still_run():
    for extra in (["--objective", "cost", "--price-per-gpu-hour", "2"],
                  ["--objective", "time-to-train", "--tokens", "1e9"],
                  ["--gpu", "h100,a100", "--tokens", "1e9"],
                  ["--what-if", "nic=100,200", "--target-efficiency", "0.8"]):  # fmt: skip
        r = CliRunner().invoke(app, [*JOB, *extra, "--json"])
        assert r.exit_code == 0, (extra, r.output)
        json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
