"""ZeRO-2/3 under a pipeline, priced as the one runtime that runs it does:
``torch.distributed.pipelining`` over FSDP2 stages turns gradient sync off for every
micro-batch's backward (whole gradients accumulate) and reduce-scatters once per step
(``REDUCE_GRAD``); a backward keeps its stage gathered until the next forward reshards it
(DeepSpeed refuses ZeRO-2/3 with its pipeline engine; Megatron-LM shards no gradients). So a
pipeline's ZeRO-2 is ZeRO-1 (same traffic, same memory), and its ZeRO-3 holds whole gradients."""

from __future__ import annotations

import pytest

from hwtune.cost.memory import sharded_state_bytes, state_bytes_per_param
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
def test_a_pipelines_zero2_is_zero1(pp, dp):
    one = _est(pp=pp, dp=dp, zero=1, global_batch=8 * dp)
    two = _est(pp=pp, dp=dp, zero=2, global_batch=8 * dp)
    assert two.step_time_s == pytest.approx(one.step_time_s, rel=1e-12)
    assert two.memory == one.memory


def test_zero2_without_a_pipeline_still_shards_gradients():
    g2 = _est(dp=2, zero=2, global_batch=8).memory.gradients
    g4 = _est(dp=4, zero=2, global_batch=16).memory.gradients
    assert g4 == pytest.approx(g2 / 2, rel=1e-9)


def test_a_pipelines_zero3_shards_weights_but_not_gradients():
    a = _est(pp=2, dp=4, zero=3, global_batch=32).memory
    b = _est(pp=2, dp=8, zero=3, global_batch=64).memory
    assert b.weights == pytest.approx(a.weights / 2, rel=1e-9)
    assert b.gradients == pytest.approx(a.gradients, rel=1e-9)


def test_sharded_state_bytes_pipelined_keeps_whole_gradients():
    sb = state_bytes_per_param("bf16", "adam", True)
    for zero in (0, 1, 2, 3):
        w, g, o = sharded_state_bytes(1e9, sb, zero, 8, pipelined=True)
        assert g == pytest.approx(1e9 * sb.grads)
        assert (w, o) == sharded_state_bytes(1e9, sb, zero, 8)[::2]


def test_a_pipelines_zero3_reduces_once_per_step():
    # doubling the micro-batches adds their compute and one gather each, no reduce-scatter:
    # the step grows by less than at ZeRO-3 without a pipeline's per-micro-batch reductions
    a = _est(pp=2, dp=4, zero=3, global_batch=32)
    b = _est(pp=2, dp=4, zero=3, global_batch=64)
    one_a = _est(pp=2, dp=4, zero=1, global_batch=32)
    one_b = _est(pp=2, dp=4, zero=1, global_batch=64)
    # the extra over ZeRO-1 grows by m gathers' exposed share only (the reduce-scatter is once)
    assert (b.step_time_s - one_b.step_time_s) < 2.0 * (a.step_time_s - one_a.step_time_s) + 1e-9


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
