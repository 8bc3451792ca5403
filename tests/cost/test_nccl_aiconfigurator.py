"""NCCL's collectives on one node against NVIDIA's published nccl-tests timings.

Source: ai-dynamo/aiconfigurator (Apache-2.0), ``systems/data/<gpu>/comm/nccl/<dir>/
nccl_perf.parquet`` (NCCL 2.29.2, 2, 4 and 8 H100 or H200 GPUs), kept in
``benchmarks/data/aiconfigurator_nccl.csv`` and compared by ``benchmarks/nccl_vs_aiconfigurator.py``
(VALIDATION.md, "NCCL all-gather and reduce-scatter"). Nothing was fitted to these rows: the LL
figures are NCCL's own (``src/graph/tuning.cc``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.collectives import (
    all_gather_time,
    all_reduce_time,
    nccl_ring_all_gather_time,
    reduce_scatter_time,
)
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster


@pytest.fixture(scope="module")
def cmp(benchmark_module):
    return benchmark_module("nccl_vs_aiconfigurator")


@pytest.fixture(scope="module")
def series(cmp):
    return {r["series"]: r for r in cmp.compare(cmp.load())}


def test_kept_timings_cover_every_collective(cmp):
    rows = cmp.load()
    assert {(r["gpu"], r["op"], int(r["gpus"])) for r in rows} == {
        (g, op, n) for g, _ in cmp.SERIES for op in cmp.OPS for n in (2, 4, 8)
    }
    assert {r["nccl"] for r in rows} == {"2.29.2"}


@pytest.mark.parametrize("gpu", ["h200_sxm", "h100_sxm"])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_eight_gpu_all_gather_and_reduce_scatter_within_ten_percent(series, gpu, op):
    """1 KB-1 GB on 8 GPUs: median error 5-8% with NCCL's LL ring priced, 26-69% without it
    (the Simple ring's 7 steps of 3 us made a small call 21 us; NCCL measured 10-14 us)."""
    r = series[(gpu, op, 8)]
    assert r["median"] < 0.10
    assert r["before"] > 0.25


@pytest.mark.parametrize("gpu", ["h200_sxm", "h100_sxm"])
def test_all_reduce_within_twenty_percent(series, gpu):
    """All-reduce (its LL ring and NVLS since the thirty-second session): 8-18% at the median on
    2-8 GPUs."""
    for n in (2, 4, 8):
        assert series[(gpu, "all_reduce", n)]["median"] < 0.20


def test_a_small_all_gather_on_eight_h100s_is_nccls_ll_ring():
    """NCCL's tuning model: 6.6 us + 7 NVLink hops x 0.6 us, bus bandwidth min(141 GB/s,
    half the ring's); the Simple ring would be 7 x 3 us."""
    cl = make_cluster("h100-sxm-80gb", 8)
    span = cl.span(8, 1)
    s = 1024.0
    ll = 6.6e-6 + 7 * 0.6e-6 + 7 / 8 * s / 141e9
    assert nccl_ring_all_gather_time(s, span, cl) == pytest.approx(ll, rel=1e-9)
    assert all_gather_time(s, span, cl) == reduce_scatter_time(s, span, cl) == pytest.approx(ll)
    assert nccl_ring_all_gather_time(s, span, cl, protocol="simple") == pytest.approx(
        7 * 3e-6 + 7 / 8 * s / cl.intra_link().bandwidth
    )


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1.0, 2.0**33),
    st.sampled_from([2, 4, 8, 16, 32]),
    st.sampled_from(["h100-sxm-80gb", "a100-sxm4-80gb", "gb200", "mi300x"]),
)
def test_ll_never_makes_a_call_slower_and_large_calls_stay_simple(s, n, gpu):
    cl = make_cluster(gpu, 32)
    span = cl.span(n, 1)
    auto = nccl_ring_all_gather_time(s, span, cl)
    simple = nccl_ring_all_gather_time(s, span, cl, protocol="simple")
    assert 0 < auto <= simple
    if s >= 2.0**30:  # LL's bandwidth is at most half the ring's: Simple wins
        assert auto == simple
    # explicit all-reduce algorithms are the Simple protocol
    assert all_reduce_time(s, span, cl, algorithm="ring") >= 2 * simple * (1 - 1e-12)


def test_unknown_protocol_is_named():
    cl = make_cluster("h100-sxm-80gb", 8)
    with pytest.raises(HwtuneInputError, match="protocol.*ll128.*auto or simple"):
        nccl_ring_all_gather_time(1024.0, cl.span(8, 1), cl, protocol="ll128")
