"""Memory of one GPU: model states by optimizer and ZeRO stage, and activations per layer.

Sources:
- Model states: Rajbhandari et al. SC'20 "ZeRO", §3 and §5: mixed-precision Adam keeps 2 (16-bit
  weights) + 2 (16-bit gradients) + 12 (fp32 master, momentum, variance) bytes per parameter;
  ZeRO-1 shards the 12, ZeRO-2 also the gradients, ZeRO-3 also the weights. Megatron-LM keeps
  gradients in an fp32 ``main_grad`` buffer (4 bytes; Megatron-LM docs, "Distributed
  Optimizer": 18 bytes/param, 6 + 12/d distributed). Compact 8-bit optimizers: Gonzalez Ortiz
  et al. 2026 "FlashOptim", Table 1 (AdamW 7 bytes, 5 with gradient release, + 2 bytes of
  scale per 32 elements per state).
- Activations: Korthikanti et al. MLSys'23 "Reducing Activation Recomputation in Large
  Transformer Models", §4 (34 s b h + 5 a s^2 b per layer for a GPT layer; tensor and sequence
  parallel sharding; selective and full recomputation). Here derived per stored tensor, so
  gated MLPs, GQA, MLA and MoE get their own counts; FlashAttention stores no s^2 tensors
  (Dao et al. 2022).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hwtune.model.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each model-state part before sharding."""

    weights: float
    grads: float
    optimizer: float  # master copy + moments (+ scales)


def state_bytes_per_param(
    precision: str, optimizer: str, fp32_grads: bool, fp8_params: bool = False
) -> StateBytes:
    """Bytes per parameter (ZeRO §3; Megatron distributed-optimizer table; FlashOptim Table 1).
    ``fp8_params``: the model's weights are fp8 tensors, 1 byte (Megatron-Core
    ``--fp8-param-gather``: "keep the compute param in fp8 (do not use any other intermediate
    dtype) and perform the param all-gather in fp8"; the distributed optimizer keeps the fp32
    main weights among its 12 bytes).

    The one place these are computed (`hwtune.optim.footprint` measures the same bytes from the
    tensors' storage, with torch; the planner does not import it)."""
    if precision == "fp32":
        return StateBytes(4.0, 4.0, 8.0)
    g = 4.0 if fp32_grads else 2.0
    if optimizer == "adam":
        return StateBytes(1.0 if fp8_params else 2.0, g, 12.0)
    if optimizer == "adam-bf16":
        return StateBytes(2.0, 2.0, 4.0)
    if optimizer == "adam-remainders":
        # fp32 moments (8) and the 16 low bits of each fp32 master weight (2), whose high bits
        # are the bf16 weight itself: Apex DistributedFusedAdam ``store_param_remainders``, set by
        # NeMo's setup_optimization for an fp32 optimizer over a bf16 model (megatron_base_model.py
        # at v2.0.0rc0)
        return StateBytes(2.0, g, 10.0)
    base = optimizer.removesuffix("-amsgrad")
    if base in ("adam-8bit", "adam-8bit-release"):
        # hwtune.optim.AdamW: 2 (bf16 weight) + 1 (int8 master correction) + 2 (bf16 grad) + 1 + 1
        # (8-bit moments), each 8-bit state with an fp16 scale per 32 elements; amsgrad keeps
        # the running max of the second moment as a third 8-bit state (Reddi et al. 2018,
        # Algorithm 2): 8 + 3 x 2/32. Gradient release ("-release"): the gradient is consumed
        # in backward and never held in full.
        states = 3 if optimizer.endswith("-amsgrad") else 2
        grads = 0.0 if base == "adam-8bit-release" else 2.0
        return StateBytes(2.0, grads, 1.0 + states * (1.0 + 2.0 / 32))
    if optimizer == "sgd":
        return StateBytes(2.0, g, 8.0)  # fp32 master + fp32 momentum
    raise ValueError(optimizer)


