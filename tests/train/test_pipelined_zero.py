"""ZeRO-2/3 under a pipeline, priced as the one runtime that runs it does:
``torch.distributed.pipelining`` over FSDP2 stages turns gradient sync off for every
micro-batch's backward (whole gradients accumulate) and reduce-scatters once per step
(``REDUCE_GRAD``); a backward keeps its stage gathered until the next forward reshards it
(DeepSpeed refuses ZeRO-2/3 with its pipeline engine; Megatron-LM shards no gradients). So a
pipeline's ZeRO-2 has ZeRO-1's memory and traffic (reduced after the last backward, not behind
it), and its ZeRO-3 peaks with the stage's weights and gradients whole."""

from __future__ import annotations

import pytest

from hwtune.cost.memory import fsdp_pipelined, sharded_state_bytes, state_bytes_per_param
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.parallel import compile_and_simulate
from hwtune.parallel.spec import make_spec
from hwtune.train.estimator import _estimate
from hwtune.train.strategy import make_strategy

LLAMA = get_model("llama3.1-8b")


def _est(**kw):
    st = make_strategy(seq=4096, **kw)
    return _estimate(LLAMA, make_cluster("h100-sxm-80gb", st.n_gpus), st)


@pytest.mark.parametrize(("pp", "dp"), [(2, 4), (4, 2), (4, 4)])
def test_a_pipelines_zero2_has_zero1s_memory_and_reduces_after_the_last_backward(pp, dp):
    one = _est(pp=pp, dp=dp, zero=1, global_batch=8 * dp)
    two = _est(pp=pp, dp=dp, zero=2, global_batch=8 * dp)
    assert two.memory == one.memory
    # the same bytes once per step, but none of it behind the backward (REDUCE_GRAD runs after
    # it), where ZeRO-1 overlaps Megatron-style; without overlap the two are the same step
    assert two.step_time_s > one.step_time_s
    off = dict(overlap_grad_reduce=False)
    one_off = _est(pp=pp, dp=dp, zero=1, global_batch=8 * dp, **off)
    two_off = _est(pp=pp, dp=dp, zero=2, global_batch=8 * dp, **off)
    assert two_off.step_time_s == pytest.approx(one_off.step_time_s, rel=1e-12)
    assert two.step_time_s == pytest.approx(two_off.step_time_s, rel=1e-12)


def test_zero2_without_a_pipeline_still_shards_gradients():
    g2 = _est(dp=2, zero=2, global_batch=8).memory.gradients
    g4 = _est(dp=4, zero=2, global_batch=16).memory.gradients
    assert g4 == pytest.approx(g2 / 2, rel=1e-9)


def test_a_pipelines_zero3_peaks_with_its_stage_whole():
    # a backward leaves the stage gathered (reshard_after_backward off) and the first backward
    # runs with the most micro-batches in flight: weights and gradients whole at the peak,
    # nothing of them shrinks with dp; only the optimizer states are sharded
    a = _est(pp=2, dp=4, zero=3, global_batch=32).memory
    b = _est(pp=2, dp=8, zero=3, global_batch=64).memory
    assert b.weights == pytest.approx(a.weights, rel=1e-9)
    assert b.gradients == pytest.approx(a.gradients, rel=1e-9)
    assert b.optimizer == pytest.approx(a.optimizer / 2, rel=1e-9)
    assert a.transient == b.transient  # no per-block gather on top of the whole stage
    one = _est(pp=2, dp=4, zero=1, global_batch=32).memory
    assert a.weights == pytest.approx(one.weights, rel=1e-9)


def test_dualpipe_is_not_pipelined_fsdp():
    # the bidirectional DualPipe is walked by hand, not by torch's pipelining runtime: its
    # ZeRO-2/3 stages shard gradients and reduce per micro-batch, in the estimator and the plan
    assert fsdp_pipelined(4, "1f1b") and fsdp_pipelined(2, "explicit")
    assert not fsdp_pipelined(4, "dualpipe") and not fsdp_pipelined(1, "1f1b")
    g2 = _est(pp=4, dp=2, zero=2, schedule="dualpipe", global_batch=32).memory.gradients
    g4 = _est(pp=4, dp=4, zero=2, schedule="dualpipe", global_batch=64).memory.gradients
    assert g4 == pytest.approx(g2 / 2, rel=1e-9)


def test_sharded_state_bytes_pipelined_keeps_weights_and_gradients_whole():
    sb = state_bytes_per_param("bf16", "adam", True)
    for zero in (0, 1, 2, 3):
        w, g, o = sharded_state_bytes(1e9, sb, zero, 8, pipelined=True)
        assert (w, g) == pytest.approx((1e9 * sb.weights, 1e9 * sb.grads))
        assert o == sharded_state_bytes(1e9, sb, zero, 8)[2]


