"""Memory of one serving GPU: weights, activation workspace, and what is left for the KV cache.

vLLM's sizing (vLLM docs, "Engine arguments: --gpu-memory-utilization"; ``gpu_worker.py``
``determine_available_memory``): the engine may use ``gpu_memory_utilization`` of the device;
from that it subtracts the weights, the peak activation of a profiling run at
``max_num_batched_tokens`` and non-torch memory, and gives the rest to KV blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.cost.compute import dtype_bytes
from hwtune.cost.kv_cache import kv_bytes_per_token, state_bytes_per_sequence
from hwtune.cost.quantized_gemm import weight_bytes_per_element
from hwtune.errors import HwtuneInputError
from hwtune.model.params import embedding_params, routed_expert_params, total_params
from hwtune.serve.config import WORKSPACE_FIXED_BYTES, ReplicaConfig

GIB = 2**30
MIN_KV_BLOCKS = 16
"""KV blocks a replica needs at the least (a replica without room for them does not fit)."""
DEFAULT_BLOCK_SIZE = 16
"""vLLM's default KV block size, tokens: a replica that would fit with it but not with the
configured ``block_size`` is told that the block size is what does not fit."""


@dataclass(frozen=True, slots=True)
class ReplicaMemory:
    """Bytes per GPU (the busiest one) and the KV cache that results."""

    usable: float
    weights: float
    activations: float
    fixed: float
    kv_bytes_per_token: float
    state_bytes_per_seq: float
    kv_blocks: int
    block_size: int

    @property
    def kv_bytes(self) -> float:
        return self.usable - self.weights - self.activations - self.fixed

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size


def weight_bytes_per_gpu(cfg: ReplicaConfig) -> float:
    """Weights on one GPU (`weight_bytes_per_element`: int4 adds a 16-bit scale per group of
    `ReplicaConfig.weight_group_size` weights, fp4 an 8-bit one per block). Embedding and LM
    head stay 16-bit and are vocabulary-parallel over ``tp``; routed experts are spread over
    all GPUs of a stage (``ep`` x ``moe_tp``); the other weights are tensor-parallel over
    ``tp`` (replicated across attention-DP groups); the model is cut into ``pp`` stages (the
    largest holds ceil(L/pp) of L layers). Speculative decoding adds a draft module of one
    average layer (DeepSeek MTP, EAGLE: embedding and head shared)."""
    spec = cfg.model
    wb = weight_bytes_per_element(cfg.weight_dtype, cfg.weight_group_size)  # 4-bit: + scales
    # a checkpoint that quantizes only its experts keeps the rest in bf16 (gpt-oss MXFP4,
    # Kimi-K2.5 int4)
    wo = max(wb, 2.0) if spec.quantized_weights == "experts" else wb
    emb = embedding_params(spec)
    routed = sum(routed_expert_params(spec, i) for i in range(spec.n_layers))
    other = total_params(spec) - emb - routed
    per_layer = (other * wo / cfg.tp + routed * wb / cfg.stage_gpus) / spec.n_layers
    layers = per_layer * -(-spec.n_layers // cfg.pp)
    if cfg.spec_tokens:  # the draft module: one more layer of the model's shape (last stage)
        layers += per_layer
    return layers + emb * 2.0 / cfg.tp


def activation_bytes_per_gpu(cfg: ReplicaConfig) -> float:
    """Peak activation of one step of ``max_num_batched_tokens`` tokens (the profiling run):
    the residual stream and the widest intermediate (QKV or gated FFN up-projection) in 16 bits,
    plus fp32 logits of ``max_num_seqs`` sampled rows. Under attention DP both are a rank's: the
    token budget is per rank already (`hwtune.serve.scheduler`'s ``rank_budget``; each engine's
    profiling run fills it on every rank, TensorRT-LLM's ``KvCacheCreator`` and vLLM's per-rank
    engine cores), and a rank samples its share of the replica's ``max_num_seqs``. Dividing the
    budget by ``dp_attention`` too priced a DP-8 rank's activations at an eighth."""
    return sum(_activation_parts(cfg))


