"""The training-step estimator: step time with its breakdown, MFU/HFU, throughput, memory.

The estimate composes the cost models of `hwtune.cost` over the ops that `hwtune.model.lowering`
produces for one rank; it re-derives no cost. Conventions:
- Model FLOPs: 6 N_active + attention in the PaLM convention (Chowdhery et al. 2022, App. B;
  see `model_flops_per_token`). MFU = model FLOP/s per GPU / dense peak of the training
  precision (bf16/fp16 peak, or the fp8 peak for fp8 training). HFU adds recomputation.
- Step time = pipeline time of the busiest rank (micro-batches + bubble, `schedules.py`) +
  exposed data-parallel communication + optimizer step + offload traffic.
- Communication inside a layer (tensor, context, expert parallel) is on the critical path
  unless its overlap switch is on, then only the part longer than the compute it hides
  behind is exposed.
- A collective that runs behind compute slows that compute (`OVERLAP_SLOWDOWN`, `overlapped`):
  each overlapped collective's breakdown part holds what it leaves exposed plus that slowdown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, TypeVar, get_args

from pydantic import BaseModel

from hwtune.cost import collectives as coll
from hwtune.cost.compute import (
    attention_kernel_share,
    attention_measured,
    attention_time,
    gemm_time,
    memory_time,
)
from hwtune.cost.memory import (
    LOSS_CHUNKS,
    ActShape,
    embedding_activation_bytes,
    fsdp_pipelined,
    layer_activation_bytes,
    logits_bytes,
    mtp_input_bytes,
    reduces_per_micro_batch,
    sharded_state_bytes,
    state_bytes_per_param,
)
from hwtune.cost.moe_routing import remote_nodes_per_token
from hwtune.cost.power import power_limited, sustained_fraction_applies
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, GroupSpan, make_cluster, require_cluster
from hwtune.hardware.device import Device
from hwtune.model import params as P
from hwtune.model.lowering import (
    Shard,
    layer_classes,
    lower_embedding,
    lower_head,
    lower_layer,
    model_flops_per_token,
)
from hwtune.model.spec import ModelSpec
from hwtune.train.accuracy import accuracy_for
from hwtune.train.pipeline_layout import chunk_layers, chunk_mtp
from hwtune.train.schedules import (
    in_flight,
    interleaved_peak,
    p2p_boundaries,
    param_copies,
    pipeline_time,
)
from hwtune.train.strategy import Precision, Strategy, expert_data_parallel, make_strategy

PRE_FA2_ARCHS = ("volta", "turing", "pascal")
"""NVIDIA architectures FlashAttention-2 does not run on (it needs sm80+: Dao 2023; the
flash-attn README lists Ampere, Ada and Hopper)."""
FRAMEWORK_RESERVE_BYTES = 1.5 * 2**30
"""CUDA context, cuBLAS/NCCL workspaces and communication buffers held outside the tensors
counted here (PyTorch CUDA semantics notes: the context alone takes 300-800 MiB; NCCL buffers
are 4 MiB x channels x peers)."""

FRAGMENTATION = 1.05
"""Caching-allocator overhead on activations (reserved / allocated, a few percent in steady
training; PyTorch memory-management docs)."""

OPTIMIZER_BYTES_MOVED = {
    "adam": 32.0,
    "adam-bf16": 16.0,
    "adam-remainders": 28.0,
    "adam-8bit": 14.0,
    "adam-8bit-release": 12.0,
    "adam-8bit-amsgrad": 14.0 + 2.0,
    "adam-8bit-release-amsgrad": 12.0 + 2.0,
    "sgd": 22.0,
}
"""HBM bytes read + written per parameter by one fused optimizer step (weights, gradient,
master copy, states in; master copy, states, 16-bit weights out; with remainders the 16-bit
weights and their 2-byte remainders stand for the master copy both ways: 2 + 4 + 2 + 8 in, 2 +
2 + 8 out); amsgrad's 8-bit running max
of the second moment is read and written once more (+2)."""

HOST_BANDWIDTH = 100e9
"""CPU memory bandwidth one GPU's CPU Adam step streams at (bytes/s) when optimizer states are
offloaded (ZeRO-Offload, Ren et al. ATC'21, §4.2: CPU Adam is memory-bound) and the cluster
does not know its nodes' host memory (`Cluster.host_memory_per_gpu`, from the system preset's
CPUs: 57.6 GB/s per GPU on a DGX H100). An assumption, not a measurement: a system without a
preset gets it, and the estimate says so in a note."""


def host_memory_bandwidth(cl: Cluster) -> float:
    """Bytes/s one GPU's offloaded optimizer step streams at: its share of the node's sustained
    host memory bandwidth where the system's CPUs are known, else `HOST_BANDWIDTH`."""
    per_gpu = cl.host_memory_per_gpu
    return HOST_BANDWIDTH if per_gpu is None else per_gpu


@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    transient: float
    reserve: float

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.transient
            + self.reserve
        )


EXPOSED_COMM_PARTS: tuple[str, ...] = (
    "tp_comm_exposed", "cp_comm_exposed", "ep_comm_exposed", "dp_comm_exposed", "pp_p2p",
)  # fmt: skip
"""The breakdown's parts that are communication left exposed (not hidden behind compute)."""


@dataclass(frozen=True)
class Estimate:
    """Result of one estimate (SI units)."""

    step_time_s: float
    mfu: float
    hfu: float
    tflops_per_gpu: float
    model_tflops_per_gpu: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    memory: Memory
    memory_capacity_bytes: float
    fits: bool
    breakdown: dict[str, float]
    comm_volume_bytes: dict[str, float]
    n_gpus: int
    tokens_per_step: int
    model_flops_per_step: float
    peak_flops_used: float
    strategy: Strategy
    notes: list[str] = field(default_factory=list)
    architecture: str | None = None

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total

    @property
    def exposed_comm_s(self) -> float:
        """Seconds of the step spent in communication that nothing hides (`EXPOSED_COMM_PARTS`
        of the breakdown)."""
        return sum(self.breakdown.get(k, 0.0) for k in EXPOSED_COMM_PARTS)

    @property
    def accuracy(self) -> dict | None:
        """The throughput error measured on published runs of this strategy's software class
        (`hwtune.train.accuracy`); a track record shown beside the estimate, not applied to it."""
        return accuracy_for(self.strategy, self.architecture)

    def to_dict(self) -> dict:
        """The JSON document of `hwtune estimate --json`."""
        mem = asdict(self.memory)
        mem["total"] = self.memory.total
        return {
            "step_time_s": self.step_time_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "tflops_per_gpu": self.tflops_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "memory_per_gpu_bytes": mem,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits": self.fits,
            "breakdown": dict(self.breakdown),
            "comm_volume_bytes": dict(self.comm_volume_bytes),
            "n_gpus": self.n_gpus,
            "tokens_per_step": self.tokens_per_step,
            "model_flops_per_step": self.model_flops_per_step,
            "peak_flops_used": self.peak_flops_used,
            "flops_convention": "model FLOPs = 6*N_active*tokens + attention (PaLM App. B, non-causal); "
            "MFU against the dense peak of the training precision",
            # the batch the estimate ran, also where the default (dp x micro-batch) gave it
            "strategy": self.strategy.model_dump()
            | {"global_batch": self.strategy.global_batch_seqs},
            "notes": list(self.notes),
            "accuracy": self.accuracy,
        }


def gemm_dtype(precision: str, device: Device) -> str:
    """The GEMM dtype of a training precision: fp32 training runs TF32 tensor cores where the
    device has them (Megatron and PyTorch enable TF32 for matmuls), else the precision itself."""
    if precision == "fp32":
        return "tf32" if device.peak_tflops.tf32 else "fp32"
    return precision


_Precisioned = TypeVar("_Precisioned", bound=BaseModel)


def default_precision(device: Device) -> str:
    """The training precision when none is given: the device's 16-bit format
    (`Device.sixteen_bit_dtype`: bf16, fp16 on V100), or fp32 on a device with neither 16-bit
    peak (a CPU profile from `hwtune bench`)."""
    if device.peak_tflops.bf16 is None and device.peak_tflops.fp16 is None:
        return "fp32"
    return device.sixteen_bit_dtype


def with_default_precision(obj: _Precisioned, device: Device) -> _Precisioned:
    """``obj`` (a `Strategy` or a `hwtune.parallel.spec.ParallelSpec`) with `default_precision`
    where it does not set its precision itself (their field default, bf16, is no choice)."""
    if "precision" in obj.model_fields_set:
        return obj
    return obj.model_copy(update={"precision": default_precision(device)})


