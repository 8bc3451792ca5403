"""Memory model: ZeRO model states (Rajbhandari et al. SC'20), compact optimizers (FlashOptim),
and per-layer activations (Korthikanti et al. 2022, §4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost.memory import (
    ActShape,
    StateBytes,
    layer_activation_bytes,
    logits_bytes,
    sharded_state_bytes,
    state_bytes_per_param,
)
from hwtune.model.spec import ModelSpec, MoE

GB = 1e9  # the ZeRO paper's GB are decimal


# --- model states -------------------------------------------------------------------------------
def total(sb: StateBytes) -> float:
    return sb.weights + sb.grads + sb.optimizer


def test_mixed_precision_adam_is_16_bytes():
    # ZeRO §3.1: fp16 weights (2) + fp16 grads (2) + fp32 master, momentum, variance (4+4+4).
    sb = state_bytes_per_param("bf16", "adam", fp32_grads=False)
    assert (sb.weights, sb.grads, sb.optimizer) == (2, 2, 12)


def test_megatron_fp32_main_grads_are_18_bytes():
    # Megatron-LM distributed optimizer docs: bf16 params + fp32 main_grad + 12 = 18 bytes/param.
    sb = state_bytes_per_param("bf16", "adam", fp32_grads=True)
    assert sb.grads == 4
    assert total(sb) == 18


def test_fp32_training_is_16_bytes():
    # fp32 weights and grads (4 + 4) and two fp32 Adam moments (4 + 4); no separate master copy.
    assert total(state_bytes_per_param("fp32", "adam", fp32_grads=False)) == 16


def test_bf16_adam_without_master_is_8_bytes():
    # bf16 weights, grads and two bf16 moments, no fp32 master: 2 + 2 + 2 + 2.
    assert total(state_bytes_per_param("bf16", "adam-bf16", fp32_grads=False)) == 8


def test_sgd_momentum_mixed_precision_is_12_bytes():
    # bf16 weights (2) + bf16 grads (2) + fp32 master (4) + fp32 momentum (4).
    assert total(state_bytes_per_param("bf16", "sgd", fp32_grads=False)) == 12


SCALE = 2.0 / 32  # FlashOptim: one fp16 (2-byte) scale per 32 elements of a quantized state


def test_flashoptim_adamw_is_7_bytes_plus_scales():
    # FlashOptim Table 1: 2 (bf16 weight) + 1 (int8 correction) + 2 (bf16 grad) + 1 + 1 (8-bit
    # moments) = 7 bytes/param, plus a 2-byte scale per 32 elements of each quantized state (the
    # two moments at least, the correction term at most as a third).
    sb = state_bytes_per_param("bf16", "adam-8bit", fp32_grads=False)
    assert sb.weights == 2 and sb.grads == 2
    assert 7 + 2 * SCALE - 1e-12 <= total(sb) <= 7 + 3 * SCALE + 1e-12


def test_flashoptim_gradient_release_is_5_bytes_plus_scales():
    # Gradient release frees each gradient in backward: 7 - 2 = 5 bytes (+ scales).
    sb = state_bytes_per_param("bf16", "adam-8bit-release", fp32_grads=False)
    assert sb.grads == 0
    assert 5 + 2 * SCALE - 1e-12 <= total(sb) <= 5 + 3 * SCALE + 1e-12


def test_unknown_optimizer_is_rejected():
    with pytest.raises(ValueError):
        state_bytes_per_param("bf16", "lamb-9bit", fp32_grads=False)


PSI, N_DP = 7.5e9, 64  # ZeRO Figure 1: 7.5B parameters, 64-way data parallelism


@pytest.mark.parametrize(
    ("zero", "expected_gb"),
    [
        (0, 120.0),  # (2 + 2 + 12) x 7.5e9 = 120 GB
        (1, 31.4),  # 4 x 7.5 + 12 x 7.5 / 64 = 31.41 GB (P_os)
        (2, 16.6),  # 2 x 7.5 + 14 x 7.5 / 64 = 16.64 GB (P_os+g)
        (3, 1.875),  # 16 x 7.5 / 64 = 1.875 GB (P_os+g+p; the figure prints 1.9)
    ],
)
def test_zero_paper_figure_1(zero, expected_gb):
    # Same numbers as the zero20 row of shared/validation/training_published.jsonl; the paper
    # keeps fp16 gradients, hence fp32_grads=False.
    sb = state_bytes_per_param("fp16", "adam", fp32_grads=False)
    w, g, o = sharded_state_bytes(PSI, sb, zero, N_DP)
    assert (w + g + o) / GB == pytest.approx(expected_gb, abs=0.05)


def test_zero_stages_shard_the_right_parts():
    sb = state_bytes_per_param("bf16", "adam", fp32_grads=False)
    n, d = 1000.0, 8
    assert sharded_state_bytes(n, sb, 0, d) == pytest.approx((2000, 2000, 12000))
    assert sharded_state_bytes(n, sb, 1, d) == pytest.approx((2000, 2000, 1500))
    assert sharded_state_bytes(n, sb, 2, d) == pytest.approx((2000, 250, 1500))
    assert sharded_state_bytes(n, sb, 3, d) == pytest.approx((250, 250, 1500))


def test_offloaded_optimizer_leaves_the_gpu():
    sb = state_bytes_per_param("bf16", "adam", fp32_grads=False)
    w, g, o = sharded_state_bytes(1e9, sb, 1, 8, offload=True)
    assert o == 0.0
    assert (w, g) == (2e9, 2e9)


@settings(max_examples=100, deadline=None)
@given(
    n=st.floats(1e3, 1e12),
    shards=st.integers(1, 4096),
    opt=st.sampled_from(["adam", "adam-bf16", "adam-8bit", "adam-8bit-release", "sgd"]),
    fp32_grads=st.booleans(),
)
def test_higher_zero_stage_never_uses_more(n, shards, opt, fp32_grads):
    sb = state_bytes_per_param("bf16", opt, fp32_grads)
    totals = [sum(sharded_state_bytes(n, sb, z, shards)) for z in range(4)]
    assert all(a >= b * (1 - 1e-12) for a, b in zip(totals, totals[1:], strict=False))
    # ZeRO-3 shards everything: exactly the unsharded total / shards.
    assert totals[3] == pytest.approx(totals[0] / shards)


# --- activations (Korthikanti et al. 2022, §4, Table 2) --------------------------------------------
S, B, H, A = 2048, 2, 1024, 16  # sequence, micro-batch, hidden, heads


def gpt(h: int = H, a: int = A) -> ModelSpec:
    """The paper's GPT layer: LayerNorm, MHA, a 4h GeLU MLP."""
    return ModelSpec(
        n_layers=2, d_model=h, n_heads=a, ffn_hidden=4 * h, ffn_act="gelu", norm="layernorm",
        pos_emb="learned", max_position=S, vocab=51200, family="gpt",
    )  # fmt: skip


