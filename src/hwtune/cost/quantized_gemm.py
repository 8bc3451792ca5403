"""GEMMs whose weights are stored in a narrower format than the math runs in (weight-only
quantization, e.g. MXFP4/NVFP4 or int4 weights on a GPU without FP4 tensor cores).

Source: the roofline of `hwtune.cost.compute.gemm_time` (Williams et al. 2009; tile and wave
quantization of Anthony et al. 2024 §3), with the weight operand read at its stored width and the
math at the activation format: W4A16 kernels (Marlin, Frantar et al. 2024 "MARLIN: Mixed-Precision
Auto-Regressive Parallel Inference on Large Language Models", §3) dequantize tiles in registers,
so decode-size GEMMs read 0.5 byte per weight while large GEMMs run at the 16-bit tensor rate.
"""

from __future__ import annotations

from hwtune.cost.compute import (
    KERNEL_OVERHEAD_S,
    dtype_bytes,
    gemm_time,
    k_fill_efficiency,
    quantization_efficiency,
)
from hwtune.hardware.device import Device


def supports(device: Device, dtype: str) -> bool:
    """Whether ``device`` has tensor-core math in ``dtype`` (a peak figure in the catalog)."""
    return getattr(device.peak_tflops, dtype, None) is not None


def serving_gemm_time(
    m: int, n: int, k: int, device: Device, weight_dtype: str, batch: int = 1
) -> float:
    """Seconds for ``batch`` (m x k) @ (k x n) GEMMs whose (k x n) weights are in ``weight_dtype``.

    When the device computes in ``weight_dtype`` this is `gemm_time` itself (W8A8 FP8 and the
    like). Otherwise the math runs in bf16 on dequantized tiles and only the weight read is
    narrower (weight-only quantization; see the module docstring).
    """
    if supports(device, weight_dtype):
        return gemm_time(m, n, k, device, weight_dtype, batch)
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    eta = quantization_efficiency(m, n, device, batch) * k_fill_efficiency(k)
    t_compute = flops / (device.peak_flops("bf16") * device.gemm_fraction("bf16") * eta)
    nbytes = batch * (2.0 * m * k + dtype_bytes(weight_dtype) * k * n + 2.0 * m * n)
    t_mem = nbytes / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    return max(t_compute, t_mem) + KERNEL_OVERHEAD_S


__all__ = ["serving_gemm_time", "supports"]