def fsdp_pipelined(pp: int, schedule: str) -> bool:
    """Whether a pipeline's ZeRO-2/3 stages run as ``torch.distributed.pipelining`` runs FSDP2
    stages (`sharded_state_bytes`, ``pipelined``): every schedule that runtime drives, named or
    an explicit order (``"explicit"``), all but the bidirectional DualPipe, which it does not
    (hwtune's runtime walks DualPipe by hand; its ZeRO-2/3 stages are priced per micro-batch, as
    without a pipeline)."""
    return pp > 1 and schedule != "dualpipe"


def reduces_per_micro_batch(zero: int, pipelined: bool) -> bool:
    """Whether each micro-batch's backward reduce-scatters its gradients: ZeRO-3, and ZeRO-2
    outside a pipelined stage (it holds only its gradient shard, Rajbhandari et al. SC'20 §5.2);
    a pipelined stage (`fsdp_pipelined`) and ZeRO 0-1 reduce once per step. A pipelined ZeRO-2/3
    stage reduces after its last backward (``REDUCE_GRAD``), none of it behind that backward."""
    return zero >= 3 or (zero == 2 and not pipelined)


def sharded_state_bytes(
    n_params: float,
    sb: StateBytes,
    zero: int,
    shards: int,
    offload: bool = False,
    pipelined: bool = False,
) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on one GPU for ``n_params`` local parameters sharded over
    ``shards`` data-parallel ranks by ZeRO stage ``zero``; offloaded optimizer states leave the GPU.

    ``pipelined`` (`fsdp_pipelined`): a pipeline stage as the one runtime that pipelines
    ZeRO-2/3 stages, ``torch.distributed.pipelining`` over FSDP2, runs it: gradient sync off for
    every micro-batch's backward (``set_requires_gradient_sync(False)``, which accumulates
    unsharded gradients) and one reduce-scatter per step (``REDUCE_GRAD``), so the gradients
    stay whole; and ``reshard_after_backward`` off, so at ZeRO-3 a backward leaves its stage
    gathered until the next forward reshards it, and the peak (the first backward, with the
    most micro-batches in flight) holds the stage's weights whole as well. DeepSpeed refuses
    ZeRO-2/3 with its pipeline engine and Megatron-LM shards no gradients."""
    d = max(1, shards)
    w = n_params * sb.weights / (d if zero >= 3 and not pipelined else 1)
    g = n_params * sb.grads / (d if zero >= 2 and not pipelined else 1)
    o = 0.0 if offload else n_params * sb.optimizer / (d if zero >= 1 else 1)
    return w, g, o


@dataclass(frozen=True, slots=True)
class ActShape:
    """What one rank holds of a micro-batch (see `hwtune.model.lowering.Shard`)."""

    tokens: int  # b * s / cp
    seq: int
    tp: int
    sp: bool
    act_bytes: float = 2.0
    flash: bool = True
    dropout: bool = False
    ep: int = 1
    moe_imbalance: float = 1.0
    loss: str = "fused"  # cross-entropy implementation (LOSS_KERNELS)
    linear_bytes: float | None = None  # bytes per element of a linear layer's kept input


def mtp_input_bytes(spec: ModelSpec, a: ActShape) -> float:
    """What one multi-token-prediction module keeps for backward beside its block's own
    activations (DeepSeek-V3 report §2.2, eq. 21): the inputs of its two RMSNorms (the hidden
    state and the next token's embedding, d each) and of the projection (their normalized
    concatenation, 2d), 16-bit, per token of the rank's sequence-parallel shard."""
    rows = a.tokens / a.tp if a.sp else a.tokens
    return a.act_bytes * rows * 4 * spec.d_model


