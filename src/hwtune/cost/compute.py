"""Time of one compute op on one device: roofline with GEMM tile and wave quantization.

Sources:
- Roofline: Williams, Waterman & Patterson, CACM 2009: time = max(FLOPs / achievable FLOP/s,
  bytes / achievable bytes/s).
- Tile and wave quantization: Anthony et al. 2024, "The Case for Co-Designing Model
  Architectures with Hardware", §3 (eta_tile = m n / (ceil(m/Tm) Tm ceil(n/Tn) Tn);
  C = ceil(m/Tm) ceil(n/Tn) tiles run in ceil(C/S) waves on S SMs, eta_wave = C / (ceil(C/S) S));
  NVIDIA "Matrix Multiplication Background User's Guide" (tile and wave quantization).
- Split-K under one wave: a GEMM with fewer output tiles than SMs (decode and small-batch
  shapes, narrow tensor-parallel shards) would leave SMs idle; the libraries split its K loop
  over several CTAs per tile and reduce the partial sums (cuBLAS/CUTLASS split-K; "Stream-K",
  Osama et al., PPoPP 2023, §2-3: data-parallel tiling under one wave idles the rest of the
  GPU, splitting the MAC loop restores it). Modelled as Stream-K spreads the work, evenly:
  each tile's K loop in ``s = max(1, min(S / C, k / SPLIT_K_MIN))`` shares, ``eta_wave = C s /
  S``, and each share pays its own pipeline fill (K-loop fill below at depth k / s), so the time
  never falls as k grows; a full wave or more keeps Anthony et al.'s wave quantization, and so
  do batched and grouped GEMMs (MoE expert kernels do not split K). Checked against Vidur's
  measured H100 profiles of Llama-2-7B/70B linear layers (VALIDATION.md, "Tier-1 GEMMs against
  Vidur's H100 measurements"): GEMMs of 17-512 rows 35.4% -> 10.3% median error.
- Achievable fractions of peak (``Device.gemm_efficiency``, ``memory_bw_efficiency``) are
  microbenchmark figures of the device catalog, not fitted here (tier 1). A device with a
  measured profile (`hwtune bench`, `hardware/profile.py`) uses the measured rates instead,
  interpolated over shape (tier 2).
- Fused attention runs at the device's measured attention efficiencies (FlashAttention-2/3,
  cuDNN; see the device catalog); the backward kernel recomputes the score matrix: 2.5x the
  forward FLOPs (5 vs 2 matmuls; Dao 2023, §3.1).
- K-loop fill: each output tile pays a prologue (filling the shared-memory pipeline, 4-7
  stages of Tk = 64 on sm80/sm90 CUTLASS/cuBLAS kernels) and an epilogue (writing the tile)
  besides its k/Tk main-loop steps: about 8 steps, K_FILL = 512 of k's worth of work per tile,
  so a GEMM reaches k / (k + K_FILL) of its large-k efficiency (NVIDIA "Matrix Multiplication
  Background User's Guide": small-K GEMMs are less efficient; CUTLASS docs, "Efficient GEMM").
  The epilogue does not speed up with the math, so for fp8 (twice the bf16 rate) the fill is
  twice as many k. The catalog efficiencies are best-shape measurements (MAMF sweeps, k up to
  ~16k), so the factor is normalized to 1 at ``K_REF``.
"""

from __future__ import annotations

from hwtune.hardware.device import Device

KERNEL_OVERHEAD_S = 4e-6
"""Per-kernel launch and tail cost, seconds (CUDA launch latency of a few microseconds;
NVIDIA CUDA C++ Best Practices Guide, 'Kernel launch overhead')."""

ALIGN_ELEMENT_BYTES = 16
MISALIGNED_EFFICIENCY = 273.0 / 398.0
"""GEMMs whose inner or output dimension is not a multiple of 16 bytes of elements (8 in
bf16, 16 in fp8) lose the vectorized, tensor-core-friendly kernels: Anthony et al. 2024 measure
a SwiGLU width of 10,922 at 273 TFLOP/s against 398 at 10,944 on an H100 with h = 4096
(Fig. 9); NVIDIA "Matrix Multiplication Background User's Guide", "Tensor Core Requirements"."""

