"""Lowering a model into ops: GEMM FLOPs against parameter counts, backward = 2x forward, tensor
parallel sharding, and the PaLM model-FLOPs convention (Chowdhery et al. 2022, App. B)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.model import params as P
from hwtune.model.lowering import (
    Shard,
    lower_embedding,
    lower_head,
    lower_layer,
    model_flops_per_token,
)
from hwtune.model.spec import ModelSpec, MoE

L, H, A, FF, V = 4, 1024, 16, 2816, 32000
SEQ = 2048


def llama(kv: int = A, ff: int = FF, vocab: int = V, **kw: object) -> ModelSpec:
    """Bias-free RMSNorm SwiGLU model: every non-norm layer parameter is a GEMM weight."""
    return ModelSpec(
        n_layers=L, d_model=H, n_heads=A, n_kv_heads=kv, ffn_hidden=ff, vocab=vocab, **kw
    )


def moe(experts: int, top_k: int, fe: int = 704) -> ModelSpec:
    return llama(moe=MoE(n_routed_experts=experts, top_k=top_k, expert_ffn_hidden=fe))


def gemm_flops(ops, weight_only: bool = False) -> float:
    return sum(
        op.flops for op in ops if op.kind == "gemm" and (op.wgrad_flops > 0 or not weight_only)
    )


def experts(ops) -> float:
    """FLOPs of the routed-expert GEMMs."""
    return sum(op.flops for op in ops if op.kind == "gemm" and op.name.startswith("expert"))


# --- forward GEMM FLOPs vs parameters --------------------------------------------------------------
@pytest.mark.parametrize("kv", [16, 4, 1])
def test_layer_gemm_flops_are_2_per_weight_per_token(kv):
    # A token passes once through every weight of a layer: 2 FLOPs (multiply + add) per weight.
    # The weights are the layer's parameters minus its two RMSNorm vectors (h each).
    spec = llama(kv=kv)
    sh = Shard(tokens=SEQ, seq=SEQ)
    weights = P.layer_params(spec, 0) - 2 * H
    per_token = gemm_flops(lower_layer(spec, "full", False, sh), weight_only=True) / SEQ
    assert per_token == pytest.approx(2 * weights)


def test_lm_head_flops_are_2vh_per_token():
    spec = llama()
    sh = Shard(tokens=SEQ, seq=SEQ)
    assert gemm_flops(lower_head(spec, sh)) / SEQ == pytest.approx(2 * V * H)
    # The same for a tied head: the matmul runs whether or not the weight is shared.
    tied = llama(tied_embeddings=True)
    assert gemm_flops(lower_head(tied, sh)) / SEQ == pytest.approx(2 * V * H)


def test_embedding_lookup_has_no_flops():
    sh = Shard(tokens=SEQ, seq=SEQ)
    assert sum(op.flops for op in lower_embedding(llama(), sh)) == 0


def test_forward_flops_match_total_matmul_params():
    # Whole model, forward: 2 x (non-embedding weights + LM head), norms excluded.
    spec = llama()
    sh = Shard(tokens=SEQ, seq=SEQ)
    layer_weights = sum(P.layer_params(spec, i) - 2 * H for i in range(L))
    fwd = L * gemm_flops(lower_layer(spec, "full", False, sh), weight_only=True)
    fwd += gemm_flops(lower_head(spec, sh))
    expected = 2 * (layer_weights + P.lm_head_params(spec)) * SEQ
    assert fwd == pytest.approx(expected)
    # and the non-embedding count of params.py is those weights plus 2h per layer + final norm.
    assert P.non_embedding_params(spec) == layer_weights + 2 * H * L + H


# --- backward ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("model", ["dense", "moe"])
def test_backward_is_twice_forward_for_every_gemm(flash, model):
    # Narayanan et al. SC'21 §5.1: dgrad (dY W^T) and wgrad (X^T dY) each cost a forward; an
    # activation-activation product (scores, context) has two input gradients and no weight.
    spec = llama() if model == "dense" else moe(8, 2)
    sh = Shard(tokens=SEQ, seq=SEQ, flash=flash)
    ops = lower_layer(spec, "full", model == "moe", sh)
    gemms = [op for op in ops if op.kind == "gemm"]
    assert gemms
    for op in gemms:
        assert op.dgrad_flops + op.wgrad_flops == pytest.approx(2 * op.flops), op.name
        if op.wgrad_flops:
            assert op.dgrad_flops == pytest.approx(op.flops), op.name
    if not flash:
        # the unfused core is in the list, with no weight gradient
        assert any(op.attention_core and op.wgrad_flops == 0 for op in gemms)


def test_flash_attention_backward_counts_two_forward_matmul_pairs():
    # Model FLOPs of the attention backward: dQ, dK (from dS) and dV, dP: 2x the forward.
    sh = Shard(tokens=SEQ, seq=SEQ)
    (core,) = [op for op in lower_layer(llama(), "full", False, sh) if op.kind == "attention"]
    assert core.dgrad_flops == pytest.approx(2 * core.flops)


# --- tensor parallelism ------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [2, 4, 8, 16])
@pytest.mark.parametrize("flash", [True, False])
def test_tensor_parallel_divides_layer_flops(t, flash):
    # Megatron TP splits heads and FFN columns over t ranks (Shoeybi et al. 2019 §3): every GEMM
    # and the attention core do 1/t of the work on each rank (heads, FFN width divisible by t).
    spec = llama()
    one = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ, flash=flash))
    many = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ, tp=t, flash=flash))
    assert sum(op.flops for op in many) == pytest.approx(sum(op.flops for op in one) / t)


@pytest.mark.parametrize("t", [2, 8])
def test_tensor_parallel_divides_lm_head(t):
    # Vocabulary-parallel head: V/t columns per rank (V = 32000 divides by 8).
    spec = llama()
    one = gemm_flops(lower_head(spec, Shard(tokens=SEQ, seq=SEQ)))
    many = gemm_flops(lower_head(spec, Shard(tokens=SEQ, seq=SEQ, tp=t)))
    assert many == pytest.approx(one / t)


def test_tensor_parallel_divides_moe_expert_work():
    # With TP (expert-TP = 1) the t ranks of a micro-batch dispatch disjoint token shards, so
    # each rank's experts see 1/t of the token-slots. (The router may run replicated, so only
    # the expert GEMMs are compared.)
    spec = moe(8, 2)
    f1 = experts(lower_layer(spec, "full", True, Shard(tokens=SEQ, seq=SEQ)))
    f2 = experts(lower_layer(spec, "full", True, Shard(tokens=SEQ, seq=SEQ, tp=2)))
    assert f2 == pytest.approx(f1 / 2)


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_expert_parallel_keeps_per_rank_expert_flops(ep):
    # An EP rank holds E/ep experts and receives, on balanced routing, the same m k token-slots
    # in all that a single rank would process: expert FLOPs per rank do not change with ep.
    spec = moe(8, 2)
    base = lower_layer(spec, "full", True, Shard(tokens=SEQ, seq=SEQ))
    sharded = lower_layer(spec, "full", True, Shard(tokens=SEQ, seq=SEQ, ep=ep))
    assert experts(sharded) == pytest.approx(experts(base))


# --- model FLOPs per token (PaLM App. B) -------------------------------------------------------------
def palm(spec_layers: int, h: int, ff: int, vocab: int, attn_keys: float) -> float:
    """6 N + 12 L h s: N = the matmul weights a token touches (MHA q, k, v, o: 4h^2; SwiGLU gate,
    up, down: 3 h ff per layer, and the LM head V h); attention 12 L h (keys) per token."""
    n = spec_layers * (4 * h * h + 3 * h * ff) + vocab * h
    return 6 * n + 12 * spec_layers * h * attn_keys


@pytest.mark.parametrize("seq", [512, 2048, 8192])
def test_model_flops_per_token_palm(seq):
    assert model_flops_per_token(llama(), seq) == pytest.approx(palm(L, H, FF, V, seq))


def test_model_flops_per_token_llama3_8b_shapes():
    # Llama 3 8B (32 layers, h 4096, GQA 8 KV heads of 128, ff 14336, V 128256) at s = 8192:
    # weights per layer q 4096^2 + k,v 2 x 4096 x 1024 + o 4096^2 + 3 x 4096 x 14336.
    spec = ModelSpec(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                     vocab=128256)  # fmt: skip
    per_layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    expected = 6 * (32 * per_layer + 128256 * 4096) + 12 * 32 * 4096 * 8192
    assert model_flops_per_token(spec, 8192) == pytest.approx(expected)


def test_causal_halves_the_attention_term():
    # Causal masking: each query sees s/2 keys on average -> 6 L h s instead of 12 L h s.
    full = model_flops_per_token(llama(), SEQ)
    causal = model_flops_per_token(llama(), SEQ, causal=True)
    assert full - causal == pytest.approx(6 * L * H * SEQ)
    assert causal == pytest.approx(palm(L, H, FF, V, SEQ / 2))


def test_sliding_window_counts_the_window():
    # Every query of a sliding-window layer attends to (at most) w keys: 12 L h w per token.
    w = 512
    spec = llama(sliding_window=w, layer_types=("sliding",) * L)
    assert model_flops_per_token(spec, 4096) == pytest.approx(palm(L, H, FF, V, w))


def test_moe_flops_scale_with_top_k_not_experts():
    # A token runs through top_k experts; more experts only widen the router (h x E).
    fe, seq = 704, 4096
    base = model_flops_per_token(moe(8, 2, fe), seq)
    more_experts = model_flops_per_token(moe(64, 2, fe), seq)
    assert more_experts - base == pytest.approx(6 * L * H * (64 - 8))
    # One more active expert adds its SwiGLU weights 3 h fe, times 6, per layer.
    more_k = model_flops_per_token(moe(8, 3, fe), seq)
    assert more_k - base == pytest.approx(6 * L * 3 * H * fe)


def test_moe_flops_from_active_params():
    # 6 x (active matmul weights incl. router and LM head) + attention, with active weights
    # from params.py: active layer params minus the two norms.
    spec = moe(16, 4)
    active = sum(P.active_layer_params(spec, i) - 2 * H for i in range(L)) + V * H
    assert model_flops_per_token(spec, SEQ) == pytest.approx(6 * active + 12 * L * H * SEQ)


@settings(max_examples=50, deadline=None)
@given(
    layers=st.integers(1, 8),
    heads=st.sampled_from([4, 8, 16]),
    hd=st.sampled_from([32, 64, 128]),
    ff=st.integers(1, 64).map(lambda x: 64 * x),
    vocab=st.integers(100, 60000),
    seq=st.sampled_from([128, 1024, 4096]),
)
def test_model_flops_match_palm_for_random_mha_models(layers, heads, hd, ff, vocab, seq):
    h = heads * hd
    spec = ModelSpec(n_layers=layers, d_model=h, n_heads=heads, ffn_hidden=ff, vocab=vocab)
    assert model_flops_per_token(spec, seq) == pytest.approx(palm(layers, h, ff, vocab, seq))


# --- eager (unfused) elementwise kernels ---------------------------------------------------------


def _bytes(ops, name: str) -> float:
    return sum(op.bytes for op in ops if op.name == name)


def test_eager_rmsnorm_swiglu_rope_move_what_their_kernels_move():
    """Eager PyTorch RMSNorm is x.float() (2+4 B), pow (4+4), mean (4), mul (4+4), type_as
    (4+2), mul(weight) (2+2): 36 B per element against 4 fused; eager SwiGLU writes and re-reads
    silu(gate): 10 B against 6; complex-form RoPE upcasts to fp32: 20 B against 4."""
    spec = llama(kv=4)
    fused = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ))
    eager = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ, fused=False))
    assert _bytes(eager, "norms") / _bytes(fused, "norms") == pytest.approx(36 / 4)
    assert _bytes(eager, "mlp_act") / _bytes(fused, "mlp_act") == pytest.approx(10 / 6)
    assert _bytes(eager, "rotary") / _bytes(fused, "rotary") == pytest.approx(20 / 4)
    assert _bytes(eager, "residual_adds") == _bytes(fused, "residual_adds")
    assert sum(op.flops for op in eager) == sum(op.flops for op in fused)


def test_eager_layernorm_and_gelu_are_single_kernels_already():
    """torch's LayerNorm and GeLU are one native kernel each in eager mode: no extra bytes."""
    spec = llama(norm="layernorm", ffn_act="gelu", pos_emb="learned")
    fused = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ))
    eager = lower_layer(spec, "full", False, Shard(tokens=SEQ, seq=SEQ, fused=False))
    assert _bytes(eager, "norms") == _bytes(fused, "norms")
    assert _bytes(eager, "mlp_act") == _bytes(fused, "mlp_act")