def test_a_pipelines_zero3_reduces_once_per_step():
    # exposed data-parallel time E(m) = (m + 1) x gather + one reduce-scatter (the first
    # forward's gather beside one per micro-batch): linear in the micro-batches with an
    # intercept above the slope (per micro-batch reductions would have none)
    def exposed(gb):
        e = _est(pp=2, dp=4, zero=3, global_batch=gb, overlap_param_gather=False)
        return e.breakdown["dp_comm_exposed"], e.strategy.grad_accum

    (e1, m1), (e2, m2), (e3, m3) = exposed(16), exposed(32), exposed(64)
    assert (m1, m2, m3) == (4, 8, 16)
    assert e3 - e2 == pytest.approx(2 * (e2 - e1), rel=1e-9)
    slope, intercept = (e2 - e1) / 4, 2 * e1 - e2
    rs = intercept - slope
    assert rs > 0.05 * e1
    # the intercept is the reduce-scatter of the stage's 16-bit gradients: the same at dp 4
    # whatever the batch, and it grows as the group does (dp 8 moves 7/8 of them, not 3/4)
    e8 = [_est(pp=2, dp=8, zero=3, global_batch=gb, overlap_param_gather=False)
          .breakdown["dp_comm_exposed"] for gb in (32, 64)]  # fmt: skip
    assert (2 * e8[0] - e8[1]) - (e8[1] - e8[0]) / 4 > rs


@pytest.mark.parametrize(
    "fields",
    [
        dict(pp=2, dp=2, global_batch=8),
        dict(pp=4, dp=2, global_batch=16),
        dict(pp=4, dp=2, global_batch=16, schedule={"name": "interleaved", "vpp": 2}),
        dict(pp=4, dp=2, global_batch=16, schedule="gpipe"),
    ],
)
def test_a_pipelines_zero3_gathers_as_often_as_the_plan(fields):
    # the compiled plan walks each chunk's forwards and backwards with the stage gathered by a
    # backward until the next forward reshards it (pp 2 1F1B m 4: 5 gathers per rank, as the
    # real run counts them); the estimator's gathered bytes are that many gathers of the
    # stage, which ZeRO-1 gathers once per step
    from hwtune.parallel.compiler import compile_plan

    spec = make_spec(seq=4096, zero=3, **fields)
    plan = compile_plan(spec, LLAMA, make_cluster("h100-sxm-80gb", spec.mesh.world))
    chunks = 2 if isinstance(fields.get("schedule"), dict) else 1  # interleaved, vpp 2
    per_rank = sum(1 for o in plan.ops if o.kind == "AG" and o.rank == 0) / chunks
    base = {k: v for k, v in fields.items() if k != "schedule"}
    sched = fields.get("schedule", "1f1b")
    kw = dict(schedule="interleaved", vpp=2) if isinstance(sched, dict) else dict(schedule=sched)
    z3 = _est(zero=3, **base, **kw).comm_volume_bytes["dp_gather_bytes_per_gpu"]
    z1 = _est(zero=1, **base, **kw).comm_volume_bytes["dp_gather_bytes_per_gpu"]
    assert z3 / z1 == pytest.approx(per_rank, rel=1e-9)
    assert per_rank == spec.base_strategy().grad_accum + 1


@pytest.mark.parametrize(
    "fields",
    [
        dict(pp=4, dp=2, zero=3, global_batch=32),
        dict(pp=2, dp=4, zero=3, global_batch=32),
        dict(pp=2, dp=8, zero=3, global_batch=32),
        dict(pp=4, dp=4, zero=3, global_batch=64, schedule={"name": "interleaved", "vpp": 2}),
        dict(pp=4, dp=2, zero=2, global_batch=32),
    ],
)
def test_the_simulator_agrees_with_the_estimator_within_5_percent(fields):
    spec = make_spec(seq=4096, **fields)
    _, res = compile_and_simulate(LLAMA, spec)
    est = _estimate(LLAMA, make_cluster("h100-sxm-80gb", spec.mesh.world), spec.base_strategy())
    assert res.step_time_s == pytest.approx(est.step_time_s, rel=0.05)


def test_zero3_without_a_pipeline_reduces_and_gathers_every_micro_batch():
    # FSDP: a gather before each forward and each backward, a reduce-scatter after each
    # backward, every micro-batch (m = 4 here): ZeRO-2's reductions, twice m of ZeRO-1's gathers
    z1, z2, z3 = (_est(dp=4, zero=z, global_batch=16, grad_reduce_dtype="bf16").comm_volume_bytes
                  for z in (1, 2, 3))  # fmt: skip
    assert z3["dp_bytes_per_gpu"] == pytest.approx(z2["dp_bytes_per_gpu"], rel=1e-9)
    assert z3["dp_bytes_per_gpu"] == pytest.approx(4 * z1["dp_bytes_per_gpu"], rel=1e-9)
    assert z3["dp_gather_bytes_per_gpu"] == pytest.approx(8 * z1["dp_gather_bytes_per_gpu"])
