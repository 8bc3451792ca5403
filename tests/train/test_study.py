"""`hwtune study` (`hwtune.train.study`): the grid, the tidy CSV + Parquet + PNG output, resuming,
local processes and a local Ray instance."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

import hwtune.train.study as study
from hwtune.errors import HwtuneInputError
from hwtune.train.study import COLUMNS, StudyPoint, grid, run_point, run_study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# columns that are measured wall time, not results: they differ between two runs
TIMING = {"search_s"}


def two_points() -> list[StudyPoint]:
    # Llama-3.1-8B on 8 and 16 H100, 16 sequences of 4096 tokens: two fast searches
    return grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [8, 16], 16, 4096)


def read_rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def comparable(rows: list[dict]) -> list[dict]:
    key = ("model", "gpu", "topology", "n_gpus")
    return sorted(({k: v for k, v in r.items() if k not in TIMING} for r in rows),
                  key=lambda r: tuple(str(r[k]) for k in key))  # fmt: skip


# ------------------------------------------------------------------ grid
def test_grid_is_the_product_of_the_axes():
    pts = grid(["a", "b"], ["g1", "g2", "g3"], ["default", "nic=200"], [8, 16, 32, 64], 512, 8192)
    assert len(pts) == 2 * 3 * 2 * 4
    assert len({p.key for p in pts}) == len(pts)  # every point once
    assert {p.global_batch for p in pts} == {512} and {p.seq for p in pts} == {8192}
    assert {p.n_gpus for p in pts} == {8, 16, 32, 64}


@pytest.mark.parametrize("axis", range(4))
def test_an_empty_axis_raises(axis):
    axes = [["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [8]]
    axes[axis] = []
    with pytest.raises(HwtuneInputError):
        grid(*axes, 16, 4096)


# ------------------------------------------------------------------ one point
def test_run_point_row():
    p = StudyPoint("llama3.1-8b", "h100-sxm-80gb", "nic=200,domain=4", 16, 16, 4096)
    row = run_point(p)
    assert row["fits"] is True
    assert row["tp"] * row["pp"] * row["dp"] * row["cp"] == 16
    # tokens per second of the job = GPUs x per-GPU tokens per second
    assert row["tokens_per_s"] == pytest.approx(16 * row["tokens_per_s_per_gpu"], rel=1e-12)
    # and = tokens per step / step time
    assert row["tokens_per_s"] == pytest.approx(16 * 4096 / row["step_time_s"], rel=1e-9)
    assert 0 <= row["exposed_comm_share"] <= 1 and 0 <= row["bubble_share"] <= 1
    assert 0 < row["memory_gib"] <= 80
    assert set(row) - {"error", "inputs_digest"} <= set(COLUMNS)


def test_run_point_infeasible_and_bad_topology_rows():
    # 405B needs 810 GB for its bf16 weights alone: more than 8 x 80 GB
    row = run_point(StudyPoint("llama3.1-405b", "h100-sxm-80gb", "default", 8, 64, 8192))
    assert row["fits"] is False and row["candidates"] > 0
    bad = run_point(StudyPoint("llama3.1-8b", "h100-sxm-80gb", "bogus=1", 8, 16, 4096))
    assert bad["fits"] is False and "topology" in bad["error"]


@pytest.mark.parametrize("topology", ["fast", "nic=abc"])
def test_run_point_unparsable_topology_gives_an_error_row(topology):
    row = run_point(StudyPoint("llama3.1-8b", "h100-sxm-80gb", topology, 8, 16, 4096))
    assert row["fits"] is False and "topology" in row["error"]


# ------------------------------------------------------------------ a study run
@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    path = run_study(two_points(), out, workers=1)
    return out, path


def test_run_study_writes_csv_parquet_and_png(first_run):
    out, path = first_run
    assert path == out / "study.csv"
    rows = read_rows(path)
    assert len(rows) == 2
    assert sorted(int(r["n_gpus"]) for r in rows) == [8, 16]
    assert all(r["fits"] == "True" for r in rows)
    header = path.read_text().splitlines()[0].split(",")
    assert header[: len(COLUMNS)] == list(COLUMNS)
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "study.parquet")
    assert table.num_rows == 2
    back = table.to_pylist()
    assert sorted(r["n_gpus"] for r in back) == [8, 16]
    by_n = {int(r["n_gpus"]): r for r in rows}
    for r in back:
        assert r["tokens_per_s"] == pytest.approx(float(by_n[r["n_gpus"]]["tokens_per_s"]))
        assert r["model"] == "llama3.1-8b"
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == PNG_MAGIC for p in pngs)


def test_running_again_adds_no_rows_and_computes_nothing(first_run, monkeypatch):
    out, path = first_run
    before = path.read_text()

    def boom(p):
        raise AssertionError(f"{p} was recomputed")

    monkeypatch.setattr(study, "run_point", boom)
    said: list[str] = []
    run_study(two_points(), out, workers=1, notice=said.append)
    assert path.read_text() == before
    assert said == [f"resuming {path}: 2 of 2 points already there"]


def _spy_on_points(monkeypatch) -> list[int]:
    """The GPU counts of the points `run_study` computes, in order (each still computed)."""
    seen: list[int] = []
    real = study.run_point

    def spy(p):
        seen.append(p.n_gpus)
        return real(p)

    monkeypatch.setattr(study, "run_point", spy)
    return seen


def test_a_grown_grid_computes_only_the_new_points(tmp_path, monkeypatch):
    seen = _spy_on_points(monkeypatch)
    one = grid(["llama3.1-8b"], ["h100-sxm-80gb"], ["default"], [8], 16, 4096)
    run_study(one, tmp_path, workers=1)
    run_study(two_points(), tmp_path, workers=1)
    assert seen == [8, 16]
    assert len(read_rows(tmp_path / "study.csv")) == 2


def _tear_last_line(path: Path, keep_fields: int) -> None:
    """Simulate a run killed while writing its last row: the row is cut after
    ``keep_fields`` fields, with no newline."""
    lines = path.read_text().splitlines(keepends=True)
    cut = ",".join(lines[-1].split(",")[:keep_fields])
    path.write_text("".join(lines[:-1]) + cut[:-1])


def test_a_torn_short_last_line_is_recomputed(first_run, tmp_path):
    out, path = first_run
    (tmp_path / "study.csv").write_text(path.read_text())
    _tear_last_line(tmp_path / "study.csv", keep_fields=3)
    run_study(two_points(), tmp_path, workers=1)
    rows = read_rows(tmp_path / "study.csv")
    assert len(rows) == 2 and all(r["fits"] == "True" for r in rows)


def test_a_torn_long_last_line_is_recomputed(first_run, tmp_path):
    out, path = first_run
    (tmp_path / "study.csv").write_text(path.read_text())
    _tear_last_line(tmp_path / "study.csv", keep_fields=9)
    said: list[str] = []
    run_study(two_points(), tmp_path, workers=1, notice=said.append)
    # one of two points was whole; the torn one is said to be dropped, not silently rerun
    assert len(said) == 1 and "1 of 2 points already there" in said[0]
    assert "1 damaged row(s) dropped and recomputed" in said[0]
    rows = read_rows(tmp_path / "study.csv")
    assert len(rows) == 2 and all(r["fits"] == "True" and r["tokens_per_s"] for r in rows)
    assert all(r["error"] == "" for r in rows)


def test_local_processes_give_the_same_rows(first_run, tmp_path):
    _, path = first_run
    run_study(two_points(), tmp_path, workers=2)
    assert comparable(read_rows(tmp_path / "study.csv")) == comparable(read_rows(path))


def test_progress_is_reported(tmp_path):
    calls = []
    run_study(two_points()[:1], tmp_path, workers=1, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 1)]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the optional 'ray' extra")
def test_ray_local_gives_the_same_rows_as_local_processes(first_run, tmp_path):
    import ray

    _, path = first_run
    try:
        run_study(two_points(), tmp_path, ray_address="local")
    finally:
        ray.shutdown()
    assert comparable(read_rows(tmp_path / "study.csv")) == comparable(read_rows(path))


def test_a_row_from_other_catalog_figures_is_recomputed(first_run, tmp_path, monkeypatch):
    # a catalog update between runs (the MI250X became one GCD) must not leave old results in
    # a resumed study: the row's inputs digest no longer matches the point's
    out, path = first_run
    rows = read_rows(path)
    rows[0]["inputs_digest"] = "0" * 16
    with (tmp_path / "study.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    seen = _spy_on_points(monkeypatch)
    said: list[str] = []
    run_study(two_points(), tmp_path, workers=1, notice=said.append)
    assert seen == [int(rows[0]["n_gpus"])]
    assert "1 row(s) computed from other catalog figures recomputed" in said[0]
    again = read_rows(tmp_path / "study.csv")
    assert len(again) == 2
    assert {r["inputs_digest"] for r in again} == {study.inputs_digest(p) for p in two_points()}


def test_a_study_written_before_the_digest_is_recomputed_not_refused(first_run, tmp_path):
    out, path = first_run
    rows = read_rows(path)
    old = [c for c in rows[0] if c != "inputs_digest"]
    with (tmp_path / "study.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    said: list[str] = []
    run_study(two_points(), tmp_path, workers=1, notice=said.append)
    assert "2 row(s) computed from other catalog figures recomputed" in said[0]
    assert all(r["inputs_digest"] for r in read_rows(tmp_path / "study.csv"))


def test_the_digest_follows_the_device_figures(monkeypatch):
    p = two_points()[0]
    base = study.inputs_digest(p)
    assert study.inputs_digest(p) == base  # deterministic
    other = StudyPoint(p.model, "a100-sxm4-80gb", p.topology, p.n_gpus, p.global_batch, p.seq)
    assert study.inputs_digest(other) != base
    # the same point (same key) after a catalog update of its device's figures: recomputed
    cl = study._cluster(p)
    dev = cl.device.model_copy(update={"gemm_efficiency": cl.device.gemm_efficiency * 0.9})
    monkeypatch.setattr(study, "_cluster", lambda q: cl.model_copy(update={"device": dev}))
    assert study.inputs_digest(p) != base