# --- MoE routing, permutation and per-expert kernels (Megatron-Core / Transformer Engine) ----------
def _op(ops, name):
    (found,) = [op for op in ops if op.name == name]
    return found


def test_deepep_permutation_moves_each_token_slot_once_each_way():
    # TE's permute kernel reads each of the n tokens once and writes its k copies; the merging
    # unpermute reads the k copies and writes n rows (TE pytorch/permutation.py, Triton
    # permute_with_mask_map / unpermute_with_mask_map). DeepEP needs nothing else around them.
    E, k, n = 64, 4, SEQ
    ops = lower_layer(moe(E, k), "full", True, Shard(tokens=n, seq=n, ep=8, moe_dispatch="deepep"))
    e = 2.0
    assert _op(ops, "moe_permute").bytes == pytest.approx(e * H * (n + n * k))
    assert _op(ops, "moe_unpermute").bytes == pytest.approx(e * H * (n * k + n))
    # backward of the merging unpermute also reads the forward expert outputs (probs gradient)
    assert _op(ops, "moe_unpermute").dgrad_bytes == pytest.approx(e * H * (n + 2 * n * k))


@pytest.mark.parametrize("ep", [2, 8])
def test_alltoall_dispatcher_sorts_received_tokens_by_local_expert(ep):
    # Megatron's MoEAlltoAllTokenDispatcher sorts the received n k rows by local expert after the
    # all-to-all and back before the combine (sort_chunks_by_idxs: read + write each row), one
    # chunk-map kernel and one copy kernel each way, when a rank holds more than one expert.
    E, k, n = 64, 4, SEQ
    spec = moe(E, k)
    a2a = lower_layer(spec, "full", True, Shard(tokens=n, seq=n, ep=ep, moe_dispatch="alltoall"))
    dep = lower_layer(spec, "full", True, Shard(tokens=n, seq=n, ep=ep, moe_dispatch="deepep"))
    sort = 2 * 2.0 * n * k * H
    for name in ("moe_permute", "moe_unpermute"):
        assert _op(a2a, name).bytes - _op(dep, name).bytes == pytest.approx(sort)
        assert _op(a2a, name).dgrad_bytes - _op(dep, name).dgrad_bytes == pytest.approx(sort)
        assert _op(a2a, name).kernels - _op(dep, name).kernels == 2


