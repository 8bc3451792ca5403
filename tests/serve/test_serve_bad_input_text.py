"""What `hwtune serve` prints about itself: the README's engine figures are the shipped record's,
help text keeps its brackets and says what each option does, and the likely band reads well."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.serve.accuracy import accuracy_for, likely_line, likely_range

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_quotes_the_shipped_engine_record():
    text = " ".join(README.read_text().split())
    rec = {e: accuracy_for(False, engine=e)["engine"]["ttft"] for e in ("sglang", "trtllm", "vllm")}
    sg = rec["sglang"]
    assert (f"TTFT median error is {sg['median_abs_error']:.0%} for SGLang (predicted "
            f"{sg['pred_over_meas']:.2f}x measured), {rec['trtllm']['median_abs_error']:.0%} for "
            f"TensorRT-LLM and {rec['vllm']['median_abs_error']:.0%} for vLLM") in text  # fmt: skip


@pytest.mark.parametrize("cmd", [[], ["plan"], ["calibrate"], ["emulate"]])
def test_engine_help_keeps_its_version_brackets(cmd):
    r = CliRunner().invoke(app, ["serve", *cmd, "--help"], env={"COLUMNS": "300"})
    assert r.exit_code == 0
    assert "trtllm[@VERSION]" in r.output


def test_plan_correction_help_says_the_slos_use_it():
    r = CliRunner().invoke(app, ["serve", "plan", "--help"], env={"COLUMNS": "300"})
    assert "SLOs are checked on the corrected percentiles" in r.output
    assert "printed beside the simulation" not in r.output


def test_likely_band_in_seconds_from_one_second_and_na_without_tpot():
    acc = accuracy_for(False)
    line = likely_line(likely_range(acc, 1.5, math.nan))
    lo, hi = (1.5 * f for f in acc["ttft"]["measured_over_predicted_80"])
    assert f"mean TTFT {lo:.3g}-{hi:.3g} s" in line and " ms" not in line.split("TPOT")[0]
    assert "mean TPOT n/a" in line and "nan" not in line
