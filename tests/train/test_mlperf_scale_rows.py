"""MLPerf Training v5.1's Llama 3.1 8B submissions on more than 72 GPUs
(benchmarks/data/training_mlperf_8b_scale.jsonl), beside the same systems' smaller runs in
training_mlperf.jsonl: where adding accelerators stops paying. Sources: mlcommons/
training_results_v5.1, the submissions' MLLOG files and config scripts, which
`benchmarks/data/check_training_mlperf.py --data <file>` re-reads."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from hwtune.train.estimator import _estimate
from hwtune.train.published import load_published

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
UF = "mlperf51-university-of-florida-hpg-dgxb200-n{}-llama31-8b-fp8-{}gpu"
THEIA_512 = "mlperf51-nvidia-theia-gb300-nvl72-llama31-8b-fp8-512gpu"


@pytest.fixture(scope="module")
def runs():
    small = load_published(DATA / "training_mlperf.jsonl")
    return {r.id: r for r in small + load_published(DATA / "training_mlperf_8b_scale.jsonl")}


def _per_gpu(run, predicted: bool) -> float:
    if predicted:
        return _estimate(run.spec, run.cluster, run.strategy).tokens_per_s_per_gpu
    return run.targets["tokens_per_s_per_gpu"]


def test_scale_rows_restate_the_logs(runs):
    # the University of Florida keeps its 8-node layout (CP 2, micro-batch 1) on 32 nodes, so
    # its global batch grows with the data-parallel ranks: 128 sequences on 256 GPUs; NVIDIA's
    # 512-GPU runs are TP 2 x CP 4 x DP 64 at global batch 64 (config_GB300_128x4x1xtp2pp1cp4)
    wide = load_published(DATA / "training_mlperf_8b_scale.jsonl")
    assert len(wide) == 5 and not any(r.skip_reason for r in wide)
    assert all(r.strategy.n_gpus > 72 and r.strategy.fp8_param_gather for r in wide)
    uf = runs[UF.format(32, 256)].strategy
    assert (uf.tp, uf.cp, uf.dp, uf.micro_batch, uf.global_batch) == (1, 2, 128, 1, 128)
    nv = runs[THEIA_512].strategy
    assert (nv.tp, nv.cp, nv.dp, nv.global_batch) == (2, 4, 64, 64)
    # measured per GPU: 21,488 tokens/s on 8 nodes, 18,397 on 32 (the logs' median blocks)
    assert _per_gpu(runs[UF.format(8, 64)], False) == pytest.approx(21488, abs=1)
    assert _per_gpu(runs[UF.format(32, 256)], False) == pytest.approx(18397, abs=1)


def test_scale_rows_error_holds_the_level_reached():
    # 47.7% median when the rows were added (2026-12-07); past 50% a change must say why
    wide = load_published(DATA / "training_mlperf_8b_scale.jsonl")
    errs = [abs(_per_gpu(r, True) / _per_gpu(r, False) - 1) for r in wide]
    assert statistics.median(errs) <= 0.50


@pytest.mark.xfail(strict=True, reason="the per-GPU loss from 64 to 256 GPUs is a cost per step "
                   "the estimator does not price (VALIDATION.md, 'Llama 3.1 8B beyond 72 GPUs')")  # fmt: skip
def test_the_estimate_follows_the_per_gpu_loss_of_more_data_parallel_ranks(runs):
    # the same system, layout and work per GPU on 8 and 32 DGX B200 nodes: measured -14%
    lo, hi = runs[UF.format(8, 64)], runs[UF.format(32, 256)]
    measured = _per_gpu(hi, False) / _per_gpu(lo, False) - 1
    predicted = _per_gpu(hi, True) / _per_gpu(lo, True) - 1
    assert measured == pytest.approx(18397 / 21488 - 1, abs=0.005)
    assert abs(predicted - measured) <= 0.05
