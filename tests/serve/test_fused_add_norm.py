"""The serving engines' residual add + RMSNorm: one kernel per norm (vLLM ``fused_add_rms_norm``,
SGLang ``fused_add_rmsnorm``, TensorRT-LLM's flashinfer ``fused_add_rmsnorm``), and inside
TensorRT-LLM's tensor-parallel all-reduce (``AllReduceFusionOp.RESIDUAL_RMS_NORM``) when its
strategy keeps the fusion (workspace 16 MB on up to 2 GPUs, 8 MB above; above 2 GPUs at most 128
tokens, PR #5432's AUTO heuristic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.cost.inference_collectives import (
    TRTLLM_FUSED_NORM_MAX_TOKENS,
    trtllm_ar_workspace_bytes,
    trtllm_norm_in_all_reduce,
)
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.lowering import Shard, add_norm_ops, norm_residual_ops
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel


def _bytes(ops) -> float:
    return sum(o.bytes for o in ops)


def _kernels(ops) -> int:
    return sum(o.kernels for o in ops)


def test_fused_add_norm_moves_four_elements_per_norm_in_one_kernel():
    """Each fused norm reads x and the residual and writes the residual and the output: 4
    elements of 2 bytes per hidden element, two norms a layer, one kernel each; the separate
    norm (read, write) and add (two reads, one write) move 5 in two kernels."""
    spec = get_model("llama3.1-8b")
    sh = Shard(tokens=1000, seq=1000)
    hb = 2.0 * 1000 * spec.d_model
    fused = add_norm_ops(spec, sh)
    assert _bytes(fused) == pytest.approx(2 * 4 * hb)
    assert _kernels(fused) == 2
    plain = norm_residual_ops(spec, sh)
    assert _bytes(plain) == pytest.approx(2 * 5 * hb)
    assert _kernels(plain) == 4


def test_norms_inside_the_all_reduce_launch_nothing_and_move_the_residual():
    spec = get_model("qwen3-235b-a22b")
    sh = Shard(tokens=64, seq=64, tp=4)
    ops = add_norm_ops(spec, sh, in_all_reduce=True)
    assert _kernels(ops) == 0
    assert _bytes(ops) == pytest.approx(2 * 2 * 2.0 * 64 * spec.d_model)


def test_unfused_engines_and_layernorm_keep_separate_norm_and_add():
    """A CPU profile that says the engine does not fuse (``Shard.fused`` False) and a LayerNorm
    model keep `norm_residual_ops` whatever the all-reduce does."""
    spec = get_model("llama3.1-8b")
    eager = Shard(tokens=8, seq=8, fused=False)
    assert add_norm_ops(spec, eager, in_all_reduce=True) == norm_residual_ops(spec, eager)
    ln = spec.model_copy(update={"norm": "layernorm"})
    sh = Shard(tokens=8, seq=8)
    assert add_norm_ops(ln, sh, in_all_reduce=True) == norm_residual_ops(ln, sh)


def test_trtllm_strategy_keeps_the_fusion_by_group_size_tokens_and_workspace():
    """Up to 2 GPUs: fused while the message fits the 16 MB workspace (bf16, hidden 8192:
    16e6 / 16384 B = 976 tokens); above 2 GPUs: at most 128 tokens and 8 MB."""
    assert trtllm_ar_workspace_bytes(2) == 16e6
    assert trtllm_ar_workspace_bytes(8) == 8e6
    assert trtllm_norm_in_all_reduce(976, 8192, 2, 2.0)
    assert not trtllm_norm_in_all_reduce(977, 8192, 2, 2.0)
    assert TRTLLM_FUSED_NORM_MAX_TOKENS == 128  # PR #5432's AUTO threshold
    assert trtllm_norm_in_all_reduce(128, 4096, 4, 2.0)
    assert not trtllm_norm_in_all_reduce(129, 4096, 4, 2.0)
    assert not trtllm_norm_in_all_reduce(64, 4096, 1, 2.0)  # no all-reduce at all
    # a message over 8 MB above two GPUs goes to NCCL even under the token limit
    assert not trtllm_norm_in_all_reduce(100, 65536, 8, 2.0)


@given(tokens=st.integers(1, 3000), tp=st.sampled_from([2, 4, 8]))
def test_norms_in_the_all_reduce_never_cost_more_than_their_kernels(tokens: int, tp: int) -> None:
    """Moving the norms into the all-reduce removes kernels and bytes; it can never make a
    step's memory-bound time longer than the same step with the norms as kernels (vLLM's
    all-reduce kernels, same model), at any token count, in or out of the fusion's range."""
    trt, vllm = _model("qwen3-235b-a22b", tp, "trtllm"), _model("qwen3-235b-a22b", tp, "vllm")
    assert trt.linear(tokens)[1] <= vllm.linear(tokens)[1] * (1 + 1e-12)


