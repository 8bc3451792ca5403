"""The cost functions' default math precision is the device's own 16-bit format
(`Device.sixteen_bit_dtype`): bf16 where the device has a bf16 peak, fp16 on Volta, which has
none (V100 whitepaper, Table 1: tensor cores take FP16 only)."""

from __future__ import annotations

import pytest

from hwtune.cost.compute import gemm_time
from hwtune.cost.kv_cache import attention_shape, decode_attention_time
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model


@pytest.mark.parametrize(
    ("gpu", "sixteen"), [("v100-sxm2-32gb", "fp16"), ("h100-sxm-80gb", "bf16")]
)
def test_gemm_time_defaults_to_the_devices_sixteen_bit_format(gpu: str, sixteen: str) -> None:
    dev = get_device(gpu)
    assert dev.sixteen_bit_dtype == sixteen
    assert gemm_time(4096, 4096, 4096, dev) == gemm_time(4096, 4096, 4096, dev, sixteen)


def test_bf16_is_refused_on_volta_rather_than_priced() -> None:
    with pytest.raises(Exception, match="bf16"):
        gemm_time(4096, 4096, 4096, get_device("v100-sxm2-32gb"), "bf16")


@pytest.mark.parametrize(
    ("gpu", "sixteen"), [("v100-sxm2-32gb", "fp16"), ("h100-sxm-80gb", "bf16")]
)
def test_decode_attention_defaults_to_the_devices_sixteen_bit_format(
    gpu: str, sixteen: str
) -> None:
    dev = get_device(gpu)
    sh = attention_shape(get_model("llama3.1-8b"), "full", 1)
    # 64 sequences over 4096 keys each with one query row (KV-read bound) and with 16
    # (speculative verification, compute-heavier): the default is the named 16-bit format
    for q in (1, 16):
        got = decode_attention_time(sh, 64, 64 * 4096, dev, sixteen, queries=q)
        want = decode_attention_time(sh, 64, 64 * 4096, dev, sixteen, queries=q, math_dtype=sixteen)
        assert got == want
