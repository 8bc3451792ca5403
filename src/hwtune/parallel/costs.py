"""Seconds and bytes of each pipeline stage, taken from the estimator's cost functions.

Nothing is re-derived here: a layer's forward, backward, weight-gradient and recomputation
seconds and its exposed in-layer communication (tensor, context, expert parallel) are the
estimator's `LayerCost` (`hwtune.train.estimator.pipeline_ranks`, per layer class, at the
layer's own TP and EP degrees); activation bytes are `hwtune.cost.memory.layer_activation_bytes`;
the embedding and the LM head are what `pipeline_ranks` adds to the first and last pipeline rank.
A layer whose attention and FFN have different TP degrees costs the attention share (by forward
FLOPs, `hwtune.model.lowering.attention_ops`) at one degree and the rest at the other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hwtune.cost.memory import ActShape, layer_activation_bytes, logits_bytes
from hwtune.cost.power import power_limited
from hwtune.hardware.cluster import Cluster
from hwtune.model import params as P
from hwtune.model.lowering import Shard, attention_ops, lower_layer
from hwtune.model.spec import ModelSpec
from hwtune.parallel.spec import LayerPlan, ParallelSpec
from hwtune.train.estimator import LayerCost, gemm_dtype, pipeline_ranks


@dataclass(frozen=True, slots=True)
class StageCost:
    """One model chunk for one micro-batch on one rank (seconds, bytes, parameters)."""

    chunk: int
    layers: tuple[int, ...]
    f: float  # forward + exposed in-layer communication
    b: float  # full backward (input + weight gradients) + exposed communication
    w: float  # weight-gradient part of b
    rec: float  # recomputation before the backward
    f_compute: float
    b_compute: float
    f_comm_raw: float  # in-layer communication with no overlap (what an F&B pair can hide)
    b_comm_raw: float
    act_bytes: float  # activations kept per micro-batch until the backward
    transient_bytes: float  # logits / a rebuilt layer during the backward
    p2p_bytes: float  # the activation sent to the next stage
    dense_params: float  # local parameters after tensor parallelism
    expert_params: float  # local routed-expert parameters after expert parallelism

    @property
    def i(self) -> float:
        return self.b - self.w


def placement_skew(model: ModelSpec, lp: LayerPlan) -> float:
    """The busiest expert-parallel rank's share of a layer's experts against an even split:
    ``k_max x ep / E`` for a ``placement`` whose largest group holds ``k_max`` of the ``E``
    routed experts (1 without a placement). With tokens routed evenly over the experts (the
    model's own skew is ``moe_imbalance``) that rank computes, receives and stores that many
    times the mean, so the layer is priced at it as at a routing imbalance of this factor."""
    moe = model.moe
    if lp.placement is None or moe is None:
        return 1.0
    return max(len(g) for g in lp.placement) * lp.ep / moe.n_routed_experts


def _shard(spec: ParallelSpec, model: ModelSpec, tp: int, ep: int, skew: float = 1.0) -> Shard:
    e = 4.0 if spec.precision == "fp32" else 2.0
    return Shard(
        tokens=spec.micro_batch * spec.seq // spec.mesh.cp, seq=spec.seq, tp=tp,
        cp=spec.mesh.cp, ep=ep, sp=spec.sequence_parallel and tp > 1, act_bytes=e,
        flash=spec.flash_attention, moe_imbalance=spec.moe_imbalance * skew,
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _attention_share(model: ModelSpec, ltype: str, moe: bool, sh: Shard) -> float:
    total = sum(op.flops for op in lower_layer(model, ltype, moe, sh))
    attn = sum(op.flops for op in attention_ops(model, ltype, sh))
    return attn / total if total else 0.5


def _sub(a: LayerCost, b: LayerCost) -> LayerCost:
    return a + b * -1.0


def layer_cost(
    spec: ParallelSpec, model: ModelSpec, cl: Cluster, lp: LayerPlan, overlap: bool = True
) -> LayerCost:
    """The estimator's `LayerCost` of one layer at its annotated degrees."""
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    gdt = gemm_dtype(spec.precision, dev)
    key = (model.layer_type(lp.index), model.is_moe_layer(lp.index))
    ov_tp = spec.overlap.tp_comm and overlap
    ov_a2a = spec.overlap.moe_a2a and overlap

    skew = placement_skew(model, lp)

    def at(tp: int) -> LayerCost:
        sh = _shard(spec, model, tp, lp.ep, skew)
        return pipeline_ranks(model, cl, dev, gdt, sh, lp.recompute, ov_tp, ov_a2a, 1, 1)[3][key]

    if lp.tp_attention == lp.tp_ffn:
        return at(lp.tp_attention)
    share = _attention_share(model, key[0], key[1], _shard(spec, model, spec.mesh.tp, lp.ep))
    return at(lp.tp_attention) * share + at(lp.tp_ffn) * (1.0 - share)


def _ends(spec: ParallelSpec, model: ModelSpec, cl: Cluster) -> tuple[LayerCost, LayerCost]:
    """Embedding (first stage) and LM head (last stage): what `pipeline_ranks` adds to the
    first and last of two pipeline ranks beyond their layers."""
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    gdt = gemm_dtype(spec.precision, dev)
    sh = _shard(spec, model, spec.mesh.tp, spec.mesh.ep)
    if model.n_layers < 2:
        return LayerCost(), LayerCost()
    _, per_rank, _, costs = pipeline_ranks(
        model, cl, dev, gdt, sh, spec.recompute, spec.overlap.tp_comm, spec.overlap.moe_a2a, 2, 1
    )
    half = [
        list(range(0, (model.n_layers + 1) // 2)),
        list(range((model.n_layers + 1) // 2, model.n_layers)),
    ]
    ends = []
    for r in (0, 1):
        acc = LayerCost()
        for i in half[r]:
            acc = acc + costs[(model.layer_type(i), model.is_moe_layer(i))]
        ends.append(_sub(per_rank[r], acc))
    return ends[0], ends[1]


def stage_costs(
    spec: ParallelSpec, model: ModelSpec, cl: Cluster, layers: tuple[LayerPlan, ...]
) -> tuple[StageCost, ...]:
    """Per model chunk: seconds (one micro-batch), activation bytes, local parameters."""
    n_chunks = spec.n_chunks()
    emb, head = _ends(spec, model, cl)
    e = 4.0 if spec.precision == "fp32" else 2.0
    tokens = spec.micro_batch * spec.seq // spec.mesh.cp
    out = []
    for c in range(n_chunks):
        idx = tuple(lp.index for lp in layers if lp.stage == c)
        acc = LayerCost()
        raw = LayerCost()
        acts = trans = dense = expert = 0.0
        for i in idx:
            lp = layers[i]
            acc = acc + layer_cost(spec, model, cl, lp)
            raw = raw + layer_cost(spec, model, cl, lp, overlap=False)
            skew = placement_skew(model, lp)  # an uneven expert placement's busiest rank
            a = ActShape(tokens=tokens, seq=spec.seq, tp=lp.tp_ffn, sp=spec.sequence_parallel and lp.tp_ffn > 1,
                         act_bytes=e, flash=spec.flash_attention, ep=lp.ep,
                         moe_imbalance=spec.moe_imbalance * skew)  # fmt: skip
            lt, moe = model.layer_type(i), model.is_moe_layer(i)
            acts += layer_activation_bytes(model, lt, moe, a, lp.recompute)
            if lp.recompute == "full":
                trans = max(trans, layer_activation_bytes(model, lt, moe, a, "none"))
            ex = P.routed_expert_params(model, i)
            expert += ex / lp.ep * skew
            # attention at its own TP degree, the rest of the layer at the FFN's (they differ
            # when an annotation gives attention and experts different degrees)
            attn = P._attention(model, lt) if lp.tp_attention != lp.tp_ffn else 0
            dense += attn / lp.tp_attention + (P.layer_params(model, i) - ex - attn) / lp.tp_ffn
        if c == 0:
            acc, raw = acc + emb, raw + emb
            dense += P.input_embedding_params(model) / spec.mesh.tp
            acts += e * tokens * model.d_model
        if c == n_chunks - 1:
            acc, raw = acc + head, raw + head
            dense += (
                P.embedding_params(model)
                - P.input_embedding_params(model)
                + P.final_norm_params(model)
            ) / spec.mesh.tp
            trans += logits_bytes(model, tokens, spec.mesh.tp)
        sp = spec.sequence_parallel and spec.mesh.tp > 1
        out.append(
            StageCost(
                chunk=c,
                layers=idx,
                f=acc.f + acc.f_comm,
                b=acc.b + acc.b_comm,
                w=acc.w,
                rec=acc.rec,
                f_compute=acc.f,
                b_compute=acc.b,
                f_comm_raw=raw.f_comm,
                b_comm_raw=raw.b_comm,
                act_bytes=acts,
                transient_bytes=trans,
                p2p_bytes=e * tokens * model.d_model / (spec.mesh.tp if sp else 1),
                dense_params=dense,
                expert_params=expert,
            )  # fmt: skip
        )
    return tuple(out)
