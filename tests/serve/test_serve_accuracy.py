"""The track record `hwtune serve` prints (`hwtune.serve.accuracy`): the shipped figures are the
ones VALIDATION.md reports, and each simulation shows its own mode's and, for a closed loop, the
record of the published runs nearest to it (model kind, band of clients)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.serve import accuracy
from hwtune.serve.accuracy import (
    ACCURACY_FILE,
    CONCURRENCY_BANDS,
    ENGINE_NAMES,
    MIN_CELL_ROWS,
    accuracy_for,
    accuracy_line,
    cell_key,
    concurrency_band,
    likely_range,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads(ACCURACY_FILE.read_text())


def test_shipped_table_is_consistent():
    modes = TABLE["modes"]
    assert sum(v["rows"] for v in modes.values()) == TABLE["all"]["rows"]
    for v in [TABLE["all"], *modes.values()]:
        assert set(v["backends"]) <= set(ENGINE_NAMES)
        for m in ("ttft", "tpot"):
            assert 0 <= v[m]["median_abs_error"] <= v[m]["p90_abs_error"]
            assert v[m]["pred_over_meas"] > 0


def _validation_all_row() -> list[str]:
    text = (ROOT / "VALIDATION.md").read_text()
    sec = text[text.index("## Serving simulator") :]
    m = re.search(r"^\| all \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| "
                  r"([\d.]+) \| ([\d.]+) \|$", sec, re.M)  # fmt: skip
    assert m, "VALIDATION.md has no 'all' row in its serving results"
    return list(m.groups())


def _assert_record_is_row(rec: dict, row: list[str]) -> None:
    """A shipped record equals a VALIDATION.md table row (rows, TTFT and TPOT median and p90 in
    percent, TTFT and TPOT pred/meas), to the table's printed digits."""
    n, t50, t90, p50, p90, rt, rp = row
    assert rec["rows"] == int(n)
    for m, med, p90_ in (("ttft", t50, t90), ("tpot", p50, p90)):
        assert rec[m]["median_abs_error"] == pytest.approx(float(med) / 100, abs=6e-4)
        assert rec[m]["p90_abs_error"] == pytest.approx(float(p90_) / 100, abs=6e-4)
    assert rec["ttft"]["pred_over_meas"] == pytest.approx(float(rt), abs=6e-3)
    assert rec["tpot"]["pred_over_meas"] == pytest.approx(float(rp), abs=6e-3)


def test_shipped_table_is_the_one_validation_reports():
    """Both come from one run of `benchmarks/serve_validation.py --write-accuracy`: the
    numbers a user sees beside a simulation are the documented ones."""
    _assert_record_is_row(TABLE["all"], _validation_all_row())


@pytest.mark.parametrize("disagg", [False, True])
def test_each_mode_reads_its_own_record(disagg):
    acc = accuracy_for(disagg)
    assert acc is not None and acc["mode"] == ("disagg" if disagg else "agg")
    line = accuracy_line(acc)
    assert f"{acc['rows']} published" in line and "TTFT" in line and "TPOT" in line


def test_cli_json_carries_the_record():
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "--model", "llama3.1-8b",
                        "--gpu", "h100", "--concurrency", "4", "--num-requests", "8",
                        "--input-len", "256", "--output-len", "16", "--json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    acc = doc["accuracy"]
    likely = acc.pop("likely")
    assert acc == accuracy_for(False, False, 4)
    assert likely == likely_range(acc, doc["ttft_s"]["mean"], doc["tpot_s"]["mean"])
    assert acc["nearest"]["kind"] == "dense" and acc["nearest"]["band"] == "1-8"


def _band_range(label: str) -> tuple[int, float]:
    if label.startswith(">"):
        return int(label[1:]) + 1, float("inf")
    lo, hi = label.split("-")
    return int(lo), int(hi)


@given(st.integers(1, 100_000))
def test_band_holds_the_clients(c):
    lo, hi = _band_range(concurrency_band(c))
    assert lo <= c <= hi
    assert (lo, None if hi == float("inf") else hi) in CONCURRENCY_BANDS


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_bands_are_ordered(a, b):
    """More clients never fall in an earlier band."""
    a, b = sorted((a, b))
    assert _band_range(concurrency_band(a))[0] <= _band_range(concurrency_band(b))[0]


def test_bands_partition_the_integers():
    for (_, hi), (lo, _) in zip(CONCURRENCY_BANDS, CONCURRENCY_BANDS[1:], strict=False):
        assert lo == hi + 1
    assert CONCURRENCY_BANDS[0][0] == 1 and CONCURRENCY_BANDS[-1][1] is None


@pytest.mark.parametrize("bad", [0, -3])
def test_band_refuses_no_clients(bad):
    with pytest.raises(ValueError, match="clients"):
        concurrency_band(bad)


def test_shipped_cells_split_each_mode():
    """Every run of a mode lies in exactly one of its cells, and each cell key is well formed."""
    cells = TABLE["cells"]
    for mode, entry in TABLE["modes"].items():
        mine = {k: v for k, v in cells.items() if k.startswith(mode + "/")}
        assert sum(v["rows"] for v in mine.values()) == entry["rows"]
    for key, v in cells.items():
        mode, kind, band = key.split("/")
        assert mode in TABLE["modes"] and kind in ("dense", "moe")
        assert cell_key(mode, kind == "moe", _band_range(band)[0]) == key
        for m in ("ttft", "tpot"):
            assert 0 <= v[m]["median_abs_error"] <= v[m]["p90_abs_error"]