K_FILL = 512
K_REF = 16384
"""Main-loop-equivalent k of a tile's prologue + epilogue, and the k at which the catalog's
best-shape GEMM efficiency was measured (MAMF sweeps reach their best at k of several thousand)."""

SPLIT_K_MIN = 256
"""Least K a split-K slice takes (4 K-tiles of 64, each slice must amortize its prologue and the
partial-sum reduction). Not fitted: the check against Vidur's H100 profiles moves by under a
point for any value from 128 to 512 (VALIDATION.md)."""

FLASH_BWD_FLOP_RATIO = 2.5
"""FlashAttention backward executes 5 matmuls of the forward's size vs 2 forward (Dao 2023, §3.1)."""


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a numeric format."""
    return _DTYPE_BYTES[dtype]


FP4_GROUP_SIZE = 16
"""Weights per 8-bit scale of fp4 weights when the checkpoint does not say: NVFP4's block of 16
values sharing one FP8 (E4M3) scale, plus one FP32 scale per tensor (NVIDIA, "Introducing
NVFP4 for Efficient and Accurate Low-Precision Inference", 2025; TensorRT Model Optimizer's
NVFP4 ``group_size: 16``). MXFP4 checkpoints (gpt-oss) state theirs: blocks of 32 with one
E8M0 scale (OCP Microscaling Formats (MX) Specification v1.0, 2023, §5;
`hwtune.model.hf_config.weight_group_size`). The native FP4 GEMM (`gemm_time` on a GPU with
FP4 math) reads both operands in NVFP4 blocks (`stored_bytes`); weight-only fp4 weights
(`hwtune.cost.quantized_gemm.weight_bytes_per_element`) read the checkpoint's block."""


def stored_bytes(dtype: str) -> float:
    """Bytes one element of a GEMM operand or of the KV cache takes in ``dtype`` as the GPU
    reads it: fp4 with its NVFP4 block scale (one byte per `FP4_GROUP_SIZE`; TensorRT-LLM's
    NVFP4 KV cache keeps the same blocks), the others `dtype_bytes` (fp8's per-tensor scales
    are negligible)."""
    b = _DTYPE_BYTES[dtype]
    return b + 1.0 / FP4_GROUP_SIZE if dtype == "fp4" else b


_DTYPE_BYTES = {
    "fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "int8": 1.0, "fp4": 0.5,
    "int4": 0.5,  # a stored weight format only (W4A16): no device has an int4 peak here
}  # fmt: skip


def _tile_side(x: int, t: int) -> int:
    """Tile side a library picks for a dimension of ``x``: the catalog tile, or the smallest
    power of two >= x (at least 16) when x is smaller (cuBLAS/CUTLASS ship 16..256-wide tiles)."""
    if x >= t:
        return t
    side = 16
    while side < x:
        side *= 2
    return side


