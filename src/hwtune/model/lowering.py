"""Lowering a `ModelSpec` into the ops of one rank: FLOPs and bytes, forward and backward.

Backward is split into the input-gradient (``dgrad``) and weight-gradient (``wgrad``) parts that
zero-bubble schedules move independently (Qi et al., ICLR'24, §2). Shapes are those of one rank
after tensor, context and expert parallelism; this module knows nothing about devices.

Conventions:
- A GEMM (m x k) @ (k x n) costs 2mnk FLOPs forward; dgrad is (m x n) @ (n x k) and wgrad
  (k x m) @ (m x n), each 2mnk (Narayanan et al. SC'21, §5.1: backward = 2x forward).
- Attention core (scores and context) of a query block of ``q`` tokens over ``kv`` keys:
  2 q kv (d_qk + d_v) FLOPs per head; causal masking halves the keys on average (flash kernels
  skip masked blocks; Dao 2023 §3.1). Unfused attention (Megatron before FlashAttention)
  computes the full square and moves the score tensors through memory (Korthikanti et al.
  2022, Table 2: the 5as/h term).
- Memory-bound ops (norms, residual adds, rotary, activation functions, dropout, MoE permute)
  are bytes read plus written; backward moves about twice the forward bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hwtune.model.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Op:
    """One op of one rank. For ``gemm`` ops (m, n, k, batch) is the forward problem."""

    name: str
    kind: str  # "gemm" | "attention" | "memory"
    flops: float = 0.0
    bytes: float = 0.0
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    dgrad_flops: float = 0.0
    wgrad_flops: float = 0.0
    dgrad_bytes: float = 0.0
    wgrad_bytes: float = 0.0
    kernels: int = 1
    attention_core: bool = False  # recomputed by selective recomputation (Korthikanti et al. §4.2)


def gemm(name: str, m: int, n: int, k: int, batch: int = 1, weight: bool = True) -> Op:
    """A (batched) GEMM op. ``weight=False`` for activation-activation products (no wgrad)."""
    f = 2.0 * m * n * k * batch
    return Op(
        name, "gemm", flops=f, m=m, n=n, k=k, batch=batch,
        dgrad_flops=f if weight else 2 * f, wgrad_flops=f if weight else 0.0,
    )  # fmt: skip


def memop(name: str, nbytes: float, kernels: int = 1, bwd_factor: float = 2.0) -> Op:
    return Op(name, "memory", bytes=nbytes, dgrad_bytes=bwd_factor * nbytes, kernels=kernels)


@dataclass(frozen=True, slots=True)
class Shard:
    """How one rank sees a micro-batch: ``tokens`` it holds (b*s/cp), ``seq`` the full sequence
    length, tensor/context/expert parallel degrees, sequence parallelism, activation bytes."""

    tokens: int
    seq: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    act_bytes: float = 2.0
    flash: bool = True
    moe_imbalance: float = 1.0
    attn_kernel: str = "best"  # fused attention kernel (cost.compute.ATTENTION_KERNELS)
    fused: bool = True  # elementwise ops fused (Megatron/TE, torch.compile); False: eager PyTorch
    fused_norm: bool = False  # RMSNorm one kernel even when the rest is eager (native nn.RMSNorm)
    moe_dispatch: str = "alltoall"  # "alltoall" | "deepep" (one network copy per node)
    fp8_recipe: str = ""  # "" (no fp8 GEMMs) | "delayed" | "current" (moe_expert_ops)
    loss_chunks: int = 1  # slices of the tokens the LM head and loss run in turn (lower_head)


def _div(x: int, t: int) -> int:
    return max(1, x // t)


def rmsnorm_bytes(e: float, fused: bool) -> float:
    """HBM bytes per normalized element of one RMSNorm forward.

    Fused (Megatron/TE, torch.compile, Apex): read x, write y, ``2e``. Eager PyTorch
    (``torch.nn.RMSNorm`` before 2.6 and torchtitan's ``RMSNorm``: ``x.float()``, ``pow(2)``,
    ``mean``, ``rsqrt``, ``mul``, ``type_as``, ``mul(weight)``), each a kernel through memory:
    (e + 4) + 8 + 4 + 8 + (4 + e) + 2e = 28 + 4e (fp32 intermediates, 4 B)."""
    return 2 * e if fused else 28 + 4 * e


def rope_bytes(e: float, fused: bool) -> float:
    """HBM bytes per rotated element (q or k) of rotary embeddings. Fused: ``2e``. Eager complex
    form (Llama reference, torchtitan ``apply_rotary_emb``: ``float()``, complex multiply,
    ``type_as``): (e + 4) + 8 + (4 + e) = 16 + 2e."""
    return 2 * e if fused else 16 + 2 * e


def act_bytes_per_elem(e: float, gated: bool, fused: bool) -> float:
    """HBM bytes per hidden element of the MLP activation. Fused SwiGLU reads gate and up and
    writes the product (3e); eager ``silu(a) * b`` writes and re-reads ``silu(a)`` (2e + 3e). A
    plain GeLU is one kernel either way (2e)."""
    if not gated:
        return 2 * e
    return 3 * e if fused else 5 * e


def attention_ops(spec: ModelSpec, ltype: str, sh: Shard) -> list[Op]:
    """Projections and core of one attention block (standard, MLA or linear)."""
    h, t, m, e = spec.d_model, sh.tp, sh.tokens, sh.act_bytes
    ops: list[Op] = []
    b_seqs = max(1, sh.tokens * sh.cp // sh.seq)
    if ltype == "linear":
        la = spec.linear_attention
        assert la is not None
        hk, hv = _div(la.n_key_heads, t), _div(la.n_value_heads, t)
        qkvz = 2 * hk * la.key_head_dim + 2 * hv * la.value_head_dim + 2 * hv
        ops.append(gemm("linear_attn_in_proj", m, qkvz, h))
        # Chunked gated delta rule (Yang et al. 2024, "Gated Delta Networks", §3): per token and
        # head, state update and readout of a (d_k x d_v) state, ~6 d_k d_v FLOPs in all.
        core = 6.0 * m * hv * la.key_head_dim * la.value_head_dim
        io = e * m * qkvz * 2
        ops.append(Op("linear_attn_core", "attention", flops=core, bytes=io, dgrad_flops=2 * core,
                      dgrad_bytes=2 * io))  # fmt: skip
        ops.append(gemm("linear_attn_out_proj", m, h, hv * la.value_head_dim))
        return ops

    heads = _div(spec.n_heads, t)
    if spec.mla is not None:
        ml = spec.mla
        dqk, dv = ml.qk_nope_head_dim + ml.qk_rope_head_dim, ml.v_head_dim
        if ml.q_lora_rank:
            ops.append(gemm("q_a_proj", m, ml.q_lora_rank, h))
            ops.append(gemm("q_b_proj", m, heads * dqk, ml.q_lora_rank))
        else:
            ops.append(gemm("q_proj", m, heads * dqk, h))
        ops.append(gemm("kv_a_proj", m, ml.kv_lora_rank + ml.qk_rope_head_dim, h))
        ops.append(gemm("kv_b_proj", m, heads * (ml.qk_nope_head_dim + dv), ml.kv_lora_rank))
        kvh = heads
        o_in = heads * dv
    else:
        dqk = dv = spec.hd
        kvh = _div(spec.kv_heads, t)
        gate = heads if spec.attn_output_gate else 0
        ops.append(gemm("qkv_proj", m, (heads + gate + 2 * kvh) * dqk, h))
        if gate:
            ops.append(memop("attn_output_gate", 3 * e * m * heads * dv))
        o_in = heads * dv

    # Attention core: queries of this rank over keys of the whole sequence (context parallel
    # ranks exchange K/V; Liu et al. 2023 "Ring Attention").
    q = m
    keys = sh.seq
    chunked = ltype == "chunked" and spec.attention_chunk_size is not None
    if ltype == "sliding" and spec.sliding_window:
        keys = min(keys, spec.sliding_window)
    elif chunked:
        keys = min(keys, spec.attention_chunk_size)
    if sh.flash:
        # causal: half the keys on average; a sliding window sees ~the whole window per query;
        # a chunk (Llama 4) is causal inside the chunk, so half of it
        causal_keys = keys / 2 if (keys == sh.seq or chunked) else keys
        core = 2.0 * q * causal_keys * (dqk + dv) * heads
        io = e * (q * heads * (2 * dqk + 2 * dv) + (m * kvh * (dqk + dv)))
        ops.append(Op("attention_core", "attention", flops=core, bytes=io, dgrad_flops=2 * core,
                      dgrad_bytes=2.5 * io, attention_core=True))  # fmt: skip
    else:
        # Unfused: baddbmm QK^T, scale-mask-softmax, dropout, bmm with V, full square computed.
        sq = sh.seq // sh.cp
        bh = b_seqs * heads
        ops.append(Op("attn_scores", "gemm", flops=2.0 * sq * keys * dqk * bh, m=sq, n=keys, k=dqk,
                      batch=bh, dgrad_flops=4.0 * sq * keys * dqk * bh, attention_core=True))  # fmt: skip
        sbytes = bh * sq * keys
        ops.append(Op("softmax", "memory", bytes=2 * e * sbytes, dgrad_bytes=3 * e * sbytes,
                      attention_core=True))  # fmt: skip
        ops.append(Op("attn_dropout", "memory", bytes=(2 * e + 1) * sbytes,
                      dgrad_bytes=(2 * e + 1) * sbytes, attention_core=True))  # fmt: skip
        ops.append(Op("attn_context", "gemm", flops=2.0 * sq * keys * dv * bh, m=sq, n=dv, k=keys,
                      batch=bh, dgrad_flops=4.0 * sq * keys * dv * bh, attention_core=True))  # fmt: skip
    if sh.cp > 1 and sh.flash:
        # ring attention runs the core as cp partial blocks and merges each partial output with
        # its log-sum-exp into the running result: read both, write one, per extra block
        # (Liu et al. 2023 "Ring Attention", Alg. 1; the online-softmax rescaling of Milakov &
        # Gimelshein 2018), in forward and again in backward
        merge = (sh.cp - 1) * 3 * e * m * heads * dv
        ops.append(Op("cp_merge", "memory", bytes=merge, dgrad_bytes=merge, kernels=sh.cp - 1,
                      attention_core=True))  # fmt: skip
    ops.append(gemm("o_proj", m, h, o_in))
    if spec.pos_emb == "rope":
        ops.append(memop("rotary", rope_bytes(e, sh.fused) * m * (heads + kvh) * dqk,
                         kernels=1 if sh.fused else 3))  # fmt: skip
    return ops


def ffn_ops(spec: ModelSpec, moe_layer: bool, sh: Shard) -> list[Op]:
    """Feed-forward block: dense MLP, or router + routed experts + shared experts."""
    h, t, m, e = spec.d_model, sh.tp, sh.tokens, sh.act_bytes
    up_mult = 2 if spec.gated else 1
    ops: list[Op] = []
    if not moe_layer:
        f = _div(spec.ffn_hidden, t)
        ops.append(gemm("mlp_up", m, up_mult * f, h))
        ops.append(memop("mlp_act", act_bytes_per_elem(e, spec.gated, sh.fused) * m * f))
        ops.append(gemm("mlp_down", m, h, f))
        return ops
    moe = spec.moe
    assert moe is not None
    E, k = moe.n_routed_experts, moe.top_k
    ops.append(gemm("router", m, E, h))
    # Expert parallelism (Megatron-Core: expert tensor parallel = 1, EP folded over TP x DP):
    # each EP rank holds E/ep experts and receives on average m*k token-slots in all, i.e.
    # ep*m*k/E rows per local expert, times the imbalance factor on the busiest rank.
    # With tensor parallelism the TP ranks of a micro-batch dispatch disjoint token shards
    # (sequence-parallel layout), so each EP rank routes m/tp tokens.
    local_e = max(1, E // sh.ep)
    rows = max(1, round(sh.ep * (m / t) * k / E * sh.moe_imbalance))
    fe = moe.expert_ffn_hidden
    ops.extend(moe_routing_ops(m / t, E, k, h, local_e, e, sh.moe_dispatch))
    # TE GroupedLinear (Megatron --moe-grouped-gemm) runs one cuBLAS GEMM per local expert
    # (``general_grouped_gemm``: a loop over the splits on a few streams), so each expert GEMM
    # is ``local_e`` launches (``kernels``).
    up = gemm("expert_up", rows, up_mult * fe, h, batch=local_e)
    down = gemm("expert_down", rows, h, fe, batch=local_e)
    ops.append(_with_kernels(up, local_e))
    ops.append(
        memop("expert_act", act_bytes_per_elem(e, spec.gated, sh.fused) * rows * local_e * fe)
    )
    ops.append(_with_kernels(down, local_e))
    if sh.fp8_recipe == "current":
        ops.append(expert_fp8_current_scaling_op(rows, local_e, h, fe, up_mult, e))
    if moe.shared_width:
        fs = _div(moe.shared_width, t)
        ops.append(gemm("shared_up", m, up_mult * fs, h))
        ops.append(memop("shared_act", act_bytes_per_elem(e, spec.gated, sh.fused) * m * fs))
        ops.append(gemm("shared_down", m, h, fs))
    return ops


def _with_kernels(op: Op, kernels: int) -> Op:
    return Op(op.name, op.kind, flops=op.flops, m=op.m, n=op.n, k=op.k, batch=op.batch,
              dgrad_flops=op.dgrad_flops, wgrad_flops=op.wgrad_flops, kernels=kernels)  # fmt: skip


ROUTER_FWD_KERNELS = 4
ROUTER_BWD_KERNELS = 3
"""Kernels of Megatron-Core's fused router after the gating GEMM (``--moe-router-fusion``,
``moe/router.py`` and ``moe/moe_utils.py``, TE ``fused_topk_with_score_function``,
``fused_compute_score_for_moe_aux_loss``, ``fused_moe_aux_loss``): forward top-k with softmax,
the aux-loss scores, the aux loss and the per-expert token count (``routing_map.sum(0)``);
backward the gradients of the first three."""


def moe_routing_ops(
    tokens: float, experts: int, top_k: int, h: int, local_e: int, e: float, dispatch: str
) -> list[Op]:
    """Router post-processing and token (un)permutation of one MoE layer on one rank, routing
    ``tokens`` tokens of width ``h`` (``e`` bytes each) to ``top_k`` of ``experts`` experts.

    Router (fp32 scores; Megatron-Core ``TopKRouter`` with ``--moe-router-fusion``): forward
    reads the logits twice (top-k, aux-loss scores: 2e per score), writes fp32 probabilities
    and scores and a bool routing map, and the aux loss reads the scores back: (2e + 13) bytes
    per token-expert score; backward reads two fp32 gradients and writes two logit gradients:
    (8 + 2e), plus the fp32 aux-loss gradient (4).

    Permutation (TE ``permutation.py``, the Triton kernels Megatron's ``--moe-permute-fusion``
    calls; n = tokens, s = n * top_k token-slots):
    - ``permute`` (``make_row_id_map``: 3 kernels, ``permute_with_mask_map``: 1) reads each
      token once and writes it top_k times: e (n + s) h; its backward is an unpermute, e (s + n) h.
    - ``unpermute`` with probability merging (1 kernel) reads the s expert outputs and writes
      n: e (s + n) h; its backward (``unpermute_with_mask_map_bwd_with_merging_probs``) reads the
      n gradients and the s forward inputs (for the probabilities' gradient) and writes s:
      e (n + 2 s) h.
    - Megatron's all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``) also sorts the received
      tokens by local expert after the dispatch and back before the combine when a rank holds
      more than one expert (``sort_chunks_by_idxs``: ``make_chunk_sort_map`` +
      ``sort_chunks_by_map``, 2 kernels each way, read + write of s rows: 2 e s h forward and
      backward, each). DeepEP (flex dispatcher) delivers tokens per rank and needs only the
      permute and unpermute around it.
    """
    n, s = tokens, tokens * top_k
    scores = n * experts
    router = Op("router_topk", "memory", bytes=(2 * e + 13) * scores,
                dgrad_bytes=(12 + 2 * e) * scores, kernels=ROUTER_FWD_KERNELS)  # fmt: skip
    permute_kernels = 4
    sort = dispatch == "alltoall" and local_e > 1
    fwd_dispatch = e * (n + s) * h + (2 * e * s * h if sort else 0.0)
    bwd_dispatch = e * (s + n) * h + (2 * e * s * h if sort else 0.0)
    fwd_combine = e * (s + n) * h + (2 * e * s * h if sort else 0.0)
    bwd_combine = e * (n + 2 * s) * h + (2 * e * s * h if sort else 0.0)
    kp = permute_kernels + (2 if sort else 0)
    kc = 1 + (2 if sort else 0)
    return [
        router,
        Op("moe_permute", "memory", bytes=fwd_dispatch, dgrad_bytes=bwd_dispatch, kernels=kp),
        Op("moe_unpermute", "memory", bytes=fwd_combine, dgrad_bytes=bwd_combine, kernels=kc),
    ]


def expert_fp8_current_scaling_op(
    rows: int, local_e: int, h: int, fe: int, up_mult: int, e: float
) -> Op:
    """What fp8 current scaling adds to the routed experts' GEMM input casts, beyond the one
    fused cast-transpose per GEMM input the estimator charges (``train.estimator``: 2 B read,
    1 + 1 B written per element, one kernel).

    TE's ``GroupedLinear`` quantizes its input with ``split_quantize``: per expert split, a
    ``Float8CurrentScalingQuantizer`` runs ``nvte_compute_amax`` (reads the split), then
    ``nvte_compute_scale_from_amax`` and ``nvte_quantize_v2`` (TE 2.9
    ``pytorch/csrc/quantizer.cpp``, ``Float8CurrentScalingQuantizer::quantize_impl``; only
    delayed scaling has the fused multi-tensor cast, ``extensions/cast.cpp``
    ``multi_tensor_quantize_impl``). So each quantized tensor costs one more read of its
    elements (``e`` bytes) and 3 kernels per expert instead of 1. Forward quantizes the inputs
    of fc1 (width h) and fc2 (width fe); backward the output gradients of fc2 (h) and fc1
    (up_mult * fe)."""
    r = rows * local_e
    extra_kernels = 2 * (3 * local_e - 1)
    return Op("expert_fp8_amax", "memory", bytes=e * r * (h + fe),
              dgrad_bytes=e * r * (h + up_mult * fe), kernels=extra_kernels)  # fmt: skip


def norm_residual_ops(spec: ModelSpec, sh: Shard) -> list[Op]:
    """Two pre-norms and two residual adds (with fused bias-dropout-add) of one layer; with
    sequence parallelism these run on tokens/tp (Korthikanti et al. 2022, §4.2.2)."""
    rows = sh.tokens // sh.tp if sh.sp else sh.tokens
    hb = sh.act_bytes * rows * spec.d_model
    return [_norm_op("norms", spec, sh, 2 * rows * spec.d_model, 2),
            memop("residual_adds", 2 * 3 * hb, kernels=2)]  # fmt: skip


def add_norm_ops(spec: ModelSpec, sh: Shard, in_all_reduce: bool = False) -> list[Op]:
    """A serving engine's two pre-norms of one layer, each with the residual add before it.

    The engines' RMSNorm takes the residual and does both in one kernel that reads the input
    and the residual and writes the updated residual and the normalized output, ``4e`` per
    element (vLLM ``RMSNorm.forward_cuda`` -> ``fused_add_rms_norm``,
    ``csrc/layernorm_kernels.cu``; SGLang ``RMSNorm.forward_cuda`` -> ``fused_add_rmsnorm``;
    TensorRT-LLM's PyTorch-backend ``RMSNorm(hidden_states, residual)``), where
    `norm_residual_ops` prices a norm and a separate add (``5e``, two kernels). Under tensor
    parallelism without attention data parallelism TensorRT-LLM runs both inside the layer's
    all-reduces (``in_all_reduce``: ``AllReduceFusionOp.RESIDUAL_RMS_NORM``, the decoder
    layers' ``PRE_*_FUSION`` / ``POST_*_FUSION``, e.g. ``_torch/models/modeling_qwen3_moe.py``):
    no kernel of their own, the all-reduce kernel reading and writing the residual besides its
    output (``2e``). A LayerNorm model, or an engine that does not fuse (``sh.fused`` False, a
    CPU profile), keeps `norm_residual_ops`."""
    if spec.norm != "rmsnorm" or not sh.fused:
        return norm_residual_ops(spec, sh)
    rows = sh.tokens // sh.tp if sh.sp else sh.tokens
    hb = sh.act_bytes * rows * spec.d_model
    if in_all_reduce:
        return [memop("add_norms_in_all_reduce", 2 * 2 * hb, kernels=0)]
    return [memop("add_norms", 2 * 4 * hb, kernels=2)]


def _norm_op(name: str, spec: ModelSpec, sh: Shard, elems: float, count: int) -> Op:
    """``count`` norms over ``elems`` normalized elements in all. LayerNorm is one native kernel
    in eager PyTorch too; an eager RMSNorm is seven (``rmsnorm_bytes``), unless it is PyTorch's
    ``nn.RMSNorm`` of a release with its fused kernel (``fused_norm``: ``rms_norm`` dispatches to
    ``_fused_rms_norm`` when weight and input share a dtype, ``aten/src/ATen/native/
    layer_norm.cpp`` ``rms_norm_symint``, from PyTorch PR #153666, 2025)."""
    eager = not (sh.fused or sh.fused_norm) and spec.norm == "rmsnorm"
    return memop(name, rmsnorm_bytes(sh.act_bytes, not eager) * elems,
                 kernels=count * (7 if eager else 1))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def lower_layer(spec: ModelSpec, ltype: str, moe_layer: bool, sh: Shard) -> tuple[Op, ...]:
    """All ops of one transformer layer of kind (``ltype``, ``moe_layer``) on one rank."""
    return tuple(
        attention_ops(spec, ltype, sh) + ffn_ops(spec, moe_layer, sh) + norm_residual_ops(spec, sh)
    )


@functools.lru_cache(maxsize=1024)
def lower_embedding(spec: ModelSpec, sh: Shard) -> tuple[Op, ...]:
    """Input embedding lookup (and learned positions): memory-bound gather."""
    return (memop("embedding", 2 * sh.act_bytes * sh.tokens * spec.d_model),)


@functools.lru_cache(maxsize=1024)
def lower_head(spec: ModelSpec, sh: Shard) -> tuple[Op, ...]:
    """Final norm, vocabulary-parallel LM head and softmax cross-entropy (fp32 logits).

    A chunked loss (``loss_chunks`` > 1, torchtitan's ``ChunkedLossWrapper``) issues the LM head
    and the loss once per slice of the tokens (``gemm`` with ``batch`` = slices, each slice its
    own GEMM) and gathers the slices' hidden-state gradients in an fp32 buffer: each slice's
    bf16 gradient read and written as fp32 (2 + 4 B), then the buffer read and written back in
    bf16 (4 + 2 B) per token and model dimension (``components/loss.py:434-475, 711``)."""
    v = -(-spec.vocab // sh.tp)
    rows = sh.tokens // sh.tp if sh.sp else sh.tokens
    c = max(1, sh.loss_chunks)
    ops = [
        _norm_op("final_norm", spec, sh, rows * spec.d_model, 1),
        # each slice's rows rounded up, as `hwtune.cost.memory.logits_bytes` sizes a slice
        gemm("lm_head", -(-sh.tokens // c), v, spec.d_model, batch=c),
        memop("cross_entropy", 3 * 4.0 * sh.tokens * v, kernels=3 * c),
    ]
    if c > 1:
        ops.append(memop("loss_grad_accumulate", 12.0 * sh.tokens * spec.d_model, kernels=c + 1,
                         bwd_factor=0.0))  # fmt: skip
    return tuple(ops)


@functools.lru_cache(maxsize=1024)
def layer_classes(spec: ModelSpec) -> dict[tuple[str, bool], list[int]]:
    """Layers grouped by (attention type, is-MoE), each with its layer indices."""
    out: dict[tuple[str, bool], list[int]] = {}
    for i in range(spec.n_layers):
        out.setdefault((spec.layer_type(i), spec.is_moe_layer(i)), []).append(i)
    return out


def model_flops_per_token(spec: ModelSpec, seq: int, causal: bool = False) -> float:
    """Forward+backward model FLOPs per token: 3 x forward, where forward = 2 x (active matmul
    parameters, router and LM head included) + attention. Attention follows the PaLM convention
    (Chowdhery et al. 2022, App. B: 12 L H Q T per token for full, non-causal attention, i.e.
    forward 2 T H (d_qk + d_v) per layer); ``causal=True`` halves the full-attention part.
    Sliding-window layers count their window. Embedding lookups are not FLOPs.
    """
    sh = Shard(tokens=seq, seq=seq)
    total = 0.0
    for (ltype, moe), idx in layer_classes(spec).items():
        per = 0.0
        for op in lower_layer(spec, ltype, moe, sh):
            if op.kind == "gemm":
                per += op.flops
            elif op.kind == "attention":
                full = op.attention_core and ltype == "full"
                per += op.flops * (2.0 if full and not causal else 1.0)
        total += per * len(idx)
    total += sum(op.flops for op in lower_head(spec, sh))
    return 3.0 * total / seq
