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
GB200_CUDNN_TFLOPS = (1419.6, 1007.4)  # gb200_triton_cudnn.csv, causal (4, 16, 8192, 16, 8192, 128)
GB200_FLEX_TFLOPS = (507.99, 473.74)


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
def test_flex_on_blackwell_runs_at_the_gb200_share_of_cudnn(name: str, backward: bool) -> None:
    i = 1 if backward else 0
    published = GB200_FLEX_TFLOPS[i] / GB200_CUDNN_TFLOPS[i]  # 0.358 forward, 0.470 backward
    assert attention_kernel_share(get_device(name), "flex", backward) == pytest.approx(
        published, abs=0.01
    )


def test_flex_on_ampere_keeps_the_2024_blogs_share_of_flashattention2() -> None:
    a100 = get_device("a100-sxm4-80gb")
    assert attention_kernel_share(a100, "fa2") == 1.0  # FA2 is Ampere's best kernel
    assert attention_kernel_share(a100, "flex") == pytest.approx(0.90)
    assert attention_kernel_share(a100, "flex", backward=True) == pytest.approx(0.85)
