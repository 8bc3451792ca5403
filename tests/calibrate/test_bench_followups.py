"""`hwtune bench --budget` covers the whole run: the command's start (importing torch), the
collectives' process start-up (measured, not guessed), and no message size starts that would
not fit. Slow start-up is simulated (a `sitecustomize` that sleeps in every rank), so the test
does not depend on how fast this machine starts Python."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from hwtune.calibrate.bench import BenchConfig, run_bench  # noqa: E402
from hwtune.calibrate.collectives import (  # noqa: E402
    bench_collectives,
    next_size_seconds,
)
from hwtune.calibrate.harness import Budget, Skip, detect_backend  # noqa: E402


@pytest.fixture(scope="module")
def cpu():
    return detect_backend("cpu", threads=1)


@given(
    prev_mean=st.floats(1e-7, 1.0),
    ratio=st.sampled_from([4.0, 16.0]),
    frac=st.floats(1e-3, 1.0),
    target=st.floats(0.01, 1.0),
)
def test_next_size_estimate_bounds_the_loop_run_ranks_runs(prev_mean, ratio, frac, target):
    # run_ranks: a warm-up call, a probe call, then iters = int(min(50, max(2, target / one)))
    # timed calls; any per-call time up to linear in the bytes stays within the estimate
    one = frac * prev_mean * ratio
    iters = int(min(50, max(2, target / one)))
    est = next_size_seconds(prev_mean, 1024.0, 1024.0 * ratio, target)
    assert 2 * one + iters * one <= est * (1 + 1e-12)
    assert est >= target


def test_spent_budget_starts_no_ranks(cpu):
    skips: list[Skip] = []
    t0 = time.perf_counter()
    pts = bench_collectives(cpu, 2, "quick", Budget(5, start=t0 - 10), skips)
    assert pts == [] and time.perf_counter() - t0 < 1.0  # no process was started
    assert skips[-1].section == "collectives" and "time budget" in skips[-1].reason


@pytest.mark.parametrize("budget", [4.0, 11.0])
def test_slow_rank_start_up_is_counted_against_the_budget(
    cpu, tmp_path: Path, monkeypatch, budget: float
):
    """Each rank sleeps 6 s before anything runs. Whether the start-up fits in the budget
    (11 s) or not (4 s: the ranks are stopped), the section ends by the budget's end, give or
    take the time to reap the processes; a start-up it timed is at least the sleep."""
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(6)\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    skips: list[Skip] = []
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    pts = bench_collectives(cpu, 2, "quick", Budget(budget), skips,
                            ops=["all_reduce", "send_recv"], timings=timings)  # fmt: skip
    wall = time.perf_counter() - t0
    assert min(budget, 6.0) <= wall <= budget + 1.0, (wall, skips)
    if pts:  # the ranks got to measure: their start-up was timed
        assert timings["startup"] >= 6.0
    if budget < 6.0:  # the ranks could not start in time: stopped, said why
        assert pts == [] and any("time budget" in s.reason for s in skips), skips


def test_run_bench_counts_from_the_callers_start(cpu):
    """The CLI passes its own start: time spent before run_bench (importing torch) is budget
    spent. 2.9 s of a 3 s budget already gone leaves the smallest shape of each curve only."""
    cfg = BenchConfig(mode="quick", threads=1, budget_s=3.0, sections=("gemm", "memory"),
                      dtypes=("fp32",))  # fmt: skip
    started = time.perf_counter() - 2.9
    res = run_bench(cfg, started=started)
    sw = res.document["software"]
    assert sw["seconds_before_sections"] >= 2.9 and sw["budget_s"] == 3.0
    assert res.seconds >= 2.9 + sw["seconds_gemm"] + sw["seconds_memory"] - 0.05
    assert any(s.section == "gemm" and s.reason == "time budget" for s in res.skipped)
    assert len({(p["m"], p["n"], p["k"], p["batch"]) for p in res.document["gemm"]}) >= 1


def test_help_says_what_the_budget_covers():
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, ["bench", "--help"], terminal_width=200)
    assert r.exit_code == 0
    text = " ".join(r.output.replace("│", " ").split())
    for words in ("whole command", "importing torch", "start-up included"):
        assert words in text, text
