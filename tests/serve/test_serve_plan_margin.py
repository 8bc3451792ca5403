"""`hwtune serve plan --margin likely`: the SLOs are checked on the simulated latencies times the
upper end of each layout's likely band (`hwtune.serve.plan.margin_correction`), read from the
shipped track record."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.serve import serve_app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.accuracy import ACCURACY_FILE
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.correction import AffineMap, ServeCorrection
from hwtune.serve.plan import SLO, margin_correction, plan
from hwtune.serve.request import closed_loop, fixed_lengths, open_loop

BAND = "measured_over_predicted_80"


def _table() -> dict:
    return json.loads(ACCURACY_FILE.read_text())


def _base(model: str = "llama3.1-8b") -> ReplicaConfig:
    return ReplicaConfig(get_model(model), get_device("h100-sxm-80gb"))


@pytest.mark.parametrize(
    ("model", "clients", "replicas", "cell"),
    [
        ("llama3.1-8b", 16, 1, "agg/dense/9-32"),
        ("llama3.1-8b", 64, 2, "agg/dense/9-32"),  # 32 clients per replica
        ("qwen3-235b-a22b", 4, 1, "agg/moe/1-8"),
    ],
)
def test_margin_is_the_upper_end_of_the_cells_band(model, clients, replicas, cell):
    dep = Deployment(_base(model), replicas=replicas)
    corr, info = margin_correction(dep, closed_loop(clients, *fixed_lengths(2 * clients, 256, 16)))
    rec = _table()["cells"][cell]
    assert corr.ttft.scale == info["ttft_factor"] == rec["ttft"][BAND][1]
    assert corr.tpot.scale == info["tpot_factor"] == rec["tpot"][BAND][1]
    assert corr.ttft.offset_s == corr.tpot.offset_s == 0.0
    assert corr.runs == rec["rows"] and info["basis"].endswith("clients")


def test_open_loop_takes_the_modes_band():
    wl = open_loop(2.0, *fixed_lengths(20, 256, 16), seed=0)
    _corr, info = margin_correction(Deployment(_base()), wl)
    assert info["ttft_factor"] == _table()["modes"]["agg"]["ttft"][BAND][1]
    assert info["basis"] == "agg runs"


def test_plan_with_margin_checks_the_scaled_p90s():
    """An SLO 1.5x the simulated p90 TTFT of the best one-GPU layout is met without the margin
    and not with it (the agg/dense/1-8 band's upper end is above 1.5x); with a loose SLO every
    reported p90 is the simulated one times the factor."""
    base, wl = _base(), closed_loop(4, *fixed_lengths(16, 512, 16))
    factor = _table()["cells"]["agg/dense/1-8"]["ttft"][BAND][1]
    assert factor > 1.5  # the premise of this test, from the shipped record
    plain = plan(base, wl, SLO(), max_gpus=1, disagg=False, processes=1)
    t1 = plain[0].ttft_p90_s
    assert plan(base, wl, SLO(ttft_p90_s=1.5 * t1), max_gpus=1, disagg=False, processes=1)[0].meets
    with pytest.raises(HwtuneInputError, match="with the likely band's margin"):
        plan(base, wl, SLO(ttft_p90_s=1.5 * t1), max_gpus=1, disagg=False, processes=1,
             margin=True)  # fmt: skip
    loose = plan(base, wl, SLO(ttft_p90_s=100.0), max_gpus=1, disagg=False, processes=1,
                 margin=True)  # fmt: skip
    same = {r.describe(): r for r in plain}
    for r in loose:
        m = r.margin
        assert m["ttft_factor"] == factor
        assert m["simulated_ttft_p90_s"] == pytest.approx(same[r.describe()].ttft_p90_s)
        assert r.ttft_p90_s == pytest.approx(factor * m["simulated_ttft_p90_s"])
        assert r.tpot_p90_s == pytest.approx(m["tpot_factor"] * same[r.describe()].tpot_p90_s)
        assert r.to_dict()["margin"] == m


def test_margin_and_a_correction_do_not_stack():
    corr = ServeCorrection(ttft=AffineMap(scale=1.0), tpot=AffineMap(scale=1.0), runs=3)
    with pytest.raises(HwtuneInputError, match="margin"):
        plan(_base(), closed_loop(2, *fixed_lengths(4, 128, 8)), SLO(), max_gpus=1,
             disagg=False, processes=1, correction=corr, margin=True)  # fmt: skip


def test_cli_rejects_an_unknown_margin_in_one_line():
    r = CliRunner().invoke(serve_app, ["plan", "--margin", "wide", "--ttft-p90", "1"])
    assert r.exit_code == 2
    assert "margin" in r.output and "wide" in r.output and "none or likely" in r.output
    assert "Traceback" not in r.output


def test_cli_json_carries_the_margin_per_layout():
    r = CliRunner().invoke(serve_app, [
        "plan", "--max-gpus", "1", "--concurrency", "4", "--input-len", "256", "--output-len",
        "16", "--no-disagg", "--processes", "1", "--ttft-p90", "100", "--margin", "likely",
        "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["margin"] == "likely"
    band = _table()["cells"]["agg/dense/1-8"]["ttft"][BAND][1]
    assert doc["best"] and all(b["margin"]["ttft_factor"] == band for b in doc["best"])


def test_readme_example_factors_are_the_shipped_ones():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    t, p = re.search(
        r"e\.g\. x([\d.]+) TTFT, x([\d.]+) TPOT for dense models at 1-8", text
    ).groups()
    rec = _table()["cells"]["agg/dense/1-8"]
    assert float(t) == pytest.approx(rec["ttft"][BAND][1], abs=6e-3)
    assert float(p) == pytest.approx(rec["tpot"][BAND][1], abs=6e-3)
