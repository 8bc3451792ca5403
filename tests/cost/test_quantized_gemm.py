"""Weight-only GEMMs (`hwtune.cost.quantized_gemm`): the weight read at its stored width, the math
at 16 bits, and the kernel family's share of the tensor-core rate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.compute import FA2_SHARE_ON_HOPPER, KERNEL_OVERHEAD_S
from hwtune.cost.quantized_gemm import kernel_share, serving_gemm_time
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device

H200 = get_device("h200-sxm-141gb")
A100 = get_device("a100-sxm4-80gb")


def test_marlin_on_hopper_runs_compute_bound_gemms_at_the_mma_sync_share():
    """A prefill-size expert GEMM is compute-bound: Marlin (mma.sync) takes 1/0.57 of the native
    wgmma kernel's math time on Hopper (FA3 paper's FA2/FA3 ratio)."""
    m, n, k = 8192, 5760, 2880
    w = serving_gemm_time(m, n, k, H200, "fp4") - KERNEL_OVERHEAD_S
    mr = serving_gemm_time(m, n, k, H200, "fp4", kernel="marlin") - KERNEL_OVERHEAD_S
    assert mr / w == pytest.approx(1.0 / FA2_SHARE_ON_HOPPER, rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 16384), st.integers(64, 16384), st.integers(64, 16384), st.integers(1, 64))
def test_marlin_is_never_faster_nor_slower_than_its_share(m, n, k, batch):
    """Only the math slows down: wgmma <= Marlin <= wgmma / 0.57 (the weight read, the larger
    side for few rows, is the same for both)."""
    a = serving_gemm_time(m, n, k, H200, "fp4", batch) - KERNEL_OVERHEAD_S
    b = serving_gemm_time(m, n, k, H200, "fp4", batch, kernel="marlin") - KERNEL_OVERHEAD_S
    assert a <= b * (1 + 1e-12)
    assert b <= a / FA2_SHARE_ON_HOPPER * (1 + 1e-12)


def test_marlin_is_native_off_hopper_and_unknown_kernels_are_named():
    assert kernel_share(A100, "marlin") == 1.0  # Marlin's own architecture
    assert kernel_share(H200, "wgmma") == 1.0
    with pytest.raises(HwtuneInputError, match="weight_only_kernel"):
        serving_gemm_time(64, 64, 64, H200, "fp4", kernel="machete2")


def test_vllm_gpt_oss_rows_use_marlin_from_the_inferencex_script_date():
    from hwtune.serve.published import MARLIN_SINCE, inferencex_engine_limits

    m = "openai/gpt-oss-120b"
    assert inferencex_engine_limits("vllm", m, 1024, 4, MARLIN_SINCE) == {
        "weight_only_kernel": "marlin"
    }
    assert inferencex_engine_limits("vllm", m, 1024, 4, "2025-12-08") == {}
    trt = inferencex_engine_limits("trtllm", m, 1024, 4, "2026-03-27")
    assert trt["weight_only_kernel"] == "triton-mxfp4"  # its moe_config backend: TRITON


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16384), st.integers(64, 16384), st.integers(64, 16384))
def test_triton_mxfp4_is_its_share_slower_in_both_regimes(m, n, k):
    """triton_kernels' MXFP4 MoE on Hopper: the aiconfigurator-measured median 1.47x applies to
    the math and to the weight read alike, so every shape takes 1/share of the wgmma time."""
    from hwtune.cost.quantized_gemm import TRITON_MXFP4_SHARE_ON_HOPPER

    a = serving_gemm_time(m, n, k, H200, "fp4") - KERNEL_OVERHEAD_S
    b = serving_gemm_time(m, n, k, H200, "fp4", kernel="triton-mxfp4") - KERNEL_OVERHEAD_S
    assert b == pytest.approx(a / TRITON_MXFP4_SHARE_ON_HOPPER, rel=1e-9)
    assert kernel_share(A100, "triton-mxfp4") == 1.0