def _model(name: str, tp: int, kernel: str, **kw: object) -> IterationModel:
    cfg = ReplicaConfig(get_model(name), get_device("h100-sxm-80gb"), tp=tp,
                        weight_dtype="fp8", all_reduce_kernel=kernel, **kw)  # fmt: skip
    return IterationModel(cfg)


def test_trtllm_decode_step_saves_the_norm_kernels_of_every_layer():
    """Qwen3-235B at TP 4, 16 decode tokens: TensorRT-LLM's step differs from the same step with
    vLLM's all-reduce kernels by the two fused-norm kernels of each of its 94 layers (and their
    bytes) plus the two kernel families' different all-reduce costs; the GEMMs are the same."""
    trt, vllm = _model("qwen3-235b-a22b", 4, "trtllm"), _model("qwen3-235b-a22b", 4, "vllm")
    assert trt.ar_norm_fusion and not vllm.ar_norm_fusion
    g_t, m_t, _ = trt.linear(16)
    g_v, m_v, _ = vllm.linear(16)
    assert g_t == g_v
    n = trt.spec.n_layers
    # each of the 2n fused-norm kernels costs at least its launch (4 us)
    assert m_v - m_t > 2 * n * 4e-6
    # above 128 tokens at TP 4 the strategy falls back to NCCL and a separate norm kernel
    assert trt.linear(512)[1] == pytest.approx(vllm.linear(512)[1])


def test_trtllm_fuses_llama_only_above_hidden_4096_and_never_under_attention_dp():
    """``modeling_llama.py``: fusion off for hidden size 4096 (Llama-3.1-8B), on for 8192
    (Llama-3.1-70B); every model turns it off under attention data parallelism."""
    assert not _model("llama3.1-8b", 4, "trtllm").ar_norm_fusion
    assert _model("llama3.1-70b", 4, "trtllm").ar_norm_fusion
    assert not _model("llama3.1-70b", 1, "trtllm").ar_norm_fusion
    assert _model("deepseek-v3", 8, "trtllm", ep=8).ar_norm_fusion
    assert not _model("deepseek-v3", 2, "trtllm", ep=8, dp_attention=4).ar_norm_fusion


def test_trtllm_fusion_needs_its_family_one_nvlink_domain_and_no_pipeline():
    """Mixtral and dense Qwen3 do not request the fusion in TensorRT-LLM; tensor parallelism
    across two 8-GPU nodes all-reduces over NCCL; pipeline stages keep the norms as kernels."""
    assert not _model("mixtral-8x7b", 4, "trtllm").ar_norm_fusion
    assert not _model("qwen3-32b", 4, "trtllm").ar_norm_fusion
    assert _model("qwen3-235b-a22b", 8, "trtllm").ar_norm_fusion
    assert not _model("qwen3-235b-a22b", 16, "trtllm").ar_norm_fusion
    assert not _model("qwen3-235b-a22b", 4, "trtllm", pp=2).ar_norm_fusion


