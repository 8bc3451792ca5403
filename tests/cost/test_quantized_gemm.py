"""Weight-only GEMMs (`hwtune.cost.quantized_gemm`): the weight read at its stored width, the math
at 16 bits, and the kernel family's share of the tensor-core rate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.compute import KERNEL_OVERHEAD_S
from hwtune.cost.quantized_gemm import kernel_share, serving_gemm_time
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device

H200 = get_device("h200-sxm-141gb")
A100 = get_device("a100-sxm4-80gb")


# NVIDIA's vLLM 0.18.0 fused Marlin MoE timings on an H200 (ai-dynamo/aiconfigurator
# systems/data/h200_sxm/moe/vllm/0.18.0/moe_perf.parquet, int4_wo, balanced routing, EP 1):
# (hidden, expert width, experts, top-k, MoE TP, tokens) -> milliseconds for the whole layer
MARLIN_MOE_H200_MS = {
    (4096, 14336, 8, 2, 1, 8192): 51.11,  # Mixtral-8x7B's shape
    (7168, 2048, 256, 8, 8, 16384): 13.82,  # DeepSeek-V3's
    (4096, 1536, 128, 8, 1, 8192): 20.95,  # Qwen3-235B-A22B's
    (2048, 768, 128, 8, 1, 16384): 10.99,  # Qwen3-30B-A3B's
}


@pytest.mark.parametrize("shape", sorted(MARLIN_MOE_H200_MS))
def test_marlin_moe_at_prefill_sizes_matches_nvidias_h200_timings(shape):
    """A balanced prefill-size MoE layer under ``kernel="marlin"`` (its two expert GEMMs, the
    router GEMM and the activation and permute traffic, as `IterationModel` charges them) takes
    the published layer time within 10%."""
    from hwtune.cost.compute import gemm_time, memory_time

    h, fe, experts, k, tp, tokens = shape
    width, rows = fe // tp, tokens * k // experts
    t = serving_gemm_time(rows, 2 * width, h, H200, "fp4", experts, kernel="marlin")
    t += serving_gemm_time(rows, h, width, H200, "fp4", experts, kernel="marlin")
    t += gemm_time(tokens, experts, h, H200, "bf16")
    t += memory_time(2 * rows * experts * width * 3, H200)
    t += memory_time(4 * 2 * tokens * k * h, H200, kernels=2)
    assert t * 1e3 == pytest.approx(MARLIN_MOE_H200_MS[shape], rel=0.10)


def test_marlin_pads_rows_to_its_16_row_tile():
    """mma.sync.m16n8k16: 1 and 16 rows cost the same math; 17 rows cost two tiles."""
    from hwtune.cost.quantized_gemm import MARLIN_ROWS, MARLIN_SHARE_ON_HOPPER

    n, k, batch = 5760, 2880, 4096  # math-bound even at one row per matrix at this share
    one, full, more = (serving_gemm_time(m, n, k, H200, "fp4", batch, kernel="marlin")
                       for m in (1, MARLIN_ROWS, MARLIN_ROWS + 1))  # fmt: skip
    rate = H200.peak_flops("bf16") * H200.gemm_fraction("bf16") * MARLIN_SHARE_ON_HOPPER
    assert full - KERNEL_OVERHEAD_S == pytest.approx(2 * 16 * n * k * batch / rate, rel=1e-9)
    assert one == pytest.approx(full, rel=1e-12)
    assert more - KERNEL_OVERHEAD_S == pytest.approx(2 * (full - KERNEL_OVERHEAD_S), rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 16384), st.integers(64, 16384), st.integers(64, 16384), st.integers(1, 64))
def test_marlin_is_the_slower_of_its_padded_math_and_the_full_bandwidth_read(m, n, k, batch):
    """Marlin on Hopper: the rows padded to 16 at the measured share of the GEMM rate, or the
    operands read at the memory bandwidth, whichever takes longer (so never faster than that
    read)."""
    from hwtune.cost.quantized_gemm import MARLIN_SHARE_ON_HOPPER

    b = serving_gemm_time(m, n, k, H200, "fp4", batch, kernel="marlin", group_size=32)
    b -= KERNEL_OVERHEAD_S
    per_weight = 0.5 + 1 / 32  # MXFP4: 4 bits and one 8-bit scale per 32 (OCP MX v1.0)
    nbytes = batch * (2.0 * m * k + per_weight * k * n + 2.0 * m * n)
    t_mem = nbytes / (H200.memory_bandwidth_si * H200.memory_bw_efficiency)
    rate = H200.peak_flops("bf16") * H200.gemm_fraction("bf16") * MARLIN_SHARE_ON_HOPPER
    t_math = 2.0 * (-(-m // 16) * 16) * n * k * batch / rate
    assert b == pytest.approx(max(t_mem, t_math), rel=1e-9)
    assert b >= t_mem * (1 - 1e-12)


def test_marlin_is_native_off_hopper_and_unknown_kernels_are_named():
    assert kernel_share(A100, "marlin") == 1.0  # Marlin's own architecture
    assert kernel_share(H200, "wgmma") == 1.0
    with pytest.raises(HwtuneInputError, match="weight_only_kernel"):
        serving_gemm_time(64, 64, 64, H200, "fp4", kernel="machete2")


def test_trtllm_gpt_oss_rows_use_the_triton_moe():
    """The vLLM rows' kernel by date is tested in `tests/serve/test_serve_validation.py`
    (`test_inferencex_vllm_gptoss_moe_kernel_follows_the_image`)."""
    from hwtune.serve.published import inferencex_engine_limits

    m = "openai/gpt-oss-120b"
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


def test_native_fp4_gemm_reads_both_operands_with_their_nvfp4_block_scales():
    """On a GPU with FP4 math, a memory-bound GEMM reads activations and weights as NVFP4:
    4 bits and one FP8 scale per 16 values (0.5625 byte), and writes bf16."""
    from hwtune.cost.compute import gemm_time
    from hwtune.hardware.catalog import get_device

    b200 = get_device("b200")
    assert b200.peak_tflops.fp4
    m, n, k = 1, 32768, 8192
    t = gemm_time(m, n, k, b200, "fp4") - KERNEL_OVERHEAD_S
    nbytes = (0.5 + 1 / 16) * (m * k + k * n) + 2.0 * m * n
    assert t == pytest.approx(nbytes / (b200.memory_bandwidth_si * b200.memory_bw_efficiency))


def test_an_fp4_kv_cache_keeps_its_nvfp4_block_scales():
    """An NVFP4 KV cache stores 4 bits and one FP8 scale per 16 values: 0.5625 byte per
    element against fp8's 1 and bf16's 2."""
    from hwtune.cost.kv_cache import kv_bytes_per_token
    from hwtune.model.catalog import get_model

    spec = get_model("llama3.1-8b")
    bf16, fp8, fp4 = (kv_bytes_per_token(spec, d) for d in ("bf16", "fp8", "fp4"))
    assert bf16 == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, 2 bytes
    assert fp8 == pytest.approx(bf16 / 2) and fp4 == pytest.approx(bf16 * 0.5625 / 2)
