"""Compute cost model: tile/wave quantization (Anthony et al. 2024), GEMM roofline, dtypes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.compute import (
    K_REF,
    KERNEL_OVERHEAD_S,
    SPLIT_K_MIN,
    dtype_bytes,
    gemm_time,
    k_fill_efficiency,
    matmul_flops,
    memory_time,
    quantization_efficiency,
)
from hwtune.hardware.catalog import get_device
from hwtune.hardware.device import Device, PeakTflops


def make_device(sms: int = 108, tile: tuple[int, int] = (128, 128)) -> Device:
    """A100-SXM-like figures (108 SMs, 312 TFLOP/s bf16, 624 fp8, 2 TB/s). GEMM efficiency 0.5
    and memory efficiency 1, so expected times are plain quotients of these figures."""
    return Device(
        name="test-a100",
        peak_tflops=PeakTflops(bf16=312, fp8=624, fp32=19.5),
        memory_gib=80,
        memory_bandwidth_tbps=2.0,
        sm_count=sms,
        boost_clock_mhz=1410,
        tdp_w=400,
        gemm_efficiency=0.5,
        memory_bw_efficiency=1.0,
        gemm_tile=tile,
    )


DEV = make_device()
H100 = get_device("h100-sxm-80gb")


# --- dtype sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "nbytes"),
    # IEEE 754 binary64/32 (8, 4 bytes); TF32 is stored in a 32-bit container (NVIDIA A100
    # whitepaper); bf16/fp16 are 16 bits; OCP FP8 (E4M3/E5M2) and int8 are 8 bits; OCP MX FP4
    # (E2M1) is 4 bits = half a byte.
    [("fp64", 8), ("fp32", 4), ("tf32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 1), ("int8", 1),
     ("fp4", 0.5)],
)  # fmt: skip
def test_dtype_bytes(dtype, nbytes):
    assert dtype_bytes(dtype) == nbytes


def test_matmul_flops_is_2mnk():
    # One multiply and one add per term of each of the m*n inner products of length k.
    assert matmul_flops(3, 5, 7) == 2 * 3 * 5 * 7


# --- tile and wave quantization (Anthony et al. 2024, §3) --------------------------------------
def test_exact_tiles_and_full_waves_is_one():
    # 108 SMs, 128x128 tiles: m = 12*128, n = 9*128 -> 108 tiles, exactly one full wave, no padding.
    assert quantization_efficiency(12 * 128, 9 * 128, DEV) == pytest.approx(1.0)
    # Two full waves (216 tiles) are just as efficient.
    assert quantization_efficiency(24 * 128, 9 * 128, DEV) == pytest.approx(1.0)


def test_one_extra_tile_costs_a_wave():
    # 109 full tiles on 108 SMs: C = 109 tiles need ceil(109/108) = 2 waves of 108 slots,
    # eta_wave = C / (ceil(C/S) S) = 109/216 (Anthony et al. 2024, §3 definition).
    eff = quantization_efficiency(109 * 128, 128, DEV)
    assert eff == pytest.approx(109 / 216)


def test_tile_quantization_padding():
    # m = 129 spills one row into a second tile row: eta_tile = 129*128 / (256*128) = 129/256;
    # the 2 tiles run in one wave of 108 slots: eta_wave = 2/108.
    eff = quantization_efficiency(129, 128, DEV)
    assert eff == pytest.approx((129 / 256) * (2 / 108))


def test_rectangular_tile_of_h100_catalog():
    # H100 SXM: 132 SMs (Hopper whitepaper). With the catalog's tile (Tm, Tn), an output of
    # 12 x 11 = 132 whole tiles is exactly one wave.
    tm, tn = H100.gemm_tile
    assert H100.sm_count == 132
    assert quantization_efficiency(12 * tm, 11 * tn, H100) == pytest.approx(1.0)
    # 133 tiles: two waves, 133/264.
    assert quantization_efficiency(133 * tm, tn, H100) == pytest.approx(133 / 264)


def test_batched_problems_share_waves():
    # 54 tiles per problem on 108 SMs: alone, one half-empty wave (54/108); two problems
    # scheduled together fill one wave exactly (grouped GEMM).
    m, n = 6 * 128, 9 * 128
    assert quantization_efficiency(m, n, DEV) == pytest.approx(0.5)
    assert quantization_efficiency(m, n, DEV, batch=2) == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(
    m=st.integers(1, 20000),
    n=st.integers(1, 20000),
    batch=st.integers(1, 64),
)
def test_quantization_efficiency_is_a_fraction(m, n, batch):
    eff = quantization_efficiency(m, n, DEV, batch)
    assert 0.0 < eff <= 1.0 + 1e-12


# --- GEMM roofline --------------------------------------------------------------------------------
# The catalog's GEMM efficiency is a best-shape figure measured at a large depth K_REF (the
# compute module's documented normalization point); at k = K_REF a well-tiled GEMM runs at
# exactly peak x gemm_efficiency, which is what the absolute numbers below rely on.
K = K_REF


def wave_time(k: int, dev: Device, dtype: str = "bf16") -> float:
    """One wave: every SM computes one Tm x Tn output tile over depth k (2 Tm Tn k FLOPs each)
    at the device's achievable rate; a compute-bound GEMM takes (waves) x this."""
    tm, tn = dev.gemm_tile
    return 2.0 * tm * tn * k * dev.sm_count / (dev.peak_flops(dtype) * dev.gemm_efficiency)


