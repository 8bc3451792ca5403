"""The KV cache of one rank: bytes per token and per sequence, and the attention that reads it.

This is the one place where the serving simulator (and anything else) gets the size of a KV
cache entry and the time of attention over cached keys. Shapes are per rank after tensor
parallelism; layers are grouped by kind as in `hwtune.model.lowering.layer_classes`.

Sources:
- Standard attention (MHA/GQA/MQA) caches K and V: 2 * kv_heads * head_dim elements per token per
  layer (Kwon et al. SOSP'23 "PagedAttention", §2; Ainslie et al. 2023 "GQA"). With tensor
  parallelism each rank keeps kv_heads/tp heads, or one replicated head when tp > kv_heads
  (Megatron/vLLM replicate KV heads; vLLM ``get_num_kv_heads``).
- MLA caches the compressed latent c_KV (kv_lora_rank) and the decoupled RoPE key
  (qk_rope_head_dim) per token per layer, shared by all heads (DeepSeek-V2 §2.1.2, Table 1:
  (d_c + d_h^R) * l elements). It is not split over tensor-parallel ranks (vLLM/SGLang replicate
  the latent cache on every TP rank; DP attention partitions sequences instead).
- Sliding-window layers need only the last ``window`` tokens (Beltagy et al. 2020; Mistral 7B
  §2); the paged cache here allocates them like full layers (vLLM before its hybrid allocator),
  so capacity counts them per token while attention reads at most the window.
- Linear-attention (Gated DeltaNet) layers keep a fixed recurrent state per sequence:
  value heads x d_k x d_v fp32 values plus the causal-conv state (Yang et al. 2024 §3).
- Decode attention (one query per sequence) reads the whole cached context: it is bound by HBM
  bandwidth for GQA (FlashDecoding, Dao et al. 2023; "PagedAttention" §4) and closer to compute
  bound for MLA with absorbed projections, whose scores and context run over the latent of width
  kv_lora_rank + rope (FLOPs 2 * heads * ctx * (2 * kv_lora_rank + rope); DeepSeek FlashMLA).
- Prefill attention of a chunk of q new tokens after c cached ones: every new token attends to
  the c cached keys and, causally, to half of the chunk: 2 * q * (c + q/2) * (d_qk + d_v) FLOPs
  per head (Agrawal et al. OSDI'24 "Sarathi-Serve", §4.2; Dao 2023 §3.1 for the causal half).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.cost.compute import KERNEL_OVERHEAD_S, attention_time, stored_bytes
from hwtune.hardware.device import Device
from hwtune.model.lowering import layer_classes
from hwtune.model.spec import ModelSpec

DECODE_ATTENTION_KERNELS = 3
"""Kernels one layer's decode attention launches in a serving engine: the new token's K/V is
written to the paged cache (with RoPE, TensorRT-LLM's QKV preprocessing, vLLM
``reshape_and_cache``), the split-KV attention kernel runs over the context (FlashDecoding, Dao
et al. 2023; FlashMLA, FlashInfer and FlashAttention-3 split long contexts across SMs), and a
combine kernel reduces the splits. At small batches and contexts the op is these launches, not
its bytes. Check: NVIDIA's per-op timings of the engines' own decode attention (ai-dynamo/
aiconfigurator ``systems/data/<gpu>/{attention,mla}/<engine>/<version>/generation_*_perf.parquet``,
kept in ``benchmarks/data/aiconfigurator_decode_attention.csv``) fit measured = c + k x roofline
(the roofline below) with k = 0.99-1.09 and c = 13-17 us where the kernels read the cache at
the roofline: GQA in SGLang 0.5.9 and vLLM 0.14 with a bf16 cache, MLA in SGLang 0.5.9 and
TensorRT-LLM 1.3.0rc20 (`benchmarks/decode_attention_vs_published.py`; VALIDATION.md, "Decode
attention: three kernels"). One launch, as before 2026-12-01, left those ops 47-57% short at the
median. Not modelled: TensorRT-LLM 1.2.0rc5's MLA kernel (c = 31 us) and fp8-cache kernels that
dequantize below the roofline."""

LINEAR_STATE_BYTES = 4.0
"""Gated DeltaNet keeps its recurrent state in fp32 (fla-org/flash-linear-attention kernels)."""


def _div(x: int, t: int) -> int:
    return max(1, x // t)


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """What attention of one layer kind looks like on one rank.

    ``kv_elems_per_token``: cached elements per token; ``flops_per_key``: FLOPs per (query, key)
    pair over all local heads for prefill; ``decode_flops_per_key``: the same for one decode
    query (different for MLA, whose decode runs in the latent space); ``window``: keys visible to
    a query (None = all); ``state_bytes_per_seq``: fixed per-sequence state (linear attention).
    """

    kind: str
    kv_elems_per_token: float
    flops_per_key: float
    decode_flops_per_key: float
    window: int | None
    state_bytes_per_seq: float = 0.0
    linear_flops_per_token: float = 0.0


def attention_shape(spec: ModelSpec, ltype: str, tp: int) -> AttentionShape:
    """The cache and attention shape of one layer of kind ``ltype`` on one of ``tp`` ranks."""
    if ltype == "linear":
        la = spec.linear_attention
        assert la is not None  # ModelSpec validation guarantees it
        hv, hk = _div(la.n_value_heads, tp), _div(la.n_key_heads, tp)
        state = hv * la.key_head_dim * la.value_head_dim * LINEAR_STATE_BYTES
        conv = (2 * hk * la.key_head_dim + hv * la.value_head_dim) * max(0, la.conv_kernel - 1)
        core = 6.0 * hv * la.key_head_dim * la.value_head_dim  # lowering.py, gated delta rule
        return AttentionShape(
            "linear", 0.0, 0.0, 0.0, None, state + 2.0 * conv, linear_flops_per_token=core
        )
    heads = _div(spec.n_heads, tp)
    window = None
    if ltype == "sliding" and spec.sliding_window:
        window = spec.sliding_window
    elif ltype == "chunked" and spec.attention_chunk_size:
        window = spec.attention_chunk_size
    if spec.mla is not None:
        m = spec.mla
        dqk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        latent = m.kv_lora_rank + m.qk_rope_head_dim
        return AttentionShape(
            "mla",
            float(latent),
            2.0 * heads * (dqk + dv),
            2.0 * heads * (latent + m.kv_lora_rank),
            window,
        )
    kvh = _div(spec.kv_heads, tp)
    d = spec.hd
    return AttentionShape("mha", 2.0 * kvh * d, 2.0 * heads * 2 * d, 2.0 * heads * 2 * d, window)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str, tp: int = 1, pp: int = 1) -> float:
    """Bytes of KV cache one token occupies on one rank (all its layers; the largest pipeline
    stage, ceil(L/pp) layers of the model's average mix). Sliding-window layers are counted per
    token (see the module docstring); linear-attention layers hold no per-token entry."""
    eb = stored_bytes(kv_dtype)
    total = 0.0
    for (ltype, _moe), idx in layer_classes(spec).items():
        total += attention_shape(spec, ltype, tp).kv_elems_per_token * eb * len(idx)
    return total * _stage_share(spec, pp)


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1, pp: int = 1) -> float:
    """Fixed bytes per running sequence on one rank (linear-attention recurrent and conv state)."""
    total = 0.0
    for (ltype, _moe), idx in layer_classes(spec).items():
        total += attention_shape(spec, ltype, tp).state_bytes_per_seq * len(idx)
    return total * _stage_share(spec, pp)


def _stage_share(spec: ModelSpec, pp: int) -> float:
    """Fraction of the layers on the largest pipeline stage: ceil(L/pp)/L."""
    if pp <= 1:
        return 1.0
    return (-(-spec.n_layers // pp)) / spec.n_layers


def prefill_attention_time(
    shape: AttentionShape,
    pair_count: float,
    kv_tokens_read: float,
    new_tokens: float,
    device: Device,
    kv_dtype: str,
) -> float:
    """Seconds of one layer's fused prefill attention over a batch of chunks.

    ``pair_count`` = sum over chunks of q * (c + q/2) (query-key pairs after causal masking, each
    capped at the window); ``kv_tokens_read`` = sum of (c + q), the keys a chunk loads from the
    cache; ``new_tokens`` = sum of q. FLOPs = pair_count * flops_per_key; bytes = cached K/V read
    plus Q and output written in 16 bits. Time from `hwtune.cost.compute.attention_time`.
    """
    if shape.kind == "linear":
        return linear_attention_time(shape, new_tokens, 0, device)
    if pair_count <= 0:
        return 0.0
    flops = pair_count * shape.flops_per_key
    io = kv_tokens_read * shape.kv_elems_per_token * stored_bytes(kv_dtype)
    # Q read and O written in 16 bits: heads * (d_qk + d_v) = flops_per_key / 2 elements per token
    io += 2.0 * new_tokens * shape.flops_per_key / 2.0
    return attention_time(flops, io, device, device.sixteen_bit_dtype, backward=False)


def decode_attention_time(
    shape: AttentionShape,
    n_seqs: int,
    ctx_tokens: float,
    device: Device,
    kv_dtype: str,
    queries: int = 1,
    math_dtype: str | None = None,
) -> float:
    """Seconds of one layer's decode attention: ``n_seqs`` sequences with ``queries`` query rows
    each (more than one when speculative decoding verifies drafts) over ``ctx_tokens`` cached
    keys in all (each already capped at the window). The rows of a sequence share one read of
    its KV cache (multi-query decode kernels: FlashMLA, FlashInfer), so the bytes are those of
    one query and the FLOPs scale with the rows. Roofline at the device's attention efficiency
    of the ``math_dtype`` peak (None: the device's 16-bit format; fp32 for full-precision
    serving), plus the launches of its `DECODE_ATTENTION_KERNELS` kernels."""
    if n_seqs <= 0:
        return 0.0
    if shape.kind == "linear":
        return linear_attention_time(shape, n_seqs * queries, n_seqs, device)
    flops = ctx_tokens * shape.decode_flops_per_key * queries
    nbytes = ctx_tokens * shape.kv_elems_per_token * stored_bytes(kv_dtype)
    math = math_dtype or device.sixteen_bit_dtype
    t_flops = flops / (device.peak_flops(math) * device.attention_fwd_efficiency)
    t_mem = nbytes / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    return max(t_flops, t_mem) + DECODE_ATTENTION_KERNELS * KERNEL_OVERHEAD_S


def linear_attention_time(
    shape: AttentionShape, tokens: float, n_seqs: int, device: Device
) -> float:
    """Seconds of a gated-delta-rule layer core over ``tokens`` tokens of ``n_seqs`` sequences
    whose recurrent state is read and written once per step (decode) — roofline at the
    attention efficiency."""
    if tokens <= 0:
        return 0.0
    flops = tokens * shape.linear_flops_per_token
    nbytes = 2.0 * n_seqs * shape.state_bytes_per_seq
    t_flops = flops / (
        device.peak_flops(device.sixteen_bit_dtype) * device.attention_fwd_efficiency
    )
    t_mem = nbytes / (device.memory_bandwidth_si * device.memory_bw_efficiency)
    return max(t_flops, t_mem) + KERNEL_OVERHEAD_S


__all__ = [
    "DECODE_ATTENTION_KERNELS",
    "AttentionShape",
    "attention_shape",
    "decode_attention_time",
    "kv_bytes_per_token",
    "linear_attention_time",
    "prefill_attention_time",
    "state_bytes_per_sequence",
]
