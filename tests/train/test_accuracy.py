"""The track record every estimate carries (`hwtune.train.accuracy`): the shipped figures must be
what the published runs give today, and each strategy must land in its software's class."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from hwtune.train.accuracy import ACCURACY_FILE, CLASSES, accuracy_for, software_class
from hwtune.train.estimator import _estimate, estimate
from hwtune.train.frameworks import framework_fields
from hwtune.train.published import load_published
from hwtune.train.strategy import make_strategy

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HWTUNE_VALIDATION_DIR", ROOT.parent / "shared" / "validation"))
JSONL = DATA / "training_published.jsonl"


@pytest.mark.parametrize(
    ("framework", "cls"),
    [("megatron", "megatron"), ("torchtitan", "pytorch"), ("torchtitan-compile", "pytorch"),
     ("llm-foundry", "pytorch"), ("huggingface", "pytorch")],
)  # fmt: skip
def test_framework_presets_fall_in_their_class(framework, cls):
    assert software_class(make_strategy(**framework_fields(framework))) == cls


def test_materialized_attention_is_the_pre_flash_class():
    assert software_class(make_strategy(flash_attention=False)) == "pre-flash"


def test_shipped_table_is_complete_and_sane():
    table = json.loads(ACCURACY_FILE.read_text())
    assert set(table["classes"]) <= set(CLASSES)
    for v in table["classes"].values():
        assert v["rows"] > 0
        assert 0 <= v["median_abs_error"] <= v["p90_abs_error"]
        assert abs(v["signed_median"]) <= v["p90_abs_error"] + 1e-9


@pytest.mark.skipif(not JSONL.exists(), reason=f"validation data not found at {JSONL}")
def test_shipped_table_matches_a_fresh_run_of_the_published_rows():
    """Recomputed here from the rows (independently of the benchmark that writes the file): a
    change to the model that moves these errors must also rewrite accuracy.json (run
    `python benchmarks/validate_training.py`), so no estimate shows a stale track record."""
    errs: dict[str, list[float]] = {}
    for run in load_published(JSONL):
        if run.skip_reason or "layer_forward_s" in run.targets:
            continue
        est = _estimate(run.spec, run.cluster, run.strategy)
        for metric, meas in run.targets.items():
            if metric == "tokens_per_s_per_gpu":
                e = est.tokens_per_s_per_gpu / meas - 1
            elif metric == "step_time_s":
                e = meas / est.step_time_s - 1
            else:
                continue
            errs.setdefault(software_class(run.strategy), []).append(e)
    shipped = json.loads(ACCURACY_FILE.read_text())["classes"]
    assert set(shipped) == set(errs)
    for key, e in errs.items():
        got = shipped[key]
        assert got["rows"] == len(e)
        assert got["median_abs_error"] == pytest.approx(statistics.median(map(abs, e)), abs=1e-4)
        assert got["p90_abs_error"] == pytest.approx(float(np.percentile(np.abs(e), 90)), abs=1e-4)
        assert got["signed_median"] == pytest.approx(statistics.median(e), abs=1e-4)


def test_estimate_json_carries_its_class_record():
    est = estimate("llama3.1-8b", gpu="h100-sxm-80gb", gpus=8)
    doc = est.to_dict()
    assert doc["accuracy"] == accuracy_for(est.strategy)
    assert doc["accuracy"]["class"] == "megatron"
    eager = estimate("llama3.1-8b", gpu="h100-sxm-80gb", gpus=8, **framework_fields("torchtitan"))
    assert eager.to_dict()["accuracy"]["class"] == "pytorch"
