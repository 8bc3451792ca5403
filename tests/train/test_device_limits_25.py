"""Configurations no framework runs are refused, not estimated: FlashAttention-2 before Ampere
(Dao 2023: it needs sm80+), optimizer offload without a sharded optimizer (DeepSpeed's
offload_optimizer needs ZeRO 1-3; Megatron-LM's --optimizer-cpu-offload its distributed
optimizer)."""

from __future__ import annotations

import pytest

import hwtune
from hwtune.errors import HwtuneInputError


@pytest.mark.parametrize("gpu", ["v100-sxm2-32gb", "v100-sxm3-32gb"])
def test_fa2_needs_ampere(gpu: str) -> None:
    with pytest.raises(HwtuneInputError) as info:
        hwtune.estimate("gpt-1.7b", gpu=gpu, gpus=8, seq=2048, attention_kernel="fa2")
    assert info.value.field == "attention_kernel" and "volta" in info.value.expected
    # the same strategy without flash attention (materialized) is a normal estimate
    est = hwtune.estimate(
        "gpt-1.7b", gpu=gpu, gpus=8, seq=2048, attention_kernel="fa2", flash_attention=False
    )
    assert est.step_time_s > 0


def test_fa2_on_ampere_and_hopper() -> None:
    for gpu in ("a100-sxm4-80gb", "h100-sxm-80gb"):
        assert hwtune.estimate("gpt-1.7b", gpu=gpu, gpus=8, attention_kernel="fa2").step_time_s > 0


def test_offload_needs_a_sharded_optimizer(rejects) -> None:  # noqa: ANN001
    with pytest.raises(HwtuneInputError) as info:
        hwtune.estimate("llama3.1-8b", gpus=8, zero=0, offload_optimizer=True)
    assert info.value.field == "offload_optimizer"
    assert hwtune.estimate("llama3.1-8b", gpus=8, zero=1, offload_optimizer=True).step_time_s > 0
    rejects(["estimate", "--offload", "--zero", "0", "--dp", "8"], "--offload", "ZeRO stage 1")
