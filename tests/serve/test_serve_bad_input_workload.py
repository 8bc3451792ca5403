"""Workload options that contradict one another or would be ignored are errors (one line, exit
2), in `hwtune serve` and `hwtune serve plan` alike."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

TRACE = "arrival_time,prompt_tokens,output_tokens\n0,100,10\n0.5,50,5\n"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--rate", "2", "--concurrency", "4"], "concurrency"),
        (["--dataset", "bogus", "--input-len", "100"], "dataset"),  # lengths given: was ignored
        (["--dataset", "bogus"], "dataset"),
        (["--dataset", "sharegpt", "--output-len", "100"], "dataset"),
        (["--rate", "2", "--burstiness", "0"], "burstiness"),
        (["--rate", "2", "--burstiness", "-1"], "burstiness"),
        (["--rate", "2", "--burstiness", "inf"], "burstiness"),
        (["--rate", "2", "--burstiness", "nan"], "burstiness"),
        (["--concurrency", "2", "--burstiness", "2"], "burstiness"),  # closed loop: ignored
        (["--burstiness", "2"], "burstiness"),
        (["--prefill-tp", "2"], "prefill-tp"),
        (["--prefill-replicas", "2"], "prefill-replicas"),
    ],
)
def test_contradictory_workload_options(args, field, rejects):
    rejects(
        ["serve", *args, "--num-requests", "2"] if "--num-requests" not in args else args, field
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--rate", "2"], "rate"),
        (["--concurrency", "2"], "concurrency"),
        (["--input-len", "100"], "input-len"),
        (["--output-len", "100"], "output-len"),
        (["--num-requests", "5"], "num-requests"),
        (["--prefix-len", "10", "--prefix-groups", "2"], "prefix-len"),
        (["--range-ratio", "0.5"], "range-ratio"),
        (["--dataset", "fixed"], "dataset"),
        (["--burstiness", "2"], "burstiness"),
    ],
)
def test_options_a_trace_would_override(tmp_path, args, field, rejects):
    f = tmp_path / "t.csv"
    f.write_text(TRACE)
    rejects(["serve", "--trace", str(f), *args], field)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--rate", "2", "--concurrency", "4"], "concurrency"),
        (["--dataset", "bogus", "--input-len", "100"], "dataset"),
        (["--concurrency", "2", "--burstiness", "3"], "burstiness"),
        (["--rate", "0"], "rate"),  # was replaced by the default 4 requests/s
    ],
)
def test_plan_rejects_them_too(args, field, rejects):
    rejects(["serve", "plan", "--processes", "1", "--max-gpus", "1", *args], field)


def test_plan_accepts_a_trace(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(TRACE)
    r = CliRunner().invoke(app, ["serve", "plan", "--trace", str(f), "--max-gpus", "1",
                                 "--processes", "1", "--no-disagg", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


def test_disagg_takes_its_prefill_options():
    r = CliRunner().invoke(app, ["serve", "--disagg", "--prefill-tp", "1", "--prefill-replicas",
                                 "1", "--rate", "4", "--input-len", "64", "--output-len", "4",
                                 "--num-requests", "4", "--burstiness", "2", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