def _tiles(m: int, n: int, device: Device, batch: int) -> tuple[float, int]:
    """(eta_tile, output tiles of all ``batch`` problems) with the tile a library picks."""
    tm, tn = device.gemm_tile
    tm, tn = _tile_side(m, tm), _tile_side(n, tn)
    tiles_m = -(-m // tm)
    tiles_n = -(-n // tn)
    return (m * n) / (tiles_m * tm * tiles_n * tn), tiles_m * tiles_n * batch


def split_k_shares(m: int, n: int, k: int, device: Device, batch: int = 1) -> float:
    """Shares each tile's K loop is split into when the tiles are fewer than the SMs:
    max(1, min(S / C, k / SPLIT_K_MIN)) (module docstring); 1 for a full wave or more, and for
    batched or grouped GEMMs (``batch`` > 1): the grouped kernels of MoE layers (CUTLASS grouped
    GEMM, Triton ``fused_moe``, DeepGEMM) schedule tiles across problems but do not split K."""
    _eta, tiles = _tiles(m, n, device, batch)
    if batch > 1 or tiles >= device.sm_count:
        return 1.0
    return max(1.0, min(device.sm_count / tiles, k / SPLIT_K_MIN))


def quantization_efficiency(
    m: int, n: int, device: Device, batch: int = 1, k: int | None = None
) -> float:
    """eta_tile * eta_wave of ``batch`` (m x n) outputs on ``device`` (Anthony et al. 2024, §3).

    A batched or grouped GEMM schedules the tiles of all its problems together, so waves are
    counted over ``batch`` times the tiles of one problem. Dimensions smaller than the catalog
    tile get the smallest power-of-two tile that covers them (skinny and decode-size GEMMs).
    Given the inner dimension ``k``, fewer tiles than SMs split their K loop to fill the GPU
    (`split_k_shares`; split-K / Stream-K, module docstring)."""
    eta_tile, tiles = _tiles(m, n, device, batch)
    sms = device.sm_count
    if k is not None and tiles < sms:
        return eta_tile * tiles * split_k_shares(m, n, k, device, batch) / sms
    waves = -(-tiles // sms)
    return eta_tile * tiles / (waves * sms)


def shape_efficiency(
    m: int, n: int, k: int, device: Device, batch: int = 1, speedup: float = 1.0
) -> float:
    """Share of the device's best-shape GEMM rate at this shape: tile, wave and split-K
    quantization times the K-loop fill at the depth each split share runs (module docstring);
    ``speedup`` is the dtype's math rate relative to bf16 (`k_fill_efficiency`)."""
    k_share = k / split_k_shares(m, n, k, device, batch)  # each share fills its own pipeline
    return quantization_efficiency(m, n, device, batch, k) * k_fill_efficiency(k_share, speedup)


def k_fill_efficiency(k: int, speedup: float = 1.0) -> float:
    """k / (k + K_FILL * speedup), normalized to 1 at ``K_REF`` (see the module docstring);
    ``speedup`` is the dtype's math rate relative to bf16."""
    kf = K_FILL * speedup
    return min(1.0, (k / (k + kf)) * ((K_REF + kf) / K_REF))


def alignment_efficiency(n: int, k: int, dtype: str = "bf16") -> float:
    """1, or ``MISALIGNED_EFFICIENCY`` when n or k is not a multiple of 16 bytes of elements."""
    step = max(1, int(ALIGN_ELEMENT_BYTES / _DTYPE_BYTES[dtype]))
    return 1.0 if (n % step == 0 and k % step == 0) else MISALIGNED_EFFICIENCY


def gemm_time(
    m: int,
    n: int,
    k: int,
    device: Device,
    dtype: str | None = None,
    batch: int = 1,
    launches: int = 1,
) -> float:
    """Seconds for ``batch`` independent (m x k) @ (k x n) GEMMs in ``dtype`` (2mnk FLOPs each;
    None: the device's 16-bit format, `Device.sixteen_bit_dtype`, fp16 on Volta).

    Compute time uses the device's achievable GEMM fraction times tile/wave quantization of the
    (m x n) output (a batched or grouped GEMM quantizes over all ``batch`` problems together);
    memory time reads A and B and writes C once. The slower of the two, plus a launch overhead
    per kernel: ``launches`` > 1 for a "grouped" GEMM issued as one library call per problem
    (Transformer Engine's ``GroupedLinear``: ``general_grouped_gemm`` loops over the experts'
    cuBLAS GEMMs), each paying ``KERNEL_OVERHEAD_S``.
    """
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    dtype = dtype or device.sixteen_bit_dtype
    extra = (max(1, launches) - 1) * KERNEL_OVERHEAD_S
    flops = 2.0 * m * n * k * batch
    prof = device.profile
    if prof is not None:  # tier 2: the measured rate at this shape (launch cost included)
        rate = prof.gemm_rate(m, n, k, dtype, batch)
        if rate is not None:
            return flops / rate + extra
    eb = stored_bytes(dtype)
    speedup = 2.0 if dtype == "fp8" else (4.0 if dtype == "fp4" else 1.0)
    eta = shape_efficiency(m, n, k, device, batch, speedup) * alignment_efficiency(n, k, dtype)
    t_compute = flops / (device.peak_flops(dtype) * device.gemm_fraction(dtype) * eta)
    out_b = 2.0 if eb < 2 else eb  # fp8/fp4 GEMMs write bf16 outputs
    t_mem = (
        batch
        * (eb * (m * k + k * n) + out_b * m * n)
        / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    )
    return max(t_compute, t_mem) + KERNEL_OVERHEAD_S + extra


ATTENTION_KERNELS: tuple[str, ...] = ("best", "fa2", "flex")
"""Fused attention kernels: ``best`` is the fastest the device has (the catalog's attention
efficiencies: FlashAttention-3 / cuDNN on Hopper, FlashAttention-4 / cuDNN on Blackwell,
FlashAttention-2 on Ampere); ``fa2`` is
FlashAttention-2, what PyTorch's SDPA flash backend runs (torchtitan before 2025, llm-foundry);
``flex`` is FlexAttention's Triton kernel generated by ``torch.compile`` (torchtitan's language
models since SDPA was dropped for them; `FLEX_SHARE_OF_BEST` on Hopper and Blackwell,
`FLEX_SHARE_OF_FA2` elsewhere)."""

FA2_SHARE_OF_BEST: dict[str, tuple[float, float]] = {
    "hopper": (0.57, 0.57),
    "blackwell": (0.24, 0.26),
}
"""FlashAttention-2's speed as a share of the architecture's best fused attention kernel, forward
and backward, where FA2 is not the best (it issues Ampere ``mma.sync`` instructions: neither
Hopper's ``wgmma`` and TMA nor Blackwell's ``tcgen05`` and tensor memory). Elsewhere (Ampere,
Ada, AMD) it is the best and its share is 1.

- Hopper: Shah et al. 2024 ("FlashAttention-3"), Fig. 5 and 7, H100 SXM5, head dim 128, 8k
  tokens: forward 370 vs 646 TFLOP/s (0.57), backward 318 vs 559 (0.57). PyTorch issue #142132
  (Dec 2024 nightly, H100): SDPA's flash backend 329 vs cuDNN 631 TFLOP/s (0.52) at
  (1, 24, 4608, 128).
- Blackwell (B200, non-causal, head dim 128, 8k tokens): FlashAttention-2 forward 361.6 TFLOP/s
  at (8, 16, 8192, 128) (meta-pytorch/tritonbench PR #171, 2025-03-04, ``--only flash_v2``)
  against FlashAttention-4 forward 1534.8 at (4, 16, 8192, 128) and backward 1359.8 (two-CTA;
  Dao-AILab/flash-attention PR #2280, 2026-02-27): forward 0.24. No FA2 backward figure at head
  dim 128 was found; FA2's backward runs at 0.96x its forward on B200 at head dim 64, 8k tokens
  (forward 343.1, backward 329.1 TFLOP/s, flash-attention issue #1589, flash_attn 2.7.4), so
  0.96 x 361.6 / 1359.8 = 0.26. Blackwell Ultra (B300, GB300) has no figure of its own and
  takes Blackwell's."""
FA2_SHARE_OF_BEST["blackwell-ultra"] = FA2_SHARE_OF_BEST["blackwell"]


FLEX_SHARE_OF_FA2: tuple[float, float] = (0.90, 0.85)
"""FlexAttention's speed as a share of FlashAttention-2's, forward and backward: "FlexAttention
achieves 90% of FlashAttention2's performance in the forward pass and 85% in the backward pass"
(causal attention, A100; the backward is a deterministic algorithm that recomputes more
intermediates than FA2): Guessous, Liang, Dong and He, "FlexAttention: The Flexibility of PyTorch
with the Performance of FlashAttention", PyTorch blog, 2024-08-07, section "Performance"
(pytorch/pytorch.github.io ``_posts/2024-08-07-flexattention.md``); the kernel is the one of
Dong et al. 2024, "Flex Attention: A Programming Model for Generating Optimized Attention
Kernels", arXiv:2412.05496. Applied on top of FlashAttention-2's share of the device's best
kernel on the architectures `FLEX_SHARE_OF_BEST` does not list (Ampere, Ada, AMD)."""

FLEX_SHARE_OF_BEST: dict[str, tuple[float, float]] = {
    "hopper": (0.58, 0.66),
    "blackwell": (0.31, 0.34),
}
"""FlexAttention's Triton kernel as a share of the architecture's best fused attention kernel,
forward and backward, where one was published (causal, bf16, head dim 128, 8k tokens, MHA).
Guessous, Stern, Hoehnerbach, Xie, Zadouri, Shah and Dao, "FlexAttention + FlashAttention-4:
Fast and Flexible", PyTorch blog, 2026-03-05
(https://pytorch.org/blog/flexattention-flashattention-4-fast-and-flexible/), section
"Democratizing attention research with FlexAttention": on Hopper "FlexAttention achieves
roughly 60% of FlashAttention-3's throughput" (about 80% at the 2024 post), and on a GB200
(1000 W) the Triton kernel against cuDNN through SDPA: "What was once a small gap has grown to a
chasm". The two figures' numbers, in the blog author's slide data (github.com/drisspg/vizz,
commit 555dcde, ``vizz/presentations/ptce_2026_flex_flash/data/``), at (B, H, S, D) =
(2, 16, 8192, 128) and (4, 16, 8192, 128):

- Hopper, ``flex_vs_fav3_causal.csv`` (the blog's "H100: FA3 vs FlexAttention, causal, BF16"):
  FlashAttention-3 679.7 / 474.9 TFLOP/s, FlexAttention 396.3 / 315.7 (0.58 / 0.66); 0.58-0.59 /
  0.65-0.69 from 4k to 16k tokens. A Triton kernel issues ``wgmma``, which FlashAttention-2 does
  not, and both directions are above FlashAttention-2's Hopper share (0.57,
  `FA2_SHARE_OF_BEST`): forward 1.02x FlashAttention-2, within the 1.00-1.22x of Dong et al.
  (arXiv:2412.05496, §6.2, Fig. 7: causal, head dim 64; the paper runs H100, A100 and A6000
  and does not name Fig. 7's GPU);
  backward 1.16x, above their 0.86-1.05x (the blog's causal FA3 backward, 474.9 TFLOP/s, is below
  the 559 of the FA3 paper that `FA2_SHARE_OF_BEST` takes).
- Blackwell, ``gb200_triton_cudnn.csv`` (the blog's GB200 "FlexAttention Triton vs cuDNN"):
  cuDNN 1419.6 / 1007.4 TFLOP/s, FlexAttention 508.0 / 473.7 (0.36 / 0.47 of that cuDNN). The
  share is taken against the GB200's best as the catalog has it: NVIDIA's cudnn-frontend
  ``sdpa_benchmark_training`` results of 2026-07-24 (cuDNN 9.26, causal, 8192 tokens, head dim
  128): cuDNN forward 1646, FlashAttention-4 backward 1389, so 508.0 / 1646 = 0.31 and
  473.7 / 1389 = 0.34 (the Triton kernel as of the blog against the best kernels of mid-2026).
  Blackwell Ultra (B300, GB300) has no figure of its own and takes Blackwell's.

FlexAttention's FlashAttention-4 backend (``BACKEND: "FLASH"``, the same post) is faster again
(1.30-2.01x the Triton kernel on H200 for ALiBi, document masking and sliding window; 1.6-3.2x
forward and 1.85-2.3x backward on GB200); torchtitan's default is the Triton kernel priced
here."""
FLEX_SHARE_OF_BEST["blackwell-ultra"] = FLEX_SHARE_OF_BEST["blackwell"]


def attention_kernel_share(device: Device, kernel: str, backward: bool = False) -> float:
    """Speed of ``kernel`` as a share of the device's best fused attention kernel, in the
    forward (or with ``backward``, the backward) pass."""
    direction = 1 if backward else 0
    fa2 = FA2_SHARE_OF_BEST.get(device.architecture, (1.0, 1.0))[direction]
    if kernel == "fa2":
        return fa2
    if kernel == "flex":
        published = FLEX_SHARE_OF_BEST.get(device.architecture)
        if published is not None:
            return published[direction]
        return fa2 * FLEX_SHARE_OF_FA2[direction]
    return 1.0


def _attention_dtype(dtype: str, device: Device) -> str:
    """The dtype attention runs in: the device's 16-bit format under fp8/fp4/int8 GEMMs."""
    return device.sixteen_bit_dtype if dtype in ("fp8", "fp4", "int8") else dtype


def attention_measured(device: Device, dtype: str, backward: bool = False) -> bool:
    """Whether `attention_time` prices ``device``'s attention in ``dtype`` at its measured
    profile's rates (tier 2), which time whatever kernel the device's SDPA ran: there the
    kernel's share (`attention_kernel_share`) is not applied."""
    prof = device.profile
    phase = "bwd" if backward else "fwd"
    return (
        prof is not None and prof.attention_rate(phase, _attention_dtype(dtype, device)) is not None
    )


def attention_time(
    flops: float,
    io_bytes: float,
    device: Device,
    dtype: str,
    backward: bool,
    kernel: str = "best",
) -> float:
    """Seconds for a fused (flash) attention kernel of ``flops`` model FLOPs (forward count).

    Backward executes ``FLASH_BWD_FLOP_RATIO`` times the forward FLOPs at the backward efficiency.
    Attention runs in bf16/fp16 even in fp8 training (Transformer Engine keeps the core in 16 bits).
    ``kernel`` (see ``ATTENTION_KERNELS``) scales the spec-sheet path; a measured profile times
    whatever kernel the device's SDPA picked.
    """
    if flops <= 0:
        return 0.0
    adt = _attention_dtype(dtype, device)
    prof = device.profile
    if prof is not None:
        f_exec = (FLASH_BWD_FLOP_RATIO if backward else 1.0) * flops  # as the profile counts
        rate = prof.attention_rate("bwd" if backward else "fwd", adt, flops=f_exec)
        if rate is not None:
            return f_exec / rate
    peak = device.peak_flops(adt) * attention_kernel_share(device, kernel, backward)
    if backward:
        t = FLASH_BWD_FLOP_RATIO * flops / (peak * device.attention_bwd_efficiency)
    else:
        t = flops / (peak * device.attention_fwd_efficiency)
    t_mem = io_bytes / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    return max(t, t_mem) + KERNEL_OVERHEAD_S


def memory_time(nbytes: float, device: Device, kernels: int = 1) -> float:
    """Seconds for memory-bound work moving ``nbytes`` through HBM, in ``kernels`` launches
    (0: work riding in another op's kernel, the bytes at the device's streaming rate only)."""
    if kernels < 0:
        raise ValueError(f"kernels: {kernels}, expected a count >= 0")
    if nbytes <= 0:
        return 0.0
    prof = device.profile
    if prof is not None and kernels:
        per = prof.elementwise_time(nbytes / kernels)
        if per is not None:
            return per * kernels
    stream = nbytes / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    return stream + kernels * KERNEL_OVERHEAD_S


def matmul_flops(m: int, n: int, k: int) -> float:
    """2mnk: one multiply and one add per inner-product term."""
    return 2.0 * m * n * k


__all__ = [
    "ATTENTION_KERNELS",
    "FA2_SHARE_OF_BEST",
    "FLEX_SHARE_OF_BEST",
    "FLEX_SHARE_OF_FA2",
    "KERNEL_OVERHEAD_S",
    "attention_kernel_share",
    "attention_measured",
    "attention_time",
    "dtype_bytes",
    "gemm_time",
    "matmul_flops",
    "memory_time",
    "quantization_efficiency",
    "shape_efficiency",
    "split_k_shares",
]