def test_one_expert_per_rank_needs_no_sort():
    E, k = 8, 2
    ops = lower_layer(moe(E, k), "full", True, Shard(tokens=SEQ, seq=SEQ, ep=E))
    dep = lower_layer(
        moe(E, k), "full", True, Shard(tokens=SEQ, seq=SEQ, ep=E, moe_dispatch="deepep")
    )
    assert _op(ops, "moe_permute").bytes == _op(dep, "moe_permute").bytes


@settings(max_examples=40, deadline=None)
@given(
    k=st.sampled_from([1, 2, 4, 8]),
    tokens=st.sampled_from([512, 2048, 8192]),
    dispatch=st.sampled_from(["alltoall", "deepep"]),
)
def test_permutation_writes_every_token_slot(k, tokens, dispatch):
    # Physics floor: dispatch writes each of the n k token-slots (e h bytes) at least once and the
    # combine reads each at least once, forward and backward.
    ops = lower_layer(moe(16, k), "full", True, Shard(tokens=tokens, seq=tokens, ep=4,
                                                     moe_dispatch=dispatch))  # fmt: skip
    slots = 2.0 * tokens * k * H
    for name in ("moe_permute", "moe_unpermute"):
        assert _op(ops, name).bytes >= slots
        assert _op(ops, name).dgrad_bytes >= slots


