"""Cost primitives added for serving: weight-only quantized GEMMs and engine all-reduces."""

from __future__ import annotations

import pytest

from hwtune.cost.collectives import all_reduce_time
from hwtune.cost.compute import KERNEL_OVERHEAD_S, gemm_time
from hwtune.cost.inference_collectives import custom_all_reduce_link, serving_all_reduce_time
from hwtune.cost.quantized_gemm import serving_gemm_time
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster


@pytest.mark.parametrize(("group", "per_weight"), [(32, 0.5 + 1 / 32), (None, 0.5 + 1 / 16)])
def test_fp4_weights_on_hopper_read_half_a_byte_per_weight_and_their_scales(group, per_weight):
    """4 bits per weight plus one 8-bit scale per block: MXFP4's 32 (OCP MX v1.0), NVFP4's 16
    (the default)."""
    dev = get_device("h100-sxm-80gb")  # no FP4 tensor cores
    k, n = 8192, 32768  # enough output tiles to fill the SMs: the weight read dominates
    t = serving_gemm_time(1, n, k, dev, "fp4", group_size=group)
    bw = dev.memory_bandwidth_si * dev.memory_bw_efficiency
    read = (per_weight * k * n + 2 * k + 2 * n) / bw
    assert t == pytest.approx(read + KERNEL_OVERHEAD_S, rel=1e-6)
    # large m: compute-bound at the bf16 rate, like a bf16 GEMM
    big = serving_gemm_time(8192, n, k, dev, "fp4")
    assert big == pytest.approx(gemm_time(8192, n, k, dev, "bf16"), rel=0.05)
    # where the device has the format, it is gemm_time itself
    assert serving_gemm_time(64, n, k, dev, "fp8") == gemm_time(64, n, k, dev, "fp8")


def test_one_shot_all_reduce_for_decode_messages():
    cl = make_cluster("h100-sxm-80gb", 8)
    span = cl.span(8, 1)
    s = 4 * 8192  # 2 tokens x 8192 hidden x bf16: one-shot's single latency step wins
    link = custom_all_reduce_link(cl, "vllm")
    assert (link.latency, link.bandwidth) == pytest.approx((4.5e-6, 0.55 * 450e9))
    assert serving_all_reduce_time(s, span, cl) == pytest.approx(4.5e-6 + 7 * s / (0.55 * 450e9))
    # one sync step against NCCL's LL ring (6.6 us + 14 hops of 0.6 us, NCCL tuning.cc)
    assert serving_all_reduce_time(s, span, cl) < 0.5 * all_reduce_time(s, span, cl)
    big = 8192 * 8192 * 2
    # never slower than NCCL as the engines run it: without NVLink SHARP (vLLM sets
    # NCCL_CUMEM_ENABLE=0), so the training side's NVLS all-reduce is not the bound
    assert serving_all_reduce_time(big, span, cl) <= all_reduce_time(big, span, cl, nvls=False)
    assert all_reduce_time(big, span, cl) < all_reduce_time(big, span, cl, nvls=False)
    assert serving_all_reduce_time(s, cl.span(1, 1), cl) == 0.0


@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_expert_parallel_under_attention_tp_all_reduces_like_tp_experts(tokens):
    """Under attention TP every rank holds every token: expert parallelism moves no tokens and
    its partial sums are all-reduced over the same group, the same bytes as tensor-parallel
    experts (TensorRT-LLM's fused MoE uses all-to-all only with attention DP). With attention
    DP the tokens are dispatched and combined by all-to-all instead."""
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.iteration import IterationModel

    spec, dev = get_model("mixtral-8x7b"), get_device("h100-sxm-80gb")
    ep = IterationModel(ReplicaConfig(spec, dev, tp=8, ep=8))
    tp = IterationModel(ReplicaConfig(spec, dev, tp=8, ep=1))
    assert ep._moe(tokens, tokens)[2] == pytest.approx(tp._moe(tokens, tokens)[2], rel=1e-12)
    dp = IterationModel(ReplicaConfig(spec, dev, tp=1, ep=8, dp_attention=8))
    assert dp._moe(tokens, -(-tokens // 8))[2] > 0


def test_eager_prefill_floor_is_the_published_deepseek_forward():
    """SGLang PR #12160: DeepSeek-V3's eager forward of one new token took 82.64 ms (host-bound:
    the same step in a prefill CUDA graph took 23.10 ms). HOST_PER_KERNEL_S is that figure over
    the kernels the iteration model launches for DeepSeek-V3 at TP 8; if the lowering changes
    the count, the constant has to be re-derived."""
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.iteration import IterationModel

    cfg = ReplicaConfig(get_model("deepseek-v3"), get_device("h200-sxm-141gb"), tp=8,
                        weight_dtype="fp8", eager_prefill=True)  # fmt: skip
    assert IterationModel(cfg).launch_floor == pytest.approx(82.64e-3, rel=0.01)


def test_launch_floor_binds_only_eager_steps_with_prompt_tokens():
    """Decode-only steps (CUDA graphs) and graph-captured engines keep their GPU time; an eager
    prefill step lasts max(GPU forward, launch floor), and its breakdown still sums to it."""
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.iteration import IterationModel, StepShape

    base = ReplicaConfig(get_model("qwen3-235b-a22b"), get_device("h200-sxm-141gb"), tp=8,
                         weight_dtype="fp8")  # fmt: skip
    graph, eager = IterationModel(base), IterationModel(base.with_(eager_prefill=True))
    small = StepShape(tokens=16, seqs=1, sampled=1, pf_pairs=16 * 8.0, pf_kv=16.0, pf_tokens=16)
    decode = StepShape(tokens=4, seqs=4, sampled=4, dec_n=4, dec_ctx=4000.0)
    big = StepShape(tokens=8192, seqs=1, sampled=1, pf_pairs=8192 * 4096.0, pf_kv=8192.0,
                    pf_tokens=8192)  # fmt: skip
    assert eager.step_time(decode) == graph.step_time(decode)
    host = base.iteration_overhead_s + base.sequence_overhead_s
    assert eager.step_time(small) == pytest.approx(eager.launch_floor + host)
    assert graph.step_time(small) < eager.step_time(small)
    assert eager.step_time(big) >= graph.step_time(big)
    for m, s in ((eager, small), (eager, big), (graph, small)):
        assert sum(m.breakdown(s).values()) == pytest.approx(m.step_time(s))
