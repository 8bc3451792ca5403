"""KV-cache usage over time: the stretch arithmetic, the merge over replicas, the time-weighted
mean, and the simulator's log (step by step and fast-forwarded alike)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.serve.config import Deployment
from hwtune.serve.kv_usage import merge_usage, stretch_blocks, time_weighted_mean
from hwtune.serve.metrics import summarize
from hwtune.serve.request import Workload, closed_loop, fixed_lengths, open_loop
from hwtune.serve.simulator import simulate


@settings(max_examples=200, deadline=None)
@given(
    block=st.integers(1, 32),
    computed=st.lists(st.integers(0, 600), min_size=1, max_size=12),
    spare=st.lists(st.integers(0, 2), min_size=12, max_size=12),
    steps=st.integers(1, 200),
)
def test_stretch_blocks_counts_each_step_directly(block, computed, spare, steps):
    """The O(requests + steps) count equals summing ceil((c + 1 + i) / block) (at least the
    blocks held) request by request for every step."""
    c = np.array(computed)
    held = -(-c // block) + np.array(spare[: c.size])
    want = [int(np.maximum(-(-(c + 1 + i) // block), held).sum()) for i in range(steps)]
    assert stretch_blocks(c, held, block, steps).tolist() == want


def test_stretch_blocks_refuses_a_request_short_of_blocks():
    with pytest.raises(ValueError, match="fewer blocks"):
        stretch_blocks(np.array([33]), np.array([1]), 16, 4)


def test_merge_and_mean_of_two_replicas_by_hand():
    """Replica A (10 blocks) uses 5 from t=0 and 0 from t=2; replica B (30 blocks) uses 30 from
    t=1 to t=3 and 15 after. Over [0, 4] the deployment holds (5*2 + 30*2 + 15*1) / (40*4) of
    its block-time = 85/160; entries at one instant count after the last of them."""
    t, frac, peak = merge_usage([([0.0, 2.0], [5, 0], 10), ([1.0, 1.0, 3.0], [7, 30, 15], 30)])
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert frac.tolist() == pytest.approx([5 / 40, 35 / 40, 30 / 40, 15 / 40])
    assert peak == 1.0
    assert time_weighted_mean(t, frac, 0.0, 4.0) == pytest.approx(85 / 160)
    # a window starting later weighs only what lies inside it
    assert time_weighted_mean(t, frac, 2.0, 4.0) == pytest.approx((30 + 15) / 80)
    assert merge_usage([([], [], 8)]) == (pytest.approx([]), pytest.approx([]), 0.0)


def test_one_request_uses_its_blocks_step_by_step(cfg8b):
    """Alone on the replica: the prefill holds ceil(P / 16) blocks, decode step i (computing
    token P + i) ceil((P + i) / 16), and everything is freed when it finishes. The mean is those
    blocks times each step's duration over the cache's block-time."""
    p, o = 1000, 200
    res = simulate(cfg8b, Workload((p,), (o,), "closed", 1), record_steps=True)
    blocks = [-(-(p + i) // 16) for i in range(o)]  # step 0 is the prefill
    durs = [s.duration for s in res.steps]
    assert len(durs) == o
    cap = res.memory.kv_blocks
    assert res.kv_util[-1] == 0.0
    want = float(np.dot(blocks, durs)) / (cap * res.duration_s)
    assert summarize(res)["kv_utilization"]["mean"] == pytest.approx(want, rel=1e-9)
    assert summarize(res)["kv_utilization"]["max"] == pytest.approx(blocks[-1] / cap)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("rate", [None, 30.0])
def test_fast_forward_logs_the_usage_step_by_step_would(cfg8b, overlap, rate):
    """Decode stretches batched into one event log the same used blocks at the same instants as
    simulating every step: equal series, equal mean (the old per-launch average differed)."""
    cfg = cfg8b.with_(overlap_schedule=overlap)
    p, o = fixed_lengths(40, 700, 200)
    wl = closed_loop(16, p, o) if rate is None else open_loop(rate, p, o, seed=5)
    a, b = simulate(cfg, wl, fast=True), simulate(cfg, wl, fast=False)
    assert a.kv_time == pytest.approx(b.kv_time, rel=1e-12, abs=1e-12)
    assert a.kv_util.tolist() == b.kv_util.tolist()
    assert summarize(a)["kv_utilization"] == pytest.approx(summarize(b)["kv_utilization"])


def test_replicas_are_weighed_by_time_not_by_steps(cfg8b):
    """Two replicas, round-robin: the deployment's fraction is never above its busiest replica's
    peak, ends at zero, and its mean lies below that peak."""
    p, o = fixed_lengths(24, 2000, 100)
    res = simulate(Deployment(cfg8b, replicas=2), closed_loop(8, p, o))
    s = summarize(res)["kv_utilization"]
    assert np.all(np.diff(res.kv_time) > 0)
    assert res.kv_util.max() <= s["max"] + 1e-12
    assert res.kv_util[-1] == 0.0
    assert 0.0 < s["mean"] < s["max"]
