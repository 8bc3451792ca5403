"""FlexAttention's Triton kernel against each architecture's best fused attention kernel.

Sources (causal, bf16, head dim 128, 8k tokens, MHA):

- Guessous, Stern, Hoehnerbach, Xie, Zadouri, Shah and Dao, "FlexAttention + FlashAttention-4:
  Fast and Flexible", PyTorch blog, 2026-03-05
  (https://pytorch.org/blog/flexattention-flashattention-4-fast-and-flexible/): on Hopper
  "FlexAttention achieves roughly 60% of FlashAttention-3's throughput"; on GB200 the Triton
  kernel trails cuDNN by "a chasm". The numbers of both figures are in the first author's slide
  data, github.com/drisspg/vizz commit 555dcde, ``vizz/presentations/ptce_2026_flex_flash/data/``:
  ``flex_vs_fav3_causal.csv`` ("H100: FA3 vs FlexAttention", shape (2, 16, 8192, 16, 8192, 128))
  and ``gb200_triton_cudnn.csv`` (shape (4, 16, 8192, 16, 8192, 128)).
- FlashAttention-4 and FlashAttention-2 on B200: Dao-AILab/flash-attention PR #2280 and issue
  #1589, meta-pytorch/tritonbench PR #171 (figures below).
- Guessous, Liang, Dong and He, "FlexAttention: The Flexibility of PyTorch with the Performance
  of FlashAttention", PyTorch blog, 2024-08-07, "Performance": 90% of FlashAttention-2 forward,
  85% backward, on A100.
"""

from __future__ import annotations

import pytest

from hwtune.cost.compute import attention_kernel_share, attention_time
from hwtune.hardware.catalog import get_device

H100_FA3_TFLOPS = (679.737, 474.924)  # flex_vs_fav3_causal.csv, 8192 tokens: fwd, bwd
H100_FLEX_TFLOPS = (396.273, 315.676)
GB200_FLEX_TFLOPS = (507.99, 473.74)  # gb200_triton_cudnn.csv, causal (4, 16, 8192, 16, 8192, 128)
# NVIDIA/cudnn-frontend sdpa_benchmark_training results, 2026-07-24 (commit e99b0d0b, cuDNN
# 9.26): Llama-3.1 GQA (2, 64/8 heads, 128), bf16, causal, 8192 tokens; forward cuDNN, backward
# FlashAttention-4 (the faster of the two in each direction)
GB200_BEST_CAUSAL_TFLOPS = (1646.0, 1389.0)
GB300_BEST_CAUSAL_TFLOPS = (1991.0, 1454.0)
# Dao-AILab/flash-attention PR #2280 (2026-02-27), B200, (4, 16, 8192, 128), FA4 fwd and 2-CTA bwd
B200_FA4_CAUSAL_TFLOPS = (1418.1, 1208.6)
B200_FA4_NONCAUSAL_TFLOPS = (1534.8, 1359.8)
# meta-pytorch/tritonbench PR #171 (2025-03-04), B200, flash_v2 forward at (8, 16, 8192, 128)
B200_FA2_NONCAUSAL_FWD = 361.591
# flash-attention issue #1589 (2025-04-13), B200, flash_attn 2.7.4, head dim 64, 8k: fwd, bwd
B200_FA2_HD64_TFLOPS = (343.07, 329.09)


@pytest.mark.parametrize("backward", [False, True])
def test_flex_on_h100_runs_at_the_blogs_share_of_flashattention3(backward: bool) -> None:
    h100 = get_device("h100-sxm-80gb")  # the figure's GPU; no measured profile: spec-sheet path
    assert h100.profile is None
    i = 1 if backward else 0
    published = H100_FLEX_TFLOPS[i] / H100_FA3_TFLOPS[i]  # 0.583 forward, 0.665 backward
    best = attention_time(1e15, 1.0, h100, "bf16", backward, "best")  # compute-bound
    flex = attention_time(1e15, 1.0, h100, "bf16", backward, "flex")
    assert best / flex == pytest.approx(published, abs=0.01)


def test_flex_on_hopper_is_roughly_sixty_percent_of_flashattention3() -> None:
    # the blog's words, for every Hopper part of the catalog (H200 included)
    for name in ("h100-sxm-80gb", "h100-pcie-80gb", "h800-sxm-80gb", "h200-sxm-141gb"):
        dev = get_device(name)
        for backward in (False, True):
            assert 0.55 <= attention_kernel_share(dev, "flex", backward) <= 0.70


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
@pytest.mark.parametrize("backward", [False, True])
def test_flex_on_blackwell_runs_at_the_gb200_share_of_the_best_kernel(
    name: str, backward: bool
) -> None:
    # the GB200's best as NVIDIA measured it: cuDNN forward, FlashAttention-4 backward
    i = 1 if backward else 0
    published = GB200_FLEX_TFLOPS[i] / GB200_BEST_CAUSAL_TFLOPS[i]  # 0.309 forward, 0.341 backward
    assert attention_kernel_share(get_device(name), "flex", backward) == pytest.approx(
        published, abs=0.01
    )


