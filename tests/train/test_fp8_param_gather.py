"""fp8 parameters (`Strategy.fp8_param_gather`, Megatron-Core ``--fp8-param-gather``): "keep the
compute param in fp8 (do not use any other intermediate dtype) and perform the param
all-gather in fp8" (Megatron-Core arguments), with the fp32 main weights in the distributed
optimizer."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.model.params import total_params
from hwtune.train.estimator import estimate
from hwtune.train.launch import megatron_launch, megatron_strategy, strategy_from_megatron
from hwtune.train.launch_torchtitan import torchtitan_refusal
from hwtune.train.strategy import make_strategy

MODEL = get_model("llama3.1-8b")
CL = make_cluster("h100-sxm-80gb", 64)


def _st(**kw):
    base = dict(precision="fp8", dp=64, zero=1, micro_batch=1, global_batch=64, seq=8192)
    return make_strategy(**(base | kw))


def test_weights_take_one_byte_each_and_the_rest_is_unchanged():
    off = estimate(MODEL, CL, _st())
    on = estimate(MODEL, CL, _st(fp8_param_gather=True))
    # bf16 weights are 2 bytes per parameter, fp8 ones 1: the weight memory halves exactly
    assert on.memory.weights == pytest.approx(off.memory.weights / 2)
    assert on.memory.weights == pytest.approx(total_params(MODEL) * 1.0, rel=0.01)
    assert on.memory.optimizer == off.memory.optimizer  # the fp32 main weights stay
    assert on.memory.gradients == off.memory.gradients


def test_the_parameter_gather_moves_half_the_bytes_so_the_step_is_no_slower():
    # MLPerf's Llama 3.1 8B on 64 H100 (Cisco hpf_n8, fp8_params) needed 85 GiB of 80 before
    off = estimate(MODEL, CL, _st())
    on = estimate(MODEL, CL, _st(fp8_param_gather=True))
    assert on.step_time_s <= off.step_time_s
    assert not off.fits and on.fits


@pytest.mark.parametrize(
    "kw",
    [dict(precision="bf16"), dict(zero=0), dict(zero=3), dict(optimizer="adam-bf16")],
)
def test_fp8_parameters_need_fp8_and_the_distributed_optimizer(kw):
    with pytest.raises(HwtuneInputError, match="fp8_param_gather"):
        estimate(MODEL, CL, _st(fp8_param_gather=True, **kw))


def test_megatron_launch_passes_it_and_reads_it_back():
    st = _st(fp8_param_gather=True, fp8_recipe="current")
    launch = megatron_launch(st, MODEL, 64, 8)
    assert "--fp8-param-gather" in launch.args
    back = megatron_strategy(strategy_from_megatron(list(launch.args)), MODEL, 64)
    assert back.fp8_param_gather and back.zero == 1 and back.precision == "fp8"
    assert "--fp8-param-gather" not in megatron_launch(_st(), MODEL, 64, 8).args


def test_torchtitan_refuses_it():
    err = torchtitan_refusal(_st(fp8_param_gather=True))
    assert err is not None and "fp8_param_gather" in str(err)


def test_cli_refuses_it_without_fp8(rejects):
    rejects(["estimate", "-m", "llama3.1-8b", "--gpus", "8", "--precision", "bf16",
             "--fp8-param-gather"], "fp8_param_gather", "precision fp8")  # fmt: skip
