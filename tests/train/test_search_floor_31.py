"""The planner's two bounds (`hwtune.train.estimator`): what makes pruning safe is that the
floor of a layout, micro-batch and schedule (`step_time_floor`, checked before memory) is
below each of its settings' bound (`step_time_lower_bound`), and that bound is below the
setting's estimated step. Random strategies, with unequal pipeline ranks (a dense first layer,
layer counts that do not divide evenly) so that the busiest rank can change with the setting."""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, make_cluster
from hwtune.model.spec import ModelSpec, MoE
from hwtune.train.estimator import (
    Estimate,
    _estimate,
    shard_of,
    step_time_floor,
    step_time_lower_bound,
)
from hwtune.train.search import why_better
from hwtune.train.strategy import SCHEDULES, Strategy

DENSE = ModelSpec(
    name="dense-7", n_layers=7, d_model=1024, n_heads=16, n_kv_heads=4, ffn_hidden=2816,
    vocab=32000,
)  # fmt: skip
MOE = ModelSpec(
    name="moe-7", n_layers=7, d_model=1024, n_heads=16, n_kv_heads=4, ffn_hidden=2816,
    vocab=32000,
    moe=MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=1408, first_k_dense_layers=1),
)  # fmt: skip
RELATIVE = 1e-12  # the three are sums of the same terms in different orders


@functools.cache
def cluster(n: int) -> Cluster:
    return make_cluster("h100-sxm-80gb", n)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    moe=st.booleans(),
    tp=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 2]),
    mb=st.sampled_from([1, 2]),
    accum=st.sampled_from([1, 3, 8]),
    schedule=st.sampled_from(SCHEDULES),
    vpp=st.sampled_from([1, 2, 3]),
    recompute=st.sampled_from(["none", "selective", "selective-op", "full"]),
    zero=st.integers(0, 3),
    offload=st.booleans(),
    overlap_tp=st.booleans(),
    overlap_a2a=st.booleans(),
    precision=st.sampled_from(["bf16", "fp8"]),
)
def test_floor_below_bound_below_estimate(
    moe, tp, pp, dp, ep, mb, accum, schedule, vpp, recompute, zero, offload, overlap_tp,
    overlap_a2a, precision,
):  # fmt: skip
    spec = MOE if moe else DENSE
    try:
        s = Strategy(
            tp=tp, pp=pp, dp=dp, ep=ep if moe else 1, micro_batch=mb,
            global_batch=mb * dp * accum, seq=2048, schedule=schedule,
            vpp=vpp if schedule == "interleaved" else 1, recompute=recompute, zero=zero,
            offload_optimizer=offload, sequence_parallel=tp > 1, precision=precision,
            overlap_tp_comm=overlap_tp, overlap_moe_a2a=overlap_a2a and moe,
        )  # fmt: skip
        s.validate_for(spec, tp * pp * dp)
    except (HwtuneInputError, ValueError):
        assume(False)
    cl = cluster(tp * pp * dp)
    floor = step_time_floor(
        spec, cl, s.precision, shard_of(s), s.overlap_tp_comm, s.overlap_moe_a2a, s.pp,
        s.schedule, s.vpp, s.split_key, s.grad_accum,
    )  # fmt: skip
    bound = step_time_lower_bound(spec, cl, s)
    step = _estimate(spec, cl, s).step_time_s
    assert 0 < floor <= bound * (1 + RELATIVE)
    assert bound <= step * (1 + RELATIVE)
    if recompute == "none" and pp == 1:  # one rank, nothing recomputed: the same terms
        assert floor == pytest.approx(bound, rel=RELATIVE)


@functools.cache
def _base_estimate() -> Estimate:
    return _estimate(DENSE, cluster(2), Strategy(dp=2, global_batch=4, seq=1024))


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.tuples(st.floats(0.0, 5.0), st.floats(0.0, 5.0)), min_size=2, max_size=5))
def test_why_best_never_names_a_part_larger_than_the_gain(parts):
    """'X s of the Y s it gains' only when X <= Y (as printed); a part that differs by more
    than the whole gain is said to be partly offset elsewhere."""
    keys = ["forward", "backward", "pp_p2p", "dp_comm_exposed", "optimizer"][: len(parts)]
    a_bd = {k: p[0] for k, p in zip(keys, parts, strict=True)}
    b_bd = {k: p[1] for k, p in zip(keys, parts, strict=True)}
    a = dataclasses.replace(_base_estimate(), breakdown=a_bd, step_time_s=sum(a_bd.values()))
    b = dataclasses.replace(_base_estimate(), breakdown=b_bd, step_time_s=sum(b_bd.values()))
    assume(b.step_time_s > a.step_time_s * (1 + 1e-6))
    line = why_better(a, b)
    assert "\n" not in line
    nums = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?) s", line)]
    if " of the " in line:
        assert nums[0] <= nums[1]
    elif "partly offset" in line:
        assert nums[0] > nums[1]
