"""GEMMs whose weights are stored in a narrower format than the math runs in (weight-only
quantization, e.g. MXFP4/NVFP4 weights on a GPU without FP4 tensor cores, or int4 weights on
any GPU: `WEIGHT_ONLY_FORMATS`).

Source: the roofline of `hwtune.cost.compute.gemm_time` (Williams et al. 2009; tile and wave
quantization of Anthony et al. 2024 §3), with the weight operand read at its stored width and the
math at the activation format: W4A16 kernels (Marlin, Frantar et al. 2024 "MARLIN: Mixed-Precision
Auto-Regressive Parallel Inference on Large Language Models", §3) dequantize tiles in registers,
so decode-size GEMMs read 0.5 byte per weight while large GEMMs run at the 16-bit tensor rate.

Which kernel runs the math matters on Hopper (``WEIGHT_ONLY_KERNELS``): Marlin, and the fused
Marlin MoE built on it, issues Ampere's ``mma.sync.m16n8k16`` tensor-core instructions (Frantar et
al. 2024, §3-4: designed for A10/A100), not Hopper's asynchronous warpgroup ``wgmma``; vLLM's
Machete README calls Machete, a CUTLASS wgmma kernel, "a spiritual successor to the Marlin kernel
but optimized for Hopper architectures". How fast the fused Marlin MoE runs on Hopper once it is
compute-bound is measured (`MARLIN_SHARE_ON_HOPPER`); below that, as its paper designs it, it
reads the 4-bit weights at the memory bandwidth.
"""

from __future__ import annotations

from hwtune.cost.compute import (
    FP4_GROUP_SIZE,
    KERNEL_OVERHEAD_S,
    dtype_bytes,
    gemm_time,
    shape_efficiency,
)
from hwtune.errors import HwtuneInputError
from hwtune.hardware.device import Device

WEIGHT_ONLY_FORMATS: tuple[str, ...] = ("int4",)
"""Weight formats whose math always runs in the activation format (bf16) on dequantized tiles,
whatever the GPU: int4 W4A16 checkpoints (GPTQ, AWQ, compressed-tensors ``type: int``
``num_bits: 4``, ModelOpt W4A16_AWQ) run Marlin, Machete or AWQ GEMM kernels, which upcast the
integer weights to 16 bits in registers (Frantar et al. 2024, §3; vLLM's Machete README), so
they never use Blackwell's FP4 tensor cores as NVFP4/MXFP4 checkpoints do. On Hopper the
native (``wgmma``, Machete) kernel is the default, as for fp4 weights there."""

NO_FLOAT_WEIGHT_ARCHITECTURES: dict[str, str] = {
    "volta": "fp16 or int4 (no fp8/fp4 tensor cores, and the Marlin kernels that run them "
    "weight-only need Turing or later)",
    "cdna2": "bf16 or fp16 (no fp8/fp4 matrix cores, and the Marlin kernels that run them "
    "weight-only on NVIDIA GPUs do not run on AMD GPUs)",
}
"""GPU architectures that serve no fp8 or fp4 weights, with the formats they do serve: no tensor
cores of those formats and no weight-only kernel for them either.

- Volta: vLLM's "Supported Hardware" table for quantization (docs, v0.9.2 to v0.14.0) has FP8
  W8A8 from Ada on and "Marlin (GPTQ/AWQ/FP8)" from Ampere on, none on Volta (SM 7.0); its FP8
  page runs fp8 checkpoints weight-only "on compute capability >= 7.5 (Turing)". int4 stays:
  GPTQ's kernels run on Volta (same table).
- CDNA2 (MI250X, MI210): no FP8 in its matrix cores (AMD's MI250X specification lists FP64,
  FP32, FP16/BF16 and INT8 matrix rates only), and the same table marks Marlin unsupported on
  AMD GPUs, so nothing runs fp8 weights weight-only there; vLLM issue #16394 (2025-04) is an
  fp8 DeepSeek-R1 checkpoint failing on an MI210 (gfx90a: "type fp8e4b8 not supported in this
  architecture"). int4 is not named (that table marks GPTQ and AWQ unsupported on AMD GPUs
  in v0.9.2) but not refused either: no source here shows a later engine failing on it."""

