"""study.csv lists its rows in the grid's order however the points finished: a resumed run
(earlier rows first, new ones appended) and several workers give the file one order."""

from __future__ import annotations

import csv

from hwtune.train.study import grid, run_study


def _gpus(path) -> list[int]:  # noqa: ANN001
    with path.open(newline="") as f:
        return [int(r["n_gpus"]) for r in csv.DictReader(f)]


def test_resumed_study_rows_follow_the_grid(tmp_path) -> None:  # noqa: ANN001
    """The 16-GPU point runs first; the full grid then appends the 8-GPU one after it."""
    run_study(grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [16], 16, 4096), tmp_path, 1)
    full = grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [8, 16], 16, 4096)
    path = run_study(full, tmp_path, workers=1)
    assert _gpus(path) == [8, 16]


def test_two_workers_write_the_grid_order(tmp_path) -> None:  # noqa: ANN001
    pts = grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [32, 8, 16], 16, 4096)
    assert _gpus(run_study(pts, tmp_path, workers=2)) == [32, 8, 16]
