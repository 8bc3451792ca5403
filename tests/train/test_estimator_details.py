"""Estimator details: the pipeline-schedule rule shared by `hwtune estimate` and `hwtune
compile`, the optimizer's bytes per parameter, step energy, the embedding's stored activations."""

from __future__ import annotations

import pytest


# ---- 1. interleaved needs pp > 1 and vpp >= 2, the same rule for estimate and compile ---------
# An interleaved schedule splits each pipeline rank's layers into vpp >= 2 chunks (Narayanan et
# al. 2021, §2.2.2); with one chunk per rank it is plain 1F1B, and without pipeline parallelism
# there is no schedule at all. Each error names the field to change and what it must be, and
# following it never leads back to the previous error.
@pytest.mark.parametrize("command", ["estimate", "compile"])
@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        # pp=1: the interleaved schedule itself is meaningless
        (["--schedule", "interleaved"], "schedule", ("interleaved", "1f1b", "pp=1")),
        (["--schedule", "interleaved", "--vpp", "1"], "schedule", ("1f1b", "pp=1")),
        # pp=1 with chunks: vpp first (then the schedule above)
        (["--schedule", "interleaved", "--vpp", "2"], "vpp", ("2", "1 without pipeline")),
        # pp=2: one chunk per rank is not interleaved
        (["--pp", "2", "--global-batch", "4", "--schedule", "interleaved"], "vpp",
         ("got 1", "at least 2")),
        (["--pp", "2", "--global-batch", "4", "--schedule", "interleaved", "--vpp", "1"], "vpp",
         ("got 1", "at least 2")),
        # chunks without the interleaved schedule
        (["--pp", "2", "--global-batch", "4", "--vpp", "2"], "vpp", ("2", "interleaved")),
    ],
)  # fmt: skip
def test_interleaved_rule_is_the_same_for_estimate_and_compile(
    rejects, command, args, field, words
):
    extra = ["--gpus", "8"] if command == "estimate" else []
    rejects([command, *extra, *args], field, *words)


@pytest.mark.parametrize("command", ["estimate", "compile"])
def test_interleaved_with_two_chunks_on_two_ranks_runs(command):
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    extra = ["--gpus", "2"] if command == "estimate" else []
    args = ["--pp", "2", "--global-batch", "4", "--schedule", "interleaved", "--vpp", "2"]
    r = CliRunner().invoke(app, [command, *extra, *args])
    assert r.exit_code == 0, r.output