def _activation_parts(cfg: ReplicaConfig) -> tuple[float, float]:
    """`activation_bytes_per_gpu` as (the token budget's hidden states, the logits of the
    ``max_num_seqs`` sampled rows), bytes per GPU."""
    spec = cfg.model
    t = cfg.token_budget()
    up = 2 if spec.gated else 1
    widest = max(
        spec.ffn_hidden * up // cfg.tp, (spec.n_heads + 2 * spec.kv_heads) * spec.hd // cfg.tp
    )
    if spec.moe is not None:
        widest = max(widest, spec.moe.top_k * up * spec.moe.expert_ffn_hidden // cfg.moe_tp)
    act = 2.0 * t * (4 * spec.d_model + 2 * widest)
    logits = 4.0 * 2 * -(-cfg.max_num_seqs // cfg.dp_attention) * -(-spec.vocab // cfg.tp)
    return act, logits


def _usable_bytes(cfg: ReplicaConfig, w: float, a: float) -> float:
    """Bytes of one GPU the engine may use with ``w`` bytes of weights and ``a`` of
    activations: TensorRT-LLM's rule ("free") takes a fraction of what the weights,
    activations and workspace leave; vLLM's and SGLang's ("total") a fraction of the device."""
    dev = cfg.effective_device
    if cfg.kv_memory_rule == "free":  # TensorRT-LLM: a fraction of what weights etc. leave
        rest = dev.memory_bytes - w - a - WORKSPACE_FIXED_BYTES
        return w + a + WORKSPACE_FIXED_BYTES + max(rest, 0.0) * cfg.gpu_memory_utilization
    return dev.memory_bytes * cfg.gpu_memory_utilization


def _limit_refusal(
    cfg: ReplicaConfig, w: float, need: float, short: float
) -> HwtuneInputError | None:
    """When the weights and workspace leave room for ``need`` bytes of KV cache but what the
    batch limits reserve (a step's activations, per-sequence state) takes it: an error naming
    the limit that reserves the most (``max_num_seqs`` for sampled logits and per-sequence
    state, the token budget's option for a step's hidden states), else None."""
    dev = cfg.effective_device
    free0 = _usable_bytes(cfg, w, 0.0) - w - WORKSPACE_FIXED_BYTES  # with no batch reserve
    if free0 < need:
        return None  # the model itself does not fit: `replica_memory` says so
    hidden, logits = _activation_parts(cfg)
    state = state_bytes_per_sequence(cfg.model, cfg.tp, cfg.pp) * cfg.max_num_seqs
    if hidden > logits + state:
        chunked = cfg.scheduler == "sarathi" and cfg.chunk_size < cfg.max_num_batched_tokens
        field, value = (("chunk_size", cfg.chunk_size) if chunked
                        else ("max_num_batched_tokens", cfg.max_num_batched_tokens))  # fmt: skip
    else:
        field, value = "max_num_seqs", cfg.max_num_seqs
    return HwtuneInputError(
        field,
        value,
        f"a batch limit whose reserved memory fits: {hidden / GIB:.1f} GiB of a "
        f"{cfg.token_budget()}-token step's hidden states, {logits / GIB:.1f} GiB of logits and "
        f"{state / GIB:.1f} GiB of per-sequence state for {cfg.max_num_seqs} sequences beside "
        f"{w / GIB:.1f} GiB of weights leave no KV cache on {dev.name} "
        f"({dev.memory_bytes / GIB:.0f} GiB): short by {short:.1f} GiB per GPU"
        + checkpoint_hint(cfg),
    )


class ModelDoesNotFit(HwtuneInputError):
    """`replica_memory`'s refusal of a replica whose weights, activations and workspace leave
    no KV cache; ``short_gib`` is by how much, per GPU."""

    def __init__(self, short_gib: float, field: str, value: object, expected: str) -> None:
        self.short_gib = short_gib
        super().__init__(field, value, expected)


def checkpoint_hint(cfg: ReplicaConfig) -> str:
    """A pointer to the checkpoint's own weight format when it is narrower than the one asked
    for (`ModelSpec.checkpoint_precision`), else nothing."""
    ship = cfg.model.checkpoint_precision
    if ship is None or dtype_bytes(ship) >= dtype_bytes(cfg.weight_dtype):
        return ""
    return f"; the checkpoint ships {ship} weights: --precision {ship}"


def replica_memory(cfg: ReplicaConfig) -> ReplicaMemory:
    """Weights, workspace and KV-cache blocks of one GPU of the replica.

    Raises `HwtuneInputError` naming how much is missing when the model does not fit."""
    dev = cfg.effective_device
    w = weight_bytes_per_gpu(cfg)
    a = activation_bytes_per_gpu(cfg)
    usable = _usable_bytes(cfg, w, a)
    per_tok = kv_bytes_per_token(cfg.model, cfg.kv_dtype, cfg.tp, cfg.pp)
    if cfg.spec_tokens:  # the draft layer caches keys of its own
        per_tok += kv_bytes_per_token(cfg.model, cfg.kv_dtype, cfg.tp, 1) / cfg.model.n_layers
    per_seq = state_bytes_per_sequence(cfg.model, cfg.tp, cfg.pp)
    free = usable - w - a - WORKSPACE_FIXED_BYTES
    block = cfg.block_size * per_tok  # bytes of one KV block (block_size tokens)
    # fixed per-sequence state (linear attention) is reserved for max_num_seqs sequences
    free_kv = free - per_seq * cfg.max_num_seqs
    need = block * MIN_KV_BLOCKS
    if free_kv < need and free_kv >= MIN_KV_BLOCKS * DEFAULT_BLOCK_SIZE * per_tok:
        fits = int(free_kv // (MIN_KV_BLOCKS * per_tok))  # tokens per block that would fit
        raise HwtuneInputError(
            "block_size",
            cfg.block_size,
            f"at most {fits} tokens per block: {MIN_KV_BLOCKS} blocks of {cfg.block_size} tokens "
            f"need {need / GIB:.1f} GiB of KV cache per GPU and {free_kv / GIB:.1f} GiB is left",
        )
    if free_kv < need:  # short of even the default block size's blocks (or of the smaller ones)
        short = (MIN_KV_BLOCKS * min(cfg.block_size, DEFAULT_BLOCK_SIZE) * per_tok - free_kv) / GIB
        limit = _limit_refusal(cfg, w, need, short)
        if limit is not None:
            raise limit
        raise ModelDoesNotFit(
            short,
            "model",
            cfg.model.name,
            f"a model that fits: {w / GIB:.1f} GiB of weights + {a / GIB:.1f} GiB of activations "
            f"+ {WORKSPACE_FIXED_BYTES / GIB:.1f} GiB workspace per GPU (tp={cfg.tp} pp={cfg.pp} "
            f"ep={cfg.ep} dp_attention={cfg.dp_attention}, {cfg.weight_dtype}) leave no KV cache "
            f"in {usable / GIB:.1f} GiB usable of {dev.name}: short by {short:.1f} GiB per GPU"
            + checkpoint_hint(cfg),
        )
    blocks = int(free_kv // block) if block > 0 else 1 << 30
    return ReplicaMemory(usable, w, a, WORKSPACE_FIXED_BYTES, per_tok, per_seq, blocks,
                         cfg.block_size)  # fmt: skip
