"""Bad files and paths given to `hwtune serve` and its subcommands: one line, exit 2, no
traceback, and output paths checked before anything is simulated."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.serve.measured_runs import load_runs
from hwtune.serve.request import load_trace

SMALL = ["--concurrency", "1", "--input-len", "64", "--output-len", "4", "--num-requests", "1"]


@pytest.mark.parametrize(
    ("opt", "name", "field"),
    [
        ("--trace-out", "missing/run.json", "trace-out"),
        ("--trace-out", "", "trace-out"),  # the directory itself
        ("--plot", "missing/cdf.png", "plot"),
        ("--plot", "cdf.txt", "plot"),  # a format matplotlib cannot write
        ("--plot", "cdf", "plot"),
    ],
)
def test_serve_output_paths_are_checked_first(tmp_path, opt, name, field, rejects):
    rejects(["serve", *SMALL, opt, str(tmp_path / name) if name else str(tmp_path)], field)


def test_serve_writes_to_good_paths(tmp_path):
    r = CliRunner().invoke(app, ["serve", *SMALL, "--json", "--trace-out",
                                 str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.svg")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.json").stat().st_size and (tmp_path / "p.svg").stat().st_size


def test_calibrate_out_is_checked_before_the_fit(tmp_path, rejects):
    runs = tmp_path / "runs.csv"
    runs.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n1,64,4,20,5\n")
    rejects(["serve", "calibrate", "--runs", str(runs), "--out", str(tmp_path / "no" / "c.yaml")],
        "out")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["serve", "plan", "--processes", "0"], "processes"),
        (["serve", "plan", "--processes", "-1"], "processes"),
        (["serve", "plan", "--processes", "2", "--ray", "local"], "processes"),  # not ignored
        (["serve", "plan", "--ray", " "], "--ray"),
        (["serve", "emulate", "--port", "70000"], "port"),
        (["serve", "emulate", "--port", "-1"], "port"),
    ],
)
def test_process_count_and_port_are_checked(args, field, rejects):
    rejects(args, field)


HEAD = "arrival_time,prompt_tokens,output_tokens"


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        (f"{HEAD}\n0,100,10\n0.5,200,inf\n", "t.csv line 3: output tokens"),
        (f"{HEAD}\n0,100.7,10\n", "t.csv line 2: prompt tokens"),  # not truncated to 100
        (f"{HEAD}\n0,100,nan\n", "t.csv line 2: output tokens"),
        (f"{HEAD},session_id\n0,100,10,inf\n", "t.csv line 2: prefix_group"),
        (f"{HEAD},prefix_group\n0,100,10,1.5\n", "t.csv line 2: prefix_group"),
        (f"{HEAD},prefix_group\n0,100,10,-2\n", "t.csv line 2: prefix_group"),  # -1: no group
        (f"{HEAD},prefix_group,prefix_len\n0,100,10,1,500\n", "t.csv line 2: prefix_len"),
        (f"{HEAD},prefix_group,prefix_len\n0,100,10,1,100\n", "t.csv line 2: prefix_len"),
        (f"{HEAD},prefix_group,prefix_len\n0,100,10,1,-50\n", "t.csv line 2: prefix_len"),
        (f"{HEAD},prefix_len\n0,100,10,50\n", "t.csv line 2: prefix_group"),  # was dropped
        (f"{HEAD}\ninf,100,10\n", "t.csv line 2: arrival"),
    ],
)
def test_trace_cells_are_not_clamped_or_truncated(tmp_path, rows, field, rejects):
    f = tmp_path / "t.csv"
    f.write_text(rows)
    with pytest.raises(HwtuneInputError, match=field):
        load_trace(f)
    rejects(["serve", "--trace", str(f)], field)


def test_jsonl_booleans_are_not_token_counts(tmp_path, rejects):
    f = tmp_path / "t.jsonl"
    f.write_text('{"arrival_time": 0, "prompt_tokens": true, "output_tokens": 10}\n')
    rejects(["serve", "--trace", str(f)], "t.jsonl line 1: prompt tokens")


def test_trace_prefix_length_is_kept(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(f"{HEAD},prefix_group,prefix_len\n0,100,10,a,99\n1,100,10,a,40\n")
    wl = load_trace(f)
    assert wl.prefix_lens == (99, 40)


def test_non_utf8_files_are_one_line_errors(tmp_path, rejects):
    f = tmp_path / "t.csv"
    f.write_bytes(HEAD.encode("utf-16") + b"\n")
    rejects(["serve", "--trace", str(f)], "trace")
    g = tmp_path / "runs.csv"
    g.write_bytes(b"concurrency,input_len\xff\n")
    rejects(["serve", "calibrate", "--runs", str(g)], "runs")


def test_a_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "t.csv"
    f.write_bytes(f"\ufeff{HEAD}\n0,100,10\n0.5,50,5\n".encode())
    assert load_trace(f).prompts == (100, 50)
    j = tmp_path / "t.jsonl"
    j.write_bytes('\ufeff{"arrival": 0, "prompt_tokens": 3, "output_tokens": 2}\n'.encode())
    assert load_trace(j).outputs == (2,)
    g = tmp_path / "runs.csv"
    g.write_bytes("\ufeffconcurrency,input_len,output_len,ttft_ms,tpot_ms\n1,64,4,20,5\n".encode())
    assert load_runs(g)[0].concurrency == 1
