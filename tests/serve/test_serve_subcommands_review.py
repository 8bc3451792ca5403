"""Review of `hwtune serve calibrate|measure|emulate|plan` and `serve --correction`: bad input
gets one line naming the field, the value and what was expected (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.serve.endpoint_bench import CSV_COLUMNS
from hwtune.serve.measured_runs import KNOWN, load_runs

HEADER = "concurrency,input_len,output_len,ttft_ms,tpot_ms"


def _csv(tmp_path: Path, text: str, name: str = "runs.csv") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_runs_columns_are_those_measure_writes() -> None:
    assert set(KNOWN) == set(CSV_COLUMNS)


def test_calibrate_row_with_more_cells_than_header(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8,99\n8,1024,128,60,9\n")
    rejects(["serve", "calibrate", "--runs", f], "line 2", "99", "at most 5 cells")


def test_calibrate_unknown_column(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tpp\n1,1024,128,30,8,4\n8,1024,128,60,9,4\n")
    rejects(["serve", "calibrate", "--runs", f], "header", "tpp", "unknown")


def test_calibrate_repeated_column(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tp,tp\n1,1024,128,30,8,1,4\n")
    rejects(["serve", "calibrate", "--runs", f], "header", "tp repeated")


@pytest.mark.parametrize("second", ["1,1024,128,30,8", "1,1024,128,35,9"])
def test_calibrate_repeated_configuration(tmp_path, rejects, second: str) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8\n" + second + "\n")
    rejects(["serve", "calibrate", "--runs", f], "line 3", second, "line 2", "one row per")


def test_runs_other_layouts_and_recorded_columns_still_read(tmp_path) -> None:
    f = _csv(tmp_path, HEADER + ",tp,ttft_p90_ms\n1,1024,128,30,8,1,40\n1,1024,128,30,8,2,40\n")
    assert [r.tp for r in load_runs(f)] == [1, 2]


def test_calibrate_run_the_deployment_cannot_serve_names_its_line(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tp\n1,1024,128,30,8,1\n\n8,1024,128,60,9,3\n")
    rejects(["serve", "calibrate", "--runs", f], "runs.csv: line 4: tp", "3")


def test_runs_line_numbers_count_blank_lines(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8\n\n\n8,1024,128,0,9\n")
    rejects(["serve", "calibrate", "--runs", f], "runs.csv: line 5: ttft_ms", "0")