def paper_shape(t: int, sp: bool) -> ActShape:
    # 16-bit activations, unfused attention with dropout: the paper's setting.
    return ActShape(tokens=S * B, seq=S, tp=t, sp=sp, act_bytes=2.0, flash=False, dropout=True)


def act(spec: ModelSpec, shape: ActShape, recompute: str) -> float:
    return layer_activation_bytes(spec, "full", False, shape, recompute)


def test_no_parallelism_34_sbh_plus_5as2b():
    # Korthikanti eq. (1): s b h (34 + 5 a s / h) bytes per layer.
    expected = S * B * H * (34 + 5 * A * S / H)
    assert act(gpt(), paper_shape(1, False), "none") == pytest.approx(expected)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_tensor_parallel_only(t):
    # Eq. (2): s b h (10 + 24/t + 5 a s / (h t)); LayerNorms, dropouts and the block inputs
    # (10 s b h) stay replicated across the t ranks.
    expected = S * B * H * (10 + 24 / t + 5 * A * S / (H * t))
    assert act(gpt(), paper_shape(t, False), "none") == pytest.approx(expected)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel(t):
    # Eq. (4): s b h / t (34 + 5 a s / h): sequence parallelism shards the replicated part too.
    expected = S * B * H / t * (34 + 5 * A * S / H)
    assert act(gpt(), paper_shape(t, True), "none") == pytest.approx(expected)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_selective_recomputation_with_sequence_parallel(t):
    # Eq. (6): 34 s b h / t: the attention core (the 5 a s^2 b terms) is recomputed.
    assert act(gpt(), paper_shape(t, True), "selective") == pytest.approx(34 * S * B * H / t)