def test_compute_bound_gemm_is_waves_times_wave_time():
    # 4096 x 4096 output on 108 SMs, 128x128 tiles: 32*32 = 1024 tiles -> ceil(1024/108) = 10 waves.
    m = n = 4096
    t = gemm_time(m, n, K, DEV) - KERNEL_OVERHEAD_S
    assert t == pytest.approx(10 * wave_time(K, DEV), rel=1e-9)
    # Roofline sanity: intensity 2mnk / (2(mk + kn + mn)) B ~ 1600 FLOP/B is far above the
    # ridge point 156e12 / 2e12 = 78 FLOP/B, so the memory time is much smaller.
    t_mem = 2.0 * (m * K + K * n + m * n) / 2.0e12
    assert t > 10 * t_mem


@pytest.mark.parametrize("batch", [2, 3, 4, 7])
def test_batch_equals_problems_quantized_together(batch):
    # Each problem has 6*9 = 54 tiles; `batch` >= 2 problems fill ceil(54*batch/108) waves.
    m, n = 6 * 128, 9 * 128
    t = gemm_time(m, n, K, DEV, batch=batch) - KERNEL_OVERHEAD_S
    waves = math.ceil(54 * batch / 108)
    assert t == pytest.approx(waves * wave_time(K, DEV), rel=1e-9)


def test_half_a_wave_splits_its_k_loop():
    # Split-K (Osama et al. 2023): one problem of 54 tiles on 108 SMs runs each tile's K loop
    # in two halves on two SMs, so it takes half a wave's time, not a whole wave (each half
    # filling its own pipeline: the K-loop fill at depth K / 2).
    m, n = 6 * 128, 9 * 128
    t = gemm_time(m, n, K, DEV) - KERNEL_OVERHEAD_S
    fill = k_fill_efficiency(K) / k_fill_efficiency(K / 2)
    assert t == pytest.approx(0.5 * wave_time(K, DEV) * fill, rel=1e-9)
    assert quantization_efficiency(m, n, DEV, k=K) == pytest.approx(1.0)
    # too shallow to split (k < 2 * SPLIT_K_MIN): the half-empty wave stays
    assert quantization_efficiency(m, n, DEV, k=SPLIT_K_MIN) == pytest.approx(0.5)


@pytest.mark.parametrize("k", [1024, 4096, 20000])
def test_two_half_wave_problems_cost_twice_one_problem(k):
    # One 54-tile problem already fills the SMs by splitting K, so a second one adds its own
    # work: twice the compute time, less the second pipeline fill the split paid; three
    # problems (162 tiles) need two full waves.
    m, n = 6 * 128, 9 * 128
    t1 = gemm_time(m, n, k, DEV) - KERNEL_OVERHEAD_S
    t2 = gemm_time(m, n, k, DEV, batch=2) - KERNEL_OVERHEAD_S
    t3 = gemm_time(m, n, k, DEV, batch=3) - KERNEL_OVERHEAD_S
    fill = k_fill_efficiency(k / 2) / k_fill_efficiency(k)
    assert t2 == pytest.approx(2 * t1 * fill, rel=1e-9)
    assert t3 == pytest.approx(4 * t1 * fill, rel=1e-9)
    assert t2 <= 2 * t1


def test_two_shallow_half_wave_problems_share_one_wave():
    # At k = SPLIT_K_MIN no split: 2 x 54 tiles fill the single wave that 1 x 54 used.
    m, n, k = 6 * 128, 9 * 128, SPLIT_K_MIN
    assert gemm_time(m, n, k, DEV, batch=2) == pytest.approx(gemm_time(m, n, k, DEV))


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 65536),
       batch=st.integers(1, 8))  # fmt: skip