INT4_GROUP_SIZE = 128
"""Weights per 16-bit scale of int4 weights when the checkpoint does not say: the default
``group_size`` of GPTQ (``GPTQConfig``, AutoGPTQ's ``BaseQuantizeConfig``) and AWQ (AutoAWQ's
``q_group_size``; ``AwqConfig``). Checkpoints that state theirs are read instead
(`ModelSpec.weight_group_size`: Kimi-K2.5's compressed-tensors ``group_size: 32``)."""


def weight_bytes_per_element(dtype: str, group_size: int | None = None) -> float:
    """Bytes one stored weight takes in ``dtype``: `dtype_bytes`, plus its share of the group
    scales:

    - int4: one 16-bit scale per ``group_size`` weights (``INT4_GROUP_SIZE`` when None; -1, one
      scale per output channel, adds under 0.1% for the K of thousands of LLM GEMMs and is left
      out, as are the 4-bit zero points of asymmetric GPTQ/AWQ groups: 0.004 byte per weight at
      group size 128). Sources: the GPTQ/AWQ/compressed-tensors packing (int32 words of eight
      4-bit weights, fp16/bf16 ``scales`` of shape (K / group_size, N)); 0.5 + 2/32 = 0.5625
      byte at Kimi-K2.5's 32.
    - fp4: one 8-bit scale per ``group_size`` weights (``FP4_GROUP_SIZE``, NVFP4's 16, when
      None): 0.5 + 1/32 = 0.53125 byte for MXFP4 (gpt-oss), 0.5625 for NVFP4; the per-tensor
      FP32 scale is left out.

    The native FP4 tensor-core path (`hwtune.cost.compute.gemm_time` on Blackwell) reads
    both operands in NVFP4 blocks (``FP4_GROUP_SIZE``)."""
    b = dtype_bytes(dtype)
    if dtype == "int4":
        g = INT4_GROUP_SIZE if group_size is None else group_size
        return b if g == -1 else b + 2.0 / g
    if dtype == "fp4":
        g = FP4_GROUP_SIZE if group_size is None else group_size
        return b if g == -1 else b + 1.0 / g
    return b


WEIGHT_ONLY_KERNELS: tuple[str, ...] = ("wgmma", "marlin", "triton-mxfp4")
"""Kernels of weight-only GEMMs: ``wgmma`` (the architecture's native tensor-core path: CUTLASS
mixed-input / Machete on Hopper, the default), ``marlin`` (mma.sync; see the module docstring),
or ``triton-mxfp4`` (OpenAI's triton_kernels MoE, TensorRT-LLM's TRITON backend on Hopper; see
`TRITON_MXFP4_SHARE_ON_HOPPER`)."""

TRITON_MXFP4_SHARE_ON_HOPPER = 1 / 1.47
"""triton_kernels' MXFP4 MoE (``matmul_ogs``) on Hopper: wgmma on weights upcast to bf16 in
registers (triton PR #8917), the conversion costing throughput in both regimes. Measured by
NVIDIA with TensorRT-LLM 1.2.0rc5's TRITON MoE backend on an H200 (ai-dynamo/aiconfigurator
``systems/data/h200_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet``, ``w4a16_mxfp4``, gpt-oss-120b's
shape: hidden 2880, 128 experts, top-4, balanced routing): over its 210 points (1 to 8192 tokens,
MoE TP 1-8, EP 1-8) the layer takes a median 1.47x (0.88-3.5x) this module's time for the same
layer (`hwtune.serve.iteration.IterationModel`, tier 1). A per-op microbenchmark of the engine's
own kernel, not an end-to-end row: applied to both the math and the weight read."""


MARLIN_SHARE_ON_HOPPER = 0.152
"""Useful-FLOP rate of vLLM's fused Marlin MoE (W4A16) on Hopper once compute-bound, as a share of
the bf16 GEMM rate this module charges (peak x ``gemm_fraction``). Measured by NVIDIA with vLLM
0.18.0 on an H200 (ai-dynamo/aiconfigurator
``systems/data/h200_sxm/moe/vllm/0.18.0/moe_perf.parquet``, ``int4_wo``, kernel
``vllm_marlin_int4_moe``, balanced routing, expert parallelism 1): over the 113 points with at
least 512 rows per expert (33 shapes: hidden 2048-7168, 8-512 experts, top-2 to top-22, MoE TP
1-32) the experts' FLOPs divided by the layer's time less its router, activation and permute
traffic give a median 0.152 (p10 0.144, p90 0.157; flat in TP and width), about 120 TFLOP/s:
Marlin's tiles hold at most 64 rows, so large batches do not reuse a weight tile further. Taken
for MXFP4 Marlin (``VLLM_MXFP4_USE_MARLIN``) too: the same fused kernel with another 4-bit
dequantization (an assumption; no MXFP4 Marlin timing is published). The points below 512 rows
carry the harness's per-call host time (0.1 ms at one token) that CUDA graphs remove in
serving, so the memory-bound side keeps the full bandwidth (the Marlin paper's design point,
near-ideal 4-bit speedup up to batch 16-32)."""