def test_selective_recomputation_tensor_parallel_only():
    # Eq. (2) without its attention-core term.
    t = 4
    expected = S * B * H * (10 + 24 / t)
    assert act(gpt(), paper_shape(t, False), "selective") == pytest.approx(expected)


@pytest.mark.parametrize(("t", "sp"), [(1, False), (4, False), (4, True), (8, True)])
def test_full_recomputation_keeps_the_layer_input(t, sp):
    # §4.1: only the layer input, 2 s b h bytes, is stored; sequence parallelism shards it by t.
    expected = 2 * S * B * H / (t if sp else 1)
    assert act(gpt(), paper_shape(t, sp), "full") == pytest.approx(expected)


def test_flash_attention_removes_the_s_squared_term():
    # FlashAttention (Dao et al. 2022) never materializes the a s^2 b score tensors.
    shape = ActShape(tokens=S * B, seq=S, tp=1, sp=False, flash=True, dropout=True)
    assert act(gpt(), shape, "none") == pytest.approx(34 * S * B * H)


def llama_like(kv: int, f: int) -> ModelSpec:
    return ModelSpec(n_layers=2, d_model=H, n_heads=A, n_kv_heads=kv, ffn_hidden=f, vocab=32000)


@pytest.mark.parametrize(("kv", "f"), [(16, 2816), (4, 2816), (1, 3584)])
def test_swiglu_gqa_from_stored_tensors(kv, f):
    # Derived from the tensors a Llama layer keeps (bf16, flash attention, no dropout), the
    # same way Korthikanti Table 2 derives the 34:
    #   attention: norm input h, QKV-projection input h, Q (a hd = h), K and V (kv hd each),
    #              attention output / o-proj input (h)                 -> 4h + 2 kv hd
    #   MLP:       norm input h, gate/up input h, gate and up outputs (2f), SiLU*up output (f)
    #                                                                    -> 2h + 3f
    spec = llama_like(kv, f)
    hd = H // A
    per_token = 2 * (4 * H + 2 * kv * hd + 2 * H + 3 * f)
    shape = ActShape(tokens=S * B, seq=S, tp=1, sp=False)
    assert act(spec, shape, "none") == pytest.approx(per_token * S * B)


def moe_model(top_k: int, experts: int = 8, fe: int = 1408) -> ModelSpec:
    return ModelSpec(
        n_layers=2, d_model=H, n_heads=A, ffn_hidden=4096, vocab=32000,
        moe=MoE(n_routed_experts=experts, top_k=top_k, expert_ffn_hidden=fe),
    )  # fmt: skip


def test_moe_activations_scale_with_top_k():
    # Each extra routed slot per token keeps a permuted input (h), an expert output (h), the
    # gate and up outputs (2 fe) and the SiLU*up output (fe), all bf16: 2 (2h + 3fe) per token.
    shape = ActShape(tokens=S * B, seq=S, tp=1, sp=False)
    fe = 1408
    a1 = layer_activation_bytes(moe_model(1, fe=fe), "full", True, shape, "none")
    a2 = layer_activation_bytes(moe_model(2, fe=fe), "full", True, shape, "none")
    assert a2 - a1 == pytest.approx(2 * (2 * H + 3 * fe) * S * B)


