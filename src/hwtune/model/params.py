"""Parameter counts of a `ModelSpec`: total, active per token, embeddings, per layer.

Every weight matrix, bias and norm weight of the architecture is counted, as laid out in the
Hugging Face modeling files of each family:

* attention (``modeling_llama.py``): ``q_proj`` d x (h*hd), ``k_proj``/``v_proj`` d x (kv*hd),
  ``o_proj`` (h*hd) x d, with biases when ``qkv_bias``/``out_bias``; Qwen3's per-head ``q_norm``
  and ``k_norm`` (``modeling_qwen3.py``) add 2*hd when ``qk_norm``.
* MLA (``modeling_deepseek_v3.py``; DeepSeek-V2 paper §2.1): ``q_a_proj`` d x r_q, ``q_a_layernorm``
  r_q, ``q_b_proj`` r_q x h*(nope+rope) (or one ``q_proj`` d x h*(nope+rope) when ``q_lora_rank``
  is None), ``kv_a_proj_with_mqa`` d x (r_kv+rope), ``kv_a_layernorm`` r_kv, ``kv_b_proj``
  r_kv x h*(nope+v), ``o_proj`` h*v x d.
* Gated DeltaNet linear attention (``modeling_qwen3_next.py``; Yang et al., *Gated Delta Networks*,
  ICLR 2025): ``in_proj_qkvz`` d x (2*k_dim + 2*v_dim), ``in_proj_ba`` d x 2*n_v, depthwise
  ``conv1d`` (2*k_dim + v_dim) x kernel, ``dt_bias`` and ``A_log`` n_v each, gated RMSNorm
  v_head_dim, ``out_proj`` v_dim x d; k_dim = n_k*k_hd, v_dim = n_v*v_hd.
* FFN: gated (SwiGLU/GeGLU; Shazeer 2020) ``gate``/``up``/``down`` = 3*d*f; plain (GPT-2) 2*d*f;
  biases f per up/gate matrix and d for down when ``mlp_bias``.
* MoE (``modeling_mixtral.py``, ``modeling_deepseek_v3.py``, ``modeling_gpt_oss.py``): router
  d x E (+E for a router bias or DeepSeek's ``e_score_correction_bias``), E routed experts of
  width ``expert_ffn_hidden`` (with per-expert biases when ``expert_bias``, as gpt-oss), and
  shared experts of total width ``shared_width``.
* norms: two per layer and one final; RMSNorm has d weights, LayerNorm d weights + d biases.
* embeddings: the input table vocab x d, an untied LM head vocab x d, a learned position table
  ``max_position`` x d (GPT-2, Megatron GPT).

Not counted: multi-token-prediction modules (``mtp_layers``; DeepSeek-V3 report §2.2 counts its
671B without the 14B MTP module), vision towers of multimodal checkpoints, and a few tiny tensors
``ModelSpec`` has no field for (gpt-oss attention sinks, h per layer; Qwen-MoE shared-expert gate,
d per layer; Qwen3.5 attention output gate; GLM-5's DSA indexer, ~9M per layer). Full-width
q/k norms (OLMoE, MiniMax-M2) are counted per head (2*hd), which under-counts by <0.01%.

All functions are pure and cached per spec (``ModelSpec`` is frozen and hashable), so they are
cheap in a search loop.
"""

from __future__ import annotations

import functools

from hwtune.model.spec import ModelSpec


def _norm(spec: ModelSpec, width: int) -> int:
    return width * (2 if spec.norm == "layernorm" else 1)


def _mlp(spec: ModelSpec, d: int, f: int, bias: bool) -> int:
    """Weights (and biases) of one FFN of width ``f``: gated 3*d*f, plain 2*d*f."""
    n_in = 2 if spec.gated else 1
    return (n_in + 1) * d * f + ((n_in * f + d) if bias else 0)


def _attention(spec: ModelSpec, kind: str) -> int:
    d, h = spec.d_model, spec.n_heads
    if kind == "linear":
        la = spec.linear_attention
        assert la is not None  # guaranteed by ModelSpec validation
        k_dim = la.n_key_heads * la.key_head_dim
        v_dim = la.n_value_heads * la.value_head_dim
        return (
            d * (2 * k_dim + 2 * v_dim)  # in_proj_qkvz
            + d * 2 * la.n_value_heads  # in_proj_ba
            + (2 * k_dim + v_dim) * la.conv_kernel  # depthwise conv1d, no bias
            + 2 * la.n_value_heads  # dt_bias, A_log
            + la.value_head_dim  # gated RMSNorm
            + v_dim * d  # out_proj
        )
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q = d * h * qk + (h * qk if spec.qkv_bias else 0)
        else:
            q = (
                d * m.q_lora_rank
                + m.q_lora_rank
                + m.q_lora_rank * h * qk
                + (m.q_lora_rank if spec.qkv_bias else 0)
            )
        kv = (
            d * (m.kv_lora_rank + m.qk_rope_head_dim)
            + m.kv_lora_rank
            + m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim)
        )
        kv += (m.kv_lora_rank + m.qk_rope_head_dim) if spec.qkv_bias else 0
        o = h * m.v_head_dim * d + (d if spec.out_bias else 0)
        return q + kv + o
    hd, kv_h = spec.hd, spec.kv_heads
    q_out, kv_out = h * hd, kv_h * hd
    n = d * (q_out + 2 * kv_out) + q_out * d
    if spec.attn_output_gate:  # q_proj also produces the gate (modeling_qwen3_next.py)
        n += d * q_out
    if spec.qkv_bias:
        n += q_out + 2 * kv_out
    if spec.out_bias:
        n += d
    if spec.qk_norm:
        n += 2 * hd
    return n