MARLIN_ROWS = 16
"""Rows of Marlin's tensor-core tile: the activations are the M side of ``mma.sync.m16n8k16``
(Frantar et al. 2024 §3), so a batch is padded to a multiple of 16."""


def kernel_share(device: Device, kernel: str) -> float:
    """The rate of ``kernel`` (math, and for ``triton-mxfp4`` also the weight read) as a share
    of the device's native tensor-core kernel's."""
    if kernel not in WEIGHT_ONLY_KERNELS:
        raise HwtuneInputError(
            "weight_only_kernel", kernel, "one of " + ", ".join(WEIGHT_ONLY_KERNELS)
        )
    if device.architecture != "hopper":
        return 1.0
    if kernel == "marlin":
        return MARLIN_SHARE_ON_HOPPER
    if kernel == "triton-mxfp4":
        return TRITON_MXFP4_SHARE_ON_HOPPER
    return 1.0


def supports(device: Device, dtype: str) -> bool:
    """Whether ``device`` has tensor-core math in ``dtype`` (a peak figure in the catalog)."""
    return getattr(device.peak_tflops, dtype, None) is not None


def serving_gemm_time(
    m: int,
    n: int,
    k: int,
    device: Device,
    weight_dtype: str,
    batch: int = 1,
    kernel: str = "wgmma",
    group_size: int | None = None,
) -> float:
    """Seconds for ``batch`` (m x k) @ (k x n) GEMMs whose (k x n) weights are in ``weight_dtype``.

    When the device computes in ``weight_dtype`` this is `gemm_time` itself (W8A8 FP8 and the
    like). Otherwise, and always for `WEIGHT_ONLY_FORMATS` (int4), the math runs in bf16 on
    dequantized tiles and only the weight read is narrower (weight-only quantization; see the
    module docstring), by ``kernel``; int4 weights carry their group scales
    (`weight_bytes_per_element`, ``group_size``).
    """
    if weight_dtype not in WEIGHT_ONLY_FORMATS and supports(device, weight_dtype):
        return gemm_time(m, n, k, device, weight_dtype, batch)
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    share = kernel_share(device, kernel)
    if kernel == "marlin" and share != 1.0:
        # the measured share is of useful FLOPs (`MARLIN_SHARE_ON_HOPPER`); the kernel's
        # mma.sync.m16n8k16 pads the rows to 16
        eta = m / (-(-m // MARLIN_ROWS) * MARLIN_ROWS)
    else:
        eta = shape_efficiency(m, n, k, device, batch)
    half = device.sixteen_bit_dtype  # activations run 16-bit: fp16 on Volta
    rate = device.peak_flops(half) * device.gemm_fraction(half) * share
    t_compute = flops / (rate * eta)
    wb = weight_bytes_per_element(weight_dtype, group_size)
    nbytes = batch * (2.0 * m * k + wb * k * n + 2.0 * m * n)
    bw_share = share if kernel == "triton-mxfp4" else 1.0
    t_mem = nbytes / (device.memory_bandwidth_si * device.memory_bw_efficiency * bw_share)
    return max(t_compute, t_mem) + KERNEL_OVERHEAD_S


__all__ = [
    "FP4_GROUP_SIZE",
    "INT4_GROUP_SIZE",
    "MARLIN_SHARE_ON_HOPPER",
    "NO_FLOAT_WEIGHT_ARCHITECTURES",
    "TRITON_MXFP4_SHARE_ON_HOPPER",
    "WEIGHT_ONLY_FORMATS",
    "WEIGHT_ONLY_KERNELS",
    "kernel_share",
    "serving_gemm_time",
    "supports",
    "weight_bytes_per_element",
]
