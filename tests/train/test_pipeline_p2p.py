"""Pipeline send/recv: Megatron's scatter/gather split over TP ranks and the overlapped
interleaved schedule (Narayanan et al. SC'21 §4.1; Megatron-Core ``--overlap-p2p-communication``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.cost import collectives as coll
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import OVERLAP_SLOWDOWN, estimate, pipeline_p2p
from hwtune.train.strategy import make_strategy

SPEC = get_model("llama3.1-70b")
CL = make_cluster("h100-sxm-80gb", 64, gpus_per_node=8)
ACT = 2.0 * 4096  # bf16 bytes per d_model element of one micro-batch of 4096 tokens


def _st(**kw):
    base = dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=32, seq=4096, precision="bf16")
    return make_strategy(**(base | kw))


def test_sequence_parallel_sends_one_tp_share_per_rank():
    # With SP the activation at a stage boundary is already split over the 8 TP ranks: each
    # sends 1/8 of it across the network, once forward and once backward (1F1B, one chunk).
    st = _st(sequence_parallel=True)
    per_mb, fixed = pipeline_p2p(SPEC, CL, st, ACT, True, 1.0)
    one = coll.send_recv_time(ACT * SPEC.d_model / 8, True, CL)
    assert per_mb == pytest.approx(2 * one)
    assert fixed == 0.0


def test_scatter_gather_without_sequence_parallel():
    # SC'21 §4.1: split before the send, all-gather over NVLink after it.
    st = _st(sequence_parallel=False)
    per_mb, _ = pipeline_p2p(SPEC, CL, st, ACT, True, 1.0)
    nb = ACT * SPEC.d_model
    one = coll.send_recv_time(nb / 8, True, CL) + coll.all_gather_time(nb, CL.span(8, 1), CL)
    assert per_mb == pytest.approx(2 * one)
    # much less than sending the whole activation over one NIC
    assert per_mb < 2 * coll.send_recv_time(nb, True, CL) / 3


def test_overlap_hides_steady_state_behind_compute_but_not_warmup():
    st = _st(sequence_parallel=True, schedule="interleaved", vpp=4, overlap_p2p_comm=True)
    one = coll.send_recv_time(ACT * SPEC.d_model / 8, True, CL)
    per_mb, fixed = pipeline_p2p(SPEC, CL, st, ACT, True, compute_mb=10.0)  # compute >> p2p
    # the 32 x 4 - 38 steady chunk steps hide their send/recv, each slowing the compute it
    # runs behind by OVERLAP_SLOWDOWN of its length (arXiv 2507.03114: 18.9% on average)
    assert per_mb == pytest.approx((32 * 4 - 38) * OVERLAP_SLOWDOWN * 2 * one / 32)
    assert per_mb < 2 * 4 * one / 4  # far below waiting for every transfer
    # rank 0's warmup: 2 (p - 1) + (v - 1) p = 14 + 24 = 38 forward chunk steps (Megatron-Core
    # num_warmup_microbatches with the default micro-batch group of p), as many flush backwards
    assert fixed == pytest.approx(2 * 38 * one)
    off = st.model_copy(update={"overlap_p2p_comm": False})
    per_off, fixed_off = pipeline_p2p(SPEC, CL, off, ACT, True, 10.0)
    assert per_off == pytest.approx(2 * 4 * one) and fixed_off == 0.0


def test_overlap_only_changes_the_interleaved_schedule():
    for sched in ("1f1b", "gpipe", "zb-h1"):
        a = pipeline_p2p(SPEC, CL, _st(schedule=sched, overlap_p2p_comm=True), ACT, True, 10.0)
        b = pipeline_p2p(SPEC, CL, _st(schedule=sched, overlap_p2p_comm=False), ACT, True, 10.0)
        assert a == b


@settings(max_examples=40, deadline=None)
@given(
    pp=hs.sampled_from([2, 4, 8]),
    v=hs.sampled_from([2, 4, 5]),
    m_mult=hs.integers(1, 8),
    compute=hs.floats(1e-6, 1.0),
)
def test_overlap_never_slower_than_waiting_and_never_below_no_transfer(pp, v, m_mult, compute):
    # Invariant: hiding transfers can only shorten the step; it cannot make them free.
    if 80 % (pp * v):
        return
    dp = 64 // (8 * pp)
    kw = dict(tp=8, pp=pp, dp=dp, micro_batch=1, global_batch=dp * pp * m_mult, seq=4096,
              sequence_parallel=True, schedule="interleaved", vpp=v)  # fmt: skip
    on = make_strategy(**kw, overlap_p2p_comm=True)
    off = make_strategy(**kw, overlap_p2p_comm=False)
    m = on.grad_accum
    p_on, f_on = pipeline_p2p(SPEC, CL, on, ACT, True, compute)
    p_off, f_off = pipeline_p2p(SPEC, CL, off, ACT, True, compute)
    assert m * p_on + f_on <= m * p_off + f_off + 1e-12
    assert m * p_on + f_on > 0.0
    # and through the whole estimator
    assert estimate(SPEC, CL, on).step_time_s <= estimate(SPEC, CL, off).step_time_s * (1 + 1e-12)
