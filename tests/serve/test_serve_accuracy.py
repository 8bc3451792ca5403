"""The track record `hwtune serve` prints (`hwtune.serve.accuracy`): the shipped figures are the
ones VALIDATION.md reports, and each simulation shows its own mode's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.serve.accuracy import ACCURACY_FILE, ENGINE_NAMES, accuracy_for, accuracy_line

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


def test_shipped_table_is_the_one_validation_reports():
    """Both come from one run of `benchmarks/serve_validation.py --write-accuracy`: the
    numbers a user sees beside a simulation are the documented ones."""
    n, t50, t90, p50, p90, rt, rp = _validation_all_row()
    a = TABLE["all"]
    assert a["rows"] == int(n)
    assert a["ttft"]["median_abs_error"] == pytest.approx(float(t50) / 100, abs=6e-4)
    assert a["ttft"]["p90_abs_error"] == pytest.approx(float(t90) / 100, abs=6e-4)
    assert a["tpot"]["median_abs_error"] == pytest.approx(float(p50) / 100, abs=6e-4)
    assert a["tpot"]["p90_abs_error"] == pytest.approx(float(p90) / 100, abs=6e-4)
    assert a["ttft"]["pred_over_meas"] == pytest.approx(float(rt), abs=6e-3)
    assert a["tpot"]["pred_over_meas"] == pytest.approx(float(rp), abs=6e-3)


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
    assert json.loads(r.stdout)["accuracy"] == accuracy_for(False)
