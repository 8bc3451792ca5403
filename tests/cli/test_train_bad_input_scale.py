"""`hwtune scale`: bad lists and numbers are one line naming the option (exit 2); a bad GPU is
an error, not an empty sweep; options the chosen sweep ignores are errors; a sweep with fewer
than two fitting counts says there is no scaling to measure."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

S = ["scale", "-m", "llama3.1-8b", "--seq", "2048"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "8,abc", "--global-batch", "64"], "--gpus"),  # was ValueError traceback
        (["--gpus", "8", "--global-batch", "64", "--knees", "abc"], "--knees"),  # traceback
        (["--gpus", "8,16", "--global-batch", "64", "--knees", "5,-1"], "--knees"),  # accepted
        (["--global-batches", "32,abc", "--fixed-gpus", "8"], "--global-batches"),  # traceback
        (["--global-batches", "32,0", "--fixed-gpus", "8"], "--global-batches"),  # a no-fit row
        (["--gpus", "8", "--global-batch", "64", "--seq", "0"], "seq"),  # ZeroDivisionError
        (["--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "nan"], "--seqs-per-gpu"),
        (["--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "-1"], "--seqs-per-gpu"),  # ->1
        (
            ["--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "0.3"],
            "--seqs-per-gpu",
        ),  # 2.4->2
        (["--gpus", "8", "--gpu", "nosuch"], "gpu"),  # was 'no strategy fits', exit 0
        (["--gpus", "8,16", "--global-batch", "64", "--plot", "/nonexistent-dir/x.png"], "--plot"),
        (["--gpus", "8,16", "--global-batch", "64", "--plot", "x.foo"], "--plot"),
    ],
)
def test_bad_values_are_named(rejects, args, field):
    rejects([*S, *args], field)


def test_empty_model_list(rejects):
    rejects(["scale", "-m", ",", "--gpus", "8"], "--model")  # was IndexError


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--global-batches", "32,64", "--fixed-gpus", "8", "--plot", "x.png"], "--plot"),
        (["--global-batches", "32,64", "--fixed-gpus", "8", "--policy", "weak"], "--policy"),
        (["--global-batches", "32,64", "--fixed-gpus", "8", "--gpus", "8,16"], "--gpus"),
        (["--global-batches", "32,64", "--global-batch", "16"], "--global-batch"),
        (["--gpus", "8", "--fixed-gpus", "8", "--global-batch", "64"], "--fixed-gpus"),
        (["--gpus", "8,16", "--policy", "weak", "--global-batch", "64"], "--global-batch"),
        (["--gpus", "8,16", "--seqs-per-gpu", "2", "--global-batch", "64"], "--seqs-per-gpu"),
    ],
)
def test_ignored_options_are_errors(rejects, args, field):
    rejects([*S, *args], field)


def test_single_point_and_no_fit_say_there_is_nothing_to_measure():
    one = CliRunner().invoke(app, [*S, "--gpus", "8", "--global-batch", "64"])
    assert one.exit_code == 0, one.output
    assert "no scaling to measure" in one.output and "stays above" not in one.output
    none = CliRunner().invoke(app, ["scale", "-m", "llama3.1-405b", "--seq", "2048", "--gpus",
                                    "8", "--global-batch", "16"])  # fmt: skip
    assert "no strategy fits at any count" in none.output


def test_weak_scaling_with_whole_sequences_runs():
    r = CliRunner().invoke(app, [*S, "--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu",
                                 "0.5", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert [p["global_batch"] for p in json.loads(r.output)["points"]] == [4, 8]