@given(t=st.sampled_from([1, 2, 4, 8]), ep=st.sampled_from([1, 2, 4, 8]), k=st.integers(1, 3))
def test_moe_activations_keep_the_slots_the_layer_computes(t, ep, k):
    # With expert TP 1 each TP rank routes its own 1/t of the tokens; the token-slots whose
    # tensors the layer keeps are the rows its expert GEMMs run (`lowering.ffn_ops`: rows per
    # local expert x local experts), so the top-k increment matches those rows exactly.
    from hwtune.model.lowering import Shard, ffn_ops

    fe = 1408
    shape = ActShape(tokens=S * B, seq=S, tp=t, sp=t > 1)
    lo = layer_activation_bytes(moe_model(k, fe=fe), "full", True, shape, "none")
    hi = layer_activation_bytes(moe_model(k + 1, fe=fe), "full", True, shape, "none")
    ops = {o.name: o for o in ffn_ops(moe_model(1, fe=fe), True, Shard(S * B, S, tp=t, ep=ep))}
    rows_per_topk = ops["expert_up"].m * ops["expert_up"].batch  # token-slots at top-1
    assert hi - lo == pytest.approx(2 * (2 * H + 3 * fe) * rows_per_topk, rel=1e-3)


def test_moe_imbalance_inflates_expert_activations():
    shape = ActShape(tokens=S * B, seq=S, tp=1, sp=False)
    hot = ActShape(tokens=S * B, seq=S, tp=1, sp=False, moe_imbalance=1.5)
    spec = moe_model(2)
    assert layer_activation_bytes(spec, "full", True, hot, "none") > layer_activation_bytes(
        spec, "full", True, shape, "none"
    )


@settings(max_examples=100, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4, 8, 16]),
    sp=st.booleans(),
    flash=st.booleans(),
    dropout=st.booleans(),
    b=st.integers(1, 8),
    s=st.sampled_from([512, 1024, 4096]),
)
def test_recomputation_never_keeps_more(t, sp, flash, dropout, b, s):
    sp = sp and t > 1
    spec = gpt()
    shape = ActShape(tokens=s * b, seq=s, tp=t, sp=sp, flash=flash, dropout=dropout)
    none, sel, full = (act(spec, shape, r) for r in ("none", "selective", "full"))
    assert 0 < full <= sel <= none


@settings(max_examples=100, deadline=None)
@given(t=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), flash=st.booleans())
def test_more_tensor_parallelism_never_keeps_more(t, sp, flash):
    spec = gpt()
    one = act(spec, ActShape(tokens=S, seq=S, tp=t, sp=sp and t > 1, flash=flash), "none")
    two = act(spec, ActShape(tokens=S, seq=S, tp=2 * t, sp=sp, flash=flash), "none")
    assert two <= one


def test_logits_shard_by_vocabulary():
    # Vocabulary-parallel logits: each of t ranks holds V/t columns (V = 51200 divides by 8).
    spec = gpt()
    assert logits_bytes(spec, 4096, 8) == pytest.approx(logits_bytes(spec, 4096, 1) / 8)
    # At least the 16-bit logits plus their fp32 upcast are alive: >= 6 bytes per logit.
    assert logits_bytes(spec, 4096, 1) >= 6 * 4096 * 51200


def test_pytorch_cross_entropy_peaks_at_three_fp32_copies():
    """F.cross_entropy(logits.float()) backward: the saved log_softmax output, nll_loss's dense
    gradient and log_softmax's input gradient, all fp32, are alive together (12 B per logit);
    Megatron's in-place kernel keeps the 16-bit logits and one fp32 buffer (6 B)."""
    spec = gpt()
    assert logits_bytes(spec, 4096, 1, "pytorch") == 3 * 4 * 4096 * 51200
    assert logits_bytes(spec, 4096, 1, "fused") == (2 + 4) * 4096 * 51200