def _ffn(spec: ModelSpec, i: int, active: bool) -> int:
    d = spec.d_model
    if not spec.is_moe_layer(i):
        return _mlp(spec, d, spec.ffn_hidden, spec.mlp_bias)
    m = spec.moe
    assert m is not None
    experts = m.top_k if active else m.n_routed_experts
    n = d * m.n_routed_experts + (m.n_routed_experts if m.router_bias else 0)
    n += experts * _mlp(spec, d, m.expert_ffn_hidden, m.expert_bias)
    if m.shared_width:
        n += _mlp(spec, d, m.shared_width, False)
    return n


def _layer(spec: ModelSpec, i: int, active: bool) -> int:
    return (
        _attention(spec, spec.layer_type(i)) + _ffn(spec, i, active) + 2 * _norm(spec, spec.d_model)
    )


def _routed(spec: ModelSpec, i: int) -> int:
    m = spec.moe
    if m is None or not spec.is_moe_layer(i):
        return 0
    return m.n_routed_experts * _mlp(spec, spec.d_model, m.expert_ffn_hidden, m.expert_bias)


@functools.lru_cache(maxsize=4096)
def _table(spec: ModelSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Per-layer (total, active, routed-expert) counts, computed once per spec."""
    n = range(spec.n_layers)
    total = tuple(_layer(spec, i, False) for i in n)
    if spec.moe is None:
        return total, total, (0,) * spec.n_layers
    return total, tuple(_layer(spec, i, True) for i in n), tuple(_routed(spec, i) for i in n)


def _check(spec: ModelSpec, i: int) -> None:
    if not 0 <= i < spec.n_layers:
        raise IndexError(f"layer {i} out of range for n_layers={spec.n_layers}")


def layer_params(spec: ModelSpec, i: int) -> int:
    """Parameters of decoder layer ``i`` (0-based): attention, FFN or MoE block, its two norms."""
    _check(spec, i)
    return _table(spec)[0][i]


def active_layer_params(spec: ModelSpec, i: int) -> int:
    """Parameters of layer ``i`` used by one token: as `layer_params` with only ``top_k`` routed experts."""
    _check(spec, i)
    return _table(spec)[1][i]


def routed_expert_params(spec: ModelSpec, i: int) -> int:
    """Parameters of the routed experts of layer ``i`` (what expert parallelism shards); 0 for a
    dense layer. Router and shared experts are not included (they are replicated)."""
    _check(spec, i)
    return _table(spec)[2][i]


def final_norm_params(spec: ModelSpec) -> int:
    """The norm after the last layer (``model.norm`` / GPT-2 ``ln_f``)."""
    return _norm(spec, spec.d_model)


def input_embedding_params(spec: ModelSpec) -> int:
    """The input side: token table vocab x d plus a learned position table (GPT-2 ``wte`` + ``wpe``)."""
    n = spec.vocab * spec.d_model
    if spec.pos_emb == "learned":
        n += spec.max_position * spec.d_model
    return n


def mtp_projection_params(spec: ModelSpec) -> int:
    """A multi-token-prediction module's projection M_k of [h; e] to the model width, d x 2d
    (DeepSeek-V3 report §2.2, eq. 21)."""
    return 2 * spec.d_model * spec.d_model


def mtp_module_params(spec: ModelSpec) -> int:
    """One multi-token-prediction module's own parameters (DeepSeek-V3 report §2.2, eq. 21-22):
    RMSNorms of the hidden state and of the next token's embedding (d each), the projection
    M_k of their concatenation (d x 2d), a transformer block shaped as the model's last layer,
    and its output norm; the embedding and the output head are the main model's (shared), so
    not counted here."""
    return (
        mtp_projection_params(spec)
        + 3 * _norm(spec, spec.d_model)
        + layer_params(spec, spec.n_layers - 1)
    )


def lm_head_params(spec: ModelSpec) -> int:
    """The output projection vocab x d, or 0 when tied to the input embedding."""
    return 0 if spec.tied_embeddings else spec.vocab * spec.d_model


def embedding_params(spec: ModelSpec) -> int:
    """Input embedding + LM head when untied + learned position table (GPT-2 ``wpe``)."""
    return input_embedding_params(spec) + lm_head_params(spec)


@functools.lru_cache(maxsize=4096)
def total_params(spec: ModelSpec) -> int:
    """All parameters of the main model (embeddings + layers + final norm; no MTP modules)."""
    return embedding_params(spec) + sum(_table(spec)[0]) + final_norm_params(spec)


def non_embedding_params(spec: ModelSpec) -> int:
    """``total_params`` less ``embedding_params`` (the convention of Kaplan et al. 2020 and Qwen3 cards)."""
    return total_params(spec) - embedding_params(spec)


@functools.lru_cache(maxsize=4096)
def active_params(spec: ModelSpec) -> int:
    """Parameters touched per token: as ``total_params``, with each MoE layer holding only its
    router, shared experts and ``top_k`` routed experts. Embeddings are included (the convention
    of the Mixtral and Qwen3 announcements); for a dense model this equals ``total_params``.
    """
    if spec.moe is None:
        return total_params(spec)
    return embedding_params(spec) + sum(_table(spec)[1]) + final_norm_params(spec)