def test_split_k_never_slows_a_gemm_and_stays_a_fraction(m, n, k, batch):
    plain = quantization_efficiency(m, n, DEV, batch)
    split = quantization_efficiency(m, n, DEV, batch, k)
    assert plain - 1e-12 <= split <= 1.0 + 1e-12


def test_grouped_gemms_do_not_split():
    # MoE expert kernels (CUTLASS grouped GEMM, Triton fused_moe, DeepGEMM) do not split K:
    # 2 problems of 18 tiles on 108 SMs keep their one third-full wave.
    m, n = 2 * 128, 9 * 128
    assert quantization_efficiency(m, n, DEV, 2, k=K) == pytest.approx(36 / 108)
    assert quantization_efficiency(m, n, DEV, 1, k=K) == pytest.approx(1.0)


def test_a_full_wave_or_more_does_not_split():
    # 133 tiles on 132 SMs keep Anthony et al.'s two-wave quantization at any depth.
    tm, tn = H100.gemm_tile
    assert quantization_efficiency(133 * tm, tn, H100, k=K) == pytest.approx(133 / 264)


def test_wide_skinny_gemm_is_memory_bound_on_h100():
    # m = 1 with n filling all 132 SMs with whole tiles: intensity ~1 FLOP/B, far below the
    # H100 ridge point (~300 FLOP/B), so the weight read dominates. Bytes: A (1 x k) + B (k x n)
    # + C (1 x n) in bf16; time = bytes / achieved bandwidth (datasheet x STREAM efficiency).
    m, n, k = 1, 132 * H100.gemm_tile[1], K
    nbytes = 2.0 * (m * k + k * n + m * n)
    bw = H100.memory_bandwidth_si * H100.memory_bw_efficiency
    assert gemm_time(m, n, k, H100) == pytest.approx(nbytes / bw + KERNEL_OVERHEAD_S, rel=1e-9)


@pytest.mark.parametrize(("n", "k"), [(4096, 4096), (8192, 8192)])
def test_decode_gemv_is_memory_bound_on_h100(n, k):
    # Llama-style decode projections (one token): 2 bytes per weight, read once. On H100 at
    # 3.35 TB/s x the catalog's STREAM efficiency, time ~ bytes / achieved bandwidth.
    nbytes = 2.0 * (k + k * n + n)
    bw = H100.memory_bandwidth_si * H100.memory_bw_efficiency
    assert gemm_time(1, n, k, H100) == pytest.approx(nbytes / bw + KERNEL_OVERHEAD_S, rel=0.25)


def test_fp8_gemm_twice_as_fast_as_bf16_at_equal_efficiency():
    # The test device's fp8 peak is 2x bf16 (as on A100-int8/H100-fp8 datasheets) and it has
    # no separate fp8 efficiency, so a compute-bound GEMM takes half the time in fp8.
    m = n = 8192
    t16 = gemm_time(m, n, K, DEV, "bf16") - KERNEL_OVERHEAD_S
    t8 = gemm_time(m, n, K, DEV, "fp8") - KERNEL_OVERHEAD_S
    assert t8 == pytest.approx(t16 / 2, rel=1e-9)


def test_fp8_gemm_faster_on_h100():
    # H100 SXM dense fp8 is 1979 vs 989 TFLOP/s bf16; even at a lower achievable fraction for
    # fp8 (cuBLASLt 0.70 vs 0.80) a large GEMM is > 1.5x faster.
    m = n = k = 16384
    assert gemm_time(m, n, k, H100, "fp8") * 1.5 < gemm_time(m, n, k, H100, "bf16")


def test_degenerate_gemm_takes_no_time():
    assert gemm_time(0, 128, 128, DEV) == 0.0
    assert gemm_time(128, 128, 128, DEV, batch=0) == 0.0


# multiples of 8: a misaligned dimension (not 16 bytes of bf16) runs a slower kernel, so adding
# work to a misaligned GEMM can make it faster (Anthony et al. 2024); the invariant is for aligned ones
dims = st.integers(1, 1500).map(lambda x: 8 * x)


@settings(max_examples=200, deadline=None)
@given(m=dims, n=dims, k=dims, batch=st.integers(1, 16))
def test_gemm_time_at_least_both_roofline_bounds(m, n, k, batch):
    # Never faster than the peak FLOP/s nor than reading A, B and writing C once at full
    # bandwidth (DEV's GEMM efficiency 0.5 leaves room for any shape bonus).
    t = gemm_time(m, n, k, DEV, batch=batch) - KERNEL_OVERHEAD_S
    flops = 2.0 * m * n * k * batch
    nbytes = 2.0 * batch * (m * k + k * n + m * n)
    assert t >= flops / 312e12 * (1 - 1e-12)
    assert t >= nbytes / 2.0e12 * (1 - 1e-12)