def _validation_cells() -> dict[str, list[str]]:
    text = (ROOT / "VALIDATION.md").read_text()
    sec = text[text.index("## Serving simulator") :]
    rx = (
        r"^\| ((?:agg|disagg)/(?:dense|moe)/[^ ]+) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| "
        r"([\d.]+)% \| ([\d.]+)% \| ([\d.]+) \| ([\d.]+) \|$"
    )
    return {m.group(1): list(m.groups()[1:]) for m in re.finditer(rx, sec, re.M)}


def test_shipped_cells_are_the_ones_validation_reports():
    rows = _validation_cells()
    assert set(rows) == set(TABLE["cells"])
    for key, (n, t50, t90, p50, p90, rt, rp) in rows.items():
        c = TABLE["cells"][key]
        assert c["rows"] == int(n)
        for metric, med, p9, ratio in (("ttft", t50, t90, rt), ("tpot", p50, p90, rp)):
            m = c[metric]
            assert m["median_abs_error"] == pytest.approx(float(med) / 100, abs=6e-4)
            assert m["p90_abs_error"] == pytest.approx(float(p9) / 100, abs=6e-4)
            assert m["pred_over_meas"] == pytest.approx(float(ratio), abs=6e-3)


@pytest.mark.parametrize("moe,clients", [(False, 4), (True, 16), (True, 64), (False, 20)])
def test_nearest_cell_is_the_simulations_own(moe, clients):
    acc = accuracy_for(False, moe, clients)
    cell = TABLE["cells"][cell_key("agg", moe, clients)]
    assert cell["rows"] >= MIN_CELL_ROWS
    near = acc["nearest"]
    assert near["rows"] == cell["rows"] and near["ttft"] == cell["ttft"]
    line = accuracy_line(acc)
    assert f"{cell['rows']} published aggregated" in line
    assert ("MoE models" if moe else "dense models") in line
    assert f"at {concurrency_band(clients)} clients" in line
    assert f"over all {acc['rows']}" in line


def test_open_loop_gets_the_mode_record_only():
    acc = accuracy_for(False, True, None)
    assert "nearest" not in acc and acc == accuracy_for(False)


def test_small_cells_are_not_shown(monkeypatch):
    """A cell under MIN_CELL_ROWS runs says too little: the mode's record stands alone."""
    rec = {"median_abs_error": 0.1, "p90_abs_error": 0.2, "pred_over_meas": 1.0}
    one = {"rows": MIN_CELL_ROWS - 1, "backends": ["vllm"], "ttft": rec, "tpot": rec}
    fake = {
        "source": "test",
        "modes": {"agg": {**one, "rows": 50}},
        "cells": {"agg/dense/1-8": one, "agg/dense/9-32": {**one, "rows": MIN_CELL_ROWS}},
    }
    monkeypatch.setattr(accuracy, "_table", lambda: fake)
    assert "nearest" not in accuracy_for(False, False, 3)
    assert accuracy_for(False, False, 9)["nearest"]["rows"] == MIN_CELL_ROWS
    assert "nearest" not in accuracy_for(False, True, 9)


def _validation_engine_rows() -> dict[str, list[str]]:
    text = (ROOT / "VALIDATION.md").read_text()
    sec = text[text.index("| mode / engine |") :]
    rows = re.findall(r"^\| (agg|disagg)/(\w+) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| "
                      r"([\d.]+)% \| ([\d.]+) \| ([\d.]+) \|$", sec[: sec.index("\n\n")], re.M)  # fmt: skip
    return {f"{m}/{e}": rest for m, e, *rest in rows}


def test_engine_records_are_the_ones_validation_reports():
    """`hwtune serve --engine E` prints E's record of the mode: the same run's figures as
    VALIDATION.md's table by mode and engine, and its rows add up to the mode's."""
    doc = _validation_engine_rows()
    shipped = {f"{m}/{e}": r for m, by in TABLE["engines"].items() for e, r in by.items()}
    assert set(doc) == set(shipped) and shipped
    for k, row in doc.items():
        _assert_record_is_row(shipped[k], row)
    for mode, by in TABLE["engines"].items():
        assert sum(r["rows"] for r in by.values()) == TABLE["modes"][mode]["rows"]
        assert set(by) == set(TABLE["modes"][mode]["backends"])


@pytest.mark.parametrize("engine", sorted(ENGINE_NAMES))
def test_an_engine_adds_its_own_record_to_the_line(engine):
    acc = accuracy_for(False, True, 4, engine)
    assert acc is not None and acc["engine"]["name"] == engine
    assert acc["engine"] == {"name": engine, **TABLE["engines"]["agg"][engine]}
    assert f"on {ENGINE_NAMES[engine]}'s {acc['engine']['rows']}:" in accuracy_line(acc)
    assert "engine" not in accuracy_for(False, True, 4)  # none asked, none shown
    assert "engine" not in accuracy_for(True, engine="vllm")  # no disaggregated vLLM runs


def test_cli_engine_shows_its_record():
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "--engine", "sglang@0.5.6",
                        "--concurrency", "2", "--num-requests", "4", "--input-len", "128",
                        "--output-len", "8", "--json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    acc = json.loads(r.stdout)["accuracy"]
    assert acc.pop("likely")["basis"] == "agg runs of dense models at 1-8 clients"
    assert acc == accuracy_for(False, False, 2, "sglang")