def embedding_activation_bytes(spec: ModelSpec, a: ActShape) -> float:
    """Bytes the input embedding keeps for backward for one micro-batch on one rank (the first
    pipeline stage): its dropout's 1-byte mask, ``s b h / t`` with sequence parallelism (``s b h``
    without), and nothing without dropout.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    §4.3: the word and position embeddings store no large activations for backward (their
    gradient scatters into the rows the token ids name), and the embedding dropout needs
    ``s b h p / t`` bytes over the p micro-batches the first stage holds (§4.2.3).
    The embedding's output is the first layer's input, which that layer's first norm stores
    (§4.1, counted in `layer_activation_bytes`); keeping it again would count it twice."""
    if not a.dropout:
        return 0.0
    return a.tokens * spec.d_model / (a.tp if a.sp else 1)


def _div(x: int, t: int) -> int:
    return max(1, x // t)


@functools.lru_cache(maxsize=8192)
def layer_activation_bytes(
    spec: ModelSpec,
    ltype: str,
    moe_layer: bool,
    a: ActShape,
    recompute: str,
    modules: tuple[str, ...] = ("core_attn",),
) -> float:
    """Bytes one layer keeps for backward for one micro-batch on one rank.

    ``recompute``: "none"; "selective" (the ``modules`` recomputed, Megatron-Core's
    --recompute-modules: ``core_attn`` keeps no s^2 tensors, Korthikanti §4.2; ``mla_up_proj``
    keeps MLA's latents but not the up-projected Q, K, V; ``mlp`` keeps a dense MLP's input
    only; ``moe_act`` drops the experts' activation output); "full" (only the layer input is
    kept: 2 s b h / t with sequence parallelism).

    The input each linear layer keeps for its weight gradient (the QKV and MLP inputs after
    their norms, the attention output before the output projection, the activation output,
    the permuted expert input) takes ``a.linear_bytes`` per element: 1 under fp8 with
    Transformer Engine, which keeps only the quantized copy (``_Linear.forward`` of TE 2.x
    drops the row-wise data and saves the column-wise fp8 data). The attention output is then
    kept twice: in 16 bits by the attention kernel for its own backward, in fp8 by the output
    projection. Norm inputs, the attention's Q, K, V, the up-projection outputs (the
    activation's input) and the expert outputs (the un-permutation's) stay 16-bit.
    """
    e, h, t, m = a.act_bytes, spec.d_model, a.tp, a.tokens
    li = e if a.linear_bytes is None else a.linear_bytes
    proj_copy = li if li != e else 0.0  # the output projection's own copy of its input
    rep = m / t if a.sp else m  # tokens of the replicated (non-TP) region held by this rank
    if recompute == "full":
        return e * rep * h
    if recompute == "selective-op":
        return _per_op_sac_bytes(spec, ltype, moe_layer, a)
    mask = 1.0 if a.dropout else 0.0
    heads = _div(spec.n_heads, t)
    mods = modules if recompute == "selective" else ()
    # --- attention block (Korthikanti Table 2 terms, per stored tensor)
    attn = (e + li) * rep * h + mask * rep * h  # norm input, QKV input, output dropout mask
    if ltype == "linear" and spec.linear_attention is not None:
        la = spec.linear_attention
        hk, hv = _div(la.n_key_heads, t), _div(la.n_value_heads, t)
        attn += e * m * (2 * hk * la.key_head_dim + 3 * hv * la.value_head_dim)
    elif spec.mla is not None:
        ml = spec.mla
        dqk = ml.qk_nope_head_dim + ml.qk_rope_head_dim
        lora = (ml.q_lora_rank or 0) + ml.kv_lora_rank
        attn += e * m * (2 * lora + ml.qk_rope_head_dim)  # latent outputs and their norms' inputs
        if "mla_up_proj" not in mods:  # Q, K, V (rebuilt from the latents when recomputed)
            attn += e * m * heads * (2 * dqk + ml.v_head_dim)
        attn += e * m * heads * ml.v_head_dim  # context
        attn += proj_copy * m * heads * ml.v_head_dim
    else:
        kvh = _div(spec.kv_heads, t)
        attn += e * m * (heads + 2 * kvh + heads) * spec.hd  # Q, K, V, context (o-proj input)
        attn += proj_copy * m * heads * spec.hd
    if not a.flash and "core_attn" not in mods and recompute != "full" and ltype != "linear":
        keys = (
            min(a.seq, spec.sliding_window) if ltype == "sliding" and spec.sliding_window else a.seq
        )
        # softmax output, dropout mask, dropout output: (2e + 1) a s^2 b / t (5 a s^2 b for e=2)
        attn += (e + mask * (e + 1)) * heads * m * keys
    # --- feed-forward block
    ffn = e * rep * h + mask * rep * h  # norm input, dropout mask
    up = 2 if spec.gated else 1
    if moe_layer and spec.moe is not None:
        moe = spec.moe
        # each TP rank routes its own 1/t of the tokens (sequence-parallel shard, expert TP 1),
        # as the layer's cost counts them (`hwtune.model.lowering.ffn_ops`)
        routed = m / t
        slots = routed * moe.top_k * a.moe_imbalance
        ffn += e * routed * h  # router / expert-dispatch input
        ffn += 4.0 * routed * moe.n_routed_experts  # fp32 router probabilities
        fe = moe.expert_ffn_hidden
        act_out = 0.0 if "moe_act" in mods else li  # the activation output, unless recomputed
        ffn += slots * ((li + e) * h + (e * up + act_out) * fe)  # permuted in/out, up, act
        if moe.shared_width:
            fs = _div(moe.shared_width, t)
            ffn += m * (li * h + (e * up + li) * fs)
    elif "mlp" in mods:
        ffn += e * rep * h  # the checkpointed MLP's input only (its SP shard)
    else:
        ffn += li * rep * h  # MLP input (norm output; the SP shard is re-gathered in backward)
        f = _div(spec.ffn_hidden, t)
        ffn += m * (e * up + li) * f  # up-projection output(s), act output
    return attn + ffn


def _per_op_sac_bytes(spec: ModelSpec, ltype: str, moe_layer: bool, a: ActShape) -> float:
    """torchtitan's per-op selective activation checkpointing (``selective_ac_option="op"``,
    torchtitan ``parallelize_llama.py``): the layer input, the attention output and every other
    matmul output are kept; norms, activations and the other matmuls are recomputed. Fused GEMMs
    are counted as half kept, so half of the weight-GEMM output elements are stored."""
    from hwtune.model.lowering import Shard, lower_layer

    sh = Shard(tokens=a.tokens, seq=a.seq, tp=a.tp, sp=a.sp, act_bytes=a.act_bytes, ep=a.ep,
               moe_imbalance=a.moe_imbalance)  # fmt: skip
    rep = a.tokens / a.tp if a.sp else a.tokens
    kept = a.act_bytes * rep * spec.d_model  # layer input
    for op in lower_layer(spec, ltype, moe_layer, sh):
        if op.kind == "gemm" and not op.attention_core:
            kept += 0.5 * a.act_bytes * op.m * op.n * op.batch
        elif op.kind == "attention":
            kept += (
                a.act_bytes
                * a.tokens
                * _div(spec.n_heads, a.tp)
                * (spec.mla.v_head_dim if spec.mla else spec.hd)
            )
    return kept


LOSS_KERNELS: dict[str, float] = {
    "fused": 6.0,
    "te": 2.0,
    "flash": 4.0,
    "pytorch": 12.0,
    "chunked": 14.0,
}
"""Peak bytes per logit of the loss on the last stage, by cross-entropy implementation.

- ``fused``: Megatron-Core's vocabulary-parallel cross-entropy (``tensor_parallel/
  cross_entropy.py``): the 16-bit logits (2) and one fp32 working copy (4) that the max
  subtraction, ``exp`` and the gradient are computed in, in place: 6.
- ``te``: Transformer Engine's Triton cross-entropy (``transformer_engine/pytorch/
  cross_entropy.py`` over ``pytorch/triton/cross_entropy.py``), what Megatron-Core runs with
  ``cross_entropy_fusion_impl='te'`` (``language_module.py compute_language_model_loss``) and
  every Megatron-Bridge performance script sets (v0.1.0rc4 YAMLs, ``cross_entropy_fusion_impl:
  "te"``; v0.2.0 ``utils/helpers.py:108``; v0.3.0 ``utils/overrides.py:64``). An online
  softmax reads the 16-bit logits in fp32 registers, keeps three fp32 values per token
  (`LOSS_ROW_BYTES`) and writes the gradient back into the logits in place: 2.
- ``flash``: flash-attn's ``CrossEntropyLoss`` (``flash_attn/losses/cross_entropy.py``: the
  xentropy CUDA kernel in 1.x, Triton in 2.x), llm-foundry's default ``loss_fn``
  ``fused_crossentropy`` (``modeling_mpt.py`` of v0.2.0-v0.6.0, ``FusedCrossEntropyLoss(
  ignore_index=-100)``, so ``inplace_backward`` False; its benchmark YAMLs set no other). It
  reads the 16-bit logits as they are, saves them and the fp32 log-sum-exp per token, and its
  backward writes a new 16-bit gradient: 2 + 2 = 4.
- ``pytorch``: ``F.cross_entropy(logits.float(), labels)`` (torchtitan, Hugging Face,
  llm-foundry). The backward of ``log_softmax`` holds its saved fp32 output, the fp32 gradient
  from ``nll_loss`` and the fp32 input gradient it allocates at once: 12 (the 16-bit logits are
  dropped before backward, torchtitan's ``del pred``; the forward peak is 2 + 4 + 4 = 10).
- ``chunked``: torchtitan's ``ChunkedLossWrapper`` (pytorch/torchtitan at b5bcd76c,
  ``components/loss.py:501-721``; every Llama 3 configuration, ``models/llama3/
  config_registry.py:197-201, 270-274``): the LM head and ``F.cross_entropy(pred.float())``
  (``loss.py:57-62``) run on one of `LOSS_CHUNKS` slices of the tokens at a time, each slice's
  backward before the next. A slice holds the ``pytorch`` 12 and its 16-bit logits, which the
  loop's ``logits`` keeps alive through that backward (``loss.py:682-700``): 14, per logit of
  one slice. Beside it an fp32 buffer of the hidden-state gradient, 4 B per token and model
  dimension (``GradAccumulator``, ``loss.py:432``, ``dtype=torch.float32`` at :639-643)."""

LOSS_ROW_BYTES: dict[str, float] = {"te": 12.0, "flash": 4.0}
"""Bytes per token a loss keeps beside its logits: Transformer Engine's row maximum, sum of
exponentials and target logit, fp32 each (``m_d_X_y``), gathered from every rank of the
vocabulary split (so per tensor-parallel rank); flash-attn's fp32 log-sum-exp."""

LOSS_CHUNKS: dict[str, int] = {"chunked": 8}
"""Slices of the tokens a chunked loss runs in turn: ``ChunkedLossWrapper.Config.num_chunks``
defaults to 8 (torchtitan ``components/loss.py:544``), which the Llama 3 configurations keep."""


def logits_bytes(spec: ModelSpec, tokens: int, tp: int, loss: str = "fused") -> float:
    """Peak bytes of the loss on the last stage (``LOSS_KERNELS``), vocabulary split over tp;
    a chunked loss holds one slice's logits and the fp32 hidden-state gradient."""
    chunks = LOSS_CHUNKS.get(loss, 1)
    logits = LOSS_KERNELS[loss] * -(-tokens // chunks) * -(-spec.vocab // tp)
    rows = LOSS_ROW_BYTES.get(loss, 0.0) * tokens * (tp if loss == "te" else 1)
    return logits + rows + (4.0 * tokens * spec.d_model if chunks > 1 else 0.0)
