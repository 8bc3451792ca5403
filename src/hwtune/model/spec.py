"""`ModelSpec`: a decoder-only transformer (dense or MoE; MHA, GQA or MLA), as data.

The spec holds architecture facts only; FLOPs, bytes and parameter counts are derived in
`params.py` and `lowering.py`, each in one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hwtune.errors import HwtuneInputError
from hwtune.frozen import FrozenModel

FfnAct = Literal["swiglu", "geglu", "gelu", "relu", "squared_relu", "silu"]
GATED_ACTS = ("swiglu", "geglu")
LayerType = Literal["full", "sliding", "linear", "chunked"]


class MLA(BaseModel):
    """Multi-head latent attention (DeepSeek-V2 §2.1; DeepSeek-V3 report §2.1.1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int | None = Field(default=None, gt=0, description="None = full-rank Q projection")
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(gt=0)


class MoE(BaseModel):
    """Mixture-of-experts feed-forward layers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_routed_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    expert_ffn_hidden: int = Field(gt=0)
    n_shared_experts: int = Field(default=0, ge=0)
    shared_expert_ffn_hidden: int | None = Field(
        default=None,
        gt=0,
        description="width of the shared expert(s) in all; default n_shared*expert_ffn_hidden",
    )
    first_k_dense_layers: int = Field(default=0, ge=0)
    moe_layer_freq: int = Field(
        default=1,
        gt=0,
        description="layer i is MoE when (i+1) % freq == 0 (HF decoder_sparse_step)",
    )
    mlp_only_layers: tuple[int, ...] = Field(
        default=(), description="layers forced dense (HF mlp_only_layers)"
    )
    router_bias: bool = False
    expert_bias: bool = False
    n_groups: int | None = Field(
        default=None, gt=0, description="expert groups of group-limited routing (HF n_group)"
    )
    topk_groups: int | None = Field(
        default=None, gt=0, description="groups a token may route to (HF topk_group)"
    )

    @model_validator(mode="after")
    def _check(self) -> MoE:
        if self.top_k > self.n_routed_experts:
            raise ValueError(
                f"top_k={self.top_k} must not exceed n_routed_experts={self.n_routed_experts}"
            )
        if (self.n_groups is None) != (self.topk_groups is None):
            raise ValueError("n_groups and topk_groups go together (group-limited routing)")
        if self.n_groups is not None and self.topk_groups is not None:
            if self.n_routed_experts % self.n_groups:
                raise ValueError(
                    f"n_groups={self.n_groups} must divide n_routed_experts={self.n_routed_experts}"
                )
            if self.topk_groups > self.n_groups:
                raise ValueError(f"topk_groups={self.topk_groups} exceeds n_groups={self.n_groups}")
        return self

    @property
    def shared_width(self) -> int:
        if self.shared_expert_ffn_hidden is not None:
            return self.shared_expert_ffn_hidden
        return self.n_shared_experts * self.expert_ffn_hidden


class LinearAttention(BaseModel):
    """Linear-attention (e.g. Gated DeltaNet) layer shapes, for hybrid models such as Qwen3.5/Qwen3-Next."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_key_heads: int = Field(gt=0)
    n_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(default=4, ge=0)


MAX_LAYERS = 10_000
"""The most layers a model may have (see `ModelSpec.n_layers`)."""


class ModelSpec(FrozenModel):
    """A decoder-only transformer. Defaults are those of the Llama family."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    family: str = "llama"
    # at most 10,000 layers: the estimator and the pipeline search build per-layer tables, and
    # the deepest published language models have under 200 (a typo such as 1e12 would otherwise
    # run out of memory instead of being refused)
    n_layers: int = Field(gt=0, le=MAX_LAYERS)
    d_model: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int | None = Field(default=None, gt=0, description="None = n_heads (MHA)")
    head_dim: int | None = Field(default=None, gt=0, description="None = d_model / n_heads")
    ffn_hidden: int = Field(gt=0, description="dense FFN width (the dense layers of an MoE model)")
    ffn_act: FfnAct = "swiglu"
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    pos_emb: Literal["rope", "learned", "alibi", "none"] = "rope"
    max_position: int = Field(default=0, ge=0, description="rows of a learned position table")
    max_context: int | None = Field(
        default=None,
        ge=1,
        description="longest prompt + output a serving engine admits (config.json "
        "max_position_embeddings and its RoPE scaling, as vLLM derives max_model_len; "
        "`hwtune.model.hf_config._context_length`), None: not stated",
    )
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    mla: MLA | None = None
    moe: MoE | None = None
    sliding_window: int | None = Field(default=None, gt=0)
    attention_chunk_size: int | None = Field(
        default=None, gt=0, description="chunked local attention (Llama 4 'chunked' layers)"
    )
    attn_output_gate: bool = Field(
        default=False,
        description="sigmoid gate on the attention output, from a doubled q_proj (Qwen3-Next/3.5)",
    )
    layer_types: tuple[LayerType, ...] | None = None
    linear_attention: LinearAttention | None = None
    mtp_layers: int = Field(
        default=0, ge=0, description="multi-token-prediction modules (not in the main count)"
    )
    quantized_weights: Literal["all", "experts"] = Field(
        default="all",
        description="which linear weights a quantized checkpoint stores in its format: all, or "
        "the routed experts only (gpt-oss MXFP4: attention, router, embeddings in bf16)",
    )
    checkpoint_precision: Literal["fp8", "fp4", "int4"] | None = Field(
        default=None,
        description="the weight format the checkpoint ships (its config.json "
        "quantization_config; `hwtune.model.hf_config.checkpoint_precision`), None: 16-bit",
    )
    checkpoint_quantization: str | None = Field(
        default=None,
        description="the checkpoint's weight quantization when it is none of the serving "
        "precisions (GPTQ 3-bit, bitsandbytes, ...; "
        "`hwtune.model.hf_config.unsupported_quantization`): serving it asks for an explicit "
        "precision; None: unquantized or in checkpoint_precision",
    )
    checkpoint_kv_precision: Literal["fp8", "fp4"] | None = Field(
        default=None,
        description="the KV-cache format the checkpoint is calibrated for (ModelOpt "
        "kv_cache_quant_algo, compressed-tensors kv_cache_scheme; "
        "`hwtune.model.hf_config.checkpoint_kv_precision`), None: 16-bit",
    )
    weight_group_size: int | None = Field(
        default=None,
        description="weights per scale of the checkpoint's 4-bit weights (int4: 16-bit "
        "scales, its quantization_config group_size, -1: one per output channel; fp4: 8-bit "
        "scales, MXFP4 32, NVFP4 16), None: not stated "
        "(`hwtune.cost.quantized_gemm.INT4_GROUP_SIZE`, `FP4_GROUP_SIZE`)",
    )
    n_params_published: float | None = Field(default=None, gt=0)
    n_active_params_published: float | None = Field(default=None, gt=0)
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads
        if self.n_heads % kv:
            raise HwtuneInputError("n_kv_heads", kv, f"a divisor of n_heads={self.n_heads}")
        if self.head_dim is None and self.mla is None and self.d_model % self.n_heads:
            raise HwtuneInputError(
                "n_heads", self.n_heads, f"a divisor of d_model={self.d_model} (or set head_dim)"
            )
        if self.layer_types is not None and len(self.layer_types) != self.n_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries; expected n_layers={self.n_layers}"
            )
        if self.layer_types and "linear" in self.layer_types and self.linear_attention is None:
            raise ValueError("layer_types has 'linear' layers but linear_attention is not set")
        if self.layer_types and "sliding" in self.layer_types and self.sliding_window is None:
            raise ValueError("layer_types has 'sliding' layers but sliding_window is not set")
        if self.layer_types and "chunked" in self.layer_types and self.attention_chunk_size is None:
            raise ValueError("layer_types has 'chunked' layers but attention_chunk_size is not set")
        if self.moe is not None and self.moe.first_k_dense_layers > self.n_layers:
            raise HwtuneInputError(
                "moe.first_k_dense_layers (first_k_dense_replace)", self.moe.first_k_dense_layers,
                f"at most n_layers = {self.n_layers} (the leading dense layers are some of the "
                "model's layers)",
            )  # fmt: skip
        g = self.weight_group_size
        if g is not None and (isinstance(g, bool) or (g != -1 and g < 1)):
            raise HwtuneInputError("weight_group_size", g, "a positive number of weights per "
                                   "scale, or -1 (one scale per output channel)")  # fmt: skip
        return self

    # --- derived shapes (no costs here) ---------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hd(self) -> int:
        """Head dimension of Q/K/V for standard attention."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def gated(self) -> bool:
        return self.ffn_act in GATED_ACTS

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "mla"
        return "mha" if self.kv_heads == self.n_heads else ("mqa" if self.kv_heads == 1 else "gqa")

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) has an MoE FFN (HF `first_k_dense_replace`, `decoder_sparse_step`)."""
        m = self.moe
        if m is None or i < m.first_k_dense_layers or i in m.mlp_only_layers:
            return False
        return (i + 1) % m.moe_layer_freq == 0

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    def layer_type(self, i: int) -> str:
        return self.layer_types[i] if self.layer_types else "full"
