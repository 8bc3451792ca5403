"""Pipeline schedules: bubbles and in-flight micro-batches from the papers (REFERENCES.md table)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hwtune.train.schedules import in_flight, p2p_boundaries, param_copies, pipeline_time
from hwtune.train.strategy import SCHEDULES

# One rank's forward, full backward and weight-gradient part for one micro-batch; B = 2F and
# W = B/2 are the usual proportions (backward does dgrad + wgrad, each a forward's worth).
F, B, W = 1.0, 2.0, 1.0


# --- bubbles -------------------------------------------------------------------------------------
@pytest.mark.parametrize("sched", ["gpipe", "1f1b"])
def test_1f1b_and_gpipe_bubble(sched):
    # Narayanan et al. SC'21 §2.2.1 / Huang et al. 2019: (p - 1)(F + B) of idle time.
    pt = pipeline_time(sched, p=8, m=32, v=1, f=F, b=B, w=W)
    assert pt.bubble == pytest.approx(7 * 3.0)
    # Total = m (F + B) steady work + the bubble.
    assert pt.total == pytest.approx(32 * 3.0 + 21.0)


@pytest.mark.parametrize("v", [1, 2, 4])
def test_interleaved_bubble_divides_by_v(v):
    # SC'21 §2.2.2: (p - 1)(F + B) / v with v model chunks per rank.
    pt = pipeline_time("interleaved", p=4, m=16, v=v, f=F, b=B, w=W)
    assert pt.bubble == pytest.approx(3 * 3.0 / v)


def test_zb_h1_bubble():
    # Qi et al. ICLR'24 §3: (p - 1)(F + B - 2W). With F=1, B=2 and W=0.5: 7 x 2 = 14.
    pt = pipeline_time("zb-h1", p=8, m=32, v=1, f=1.0, b=2.0, w=0.5)
    assert pt.bubble == pytest.approx(7 * (3.0 - 1.0))


def test_zb_h1_bubble_vanishes_when_w_covers_it():
    # F + B - 2W = 3 - 3.2 < 0: the weight-gradient work fills the whole warm-up/cool-down,
    # and idle time cannot be negative, so the bubble is 0.
    pt = pipeline_time("zb-h1", p=8, m=32, v=1, f=1.0, b=2.0, w=1.6)
    assert pt.bubble == 0.0


def test_dualpipe_bubble():
    # DeepSeek-V3 §3.2.1 Table 2: (p/2 - 1)(F&B + B - 3W); with no overlap F&B = F + B.
    # p = 8, F = 1, B = 2, W = 0.5: 3 x (3 + 2 - 1.5) = 10.5.
    pt = pipeline_time("dualpipe", p=8, m=32, v=1, f=1.0, b=2.0, w=0.5)
    assert pt.bubble == pytest.approx(10.5)


def test_dualpipev_bubble():
    # DualPipeV (deepseek-ai/DualPipe README): the DualPipe bubble over 2r stages folded onto
    # r ranks, each stage holding half of the rank's work: (2r/2 - 1) (F&B + B - 3W) / 2.
    # r = 4 ranks, F = 1, B = 2, W = 0.5: 3 x 3.5 / 2 = 5.25.
    pt = pipeline_time("dualpipev", p=4, m=32, v=1, f=1.0, b=2.0, w=0.5)
    assert pt.bubble == pytest.approx(5.25)


@pytest.mark.parametrize("sched", SCHEDULES)
def test_single_stage_has_no_bubble(sched):
    pt = pipeline_time(sched, p=1, m=8, v=1, f=F, b=B, w=W)
    assert pt.bubble == 0.0
    assert pt.total == pytest.approx(8 * (F + B))


def test_unknown_schedule_is_rejected():
    with pytest.raises(ValueError):
        pipeline_time("pipedream-2bw-ish", p=4, m=8, v=1, f=F, b=B, w=W)


def test_bubble_fraction_falls_with_more_micro_batches():
    # 1F1B bubble share (p-1)/(m+p-1) (SC'21 §2.2.1): 3/11 at m=8, 3/67 at m=64.
    a = pipeline_time("1f1b", p=4, m=8, v=1, f=F, b=B, w=W)
    b = pipeline_time("1f1b", p=4, m=64, v=1, f=F, b=B, w=W)
    assert a.bubble / a.total == pytest.approx(3 / 11)
    assert b.bubble / b.total == pytest.approx(3 / 67)


# --- activations in flight -------------------------------------------------------------------------
def test_in_flight_1f1b_is_p():
    # 1F1B warm-up: stage 0 holds p micro-batches before its first backward (SC'21 §2.2.1).
    assert in_flight("1f1b", p=8, m=64, v=1) == 8


def test_in_flight_gpipe_is_m():
    # GPipe runs all m forwards before any backward.
    assert in_flight("gpipe", p=8, m=64, v=1) == 64


def test_in_flight_interleaved():
    # Korthikanti et al. 2022 §4.2.3: p (1 + (p - 1)/(p v)); p = 8, v = 2: 8 x (1 + 7/16) = 11.5.
    assert in_flight("interleaved", p=8, m=64, v=2) == pytest.approx(11.5)


def test_in_flight_dualpipe_is_p_plus_1():
    # DeepSeek-V3 Table 2: PP + 1 micro-batches of activations.
    assert in_flight("dualpipe", p=8, m=64, v=1) == 9


def test_in_flight_dualpipev_is_p_plus_half():
    # DualPipe README (same number of PP stages): DualPipeV keeps PP + 1 stage activations on
    # PP/2 devices; with p ranks, PP = 2p stages of L/(2p) layers: (2p + 1)/2 micro-batches of a
    # rank's L/p layers.
    assert in_flight("dualpipev", p=8, m=64, v=1) == 8.5


def test_in_flight_zero_bubble_is_p():
    # Qi et al. ZB-H1 keeps 1F1B's peak memory (p in flight).
    assert in_flight("zb-h1", p=8, m=64, v=1) == 8


def test_in_flight_never_exceeds_the_micro_batches():
    # With fewer micro-batches than stages only m exist to hold.
    assert in_flight("1f1b", p=8, m=3, v=1) == 3


@pytest.mark.parametrize("sched", SCHEDULES)
def test_in_flight_single_stage_is_one(sched):
    assert in_flight(sched, p=1, m=16, v=1) == 1


def test_param_copies_and_boundaries():
    # DualPipe keeps both directions' parameters (2x, Table 2); DualPipeV and the rest 1x.
    assert param_copies("dualpipe") == 2
    assert param_copies("dualpipev") == 1
    assert param_copies("1f1b") == 1
    # Interleaving crosses a stage boundary per chunk.
    assert p2p_boundaries("interleaved", 4) == 4
    assert p2p_boundaries("1f1b", 1) == 1


# --- invariants ------------------------------------------------------------------------------------
times = st.floats(1e-6, 10.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    sched=st.sampled_from(SCHEDULES),
    p=st.integers(1, 64),
    m=st.integers(1, 512),
    v=st.integers(1, 8),
    f=times,
    b_ratio=st.floats(1.0, 3.0),
    w_share=st.floats(0.0, 1.0),
)
def test_bubble_nonnegative_and_total_covers_the_work(sched, p, m, v, f, b_ratio, w_share):
    b = f * b_ratio
    w = b * w_share
    pt = pipeline_time(sched, p, m, v, f, b, w)
    assert pt.bubble >= 0.0
    assert pt.total >= m * (f + b) * (1 - 1e-12)
    assert pt.total == pytest.approx(m * (f + b) + pt.bubble)


@settings(max_examples=300, deadline=None)
@given(
    p=st.integers(2, 64),
    m=st.integers(1, 512),
    v=st.integers(1, 8),
    f=times,
    b_ratio=st.floats(1.0, 3.0),
    w_share=st.floats(0.0, 0.5),
)
def test_interleaving_and_zero_bubble_never_worse_than_1f1b(p, m, v, f, b_ratio, w_share):
    b = f * b_ratio
    w = b * w_share
    base = pipeline_time("1f1b", p, m, v, f, b, w).bubble
    assert pipeline_time("interleaved", p, m, v, f, b, w).bubble <= base * (1 + 1e-12)
    assert pipeline_time("zb-h1", p, m, v, f, b, w).bubble <= base * (1 + 1e-12)
    assert pipeline_time("zbv", p, m, v, f, b, w).bubble <= base * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(p=st.integers(2, 64), m=st.integers(1, 512), v=st.integers(1, 8))
def test_in_flight_bounds(p, m, v):
    # Every schedule holds between 1 and m micro-batches; 1F1B-family memory never exceeds GPipe's.
    for sched in SCHEDULES:
        k = in_flight(sched, p, m, v)
        assert 1 <= k <= m
        assert k <= in_flight("gpipe", p, m, v)
    assume(m >= p + 1)
    # Interleaving adds at most (p - 1)/v micro-batches over plain 1F1B.
    assert in_flight("1f1b", p, m, v) <= in_flight("interleaved", p, m, v) <= p + (p - 1) / v + 1e-9
