"""The data-parallel bucket group that cannot hide (`estimator.edge_bucket_params`): Megatron-Core
fills buckets in reverse parameter order, so the group holding the input embedding is reduced
after the backward's last gradient and gathered by the forward's first pre-hook, which waits
for it (Megatron-LM 25.09 ``param_and_grad_buffer.py``, ``finish_param_sync``); with fp8 weights
every 16-bit parameter joins it (``partition_buckets`` case 3)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.collectives import all_gather_time, reduce_scatter_time
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import _estimate, edge_bucket_params, rank_layouts
from hwtune.train.published import load_published
from hwtune.train.search import _dominated
from hwtune.train.strategy import make_strategy

MLPERF = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "training_mlperf.jsonl"
UF = "mlperf51-university-of-florida-hpg-dgxb200-n{}-llama31-8b-fp8-{}gpu"


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["llama3.1-8b", "llama3.1-70b", "qwen3-8b", "gpt-7.5b"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    dp=st.sampled_from([2, 8, 64]),
    zero=st.sampled_from([1, 2, 3]),
)
def test_the_embeddings_gather_and_reduction_are_never_hidden(model, tp, dp, zero):
    # whatever the compute, the first forward waits for the embedding's gather and the step
    # for its gradient's reduction: a floor under the exposed data-parallel time
    spec = get_model(model)
    cl = make_cluster("h100-sxm-80gb", tp * dp)
    s = make_strategy(tp=tp, dp=dp, zero=zero, micro_batch=1, global_batch=dp, seq=4096,
                      grad_reduce_dtype="bf16")  # fmt: skip
    est = _estimate(spec, cl, s)
    span = cl.span(dp, tp)
    emb = spec.vocab * spec.d_model / tp
    floor = all_gather_time(2 * emb, span, cl) + reduce_scatter_time(2 * emb, span, cl)
    assert est.breakdown["dp_comm_exposed"] >= floor * (1 - 1e-9)


def test_only_the_first_pipeline_stage_holds_the_embedding():
    spec = get_model("llama3.1-70b")
    first, *_, last = rank_layouts(spec, 4, 1)
    vd = 128256 * 8192  # Llama 3.1 70B config.json: vocab_size x hidden_size
    assert edge_bucket_params(spec, first, 8, False) == vd / 8
    assert edge_bucket_params(spec, first, 8, True) == pytest.approx(vd / 8)  # no head here
    assert edge_bucket_params(spec, last, 1, True) == pytest.approx(last.embedding_params)


def test_the_university_of_floridas_step_from_two_nodes_to_four():
    # measured on one DGX B200 system (MLPerf Training v5.1 logs): 28,421 tokens/s/GPU on 2
    # nodes (CP 1, micro-batch 2) and 21,585 on 4 (CP 2, one micro-batch per step): -24%.
    # With the edge group priced the estimate falls 20% (16% before, 2026-12-06); past 5
    # points from the measured drop a change must say why
    runs = {r.id: r for r in load_published(MLPERF)}
    n2, n4 = runs[UF.format(2, 16)], runs[UF.format(4, 32)]
    measured = n4.targets["tokens_per_s_per_gpu"] / n2.targets["tokens_per_s_per_gpu"] - 1
    assert measured == pytest.approx(21585 / 28421 - 1, abs=0.005)
    pred = [_estimate(r.spec, r.cluster, r.strategy).tokens_per_s_per_gpu for r in (n2, n4)]
    assert abs((pred[1] / pred[0] - 1) - measured) <= 0.05


def test_mlperf_median_with_the_edge_group():
    # 10.9% before the edge group (2026-12-07), 8.8% with it; past 10% a change must say why
    runs = [r for r in load_published(MLPERF) if not r.skip_reason]
    errs = [
        abs(_estimate(r.spec, r.cluster, r.strategy).tokens_per_s_per_gpu
            / r.targets["tokens_per_s_per_gpu"] - 1)
        for r in runs
    ]  # fmt: skip
    assert statistics.median(errs) <= 0.10


def test_zero_3_stands_apart_when_the_gradient_dtypes_differ():
    z1, z3 = (1, "none", False), (3, "none", False)
    assert _dominated(z1, z3)  # same gradient dtype: ZeRO 1 fits, ZeRO 3 need not be tried
    assert not _dominated(z1, z3, zero3_apart=True)
    assert _dominated((1, "none", False), (2, "none", False), zero3_apart=True)
