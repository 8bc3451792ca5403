"""Per-request records (`hwtune serve --requests-out`, `hwtune.report.serve_requests`)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.report.serve_requests import COLUMNS, write_requests
from hwtune.serve.metrics import summarize
from hwtune.serve.request import closed_loop, range_ratio_lengths
from hwtune.serve.simulator import simulate


@pytest.fixture(scope="module")
def run(cfg8b):
    wl = closed_loop(6, *range_ratio_lengths(30, 400, 24, 0.5, seed=3))
    return simulate(cfg8b, wl, record_tokens=True)


def test_token_times_bound_each_request(run):
    """Every request's token times: one per output token, non-decreasing, the first at its
    first token and the last at its finish (what TTFT, TPOT and E2E are made of)."""
    for r in run.requests:
        t = np.asarray(r.token_times)
        assert t.size == r.output and np.all(np.diff(t) >= 0)
        assert t[0] == r.first_token and t[-1] == r.finish


def test_csv_rows_give_the_summary(run, tmp_path):
    """The summary's means and percentiles are those of the CSV's columns (nothing lost on the
    way out), and each row's TPOT is its E2E less TTFT over its gaps."""
    p = write_requests(run, tmp_path / "r.csv")
    with p.open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS and len(rows) == len(run.requests)
    s = summarize(run)
    for col, key in (("ttft_s", "ttft_s"), ("e2e_s", "e2e_s"), ("queue_s", "queue_s")):
        v = np.array([float(r[col]) for r in rows])
        assert v.mean() == pytest.approx(s[key]["mean"], rel=1e-12)
        assert np.percentile(v, 90) == pytest.approx(s[key]["p90"], rel=1e-12)
    for r in rows:
        e2e, ttft, n = float(r["e2e_s"]), float(r["ttft_s"]), int(r["output_tokens"])
        assert float(r["tpot_s"]) == pytest.approx((e2e - ttft) / (n - 1), rel=1e-9)
        assert float(r["itl_max_s"]) >= float(r["itl_p50_s"]) > 0


def test_jsonl_is_strict_json_with_token_times(cfg8b, tmp_path):
    """A one-token output has no TPOT or gaps: null, not NaN."""
    res = simulate(cfg8b, closed_loop(2, np.array([100, 120]), np.array([1, 5])),
                   record_tokens=True)  # fmt: skip
    p = write_requests(res, tmp_path / "r.jsonl")
    recs = [json.loads(line) for line in p.read_text().splitlines()]
    one = next(r for r in recs if r["output_tokens"] == 1)
    assert one["tpot_s"] is None and one["itl_max_s"] is None and len(one["token_times_s"]) == 1
    five = next(r for r in recs if r["output_tokens"] == 5)
    assert np.diff(five["token_times_s"]).max() == pytest.approx(five["itl_max_s"])


def test_cli_writes_the_file_and_checks_its_name(tmp_path, rejects):
    out = tmp_path / "req.csv"
    r = CliRunner().invoke(app, ["serve", "--concurrency", "2", "--input-len", "64",
                                 "--output-len", "4", "--num-requests", "6", "--json",
                                 "--requests-out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 7
    rejects(["serve", "--requests-out", str(tmp_path / "r.txt")], "requests-out")
    rejects(["serve", "--requests-out", str(tmp_path / "no" / "r.csv")], "requests-out")
