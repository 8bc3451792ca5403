"""Accuracy of the estimator against published runs (shared/validation/training_published.jsonl).

The issue's targets are median |error| <= 10% on throughput and on peak memory over every row
the tool can express and p90 <= 25% on throughput (all met; see VALIDATION.md).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from hwtune.cost.memory import sharded_state_bytes, state_bytes_per_param
from hwtune.train.estimator import _estimate, layer_times
from hwtune.train.published import load_published

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HWTUNE_VALIDATION_DIR", ROOT.parent / "shared" / "validation"))
JSONL = DATA / "training_published.jsonl"

if not JSONL.exists():  # CI lays shared/ beside the clone; elsewhere say why nothing ran
    pytest.skip(f"validation data not found at {JSONL}", allow_module_level=True)

MEGATRON_LINEAGE = ("narayanan21-t1", "narayanan21-t2-ptd", "korthikanti22", "nemo2407", "mbridge")


def _errors() -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {"throughput": [], "peak_memory": [], "layer": []}
    for run in load_published(JSONL):
        if run.skip_reason:
            continue
        if "layer_forward_s" in run.targets:
            lf, lb = layer_times(run.spec, run.cluster, run.strategy)
            out["layer"].append((run.id, lf / run.targets["layer_forward_s"] - 1))
            out["layer"].append((run.id, lb / run.targets["layer_backward_s"] - 1))
            continue
        est = _estimate(run.spec, run.cluster, run.strategy)
        for metric, meas in run.targets.items():
            if metric == "tokens_per_s_per_gpu":
                out["throughput"].append((run.id, est.tokens_per_s_per_gpu / meas - 1))
            elif metric == "step_time_s":
                out["throughput"].append((run.id, meas / est.step_time_s - 1))
            elif metric == "peak_memory_bytes":
                out["peak_memory"].append((run.id, est.memory.total / meas - 1))
    return out


ERRORS = _errors()


def _median(metric: str, prefixes: tuple[str, ...] = ("",)) -> float:
    errs = [abs(e) for i, e in ERRORS[metric] if i.startswith(prefixes)]
    assert errs, f"no {metric} rows"
    return statistics.median(errs)


def test_most_rows_are_expressible():
    runs = load_published(JSONL)
    expressed = [r for r in runs if not r.skip_reason]
    # 90 rows; the 3 others: OPT-175B and LLaMA-65B state no TP degree (OPT no vocabulary
    # either), ZeRO's Fig. 1 is analytical (Qwen3-235B's EP 32 over TP 2 x DP 16 is expressed
    # since expert parallelism folds over tensor x context x data ranks)
    assert len(expressed) >= 87, [(r.id, r.skip_reason) for r in runs if r.skip_reason]


def test_zero_paper_model_states_exactly():
    """Rajbhandari et al. SC'20, Fig. 1: 7.5B parameters, 64-way DP, mixed-precision Adam
    (K = 12): 120 GB baseline, 31.4 GB ZeRO-1, 16.6 GB ZeRO-2, 1.875 GB ZeRO-3 (the row's figures)."""
    row = next(json.loads(x) for x in JSONL.read_text().splitlines() if "zero20-fig1" in x)
    want = {m["metric"]: m["value"] for m in row["measured"]}
    psi, n = 7.5e9, 64
    sb = state_bytes_per_param("fp16", "adam", fp32_grads=False)
    for zero, key in [(0, "model_state_memory_per_gpu_baseline_dp"), (1, "model_state_memory_per_gpu_zero1_Pos"),
                      (2, "model_state_memory_per_gpu_zero2_Pos+g"), (3, "model_state_memory_per_gpu_zero3_Pos+g+p")]:  # fmt: skip
        got = sum(sharded_state_bytes(psi, sb, zero, n)) / 1e9
        assert got == pytest.approx(want[key], rel=0.01)


def _p90(metric: str, prefixes: tuple[str, ...] = ("",)) -> float:
    errs = [abs(e) for i, e in ERRORS[metric] if i.startswith(prefixes)]
    return float(np.percentile(errs, 90))


def test_megatron_lineage_meets_the_targets():
    """Megatron-LM, NeMo and Megatron-Bridge runs (44 rows): the frameworks whose kernels the
    cost model follows (fused attention and elementwise ops, overlapped gradient reduction)
    meet the issue's throughput targets: median <= 10%, p90 <= 25% (measured: 4.6%, 12.2%)."""
    assert _median("throughput", MEGATRON_LINEAGE) <= 0.10
    assert _p90("throughput", MEGATRON_LINEAGE) <= 0.25


def test_layer_times_match_korthikanti_table4():
    """Korthikanti et al. 2022, Table 4: forward and backward time of one 22B-model layer on 8
    A100s with TP=8 (no/selective/full recomputation, with and without sequence parallelism):
    the op-level models (GEMMs, unfused attention, TP collectives) within 5% median, 12% max
    (measured: 1.3% median, 10.4% max)."""
    errs = [abs(e) for _, e in ERRORS["layer"]]
    assert len(errs) == 10
    assert statistics.median(errs) <= 0.05
    assert max(errs) <= 0.12


def test_all_rows_meet_the_throughput_targets():
    """The issue's p90 target over every expressible row: <= 25% (measured 19.2% over 82 rows;
    the misses above it are DeepSpeed ZeRO-3 of 2021 (six rows), dropless Qwen3-30B-A3B,
    MosaicML's 7B on 512 GPUs and torchtitan's FSDP 4 x CP 2 row, see VALIDATION.md)."""
    assert _p90("throughput") <= 0.25


def _tps_at(run_id: str, hbm_tbps: float | None = None) -> tuple[float, float]:
    """(predicted, measured) tokens/s per GPU of one row, optionally with the GPU's HBM
    bandwidth replaced."""
    run = next(r for r in load_published(JSONL) if r.id == run_id)
    cl = run.cluster
    if hbm_tbps is not None:
        dev = cl.device.model_copy(update={"memory_bandwidth_tbps": hbm_tbps})
        cl = cl.model_copy(update={"device": dev})
    est = _estimate(run.spec, cl, run.strategy)
    return est.tokens_per_s_per_gpu, run.targets["tokens_per_s_per_gpu"]


@pytest.mark.parametrize("table", ["t1-8B-8gpu", "t3-8B-128gpu"])
def test_eager_elementwise_cost_matches_torchtitans_compile_gain(table):
    """torchtitan measured the same run with and without torch.compile (6,667 vs 5,762 tokens/s
    on 8 GPUs; 6,514 vs 5,605 on 128). The only modelled difference is the eager kernels'
    bytes (``model.lowering.rmsnorm_bytes`` etc., counted from the op sequence, not fitted),
    whose time rests on the HBM bandwidth of this 96 GB HBM2e part: 2.4 TB/s, as torchtitan's
    benchmark page states it (the catalog's source). The predicted speed-up must match the
    measured one to within one point (1.16 either way), and it must rest on the bandwidth:
    at the HBM3 H100's 3.35 TB/s, which the catalog took before the source was read, it is
    smaller (1.12)."""
    p_eager, m_eager = _tps_at(f"torchtitan-{table}-fsdp")
    p_comp, m_comp = _tps_at(f"torchtitan-{table}-fsdp-compile")
    measured = m_comp / m_eager
    assert p_comp / p_eager == pytest.approx(measured, abs=0.01)
    fast_eager, _ = _tps_at(f"torchtitan-{table}-fsdp", 3.35)
    fast_comp, _ = _tps_at(f"torchtitan-{table}-fsdp-compile", 3.35)
    assert fast_comp / fast_eager < p_comp / p_eager - 0.02  # the bytes carry the test


def test_all_rows_memory_guard():
    assert _p90("peak_memory") <= 0.21  # measured 18.9% (70B 2D and eager rows)


def test_throughput_median_within_10_percent():
    """The issue's target over every expressible row (measured 7.4%: Hopper GEMMs at their
    sustained clock and the NVIDIA recipes' TP overlap; VALIDATION.md)."""
    assert _median("throughput") <= 0.10


def test_peak_memory_median_within_10_percent():
    """The issue's target (measured 8.5%: torchtitan's loss is F.cross_entropy on an fp32
    upcast, 12 B per logit at its backward peak, cost.memory.LOSS_KERNELS)."""
    assert _median("peak_memory") <= 0.10


def test_megatron_bridge_2509_h100_rows_are_fp8_current_scaling():
    """The 25.09 DGX-H100 table has no precision column; its footnote gives the parenthesised
    figures for another FP8 granularity, so the main figures are FP8 (current scaling, the
    recipe the 25.11 H100 table names). Rows that state a precision keep it."""
    runs = {r.id: r for r in load_published(JSONL)}
    ds = runs["mbridge-25.09-h100-deepseek-v3-na-1024gpu"]
    assert ds.strategy.precision == "fp8"
    assert ds.strategy.fp8_recipe == "current"
    assert not any("precision not stated" in a for a in ds.assumptions)
    qwen = runs["mbridge-25.11-h100-qwen3-30b-a3b-fp8-cs-16gpu"]
    assert (qwen.strategy.precision, qwen.strategy.fp8_recipe) == ("fp8", "current")
    nemo = runs["nemo2407-h100-fp8-llama3-8b-8gpu"]
    assert (nemo.strategy.precision, nemo.strategy.fp8_recipe) == ("fp8", "delayed")


@pytest.mark.parametrize(
    ("row", "on"),
    [
        ("nemo2407-h100-fp8-llama3-70b-64gpu", True),  # llama/llama3_70b.yaml, tag 24.07
        ("nemo2407-h100-fp8-llama2-70b-64gpu", True),  # llama/llama2_70b.yaml
        ("nemo2407-h100-fp8-gpt3-175b-128gpu", False),  # gpt3/175b.yaml at 77b69bba
        ("nemo2407-h100-fp8-gpt3-175b-512gpu", True),  # gpt3/175b_mlperf.yaml at 121c975d
        ("nemo2407-h100-fp8-nemotron-340b-128gpu", False),  # nemotron_340b.yaml at 630e6544
        ("mbridge-25.11-h100-llama3.1-405b-fp8-cs-1024gpu", True),  # Megatron-Bridge v0.2.0
        ("mbridge-25.09-h100-deepseek-v3-na-1024gpu", False),  # deepseek_v3.py
        ("nemo2407-h100-fp8-llama3-8b-8gpu", False),  # TP 1: nothing to overlap
    ],
)
def test_tp_overlap_follows_the_rows_recipes(row, on):
    """NVIDIA's recipes, not a default, decide the TP overlap of each NeMo/Megatron-Bridge row
    (values read from the recipe files, cited in `train/published.py`)."""
    run = next(r for r in load_published(JSONL) if r.id == row)
    assert run.strategy.overlap_tp_comm is on