@pytest.mark.parametrize("backward", [False, True])
def test_flex_on_gb200_runs_at_its_measured_rate(backward: bool) -> None:
    # absolute: the catalog's GB200 attention rate times the share gives the blog's Triton figure
    gb200 = get_device("gb200")
    i = 1 if backward else 0
    flops = 1e15
    t = attention_time(flops, 1.0, gb200, "bf16", backward, "flex")
    executed = flops * (2.5 if backward else 1.0)  # FlashAttention counts backward as 2.5x
    assert executed / t / 1e12 == pytest.approx(GB200_FLEX_TFLOPS[i], rel=0.05)


@pytest.mark.parametrize("backward", [False, True])
def test_b200_best_attention_runs_at_flashattention4s_causal_rate(backward: bool) -> None:
    # PR #2280's B200 figures
    i = 1 if backward else 0
    flops = 1e15
    t = attention_time(flops, 1.0, get_device("b200"), "bf16", backward)
    executed = flops * (2.5 if backward else 1.0)
    assert executed / t / 1e12 == pytest.approx(B200_FA4_CAUSAL_TFLOPS[i], rel=0.03)


def test_fa2_on_b200_runs_at_tritonbenchs_rate() -> None:
    # tritonbench's FA2 forward on B200 (non-causal, 8k, head dim 128) against FA4's
    b200 = get_device("b200")
    assert attention_kernel_share(b200, "fa2") == pytest.approx(
        B200_FA2_NONCAUSAL_FWD / B200_FA4_NONCAUSAL_TFLOPS[0], abs=0.01
    )
    # backward: FA2's own bwd/fwd ratio on B200 (head dim 64) carried to head dim 128
    bwd = B200_FA2_HD64_TFLOPS[1] / B200_FA2_HD64_TFLOPS[0] * B200_FA2_NONCAUSAL_FWD
    assert attention_kernel_share(b200, "fa2", True) == pytest.approx(
        bwd / B200_FA4_NONCAUSAL_TFLOPS[1], abs=0.01
    )


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
@pytest.mark.parametrize("backward", [False, True])
def test_fa2_is_below_flex_on_blackwell(name: str, backward: bool) -> None:
    # FA2 issues Ampere mma.sync; Triton's FlexAttention issues tcgen05 on Blackwell: FA2's
    # 361.6 TFLOP/s (tritonbench) is below Flex's 508.0 forward (the blog's GB200 data)
    dev = get_device(name)
    assert attention_kernel_share(dev, "fa2", backward) < attention_kernel_share(
        dev, "flex", backward
    )


def test_flex_on_ampere_keeps_the_2024_blogs_share_of_flashattention2() -> None:
    a100 = get_device("a100-sxm4-80gb")
    assert attention_kernel_share(a100, "fa2") == 1.0  # FA2 is Ampere's best kernel
    assert attention_kernel_share(a100, "flex") == pytest.approx(0.90)
    assert attention_kernel_share(a100, "flex", backward=True) == pytest.approx(0.85)


@pytest.mark.parametrize("name", ["gb200", "gb300"])
@pytest.mark.parametrize("backward", [False, True])
def test_grace_blackwell_attention_runs_at_nvidias_measured_rate(name: str, backward: bool) -> None:
    i = 1 if backward else 0
    flops = 1e15
    t = attention_time(flops, 1.0, get_device(name), "bf16", backward)
    executed = flops * (2.5 if backward else 1.0)
    best = GB300_BEST_CAUSAL_TFLOPS if name == "gb300" else GB200_BEST_CAUSAL_TFLOPS
    assert executed / t / 1e12 == pytest.approx(best[i], rel=0.03)


def test_blackwell_ultra_forward_outruns_blackwell_at_the_same_peak() -> None:
    # the doubled exponential rate: GB300 1991 vs GB200 1646 TFLOP/s, same run, same 2500 peak
    gb300, gb200 = get_device("gb300"), get_device("gb200")
    assert gb300.peak_tflops.bf16 == gb200.peak_tflops.bf16
    ratio = gb300.attention_fwd_efficiency / gb200.attention_fwd_efficiency
    assert ratio == pytest.approx(
        GB300_BEST_CAUSAL_TFLOPS[0] / GB200_BEST_CAUSAL_TFLOPS[0], rel=0.03
    )