def test_gemm_never_beats_peak_even_at_full_efficiency():
    # A calibrated device that reaches 100% of peak on its best shape cannot exceed the peak.
    perfect = DEV.model_copy(update={"gemm_efficiency": 1.0})
    m = n = 108 * 128  # whole tiles, whole waves
    k = 8 * K_REF
    t = gemm_time(m, n, k, perfect) - KERNEL_OVERHEAD_S
    assert t >= 2.0 * m * n * k / 312e12 * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(m=dims, n=dims, k=dims, batch=st.integers(1, 8), which=st.sampled_from("mnkb"))
def test_gemm_time_grows_with_work(m, n, k, batch, which):
    # Adding rows, columns, depth or problems adds FLOPs and bytes; quantization can only
    # add tiles or waves, so the time never drops.
    bigger = {"m": (2 * m, n, k, batch), "n": (m, 2 * n, k, batch),
              "k": (m, n, 2 * k, batch), "b": (m, n, k, 2 * batch)}[which]  # fmt: skip
    t0 = gemm_time(m, n, k, DEV, batch=batch)
    t1 = gemm_time(*bigger[:3], DEV, batch=bigger[3])
    assert t1 >= t0 * (1 - 1e-12)


@pytest.mark.parametrize("k", [64, 512, 4096, K_REF, 65536])
def test_doubling_depth_at_most_doubles_compute_time(k):
    # Same tile grid, twice the FLOPs per tile: the time grows, and by at most 2x (fixed
    # per-tile costs are amortized over a longer k loop, never the reverse).
    t1 = gemm_time(4096, 4096, k, DEV) - KERNEL_OVERHEAD_S
    t2 = gemm_time(4096, 4096, 2 * k, DEV) - KERNEL_OVERHEAD_S
    assert t1 < t2 <= 2 * t1 * (1 + 1e-12)


# --- memory-bound ops -------------------------------------------------------------------------------
def test_memory_time_is_bytes_over_bandwidth_plus_launches():
    # 2 GB at 2 TB/s = 1 ms, plus one launch overhead per kernel.
    assert memory_time(2e9, DEV, kernels=3) == pytest.approx(1e-3 + 3 * KERNEL_OVERHEAD_S)
    assert memory_time(0, DEV) == 0.0


def test_flashattention2_on_hopper_runs_at_the_fa3_papers_ratio():
    """FA3 paper (Shah et al. 2024, Fig. 5/7, H100, hd 128, 8k): FA2 370 vs FA3 646 TFLOP/s
    forward, 318 vs 559 backward, both 0.57; on Ampere FA2 is the best kernel (ratio 1)."""
    from hwtune.cost.compute import attention_time

    flops = 1e13  # large enough that the kernel overhead is negligible
    for backward in (False, True):
        best = attention_time(flops, 0.0, H100, "bf16", backward)
        fa2 = attention_time(flops, 0.0, H100, "bf16", backward, kernel="fa2")
        assert best / fa2 == pytest.approx(min(370 / 646, 318 / 559), rel=0.01)
    a100 = get_device("a100-sxm4-80gb")
    assert attention_time(flops, 0.0, a100, "bf16", False, kernel="fa2") == attention_time(
        flops, 0.0, a100, "bf16", False
    )


# --- grouped GEMMs issued as one library call per problem -----------------------------------------
@pytest.mark.parametrize("launches", [1, 2, 16, 128])
def test_each_extra_launch_of_a_grouped_gemm_costs_one_kernel_overhead(launches):
    # TE GroupedLinear's general_grouped_gemm issues one cuBLAS GEMM per expert: the math is the
    # same as one batched call, the launch overhead is paid per GEMM.
    one = gemm_time(4096, 1536, 2048, H100, "fp8", batch=16)
    many = gemm_time(4096, 1536, 2048, H100, "fp8", batch=16, launches=launches)
    assert many - one == pytest.approx((launches - 1) * KERNEL_OVERHEAD_S)


@settings(max_examples=40, deadline=None)
@given(launches=st.integers(1, 256), batch=st.integers(1, 64))
def test_more_launches_never_faster(launches, batch):
    a = gemm_time(512, 768, 2048, DEV, batch=batch, launches=launches)
    b = gemm_time(512, 768, 2048, DEV, batch=batch, launches=launches + 1)
    assert b > a