def check_training_precision(precision: str, device: Device) -> None:
    """Refuse a training ``precision`` whose GEMMs ``device`` has no peak for, naming the
    training precisions it does have (bf16 on V100: fp16 or fp32, and why)."""
    runs = [p for p in get_args(Precision) if getattr(device.peak_tflops, gemm_dtype(p, device))]
    if precision not in get_args(Precision) or precision in runs:
        return
    if precision == "bf16" and "fp16" in runs:
        raise HwtuneInputError(
            "precision", "bf16", device.no_bf16_expectation(f"one of {', '.join(runs)}")
        )
    raise HwtuneInputError(
        "precision", precision, f"one of {', '.join(runs)} ({device.name} has no "
        f"{gemm_dtype(precision, device)} peak)",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """One layer of one rank for one micro-batch, seconds (compute only) and comm bytes."""

    fwd: float
    dgrad: float
    wgrad: float
    attn_core_fwd: float
    sac_fwd: float  # forward time "selective-op" recomputes (every other matmul + memory ops)
    core_flops: float  # attention-core forward FLOPs (what selective recomputation repeats)
    gemm_flops: float  # weight-GEMM forward FLOPs
    a2a_bytes: float  # bytes per rank per all-to-all
    cp_bytes: float  # K/V bytes one rank passes around the ring per forward
    flops_fwd: float
    # forward seconds and FLOPs of the parts Megatron-Core's --recompute-modules can repeat
    # besides core attention (`SELECTIVE_MODULE_OPS`), as (module, seconds, flops)
    modules: tuple[tuple[str, float, float], ...] = ()

    def selective(self, modules: tuple[str, ...]) -> tuple[float, float]:
        """Forward seconds and FLOPs that selective recomputation of ``modules`` repeats."""
        t = self.attn_core_fwd if "core_attn" in modules else 0.0
        f = self.core_flops if "core_attn" in modules else 0.0
        for name, secs, flops in self.modules:
            if name in modules:
                t, f = t + secs, f + flops
        return t, f


SELECTIVE_MODULE_OPS: dict[str, tuple[str, ...]] = {
    "mla_up_proj": ("q_b_proj", "kv_b_proj", "rotary"),
    "mlp": ("mlp_up", "mlp_act", "mlp_down"),
    "moe_act": ("expert_act",),
}
"""The ops of `hwtune.model.lowering.lower_layer` each of Megatron-Core's recompute modules
repeats in the backward (TransformerConfig.recompute_modules): ``mla_up_proj`` the MLA
up-projections and the rotary embedding applied to their outputs
(multi_latent_attention.py, ``recompute_up_proj``), ``mlp`` a dense layer's MLP
(transformer_layer.py), ``moe_act`` the experts' activation function (experts.py)."""


OVERLAP_SLOWDOWN = 0.189
"""How much slower compute kernels run while a collective is in flight on the same GPU than
alone (its kernels' SMs, memory traffic and power taken from them): "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and
Power Implications" (arXiv 2507.03114, 2025), abstract: an average computational slowdown of
18.9% (at most 40.0%) when compute and communication overlap, over GPT and LLaMA training on
4 A100, H100, MI250 and MI210 GPUs."""


def overlapped(comm: float, window: float) -> float:
    """Seconds a collective of ``comm`` seconds run behind ``window`` seconds of compute adds to
    the step: the part longer than the window, plus the compute it slows while both run
    (`OVERLAP_SLOWDOWN` x the overlap)."""
    hidden = max(0.0, min(comm, window))
    return comm - hidden + OVERLAP_SLOWDOWN * hidden


TP_OVERLAP_SHARE = 0.5
A2A_OVERLAP_SHARE = 0.5
"""With communication overlap switched on, a collective hides behind at most this share of the
layer's forward compute (the GEMMs it can be pipelined with: Wang et al. ASPLOS'23 "Overlap
communication with dependent computation via decomposition"; DeepSeek-V3 §3.2.1 overlaps
dispatch/combine with the other micro-batch's attention and MLP)."""


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Seconds one rank spends per micro-batch: compute (f, b, w, rec) and exposed comm."""

    f: float = 0.0
    b: float = 0.0
    w: float = 0.0
    rec: float = 0.0
    f_comm: float = 0.0
    b_comm: float = 0.0
    tp: float = 0.0
    cp: float = 0.0
    ep: float = 0.0

    def __mul__(self, k: float) -> LayerCost:
        return LayerCost(self.f * k, self.b * k, self.w * k, self.rec * k, self.f_comm * k,
                         self.b_comm * k, self.tp * k, self.cp * k, self.ep * k)  # fmt: skip

    def __add__(self, o: LayerCost) -> LayerCost:
        return LayerCost(self.f + o.f, self.b + o.b, self.w + o.w, self.rec + o.rec,
                         self.f_comm + o.f_comm, self.b_comm + o.b_comm,
                         self.tp + o.tp, self.cp + o.cp, self.ep + o.ep)  # fmt: skip

    @property
    def total(self) -> float:
        return self.f + self.b + self.rec + self.f_comm + self.b_comm


@functools.lru_cache(maxsize=8192)
def _layer_times(
    spec: ModelSpec, ltype: str, moe: bool, sh: Shard, device: Device, gdt: str
) -> LayerTimes:
    ops = lower_layer(spec, ltype, moe, sh)
    fwd = dg = wg = core = flops = sac = core_f = gemm_f = 0.0
    fp8 = gdt == "fp8"
    n_weight_gemm = 0
    module_of = {o: mod for mod, names in SELECTIVE_MODULE_OPS.items() for o in names}
    mods: dict[str, list[float]] = {}
    for op in ops:
        flops += op.flops
        t_before = fwd
        mod = module_of.get(op.name)
        if mod is not None:
            acc = mods.setdefault(mod, [0.0, 0.0])
            acc[1] += op.flops
        if op.kind == "gemm":
            dt = "bf16" if (op.attention_core or op.name in ("router",)) and fp8 else gdt
            # a grouped GEMM issued as one GEMM per expert (TE GroupedLinear) pays each launch
            tf = gemm_time(op.m, op.n, op.k, device, dt, op.batch, op.kernels)
            fwd += tf
            dg += gemm_time(op.m, op.k, op.n, device, dt, op.batch, op.kernels) * (
                op.dgrad_flops / op.flops if op.flops else 0
            )
            if op.wgrad_flops:
                wg += gemm_time(op.k, op.n, op.m, device, dt, op.batch, op.kernels)
            if fp8 and not op.attention_core:
                # Transformer Engine's fused cast-transpose: the 16-bit input (forward) and
                # output gradient (backward) are read once (2 B) and written as fp8 twice,
                # row- and column-major (1 + 1 B), since Hopper fp8 GEMMs take only the TN
                # layout (TE docs, "FP8 primer"; cuBLASLt fp8 requirements)
                fwd += memory_time(4.0 * op.m * op.k * op.batch, device)
                dg += memory_time(4.0 * op.m * op.n * op.batch, device)
            if op.attention_core:
                core += tf
                core_f += op.flops
            else:
                gemm_f += op.flops
                # torchtitan's per-op policy saves every other matmul output (the 1st, 3rd, ...)
                # and recomputes the rest; fused GEMMs count as half saved, half recomputed
                n_weight_gemm += 1
                sac += (fwd - t_before) * 0.5
        elif op.kind == "attention":
            tf = attention_time(op.flops, op.bytes, device, gdt, False, sh.attn_kernel)
            fwd += tf
            dg += attention_time(op.flops, op.dgrad_bytes, device, gdt, True, sh.attn_kernel)
            core += tf
            core_f += op.flops
        else:
            tm = memory_time(op.bytes, device, op.kernels)
            fwd += tm
            dg += memory_time(op.dgrad_bytes, device, op.kernels)
            sac += tm
            if op.attention_core:
                core += tm
        if mod is not None:
            mods[mod][0] += fwd - t_before
    e = sh.act_bytes
    a2a = 0.0
    if moe and spec.moe is not None:
        a2a = e * sh.tokens / sh.tp * spec.moe.top_k * spec.d_model * sh.moe_imbalance
    cp_bytes = 0.0
    if sh.cp > 1 and ltype != "linear":
        if spec.mla is not None:
            kvw = (
                spec.n_heads
                // sh.tp
                * (spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim + spec.mla.v_head_dim)
            )
        else:
            kvw = 2 * max(1, spec.kv_heads // sh.tp) * spec.hd
        cp_bytes = e * sh.tokens * kvw * (sh.cp - 1)
    return LayerTimes(fwd, dg, wg, core, sac, core_f, gemm_f, a2a, cp_bytes, flops,
                      tuple((k, v[0], v[1]) for k, v in mods.items()))  # fmt: skip


def _chunk_sizes(n_layers: int, pp: int, v: int, split: str = "layers") -> list[int]:
    """Layers of each of the ``pp * v`` chunks in model order (`Strategy.pipeline_split`,
    `hwtune.train.pipeline_layout.chunk_layers`)."""
    return chunk_layers(split, n_layers, pp * v)


def _stage_chunks(n_layers: int, pp: int, v: int, split: str = "layers") -> list[list[range]]:
    """Layer indices of each pipeline rank's chunks: ``pp * v`` contiguous chunks, rank r
    holding chunks r, r + pp, ... (Megatron's interleaved assignment)."""
    bounds = [0]
    for size in _chunk_sizes(n_layers, pp, v, split):
        bounds.append(bounds[-1] + size)
    ranks: list[list[range]] = [[] for _ in range(pp)]
    for c in range(pp * v):
        ranks[c % pp].append(range(bounds[c], bounds[c + 1]))
    return ranks


def _stage_layers(n_layers: int, pp: int, v: int, split: str = "layers") -> list[list[int]]:
    """Layer indices of each pipeline rank (its chunks in order, see `_stage_chunks`)."""
    return [[i for ch in r for i in ch] for r in _stage_chunks(n_layers, pp, v, split)]


LayerCounts = tuple[tuple[tuple[str, bool], int], ...]


@dataclass(frozen=True, slots=True)
class RankLayout:
    """What one pipeline rank holds: layer classes with their counts (in all and per chunk),
    and parameters (routed-expert parameters apart, since expert parallelism shards them)."""

    counts: LayerCounts
    n_layers: int
    dense_params: float
    expert_params: float
    chunks: tuple[LayerCounts, ...] = ()
    mtp: int = 0  # multi-token-prediction modules on this rank (in counts and params too)
    chunk_mtp: tuple[int, ...] = ()
    embedding_params: float = 0.0
    """Of ``dense_params``, the embedding, output head and final norm: weights that stay 16-bit
    when the linear layers' weights are fp8 (Transformer Engine makes only its own layers'
    weights fp8; Megatron-Core's embedding and output layer are not TE layers)."""


def weight_bytes(params: float, embedding: float, fp8_params: bool) -> float:
    """Bytes of the 16-bit-trained weights ``params``, of which ``embedding`` are the embedding,
    output head and final norm (`RankLayout.embedding_params`): with fp8 weights
    (`Strategy.fp8_param_gather`) the others take `state_bytes_per_param`'s fp8 weight bytes
    and these stay 16-bit; without, all are 16-bit. The one place the estimator's weight
    gathers and the memory model's fp8 weights are priced."""
    if not fp8_params:
        return 2.0 * params
    fp8 = state_bytes_per_param("fp8", "adam", False, fp8_params=True).weights
    return fp8 * (params - embedding) + 2.0 * embedding


def edge_bucket_params(spec: ModelSpec, first: RankLayout, tp: int, fp8_params: bool) -> float:
    """Parameters per rank of the gradient bucket group reduced last after the backward and
    gathered first before the forward, under Megatron-Core's DDP with overlapped reduction and
    gathering. Buckets are filled in reverse parameter order (``param_and_grad_buffer.py``,
    ``for param in params[::-1]``), so the last holds the input embedding, whose gradient is
    the backward's last; the forward's first pre-hook dispatches that group's all-gather and
    waits for it ("first AG bucket in first model chunk if ddp_config.align_param_gather is
    False", ``finish_param_sync``). With fp8 weights every 16-bit parameter of the rank (the
    embedding, output head and final norm, ``first.embedding_params``) joins that group
    (``partition_buckets`` case 3: "merge all non-fp8 buckets into the last fp8 bucket
    group"). Megatron-LM at 25.09-alpha.rc1, the revision of NVIDIA's MLPerf Training v5.1
    Llama 3.1 submissions. The first pipeline stage holds it; its backward ends the step. A
    lower bound: the other parameters that share the group (the rest of the embedding's
    bucket, the last fp8 bucket; 768,000,000-element buckets in NVIDIA's MLPerf 8B configs)
    are left out, as a bucket's fill depends on the configured size."""
    params = first.embedding_params if fp8_params else P.input_embedding_params(spec)
    return params / tp


def _counts(spec: ModelSpec, layers: Iterable[int]) -> LayerCounts:
    out: dict[tuple[str, bool], int] = {}
    for i in layers:
        key = (spec.layer_type(i), spec.is_moe_layer(i))
        out[key] = out.get(key, 0) + 1
    return tuple(out.items())


def _with_mtp(spec: ModelSpec, counts: LayerCounts, n: int) -> LayerCounts:
    """``counts`` with ``n`` multi-token-prediction blocks, each shaped as the last layer."""
    if not n:
        return counts
    key = (spec.layer_type(spec.n_layers - 1), spec.is_moe_layer(spec.n_layers - 1))
    out = dict(counts)
    out[key] = out.get(key, 0) + n
    return tuple(out.items())


@functools.lru_cache(maxsize=4096)
def rank_layouts(spec: ModelSpec, pp: int, v: int, split: str = "layers") -> tuple[RankLayout, ...]:
    """Per pipeline rank: embedding on the first, LM head and final norm on the last, and the
    multi-token-prediction modules where the split puts them (`pipeline_layout.chunk_mtp`):
    each a block shaped as the last layer plus its projection and norms
    (`hwtune.model.params.mtp_module_params`); a rank other than the first holds its own copy
    of the shared embedding, and one other than the last of the output head (Megatron-Core's
    GPTModel builds both where ``mtp_process`` is set, tied to the main ones)."""
    out = []
    mtp_chunks = chunk_mtp(split, pp * v)
    last = spec.n_layers - 1
    for r, chunks in enumerate(_stage_chunks(spec.n_layers, pp, v, split)):
        layers = [i for ch in chunks for i in ch]
        per_chunk = tuple(mtp_chunks[c] for c in range(r, pp * v, pp))
        mtp = sum(per_chunk)
        dense = expert = 0.0
        for i in layers:
            ex = P.routed_expert_params(spec, i)
            expert += ex
            dense += P.layer_params(spec, i) - ex
        if mtp:
            ex = P.routed_expert_params(spec, last)
            expert += mtp * ex
            dense += mtp * (P.mtp_module_params(spec) - ex)
        emb = 0.0
        if r == 0 or mtp:
            emb += P.input_embedding_params(spec)
        if r == pp - 1 or mtp:
            emb += P.embedding_params(spec) - P.input_embedding_params(spec)
        if r == pp - 1:
            emb += P.final_norm_params(spec)
        dense += emb
        out.append(RankLayout(
            _with_mtp(spec, _counts(spec, layers), mtp), len(layers) + mtp, dense, expert,
            tuple(_with_mtp(spec, _counts(spec, ch), k) for ch, k in zip(chunks, per_chunk, strict=True)),
            mtp, per_chunk, emb,
        ))  # fmt: skip
    return tuple(out)


def estimate(
    model: ModelSpec | str,
    cluster: Cluster | None = None,
    strategy: Strategy | None = None,
    *,
    gpu: str | Device | None = None,
    gpus: int | None = None,
    **strategy_fields: object,
) -> Estimate:
    """Estimate one training step.

    ``model``: a `ModelSpec`, a catalog name or a config.json path. ``cluster``: a `Cluster`, or
    ``gpu``/``gpus`` for the common case (the rest from the device's system preset).
    ``strategy``: a `Strategy`, or its fields as keywords (``tp=8, pp=4, micro_batch=1, ...``);
    ``dp`` defaults to the GPUs left over, ``precision`` (as a keyword, or a `Strategy` that
    does not set it) to `default_precision`: bf16, fp16 on V100. Each is given one way: ``gpu``
    or ``gpus`` beside a ``cluster``, or strategy keywords beside a ``strategy``, are refused
    (they would be ignored).
    """
    spec = _resolve_model(model)
    if cluster is not None:
        require_cluster(cluster, "or gpu= and gpus=")
    if strategy is not None and not isinstance(strategy, Strategy):
        raise HwtuneInputError("strategy", strategy, "a Strategy, e.g. hwtune.train.strategy."
                               "make_strategy(tp=8) (or its fields as keywords)")  # fmt: skip
    if cluster is not None and (gpu is not None or gpus is not None):
        name, value = ("gpu", gpu) if gpu is not None else ("gpus", gpus)
        raise HwtuneInputError(name, value, f"no {name} beside a cluster (the cluster's device "
                               "and GPU count are used)")  # fmt: skip
    if strategy is not None and strategy_fields:
        name = next(iter(strategy_fields))
        raise HwtuneInputError(name, strategy_fields[name], "no strategy keyword beside a "
                               "strategy (it would be ignored: give the fields one way)")  # fmt: skip
    if cluster is None:
        if gpus is None:
            n = 1
            for k in ("tp", "pp", "cp"):
                n *= int(strategy_fields.get(k) or 1)  # type: ignore[call-overload]
            gpus = n * int(strategy_fields.get("dp") or 1)  # type: ignore[call-overload]
        cluster = make_cluster(gpu or "h100-sxm-80gb", gpus)
    if strategy is None:
        f = dict(strategy_fields)
        if f.get("precision") is None:  # bf16, or fp16 where the device has no bf16 (V100)
            f["precision"] = default_precision(cluster.device)
        if f.get("dp") is None:
            make_strategy(**{**f, "dp": 1})  # a bad tp/pp/cp is named before dp is derived from it
            denom = int(f.get("tp") or 1) * int(f.get("pp") or 1) * int(f.get("cp") or 1)  # type: ignore[call-overload]
            if cluster.n_gpus % denom:
                raise HwtuneInputError("tp*pp*cp", denom, f"a divisor of the {cluster.n_gpus} GPUs")
            f["dp"] = cluster.n_gpus // denom
        strategy = make_strategy(**f)
    else:
        strategy = with_default_precision(strategy, cluster.device)
    strategy.validate_for(spec, cluster.n_gpus)
    check_training_precision(strategy.precision, cluster.device)
    check_attention_kernel(strategy.flash_attention, strategy.attention_kernel, cluster.device)
    return _estimate(spec, cluster, strategy)


def check_attention_kernel(flash: bool, kernel: str, dev: Device) -> None:
    """Refuse FlashAttention-2 on a GPU it does not run on (`PRE_FA2_ARCHS`)."""
    if flash and kernel == "fa2" and dev.architecture in PRE_FA2_ARCHS:
        raise HwtuneInputError(
            "attention_kernel", "fa2", f"best on a {dev.architecture} GPU (FlashAttention-2 "
            "runs on Ampere and newer: Dao 2023, the flash-attn README)",
        )  # fmt: skip


def _resolve_model(model: ModelSpec | str) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    from hwtune.model.catalog import get_model

    return get_model(model)


def expert_spans(cl: Cluster, tp: int, cp: int, dp: int, ep: int) -> tuple[GroupSpan, GroupSpan]:
    """Placement of a pipeline stage's expert groups under MoE parallel folding with expert TP 1
    (`hwtune.train.strategy.expert_data_parallel`): (EP group: ``ep`` consecutive ranks,
    expert-data-parallel group: its ``tp * cp * dp / ep`` replicas, ``ep`` ranks apart)."""
    return cl.span(ep, 1), cl.span(expert_data_parallel(tp, cp, dp, ep), ep)


class EndTimes(NamedTuple):
    """Forward and backward seconds of one micro-batch's ends of the model on one rank: the
    embedding, and the LM head with its loss."""

    emb_f: float
    emb_b: float
    head_f: float
    head_b: float


def _head_dtype(gdt: str) -> str:
    """The LM head's GEMM dtype: the layers' ``gdt``, bf16 under fp8 (Megatron-Core's output
    layer is a plain ``ColumnParallelLinear``, not a Transformer Engine module, so fp8 autocast
    leaves it in 16-bit)."""
    return "bf16" if gdt == "fp8" else gdt


@functools.lru_cache(maxsize=4096)
def _end_times(spec: ModelSpec, sh: Shard, dev: Device, gdt: str) -> EndTimes:
    """`EndTimes` of ``sh`` on ``dev`` (GEMMs in ``gdt``; the head in bf16 under fp8)."""
    emb_f = sum(memory_time(op.bytes, dev) for op in lower_embedding(spec, sh))
    emb_b = sum(memory_time(op.dgrad_bytes, dev) for op in lower_embedding(spec, sh))
    hdt = _head_dtype(gdt)
    head_f = head_b = 0.0
    for op in lower_head(spec, sh):
        if op.kind == "gemm":  # a chunked loss issues one GEMM per slice (op.batch of them)
            head_f += op.batch * gemm_time(op.m, op.n, op.k, dev, hdt)
            head_b += op.batch * (
                gemm_time(op.m, op.k, op.n, dev, hdt) + gemm_time(op.k, op.n, op.m, dev, hdt)
            )
        else:
            head_f += memory_time(op.bytes, dev, op.kernels)
            head_b += memory_time(op.dgrad_bytes, dev, op.kernels)
    return EndTimes(emb_f, emb_b, head_f, head_b)


def _mtp_times(spec: ModelSpec, sh: Shard, dev: Device, gdt: str) -> tuple[float, float]:
    """Forward and backward seconds of one multi-token-prediction module's own parts beside its
    block (which is in the layer counts): the next token's embedding, the projection of
    [h; e] (d x 2d, column-parallel) and the shared head and loss again."""
    ends = _end_times(spec, sh, dev, gdt)
    hdt = _head_dtype(gdt)
    pn, d2 = max(1, spec.d_model // sh.tp), 2 * spec.d_model
    mtp_f = ends.emb_f + ends.head_f + gemm_time(sh.tokens, pn, d2, dev, hdt)
    mtp_b = ends.emb_b + ends.head_b + gemm_time(sh.tokens, d2, pn, dev, hdt)
    mtp_b += gemm_time(d2, pn, sh.tokens, dev, hdt)
    return mtp_f, mtp_b


@functools.lru_cache(maxsize=16384)
def _layer_costs(
    spec: ModelSpec,
    cl: Cluster,
    dev: Device,
    gdt: str,
    sh: Shard,
    recompute: str,
    overlap_tp_comm: bool,
    overlap_moe_a2a: bool,
    modules: tuple[str, ...] = ("core_attn",),
) -> tuple[dict, dict, float]:
    """Per layer class: its times (`_layer_times`) and its `LayerCost` with the exposed
    in-layer communication and recomputation; and the LM head's vocabulary-parallel
    all-reduces. The same for every pipeline depth and split, so `pipeline_ranks` shares them
    across the planner's schedules."""
    e, tokens, tp, cp, ep = sh.act_bytes, sh.tokens, sh.tp, sh.cp, sh.ep
    tp_span = cl.span(tp, 1)
    cp_span = cl.span(cp, tp)
    ep_span = expert_spans(cl, tp, cp, 1, ep)[0]
    # ---- per-layer times and communication
    classes = {key: _layer_times(spec, key[0], key[1], sh, dev, gdt) for key in layer_classes(spec)}

    # one TP "point" (after attention, after MLP): an all-reduce, or with sequence parallelism
    # an all-gather before and a reduce-scatter after (Korthikanti et al. 2022, §4.2.2)
    t_tp_point = 0.0
    if tp > 1:
        nb = e * tokens * spec.d_model
        if sh.sp:
            t_tp_point = coll.all_gather_time(nb, tp_span, cl) + coll.reduce_scatter_time(
                nb, tp_span, cl
            )
        else:
            t_tp_point = coll.all_reduce_time(nb, tp_span, cl)

    def a2a_time(nbytes: float) -> float:
        """One dispatch (or combine) of ``nbytes`` (all top-k copies) over the EP group."""
        moe = spec.moe
        if sh.moe_dispatch == "deepep" and moe is not None and ep_span.domains > 1:
            nodes = ep_span.domains
            remote = remote_nodes_per_token(
                moe.n_routed_experts, moe.top_k, nodes, moe.n_groups, moe.topk_groups
            )
            return coll.node_dedup_dispatch_time(nbytes, moe.top_k, remote, ep_span, cl)
        return coll.all_to_all_time(nbytes, ep_span, cl)

    def layer_cost(key: tuple[str, bool]) -> LayerCost:
        lt = classes[key]
        # tensor parallel: 2 points forward, 2 backward (Shoeybi et al. 2019, Fig. 4)
        t_tp = 2 * t_tp_point
        if overlap_tp_comm:
            t_tp = overlapped(t_tp, TP_OVERLAP_SHARE * lt.fwd)
        # context parallel: ring exchange of K/V hidden behind the attention core
        t_cp_f = t_cp_b = 0.0
        if cp > 1 and lt.cp_bytes:
            ring = coll.send_recv_time(lt.cp_bytes / (cp - 1), cp_span.domains > 1, cl) * (cp - 1)
            t_cp_f = overlapped(ring, lt.attn_core_fwd)
            t_cp_b = overlapped(2 * ring, lt.dgrad - lt.fwd + lt.attn_core_fwd)
        # expert parallel: dispatch + combine forward, and again backward
        t_a2a = 0.0
        if lt.a2a_bytes and ep > 1:
            t_a2a = 2 * a2a_time(lt.a2a_bytes)
            if overlap_moe_a2a:
                t_a2a = overlapped(t_a2a, A2A_OVERLAP_SHARE * lt.fwd)
        rec_c = rec_comm = 0.0
        if recompute == "full":
            rec_c, rec_comm = lt.fwd, t_tp + t_cp_f + t_a2a
        elif recompute == "selective":
            rec_c = lt.selective(modules)[0]
        elif recompute == "selective-op":
            rec_c = lt.sac_fwd
        return LayerCost(
            f=lt.fwd, b=lt.dgrad + lt.wgrad, w=lt.wgrad, rec=rec_c,
            f_comm=t_tp + t_cp_f + t_a2a, b_comm=t_tp + t_cp_b + t_a2a + rec_comm,
            tp=2 * t_tp + (t_tp if recompute == "full" else 0.0),
            cp=t_cp_f + t_cp_b, ep=2 * t_a2a + (t_a2a if recompute == "full" else 0.0),
        )  # fmt: skip

    costs = {key: layer_cost(key) for key in classes}
    head_comm = 0.0
    if tp > 1:  # vocabulary-parallel cross-entropy: small all-reduces of per-token max and sum
        head_comm = 2 * coll.all_reduce_time(4.0 * tokens, tp_span, cl)
    return classes, costs, head_comm


def _with_ends(
    acc: LayerCost, spec: ModelSpec, sh: Shard, dev: Device, gdt: str, head_comm: float,
    r: int, pp: int, mtp: int,
) -> LayerCost:  # fmt: skip
    """``acc`` (rank ``r``'s layers) with what else the rank runs: the embedding on the first
    rank, the LM head and loss with their vocabulary-parallel all-reduces on the last, and
    each multi-token-prediction module's own parts with its head's all-reduces."""
    if r == 0 or r == pp - 1:
        ends = _end_times(spec, sh, dev, gdt)
        if r == 0:
            acc = acc + LayerCost(f=ends.emb_f, b=ends.emb_b)
        if r == pp - 1:
            acc = acc + LayerCost(f=ends.head_f, b=ends.head_b, f_comm=head_comm, tp=head_comm)
    if mtp:
        mtp_f, mtp_b = _mtp_times(spec, sh, dev, gdt)
        acc = acc + LayerCost(f=mtp_f, b=mtp_b, f_comm=head_comm, tp=head_comm) * mtp
    return acc


@functools.lru_cache(maxsize=16384)
def pipeline_ranks(
    spec: ModelSpec,
    cl: Cluster,
    dev: Device,
    gdt: str,
    sh: Shard,
    recompute: str,
    overlap_tp_comm: bool,
    overlap_moe_a2a: bool,
    pp: int,
    v: int,
    split: str = "layers",
    modules: tuple[str, ...] = ("core_attn",),
) -> tuple[dict, tuple[LayerCost, ...], int, dict]:
    """Per-layer-class times and the per-pipeline-rank costs of one micro-batch (compute and
    exposed in-layer communication), and the busiest rank. Independent of the data-parallel
    degree, ZeRO stage and offload, so the planner reuses it across those."""  # fmt: skip
    classes, costs, head_comm = _layer_costs(
        spec, cl, dev, gdt, sh, recompute, overlap_tp_comm, overlap_moe_a2a, modules
    )
    # ---- pipeline ranks: layers, embedding on the first, head on the last
    layouts = rank_layouts(spec, pp, v, split)
    per_rank: list[LayerCost] = []
    seen: dict[tuple, LayerCost] = {}  # ranks of the same layers cost the same (most of them)
    for r, lay in enumerate(layouts):
        kind = (lay.counts, r == 0, r == pp - 1, lay.mtp)
        acc = seen.get(kind)
        if acc is None:
            acc = LayerCost()
            for key, cnt in lay.counts:
                acc = acc + costs[key] * cnt
            acc = seen[kind] = _with_ends(acc, spec, sh, dev, gdt, head_comm, r, pp, lay.mtp)
        per_rank.append(acc)
    totals = [c.total for c in per_rank]
    busiest = max(range(pp), key=totals.__getitem__)
    return classes, tuple(per_rank), busiest, costs


def shard_of(st: Strategy) -> Shard:
    """How one rank sees a micro-batch under ``st`` (the key of the per-layer cost caches)."""
    return Shard(
        tokens=st.micro_batch * st.seq // st.cp, seq=st.seq, tp=st.tp, cp=st.cp, ep=st.ep,
        sp=st.sequence_parallel, act_bytes=4.0 if st.precision == "fp32" else 2.0,
        flash=st.flash_attention, moe_imbalance=st.moe_imbalance,
        attn_kernel=st.attention_kernel, fused=st.fused_elementwise, fused_norm=st.fused_norm,
        moe_dispatch=st.moe_dispatch,
        fp8_recipe=(st.fp8_recipe if st.precision == "fp8" else ""),
        loss_chunks=LOSS_CHUNKS.get(st.loss_kernel, 1),
    )  # fmt: skip


def layer_times(spec: ModelSpec, cl: Cluster, st: Strategy) -> tuple[float, float]:
    """Forward and backward seconds of one transformer layer (of the first layer's kind) for
    one micro-batch on one rank, exposed in-layer communication and recomputation included:
    what Korthikanti et al. 2022 (Table 4) time per layer."""
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    sh = shard_of(st)
    costs = pipeline_ranks(
        spec, cl, dev, gemm_dtype(st.precision, dev), sh, st.recompute, st.overlap_tp_comm,
        st.overlap_moe_a2a, 1, 1,
    )[3]  # fmt: skip
    c = costs[(spec.layer_type(0), spec.is_moe_layer(0))]
    return c.f + c.f_comm, c.b + c.b_comm + c.rec


def step_time_lower_bound(spec: ModelSpec, cl: Cluster, st: Strategy) -> float:
    """The busiest pipeline rank's step under its schedule: its layers' compute with their
    exposed in-layer communication and recomputation, and the schedule's bubble
    (`pipeline_time`), without pipeline send/recv, gradient accumulation, data-parallel
    communication, optimizer or offload. `_estimate` only adds those (none negative) to the same
    rank's same terms, and the bubble grows with them, so no strategy's step is shorter. The
    planner's bound."""
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    sh = shard_of(st)
    v_eff = st.vpp if st.schedule == "interleaved" else 1
    _, per_rank, busiest, _ = pipeline_ranks(
        spec, cl, dev, gemm_dtype(st.precision, dev), sh, st.recompute, st.overlap_tp_comm,
        st.overlap_moe_a2a, st.pp, v_eff, st.split_key, st.recompute_modules,
    )  # fmt: skip
    rc = per_rank[busiest]
    f, b = rc.f + rc.f_comm, rc.b + rc.b_comm + rc.rec
    return pipeline_time(st.schedule, st.pp, st.grad_accum, st.vpp, f, b, rc.w).total


def step_time_floor(
    spec: ModelSpec, cl: Cluster, precision: str, sh: Shard, overlap_tp_comm: bool,
    overlap_moe_a2a: bool, pp: int, schedule: str, vpp: int, split: str, m: int,
) -> float:  # fmt: skip
    """A floor under `step_time_lower_bound` for every recomputation, ZeRO stage and offload of
    one layout, micro-batch and schedule, so the planner can pass over them all at once, before
    costing their memory.

    Without recomputation each rank's time is its least (recomputation only adds), so every
    setting's busiest rank takes at least T, the busiest time here, with a weight gradient of at
    most W, the largest of any rank. `pipeline_time` grows with f + b and with b and shrinks
    with w, so ``pipeline_time(schedule, pp, m, vpp, T, 0, W)`` is below each setting's bound."""
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    v_eff = vpp if schedule == "interleaved" else 1
    most, w_most = _rank_peaks(
        spec, cl, dev, gemm_dtype(precision, dev), sh, overlap_tp_comm, overlap_moe_a2a, pp,
        v_eff, split,
    )  # fmt: skip
    return pipeline_time(schedule, pp, m, vpp, most, 0.0, w_most).total


def _rank_peaks(
    spec: ModelSpec, cl: Cluster, dev: Device, gdt: str, sh: Shard, overlap_tp_comm: bool,
    overlap_moe_a2a: bool, pp: int, v: int, split: str,
) -> tuple[float, float]:  # fmt: skip
    """The largest `LayerCost.total` and the largest weight-gradient time of any pipeline rank
    without recomputation: `pipeline_ranks`'s ranks with each layer class summed as one number
    (the planner's floor asks for this once per layout, micro-batch and schedule, most of them
    only once); the rest of a rank is `_with_ends`, as there.
    ``tests/train/test_search_floor_31.py`` holds the floor under every setting's bound."""
    _, costs, head_comm = _layer_costs(
        spec, cl, dev, gdt, sh, "none", overlap_tp_comm, overlap_moe_a2a
    )
    totals = {key: c.total for key, c in costs.items()}
    most = w_most = 0.0
    for r, lay in enumerate(rank_layouts(spec, pp, v, split)):
        layers = LayerCost(f=sum(totals[key] * cnt for key, cnt in lay.counts))
        t = _with_ends(layers, spec, sh, dev, gdt, head_comm, r, pp, lay.mtp).total
        most = max(most, t)
        w_most = max(w_most, sum(costs[key].w * cnt for key, cnt in lay.counts))
    return most, w_most


def pipeline_p2p(
    spec: ModelSpec,
    cl: Cluster,
    st: Strategy,
    act_bytes_per_feature: float,
    pp_cross: bool,
    compute_mb: float,
) -> tuple[float, float]:
    """Pipeline send/recv seconds: (exposed per micro-batch, exposed once per step).

    One boundary crossing moves a micro-batch's activation, ``act_bytes_per_feature`` x d_model
    bytes, and each TP rank sends its 1/tp share on its own link: with sequence parallelism the
    activation is already split; without it Megatron scatters it before the send and all-gathers
    it over NVLink after (Narayanan et al. SC'21 §4.1, scatter/gather communication).
    A micro-batch crosses ``p2p_boundaries`` boundaries per rank each way. With
    ``overlap_p2p_comm`` the interleaved schedule posts each send/recv behind the next chunk's
    compute (Megatron-Core ``schedules.py``, ``--overlap-p2p-communication``), so the steady state
    exposes only what exceeds a micro-batch's compute ``compute_mb`` and slows that compute
    (`overlapped`); the warmup forwards and the
    flush backwards are not overlapped (``--overlap-p2p-communication-warmup-flush`` off): rank
    0 runs 2(p-1) + (v-1)p warmup chunk steps (Megatron-Core ``num_warmup_microbatches`` with
    the default micro-batch group of p)."""
    pp, tp, v, m = st.pp, st.tp, st.vpp, st.grad_accum
    if pp <= 1:
        return 0.0, 0.0
    act = act_bytes_per_feature * spec.d_model
    one = coll.send_recv_time(act / tp, pp_cross, cl)
    if tp > 1 and not st.sequence_parallel:
        one += coll.all_gather_time(act, cl.span(tp, 1), cl)
    per_mb = 2 * one * p2p_boundaries(st.schedule, v)
    if not (st.overlap_p2p_comm and st.schedule == "interleaved"):
        return per_mb, 0.0
    # m v chunk steps, each a forward and a backward crossing; the warmup forwards and the
    # flush backwards wait, the rest hide behind their chunk's compute
    warm = min(2 * (pp - 1) + (v - 1) * pp, m * v)
    steady = (m * v - warm) * overlapped(2 * one, compute_mb / v)
    return steady / m, 2 * warm * one


def tier_note(dev: Device) -> str:
    """Which figures price ``dev``: tier 2 with a `hwtune bench` profile, tier 1 without (the
    first note of `estimate`, printed by `compile` as well). With a profile whose all-reduce
    points give no plain alpha-beta fit, what priced the links instead
    (`DeviceProfile.collective_fit_note`)."""
    if dev.profile is not None:
        fit = dev.profile.collective_fit_note("all_reduce")
        return (f"tier 2: measured profile of {dev.name} (hwtune bench), spec sheet outside it"
                + (f"; {fit}" if fit else ""))  # fmt: skip
    return f"tier 1: spec-sheet figures of {dev.name} (calibrate with hwtune bench)"


def _estimate(spec: ModelSpec, cl: Cluster, st: Strategy) -> Estimate:
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    gdt = gemm_dtype(st.precision, dev)
    e = 4.0 if st.precision == "fp32" else 2.0
    tp, pp, dp, cp, ep, v = st.tp, st.pp, st.dp, st.cp, st.ep, st.vpp
    mb, seq = st.micro_batch, st.seq
    m = st.grad_accum
    tokens = mb * seq // cp
    sh = shard_of(st)
    notes: list[str] = [tier_note(cl.device)]
    sus = cl.device.sustained_gemm_fraction
    if sustained_fraction_applies(cl.device, cl.sustained_clocks):  # `power_limited` applied it
        of = "the profile's burst rates (hwtune bench)" if cl.device.profile else "the burst rate"
        notes.append(
            f"compute at the sustained clock of a power-limited {cl.device.name}: {sus:.2f} of "
            f"{of} under continuous GEMMs (--burst-clocks for bursts)"
        )
    elif cl.device.profile is not None and cl.device.profile.gemm_clocks == "sustained":
        notes.append(
            "compute at the profile's GEMM and attention rates, measured at the sustained clock "
            "(gemm_clocks: sustained): no further sustained-clock derate"
            + (
                f", only the power cap's ({dev.profile.clock_fraction:.2f} of that clock)"
                if dev.profile is not None and dev.profile.clock_fraction < 1
                else ""
            )
            + ", and --burst-clocks cannot raise them"
        )
    if pp > 1 and st.global_batch is None:  # the default batch: one micro-batch per rank
        notes.append(
            f"global batch left at dp x micro-batch = {st.global_batch_seqs}: {m} micro-batch "
            f"through {pp} pipeline stages, so the bubble takes most of the step; a global "
            f"batch of several micro-batches per stage ({4 * pp * dp * mb}: 4 x pp x dp x "
            "micro-batch) fills the pipeline"
        )
    share = attention_kernel_share(dev, st.attention_kernel)
    # a measured profile times the kernel it ran, whichever the strategy names
    measured = all(attention_measured(dev, gdt, b) for b in (False, True))
    unapplied = " (not applied in tier 2: the profile times the kernel it measured)"
    if st.attention_kernel == "flex":
        back = attention_kernel_share(dev, "flex", backward=True)
        notes.append(
            f"attention: FlexAttention at {share:.2f}x (forward) and {back:.2f}x (backward) the "
            "device's best, causal over the whole sequence (torchtitan also masks across packed "
            "documents, which skips more blocks on short documents)"
            + (unapplied if measured else "")
        )
    elif share < 1.0:
        back = attention_kernel_share(dev, st.attention_kernel, backward=True)
        notes.append(
            f"attention: FlashAttention-2 kernels at {share:.2f}x (forward) and {back:.2f}x "
            "(backward) the device's best" + (unapplied if measured else "")
        )
    if st.loss_kernel in LOSS_CHUNKS:
        notes.append(
            f"loss: LM head and cross-entropy over {LOSS_CHUNKS[st.loss_kernel]} slices of the "
            "tokens in turn (torchtitan's ChunkedLossWrapper)"
        )
    pipelined = fsdp_pipelined(pp, st.schedule)
    if pipelined and st.zero >= 2 and dp * cp > 1:
        notes.append(
            f"ZeRO-{st.zero} under a pipeline as torch.distributed.pipelining runs FSDP2 "
            "stages: whole gradients over the micro-batches, reduce-scattered once per step "
            "after the last backward"
            + (
                " (ZeRO-1's memory)"
                if st.zero == 2
                else "; a backward leaves its stage gathered, so the peak holds it whole"
            )
        )
    if st.offload_optimizer:
        per_gpu = cl.host_memory_per_gpu
        notes.append(
            "optimizer step on the CPU (ZeRO-Offload) at "
            + (
                f"{per_gpu / 1e9:.0f} GB/s per GPU: {cl.host_memory_efficiency:.2f} of the "
                f"node's {cl.host_memory_gbps_per_node:g} GB/s host memory shared by its "
                f"{cl.gpus_per_node} GPUs"
                if per_gpu is not None
                else f"an assumed {HOST_BANDWIDTH / 1e9:.0f} GB/s per GPU (the system's host "
                "memory is unknown: host_memory_gbps_per_node in a cluster file)"
            )
        )
    if not st.fused_elementwise:
        notes.append(
            "elementwise ops eager: one kernel per elementary op (no torch.compile)"
            + ("; RMSNorm PyTorch's fused kernel" if st.fused_norm else "")
        )

    # ---- process-group placement (Megatron order: tp, cp, dp, pp; ep folded over tp x cp x dp)
    dp_span = cl.span(dp * cp, tp)  # gradients reduce over data x context ranks
    ep_span, edp_span = expert_spans(cl, tp, cp, dp, ep)
    edp = expert_data_parallel(tp, cp, dp, ep)
    # pipeline sends on the network only when each pipeline rank fills whole domains: where
    # ranks share a domain, only some boundaries cross it (the DAG simulator prices each at
    # its own link), and the closed form, which exposes every send in full, prices them all on
    # the scale-up link: sends run beside compute, so one slow boundary among fast ones mostly
    # hides (NeMo 24.07 Llama 2 13B, 16 H100s, tp1 pp4 dp4, one of three boundaries across
    # nodes: -2.3% as priced here, -4.3% pricing the mix of links, -6.1% pricing all on the
    # network)
    pp_cross = tp * cp * dp >= cl.domain

    # ---- per-layer times and communication, per pipeline rank
    v_eff = v if st.schedule == "interleaved" else 1
    layouts = rank_layouts(spec, pp, v_eff, st.split_key)
    classes, per_rank, busiest, _ = pipeline_ranks(
        spec, cl, dev, gdt, sh, st.recompute, st.overlap_tp_comm, st.overlap_moe_a2a, pp, v_eff,
        st.split_key, st.recompute_modules,
    )  # fmt: skip
    rc = per_rank[busiest]
    f, b, w, rec = rc.f + rc.f_comm, rc.b + rc.b_comm, rc.w, rc.rec
    busiest_layout = layouts[busiest]
    t_ga = grad_accumulation_time(
        spec, st.grad_accumulation,
        busiest_layout.dense_params / tp + busiest_layout.expert_params / ep,
        busiest_layout.n_layers, dev,
    )  # fmt: skip
    b += t_ga

    # pipeline p2p: activations cross each stage boundary forward and back
    p2p_t, p2p_fixed = pipeline_p2p(spec, cl, st, e * tokens, pp_cross, f + b + rec)
    pt = pipeline_time(st.schedule, pp, m, v, f + p2p_t / 2, b + rec + p2p_t / 2, w)
    compute_total = pt.total + p2p_fixed

    # ---- data parallel: gradients and (ZeRO-3) parameters
    here = layouts[busiest]
    n_here = max(1, here.n_layers)
    dense_params, expert_params = here.dense_params, here.expert_params
    dense_local = dense_params / tp
    expert_local = expert_params / ep
    copies = param_copies(st.schedule) if pp > 1 else 1

    fp32_grads = _fp32_grads(st)
    gb = 4.0 if fp32_grads else 2.0
    if st.precision == "fp32":
        gb = 4.0
    grad_bytes_dense = dense_local * copies * gb
    grad_bytes_expert = expert_local * copies * gb
    t_dp = 0.0
    t_dp_exposed = 0.0
    t_ag = 0.0
    rounds = 1  # gradient reductions per step
    gathered = 0.0  # parameter bytes all-gathered per step
    # NIC sharing: an overlapped gradient reduction that crosses the network runs during the
    # backward, when the expert all-to-alls (also across the network) use the same NICs
    share = 2.0 if (ep > 1 and ep_span.domains > 1 and st.overlap_grad_reduce) else 1.0
    rs_t = functools.partial(coll.reduce_scatter_time, nic_share=share)
    ag_t = functools.partial(coll.all_gather_time, nic_share=share)
    ar_t = functools.partial(coll.all_reduce_time, nic_share=share)
    edge = edge_bucket_params(spec, layouts[0], tp, st.fp8_param_gather)
    if st.zero < 3:
        if dp * cp > 1:
            if st.zero >= 1:
                t_dp = rs_t(grad_bytes_dense, dp_span, cl)
                gathered = weight_bytes(dense_local * copies, here.embedding_params / tp * copies,
                                        st.fp8_param_gather)  # fmt: skip
                t_ag = ag_t(gathered, dp_span, cl)
            else:
                t_dp = ar_t(grad_bytes_dense, dp_span, cl)
        if edp > 1 and grad_bytes_expert:
            if st.zero >= 1:
                t_dp += rs_t(grad_bytes_expert, edp_span, cl)
                expert_w = weight_bytes(expert_local * copies, 0.0, st.fp8_param_gather)
                gathered += expert_w
                t_ag += ag_t(expert_w, edp_span, cl)
            else:
                t_dp += ar_t(grad_bytes_expert, edp_span, cl)
        # ZeRO-2 holds only its shard of the gradients (the memory model divides them by the
        # data-parallel size), so each micro-batch's backward reduce-scatters its gradients and
        # frees them (Rajbhandari et al. SC'20 §5.2; DeepSpeed stage 2 reduces every micro-step);
        # ZeRO-0/1 accumulate the full gradients locally and reduce once per step
        # A pipelined ZeRO-2 stage (`fsdp_pipelined`) reduces once per step with whole
        # gradients in between (`sharded_state_bytes`): ZeRO-1's traffic
        rounds = m if reduces_per_micro_batch(st.zero, pipelined) else 1  # reductions per step
        # an overlapped reduction hides behind the last micro-batch's backward but for its
        # tail, which waits for the backward's last gradients: the last layer's share, or the
        # bucket group of the first stage's embedding (`edge_bucket_params`) when larger
        reduce = rs_t if st.zero >= 1 else ar_t
        edge_t = reduce(edge * gb, dp_span, cl) if dp * cp > 1 else 0.0
        tail = min(t_dp, max(t_dp / n_here, edge_t))
        # (a pipelined ZeRO-2 stage reduces after its last backward, ``REDUCE_GRAD``: nothing
        # of it overlaps, unlike Megatron-Core's ZeRO-1 buckets)
        overlap = st.overlap_grad_reduce and not (st.zero == 2 and pipelined)
        window = min(b + rec, max(0.0, t_dp - tail)) if overlap else 0.0
        t_dp_exposed = rounds * overlapped(t_dp, window)
        t_dp *= rounds
        if t_ag and st.overlap_param_gather:
            # the first bucket group's gather is dispatched by the forward's first pre-hook,
            # which waits for it; each later one is prefetched behind the layers before it
            head = min(t_ag, ag_t(weight_bytes(edge, edge, st.fp8_param_gather), dp_span, cl))
            t_dp_exposed += head + overlapped(t_ag - head, f)
        elif t_ag:
            t_dp_exposed += t_ag
    else:
        # FSDP / ZeRO-3: gather 16-bit weights before forward and backward, reduce-scatter
        # gradients, every micro-batch; prefetching overlaps them with the layers' compute.
        # One collective per layer (the FSDP unit is a transformer block: torchtitan's
        # apply_fsdp, PyTorch FSDP's transformer auto-wrap policy), so the per-collective
        # latency is paid once per layer, not once per stage.
        w16 = 2.0
        nl = n_here

        def per_layer(fn: Callable[..., float], nbytes: float, span: GroupSpan) -> float:
            return nl * fn(nbytes / nl, span, cl) if nbytes else 0.0

        if st.zero3_gather == "parameter":
            ag = nl * deepspeed_2021_param_gather(spec, dense_local * w16 / nl, tp, dp_span, cl)
        else:
            ag = per_layer(ag_t, dense_local * w16, dp_span)
        ag += per_layer(ag_t, expert_local * w16, edp_span)
        rs = per_layer(rs_t, grad_bytes_dense, dp_span) + per_layer(
            rs_t, grad_bytes_expert, edp_span
        )
        # each switch hides its own collectives: prefetched gathers behind the layers' forward
        # and backward, bucketed reduce-scatters behind the backward; what is not overlapped
        # runs between the layers. The first gather and the last reduce-scatter of a pass wait.
        # DeepSpeed's 2021 per-parameter gathers synchronize the device first: none hides.
        # The first unit gathered and the last reduced hold the embedding (torchtitan shards
        # tok_embeddings as its own unit; a wrap policy leaves it in the root unit), as
        # Megatron-Core's edge bucket does (`edge_bucket_params`).
        pg = st.overlap_param_gather and st.zero3_gather != "parameter"
        gr = st.overlap_grad_reduce
        head = min(ag, ag_t(w16 * edge, dp_span, cl)) if pg and dp * cp > 1 else 0.0
        # a forward's gather: the first unit's waits, the rest prefetched behind the forward
        fwd_gather = head + overlapped(ag - head, f) if pg else ag
        if pipelined:
            # a pipeline's FSDP2 stages (torch.distributed.pipelining, `sharded_state_bytes`):
            # gradients reduce-scattered once per step, after the last backward
            # (``REDUCE_GRAD``, which waits for it); a backward keeps its stage gathered
            # (``reshard_after_backward`` off) until the next forward has run and resharded
            # it. So a chunk gathers for a forward only after another forward (or at the
            # start) and for a backward only after a forward: over any order of its m
            # forwards and m backwards that starts with a forward and ends with a backward,
            # runs of F and B alternating R times, m - (R - 1) + R = m + 1 gathers (pp 2
            # 1F1B m 4: 5, as the runtime counts, `runtime/comm.py`): one per micro-batch
            # before its backward, and the first forward's
            t_dp = (m + 1) * ag + rs
            gathers = m + 1
            hidden = ag if pg else 0.0
            per_mb = (ag - hidden) + max(0.0, hidden - (b + rec))
            per_mb += OVERLAP_SLOWDOWN * min(hidden, b + rec)
            t_dp_exposed = m * per_mb + fwd_gather + rs
        else:
            t_dp = m * (2 * ag + rs)
            gathers, rounds = 2 * m, m
            hidden_b = (ag if pg else 0.0) + (rs if gr else 0.0)
            edge_rs = rs_t(edge * gb, dp_span, cl) if gr and dp * cp > 1 else 0.0
            # the last unit's share waits; the rest overlaps the backward, and what the
            # backward cannot hold runs after it
            tail = min(hidden_b, max(hidden_b / nl, edge_rs))
            per_mb = (
                fwd_gather
                + max(0.0, hidden_b - tail - (b + rec))
                + OVERLAP_SLOWDOWN * min(hidden_b - tail, b + rec)
                + (0.0 if pg else ag)
                + (0.0 if gr else rs)
                + tail
            )
            t_dp_exposed = m * per_mb
        held = (dense_local if dp * cp > 1 else 0.0) + (expert_local if edp > 1 else 0.0)
        gathered = gathers * w16 * held

    # ---- optimizer step and offload
    shards_dense = dp * cp if st.zero >= 1 else 1
    opt_params = dense_local * copies / shards_dense + expert_local * copies / (
        edp if st.zero >= 1 else 1
    )
    t_opt = 0.0
    t_off = 0.0
    if st.offload_optimizer:
        # gradients down and 16-bit weights up over the GPU's host link (PCIe, or C2C on
        # Grace parts)
        t_off = opt_params * (gb + 2.0) / dev.host_link_si
        t_opt = opt_params * OPTIMIZER_BYTES_MOVED[st.optimizer] / host_memory_bandwidth(cl)
    else:
        t_opt = memory_time(opt_params * OPTIMIZER_BYTES_MOVED[st.optimizer], dev, kernels=2)

    # activation offload (no pipeline): each micro-batch's offloaded activations cross the host
    # link during its forward and back during its backward, behind that pass's compute
    t_act_off = 0.0
    if st.offload_activation_layers:
        link = offloaded_activation_bytes(spec, st) / dev.host_link_si
        t_act_off = m * (max(0.0, link - rc.f) + max(0.0, link - rc.b))
    step = compute_total + t_dp_exposed + t_opt + t_off + t_act_off

    # ---- memory of the busiest-in-memory rank (rank 0 holds the most in-flight micro-batches)
    mem = estimate_memory(spec, cl, st)

    # ---- FLOPs and rates
    tokens_step = st.global_batch_seqs * seq
    model_flops = model_flops_per_token(spec, seq) * tokens_step

    # hardware FLOPs add what recomputation repeats: per layer class, the recomputed forward
    # FLOPs of one rank's shard times the ranks that share a micro-batch (tp x cp), the layers
    # of that class, and the micro-batches of the step (Narayanan et al. SC'21 eq. 3: only the
    # transformer layers are recomputed)
    # attention counted in the model-FLOPs convention (non-causal, PaLM App. B) like the rest
    def core_nc(key: tuple[str, bool], lt: LayerTimes) -> float:
        return lt.core_flops * (2.0 if key[0] == "full" and st.flash_attention else 1.0)

    mods = st.recompute_modules
    rec_per_class = {
        "none": lambda key, lt: 0.0,
        "full": lambda key, lt: lt.flops_fwd - lt.core_flops + core_nc(key, lt),
        "selective": lambda key, lt: (
            (core_nc(key, lt) if "core_attn" in mods else 0.0)
            + lt.selective(tuple(x for x in mods if x != "core_attn"))[1]
        ),
        "selective-op": lambda key, lt: 0.5 * lt.gemm_flops,
    }[st.recompute]
    rec_flops = (
        sum(rec_per_class(key, classes[key]) * len(idx) for key, idx in layer_classes(spec).items())
        * (tp * cp)
        * (dp * m)
    )
    # multi-token prediction runs beside the model (not model FLOPs: the model is the same
    # without it): each module a block shaped as the last layer, its d x 2d projection and
    # its own output head, forward and backward (3x the forward) on every token of the step
    mtp_flops = 0.0
    if st.mtp_layers:
        last = (spec.layer_type(spec.n_layers - 1), spec.is_moe_layer(spec.n_layers - 1))
        block = 3.0 * classes[last].flops_fwd * (tp * cp) * (dp * m)
        own = P.mtp_projection_params(spec) + spec.d_model * spec.vocab  # the head: shared
        mtp_flops = st.mtp_layers * (block + 6.0 * tokens_step * own)
    hw_flops = model_flops + rec_flops + mtp_flops
    n = cl.n_gpus
    peak = cl.device.peak_flops(gdt)  # MFU against the nominal datasheet peak
    mfu = model_flops / (step * n * peak)
    hfu = hw_flops / (step * n * peak)

    breakdown = {
        "forward": m * rc.f,
        "backward": m * rc.b,
        "recompute": m * rc.rec,
        "grad_accumulation": m * t_ga,
        "pipeline_bubble": pt.bubble,
        "pp_p2p": m * p2p_t + p2p_fixed,
        "tp_comm_exposed": m * rc.tp,
        "cp_comm_exposed": m * rc.cp,
        "ep_comm_exposed": m * rc.ep,
        "dp_comm_exposed": t_dp_exposed,
        "optimizer": t_opt,
        "offload": t_off,
        "activation_offload": t_act_off,
    }
    volume = {
        "dp_bytes_per_gpu": (t_dp and rounds * (grad_bytes_dense + grad_bytes_expert)) or 0.0,
        "dp_gather_bytes_per_gpu": gathered,
        "tp_bytes_per_gpu": (4 * here.n_layers * e * tokens * spec.d_model * m) if tp > 1 else 0.0,
        "ep_a2a_bytes_per_gpu": sum(4 * classes[k].a2a_bytes * c for k, c in here.counts) * m
        if ep > 1
        else 0.0,
    }
    return Estimate(
        step_time_s=step,
        mfu=mfu,
        hfu=hfu,
        tflops_per_gpu=hw_flops / step / n / 1e12,
        model_tflops_per_gpu=model_flops / step / n / 1e12,
        tokens_per_s=tokens_step / step,
        tokens_per_s_per_gpu=tokens_step / step / n,
        memory=mem,
        memory_capacity_bytes=dev.memory_bytes,
        fits=mem.total <= dev.memory_bytes,
        breakdown=breakdown,
        comm_volume_bytes=volume,
        n_gpus=n,
        tokens_per_step=tokens_step,
        model_flops_per_step=model_flops,
        peak_flops_used=peak,
        strategy=st,
        notes=notes,
        architecture=dev.architecture,
    )


DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9
DEEPSPEED_PREFETCH_BUCKET = 5e7
DEEPSPEED_REDUCE_BUCKET = 5e8
"""DeepSpeed ZeRO-3 defaults (``deepspeed/runtime/zero/config.py``, DeepSpeed config docs):
``stage3_max_live_parameters`` 1e9, ``stage3_prefetch_bucket_size`` 5e7 and
``reduce_bucket_size`` 5e8 elements."""


DEEPSPEED_PERSISTENCE_THRESHOLD = 1e5
"""``stage3_param_persistence_threshold``: DeepSpeed ZeRO-3 keeps parameters of fewer elements
whole on every rank and never gathers them (``deepspeed/runtime/zero/constants.py``, 1e5 since
the first stage-3 release, v0.3.13, 2021-03)."""


GRAD_ACCUMULATION_BYTES: dict[str, float] = {"fused": 0.0, "fp32-copy": 2.0 + 4.0 + 3 * 4.0}
"""HBM bytes per parameter and micro-batch that joining the micro-batch's gradients to the
step's costs beyond the backward GEMMs. ``fp32-copy``: DeepSpeed ``BF16_Optimizer.update_hp_grads``
(deepspeed/runtime/bf16_optimizer.py since v0.6.2, "bf16+pipeline parallelism" #1801, the
optimizer BLOOM-176B trained with; the pipeline engine calls it after every backward pass):
``hp_grad.add_(lp.grad.to(fp32))`` per parameter, a cast (read 2 B, write 4 B) and an add (read
4 + 4 B, write 4 B)."""


def grad_accumulation_time(
    spec: ModelSpec, mode: str, params_local: float, n_layers: int, dev: Device
) -> float:
    """Seconds per micro-batch that one rank spends adding its gradients into the step's
    (`GRAD_ACCUMULATION_BYTES`): memory-bound, two kernels per parameter tensor (each block's
    weight matrices, their biases and the norms' scales and shifts)."""
    per_param = GRAD_ACCUMULATION_BYTES[mode]
    if per_param == 0.0 or params_local <= 0:
        return 0.0
    tensors_per_layer = 4 * (2 if spec.mlp_bias else 1) + (4 if spec.norm == "layernorm" else 2)
    return memory_time(
        per_param * params_local, dev, kernels=2 * max(1, n_layers) * tensors_per_layer
    )


def _block_matrix_widths(spec: ModelSpec) -> tuple[int, int, int, int]:
    """Output widths of a Megatron-style block's four weight matrices (each d_model rows): the
    fused QKV, the attention output projection, the FFN's first projection (gate and up fused
    when gated) and its second."""
    hd = spec.hd
    return ((spec.n_heads + 2 * spec.kv_heads) * hd, spec.n_heads * hd,
            spec.ffn_hidden * (2 if spec.gated else 1), spec.ffn_hidden)  # fmt: skip


def deepspeed_2021_param_gather(
    spec: ModelSpec, layer_bytes: float, tp: int, span: GroupSpan, cl: Cluster
) -> float:
    """Seconds to gather one transformer block's 16-bit weights (``layer_bytes`` on this rank's
    shard of tensor parallelism) the way DeepSpeed ZeRO-3 did in 2021 (v0.3.13-v0.5,
    ``deepspeed/runtime/zero/partition_parameters.py`` ``_allgather_param``): one call per
    parameter above `DEEPSPEED_PERSISTENCE_THRESHOLD` (a Megatron block's fused QKV, output
    projection and the two FFN matrices), each allocating its full tensor with ``torch.zeros``,
    then ``torch.cuda.synchronize()`` (so nothing overlaps it: DeepSpeed commit c0eeb69,
    2021-10, "the async version is not async at all"), then PyTorch's list ``all_gather``, which
    NCCL runs as one ring (`nccl_ring_all_gather_time`) into a flat buffer that PyTorch copies
    back with one ``copy_`` kernel per rank (``ProcessGroupNCCL::allgather`` of PyTorch 1.8)."""
    sizes = [spec.d_model * w / tp for w in _block_matrix_widths(spec)]
    calls = sum(1 for x in sizes if x > DEEPSPEED_PERSISTENCE_THRESHOLD)
    n = span.size
    if calls == 0 or n == 1 or layer_bytes <= 0:
        return 0.0
    per_call = layer_bytes / calls
    ring = coll.nccl_ring_all_gather_time(per_call, span, cl)
    dev = cl.device
    # zero-fill, the ring, then the flat buffer copied back (read + write) by n kernels
    local = memory_time(per_call, dev) + memory_time(2 * per_call, dev, kernels=n)
    return calls * (ring + local)


def zero3_transient_bytes(
    spec: ModelSpec, layer_params: float, tp: int, fp32_grads: bool, gather: str = "layer"
) -> float:
    """Bytes of gathered ZeRO-3 weights and unsharded gradients alive at once on one GPU.

    ``layer`` (FSDP/FSDP2 wrapping each transformer block, Megatron-FSDP): two blocks' 16-bit
    weights (the current one and the prefetched next) and one block's gradients before the
    reduce-scatter (PyTorch FSDP docs, "forward/backward prefetch"). ``module`` (DeepSpeed): the
    gathered parameters of whole ``nn.Module``s up to ``stage3_max_live_parameters`` (at least
    the largest weight matrix, which is never split: the FFN's first projection, gate and up
    fused as Megatron-DeepSpeed builds it, or the fused QKV, whichever is wider) plus the
    prefetch bucket, and gradients in ``reduce_bucket_size`` buckets (DeepSpeed ZeRO-3 docs)."""
    g = 4.0 if fp32_grads else 2.0
    if gather == "layer":
        return layer_params * (2 * 2.0 + g)
    largest = spec.d_model * max(_block_matrix_widths(spec)) / tp
    live = max(largest, min(layer_params, DEEPSPEED_MAX_LIVE_PARAMETERS))
    return 2.0 * (live + DEEPSPEED_PREFETCH_BUCKET) + g * min(layer_params, DEEPSPEED_REDUCE_BUCKET)


def estimate_memory(spec: ModelSpec, cl: Cluster, st: Strategy) -> Memory:
    """Memory per GPU of the most loaded stage, without the timing: the planner's first filter."""
    return _memory(
        spec, st.precision, st.optimizer, st.grad_reduce_dtype, st.tp, st.pp, st.dp, st.cp,
        st.ep, st.sequence_parallel, st.zero, st.micro_batch, st.seq, st.grad_accum,
        st.vpp if st.schedule == "interleaved" else 1, st.schedule, st.recompute,
        st.offload_optimizer, st.flash_attention, st.dropout, st.moe_imbalance, st.loss_kernel,
        st.zero3_gather, st.fp8_saved_inputs, st.split_key, st.recompute_modules,
        st.offload_activation_layers, st.fp8_param_gather,
    )  # fmt: skip


def offloaded_activation_bytes(spec: ModelSpec, st: Strategy) -> float:
    """Bytes of one micro-batch's activations that go to host memory and back
    (`Strategy.offload_activation_layers` of the rank's layers, at their mean size)."""
    if not st.offload_activation_layers:
        return 0.0
    a = act_shape(st.precision, st.tp, st.cp, st.ep, st.sequence_parallel, st.micro_batch,
                  st.seq, st.flash_attention, st.dropout, st.moe_imbalance, st.loss_kernel,
                  st.fp8_saved_inputs)  # fmt: skip
    lay = rank_layouts(spec, 1, 1)[0]
    per_mb = sum(cnt * layer_activation_bytes(spec, lt, moe, a, st.recompute, st.recompute_modules)
                 for (lt, moe), cnt in lay.counts)  # fmt: skip
    return _offloaded(per_mb, st.offload_activation_layers, lay.n_layers)


def _offloaded(layers_bytes: float, offload_layers: int, n_layers: int) -> float:
    """What ``offload_layers`` of a rank's ``n_layers`` layers keep of one micro-batch,
    ``layers_bytes`` being all of them, at their mean size. Transformer Engine offloads the
    first layers' activations and gives each copy a window that ends further into the forward,
    the windows spread evenly over the model (``AsyncDoubleBufferGroupOffloadHandler``'s
    ``layer_window_map``, ``pytorch/cpu_offload.py``), which is why the copies run behind the
    whole pass's compute."""
    return layers_bytes * offload_layers / n_layers if offload_layers else 0.0


def _fp32_grads(st: Strategy) -> bool:
    """Gradients kept and reduced in fp32: Megatron's main_grad buffer (ZeRO 0-2) unless the
    strategy says otherwise; FSDP (ZeRO-3) keeps them in the parameter dtype."""
    return grads_in_fp32(st.grad_reduce_dtype, st.zero)


def grads_in_fp32(grad_reduce_dtype: str | None, zero: int) -> bool:
    """Whether gradients are kept and reduced in fp32 (see ``_fp32_grads``)."""
    return grad_reduce_dtype == "fp32" or (grad_reduce_dtype is None and zero < 3)


@functools.lru_cache(maxsize=65536)
def _states(
    spec: ModelSpec,
    pp: int,
    v: int,
    copies: int,
    tp: int,
    ep: int,
    dp: int,
    cp: int,
    zero: int,
    offload: bool,
    precision: str,
    optimizer: str,
    grad_reduce_dtype: str | None,
    zero3_gather: str = "layer",
    split: str = "layers",
    fp8_params: bool = False,
    pipelined: bool = False,
) -> tuple[tuple[float, float, float, float], ...]:
    """Per pipeline rank (first and last): weights, gradients, optimizer bytes, and the
    gathered-weight transient under ZeRO-3 (`zero3_transient_bytes`; none for a
    ``pipelined`` stage, `fsdp_pipelined`, whose weights and gradients are whole at the peak)."""  # fmt: skip
    fp32_grads = grads_in_fp32(grad_reduce_dtype, zero)
    sb = state_bytes_per_param(precision, optimizer, fp32_grads, fp8_params)
    edp = expert_data_parallel(tp, cp, dp, ep)
    layouts = rank_layouts(spec, pp, v, split)
    out = []
    for r in sorted({0, pp - 1}):
        lay = layouts[r]
        dense_local = lay.dense_params / tp * copies
        expert_local = lay.expert_params / ep * copies
        w1, g1, o1 = sharded_state_bytes(dense_local, sb, zero, dp * cp, offload, pipelined)
        w2, g2, o2 = sharded_state_bytes(expert_local, sb, zero, edp, offload, pipelined)
        if fp8_params:  # ZeRO 1-2: unsharded weights, the embedding, head and norm 16-bit
            w1 = weight_bytes(dense_local, lay.embedding_params / tp * copies, True)
        zt = 0.0
        if zero >= 3 and not pipelined:
            per_layer = (dense_local + expert_local) / max(1, lay.n_layers)
            zt = zero3_transient_bytes(spec, per_layer, tp, fp32_grads, zero3_gather)
        out.append((w1 + w2, g1 + g2, o1 + o2, zt))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def _activations(
    spec: ModelSpec, pp: int, v: int, a: ActShape, recompute: str, schedule: str, m: int,
    split: str = "layers", modules: tuple[str, ...] = ("core_attn",), offload_layers: int = 0,
) -> tuple[tuple[float, float], ...]:  # fmt: skip
    """Per pipeline rank (first and last): activations kept at the schedule's peak, and the
    transient of the loss and of a layer rebuilt by full recomputation. Under the interleaved
    schedule the peak is walked chunk by chunk (`interleaved_peak`), since chunks can differ
    (a remainder of layers, `Strategy.pipeline_split`); otherwise it is `in_flight`
    micro-batches of all the rank's layers. With ``offload_layers`` (no pipeline, one
    micro-batch in flight) that many layers' activations live in host memory
    (`offloaded_activation_bytes`), one layer's in flight on the GPU as a transient."""
    layouts = rank_layouts(spec, pp, v, split)
    out = []
    for r in sorted({0, pp - 1}):
        lay = layouts[r]
        biggest_layer = 0.0
        for (lt, moe), _ in lay.counts:
            if recompute == "full":
                biggest_layer = max(biggest_layer, layer_activation_bytes(spec, lt, moe, a, "none"))
        chunk_bytes = [
            sum(
                cnt * layer_activation_bytes(spec, lt, moe, a, recompute, modules)
                for (lt, moe), cnt in ch
            )
            for ch in lay.chunks
        ]
        for c, k in enumerate(lay.chunk_mtp):  # an MTP module's inputs beside its block
            chunk_bytes[c] += k * mtp_input_bytes(spec, a)
        moved = _offloaded(sum(chunk_bytes), offload_layers, lay.n_layers)
        if r == 0:  # the embedding's dropout mask (Korthikanti §4.3), with the first chunk
            chunk_bytes[0] += embedding_activation_bytes(spec, a)
        if schedule == "interleaved" and pp > 1:
            acts = interleaved_peak(pp, v, m, r, tuple(chunk_bytes))
        else:  # one micro-batch in flight when offloading (no pipeline)
            acts = sum(chunk_bytes) * in_flight(schedule, pp, m, v) - moved
        transient = biggest_layer  # full recomputation rebuilds one layer during its backward
        if offload_layers:
            transient += moved / offload_layers  # the layer whose copy is under way
        heads = (r == pp - 1) + lay.mtp  # each MTP module computes its own logits and loss
        if heads:
            transient += heads * logits_bytes(spec, a.tokens, a.tp, a.loss)
        out.append((acts * FRAGMENTATION, transient))
    return tuple(out)


def act_shape(
    precision: str, tp: int, cp: int, ep: int, sp: bool, mb: int, seq: int, flash: bool,
    dropout: bool, imbalance: float, loss: str, fp8_saved_inputs: bool = True,
) -> ActShape:  # fmt: skip
    """What one rank keeps of a micro-batch (`hwtune.cost.memory.ActShape`): 16-bit
    activations (32-bit in fp32 training), and 1-byte inputs of the linear layers under fp8
    with Transformer Engine (`Strategy.fp8_saved_inputs`)."""
    e = 4.0 if precision == "fp32" else 2.0
    return ActShape(tokens=mb * seq // cp, seq=seq, tp=tp, sp=sp, act_bytes=e, flash=flash,
                    dropout=dropout, ep=ep, moe_imbalance=imbalance, loss=loss,
                    linear_bytes=1.0 if precision == "fp8" and fp8_saved_inputs else e)  # fmt: skip


def memory_table(
    spec: ModelSpec,
    precision: str,
    optimizer: str,
    grad_reduce_dtype: str | None,
    tp: int,
    pp: int,
    dp: int,
    cp: int,
    ep: int,
    sp: bool,
    mb: int,
    seq: int,
    m: int,
    v: int,
    schedule: str,
    flash: bool,
    dropout: bool,
    imbalance: float,
    settings: list[tuple[int, str, bool]],
    loss: str = "fused",
    fp8_saved_inputs: bool = True,
    split: str = "layers",
    modules: tuple[str, ...] = ("core_attn",),
    offload_layers: int = 0,
    fp8_params: bool = False,
) -> dict[tuple[int, str, bool], float]:
    """Total memory per GPU for each (ZeRO stage, recomputation, offload) setting of one layout.

    Memory is separable: model states depend on (ZeRO, offload), activations on the
    recomputation, so the planner costs each part once and adds them up."""  # fmt: skip
    copies = param_copies(schedule) if pp > 1 else 1
    a = act_shape(precision, tp, cp, ep, sp, mb, seq, flash, dropout, imbalance, loss,
                  fp8_saved_inputs)  # fmt: skip
    # per rank: model-state bytes for each (ZeRO, offload), activation bytes for each recompute
    states: dict[tuple[int, bool], list[float]] = {}
    acts: dict[str, list[float]] = {}
    out = {}
    for z, r, o in settings:
        s = states.get((z, o))
        if s is None:
            s = states[(z, o)] = [
                w + g + op + zt
                for w, g, op, zt in _states(
                    spec,
                    pp,
                    v,
                    copies,
                    tp,
                    ep,
                    dp,
                    cp,
                    z,
                    o,
                    precision,
                    optimizer,
                    grad_reduce_dtype,
                    "layer",
                    split,
                    fp8_params,
                    fsdp_pipelined(pp, schedule),
                )  # fmt: skip
            ]
        ac = acts.get(r)
        if ac is None:
            ac = acts[r] = [
                x + y
                for x, y in _activations(
                    spec,
                    pp,
                    v,
                    a,
                    r,
                    schedule,
                    m,
                    split,
                    modules,
                    offload_layers if r == "none" else 0,
                )  # fmt: skip
            ]
        t = s[0] + ac[0]
        if len(s) > 1:
            t = max(t, s[1] + ac[1])
        out[(z, r, o)] = t + FRAMEWORK_RESERVE_BYTES
    return out


def _memory(
    spec: ModelSpec, precision: str, optimizer: str, grad_reduce_dtype: str | None, tp: int,
    pp: int, dp: int, cp: int, ep: int, sp: bool, zero: int, mb: int, seq: int, m: int, v: int,
    schedule: str, recompute: str, offload: bool, flash: bool, dropout: bool, imbalance: float,
    loss: str = "fused", zero3_gather: str = "layer", fp8_saved_inputs: bool = True,
    split: str = "layers", modules: tuple[str, ...] = ("core_attn",), offload_layers: int = 0,
    fp8_params: bool = False,
) -> Memory:  # fmt: skip
    copies = param_copies(schedule) if pp > 1 else 1
    states = _states(spec, pp, v, copies, tp, ep, dp, cp, zero, offload, precision, optimizer,
                     grad_reduce_dtype, zero3_gather, split, fp8_params,
                     fsdp_pipelined(pp, schedule))  # fmt: skip
    a = act_shape(precision, tp, cp, ep, sp, mb, seq, flash, dropout, imbalance, loss,
                  fp8_saved_inputs)  # fmt: skip
    acts = _activations(spec, pp, v, a, recompute, schedule, m, split, modules, offload_layers)
    best: Memory | None = None
    for (w, g, o, zt), (act, tr) in zip(states, acts, strict=True):
        mem = Memory(w, g, o, act, tr + zt, FRAMEWORK_RESERVE_BYTES)
        if best is None or mem.total > best.total:
            best = mem
    assert best is not None
    return best