def test_linear_does_not_interpolate_across_the_fusion_threshold():
    """Llama-3.1-70B at TP 2 fuses up to 976 tokens (16e6 B / (8192 x 2 B)); a step of 977 tokens
    is priced with the norms as kernels, as the exact evaluation gives, not blended with the
    fused grid point below it."""
    m = _model("llama3.1-70b", 2, "trtllm")
    assert m._norms_in_all_reduce(976) and not m._norms_in_all_reduce(977)
    assert m.linear(977) == pytest.approx(m._linear_exact(977), rel=1e-12)


def test_eager_prefill_floor_counts_norm_kernels_unless_they_ride_the_all_reduce():
    """A prompt step of at most 128 tokens at TP 4 launches 2 fewer kernels per layer (the norms
    ride in the all-reduces); a larger one launches them."""
    from hwtune.serve.config import HOST_PER_KERNEL_S
    from hwtune.serve.iteration import StepShape

    m = _model("qwen3-235b-a22b", 4, "trtllm", eager_prefill=True)
    n = m.spec.n_layers
    small = StepShape(tokens=100, seqs=1, sampled=1, pf_pairs=100 * 50.0, pf_kv=100.0,
                      pf_tokens=100, pf_max_q=100)  # fmt: skip
    big = StepShape(tokens=1000, seqs=1, sampled=1, pf_pairs=1000 * 500.0, pf_kv=1000.0,
                    pf_tokens=1000, pf_max_q=1000)  # fmt: skip
    assert m.launch_time(big) == pytest.approx(m.launch_floor)
    assert m.launch_floor - m.launch_time(small) == pytest.approx(2 * n * HOST_PER_KERNEL_S)


def test_trtllm_triton_moe_launches_its_own_kernels_in_an_eager_prefill():
    """TensorRT-LLM's TRITON MoE (gpt-oss on Hopper) launches 14 kernels per layer under expert
    parallelism (router, topk, the rank's remap, clear and compaction, histogram, routing
    memset and indices, a padding fill and copy, two matmul_ogs, the top-k combine, the
    contiguous copy) and 11 without the three expert-parallel ones, where the generic count is
    6; the launch floor grows by that difference times the MoE layers."""
    from hwtune.serve.config import HOST_PER_KERNEL_S
    from hwtune.serve.iteration import MOE_LAUNCHES, TRITON_MOE_LAUNCHES

    def floor(kernel: str, ep: int) -> float:
        return _model("gpt-oss-120b", 8, "trtllm", ep=ep, eager_prefill=True,
                      weight_only_kernel=kernel).launch_floor  # fmt: skip

    assert (TRITON_MOE_LAUNCHES["ep"], TRITON_MOE_LAUNCHES["tp"], MOE_LAUNCHES) == (14, 11, 6)
    layers = get_model("gpt-oss-120b").n_layers
    for ep, extra in ((8, 14 - 6), (1, 11 - 6)):
        got = floor("triton-mxfp4", ep) - floor("wgmma", ep)
        assert got == pytest.approx(extra * layers * HOST_PER_KERNEL_S)


def test_trtllm_triton_moe_extra_kernels_cost_gpu_time_in_every_step():
    """The eight launches beyond the generic six (routing, indices, padding, combine) run in
    CUDA-graph decode steps too: at least a kernel's fixed cost each, so the MoE layer of a
    4-token step at TP 8 / EP 8 costs 8 x 4 us more than the same layer counted as six
    kernels. NVIDIA's TensorRT-LLM 1.2.0rc5 H200 tables put that layer at 69-86 us, tier 1's
    six-kernel price at ~40 us (VALIDATION.md, "TensorRT-LLM's TRITON MoE launches")."""
    from hwtune.cost.compute import KERNEL_OVERHEAD_S

    def moe_memory(kernel: str) -> float:
        m = _model("gpt-oss-120b", 8, "trtllm", ep=8, weight_only_kernel=kernel)
        return m._moe(4, 4)[1]

    assert moe_memory("triton-mxfp4") - moe_memory("wgmma") == pytest.approx(8 * KERNEL_OVERHEAD_S)
