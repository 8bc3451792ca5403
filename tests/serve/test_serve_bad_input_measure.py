"""`hwtune serve measure` refuses what it could not record faithfully, before it sends a
request (the URL below has no server: an error after the first request would be a different
one)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.serve.endpoint_bench import CSV_COLUMNS

MEASURE = ["serve", "measure", "--url", "http://127.0.0.1:9", "--served-model", "m",
           "--timeout", "1"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--concurrency", "1,,2"], "concurrency"),
        (["--input-len", "512,"], "input-len"),
        (["--output-len", "1"], "output-len"),  # TPOT undefined
        (["--output-len", "64,1"], "output-len"),
        (["--output-len", "2", "--range-ratio", "0.5"], "output-len"),  # samples one token
    ],
)
def test_measure_rejects(args, field, rejects):
    rejects([*MEASURE, *args], field)


def test_append_needs_the_same_header(tmp_path, rejects):
    f = tmp_path / "runs.csv"
    f.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n1,64,4,20,5\n")
    rejects([*MEASURE, "--out", str(f), "--append"], "out")
    assert f.read_text().count("\n") == 2  # untouched


def test_append_accepts_its_own_header(tmp_path):
    """With the header `serve measure` writes, the append goes on to the (absent) server."""
    f = tmp_path / "runs.csv"
    f.write_text(",".join(CSV_COLUMNS) + "\n")
    r = CliRunner().invoke(app, [*MEASURE, "--out", str(f), "--append", "--num-requests", "1",
                                 "--warmup", "0", "--concurrency", "1"])  # fmt: skip
    assert "out:" not in r.output