def test_router_scores_scale_with_tokens_times_experts():
    # the fused top-k / aux-loss kernels touch every token-expert score a fixed number of times
    a = _op(lower_layer(moe(64, 4), "full", True, Shard(tokens=SEQ, seq=SEQ)), "router_topk")
    b = _op(lower_layer(moe(128, 4), "full", True, Shard(tokens=2 * SEQ, seq=2 * SEQ)),
            "router_topk")  # fmt: skip
    assert b.bytes == pytest.approx(4 * a.bytes)
    assert b.dgrad_bytes == pytest.approx(4 * a.dgrad_bytes)
    # Megatron --moe-router-fusion: top-k+softmax, aux scores, aux loss, token count
    assert a.kernels == 4


@pytest.mark.parametrize("ep", [1, 8])
def test_grouped_expert_gemms_launch_one_gemm_per_local_expert(ep):
    # TE GroupedLinear -> general_grouped_gemm: one cuBLAS GEMM per expert split
    E = 128
    ops = lower_layer(moe(E, 8), "full", True, Shard(tokens=SEQ, seq=SEQ, ep=ep))
    for name in ("expert_up", "expert_down"):
        assert _op(ops, name).kernels == E // ep
        assert _op(ops, name).batch == E // ep


def test_fp8_current_scaling_adds_an_amax_pass_per_expert_split():
    # Qwen3-30B-A3B-like layer (128 experts, top-8, expert width 768, h 2048) on 8 EP ranks:
    # 16 local experts. Current scaling quantizes each expert split with 3 kernels (amax, scale,
    # cast; TE Float8CurrentScalingQuantizer::quantize_impl) where delayed scaling has one fused
    # multi-tensor cast: 2 quantized inputs x (16 x 3 - 1) = 94 extra kernels forward, and the
    # amax pass reads each quantized element once more.
    spec = ModelSpec(n_layers=1, d_model=2048, n_heads=32, n_kv_heads=4, head_dim=128,
                     ffn_hidden=6144, vocab=151936,
                     moe=MoE(n_routed_experts=128, top_k=8, expert_ffn_hidden=768))  # fmt: skip
    n = 8192
    sh = Shard(tokens=n, seq=4096, ep=8, fp8_recipe="current")
    op = _op(lower_layer(spec, "full", True, sh), "expert_fp8_amax")
    assert op.kernels == 94
    slots = n * 8  # balanced: every token-slot lands on one expert of some rank; per rank n k
    assert op.bytes == pytest.approx(2.0 * slots * (2048 + 768))
    assert op.dgrad_bytes == pytest.approx(2.0 * slots * (2048 + 2 * 768))
    for recipe in ("", "delayed"):
        ops = lower_layer(spec, "full", True, Shard(tokens=n, seq=4096, ep=8, fp8_recipe=recipe))
        assert not [o for o in ops if o.name == "expert_fp8_amax"]
