"""Context parallelism: each sequence split over the ``cp`` ranks, causal attention exact.

Layout (load-balanced causal sharding, Megatron-LM / TransformerEngine): the sequence is cut
into ``2 cp`` equal chunks and cp rank ``i`` holds chunks ``i`` and ``2 cp - 1 - i``. Under a
causal mask chunk ``c`` of ``m`` tokens attends to ``c m^2 + m (m + 1) / 2`` (query, key) pairs,
so every rank's two chunks sum to ``(2 cp - 1) m^2 + m (m + 1)``: the same work on every rank
(`causal_pairs`), where contiguous chunks would leave rank 0 with almost none and the last rank
with most. Each rank keeps the position ids of its tokens (`positions`), which is what the
rotary embedding and the causal mask read.

Algorithm: **all-gather K/V** (Llama 3 paper, Dubey et al. 2024 §3.3.2 "Context parallelism"):
every rank all-gathers the keys and values of the whole sequence (one collective for K and V
stacked, `GatherSequence`), puts them in token order, and attends its local queries to all keys
with the mask ``key position <= query position``; the backward of the all-gather is a
reduce-scatter (sum) of dK/dV, so each rank receives the gradient its keys and values got from
every rank's queries. Chosen over the ring exchange with online-softmax merging (Liu et al. 2023,
"Ring Attention", §3; Megatron's ``p2p`` CP) because (1) it is exact up to float32 summation
order: the softmax runs once over the full row of scores, with the same kernel as the
single-process run (SDPA with a boolean mask), whereas the ring merges per-block partial
softmaxes (log-sum-exp rescaling) and rounds differently; (2) it needs only two blocking
collectives that gloo has (all-gather and reduce-scatter) and no overlapped send/receive
pipeline, which a CPU/gloo process group would serialise anyway; (3) any mask works (the Llama 3
authors chose it for document masks and GQA, whose K/V are smaller than Q). Its cost: every rank
holds the full K/V (``2 s b h_kv d`` bytes) for the attention, and the communication is not
overlapped with compute -- the ring's advantage at long sequences on fast links, which the
estimator's CP cost (``hwtune.train.estimator``) models, not this runtime.

Recomputation: the all-gather sits inside the attention core, so ``selective`` and ``full``
recomputation rerun it in the backward (one more collective per recomputed layer, the same
order on every cp rank).

The loss of a rank is the mean over its tokens; every rank holds ``s / cp`` tokens of each
sequence, so the mean of the ranks' means is the mean over all tokens (the single-process loss),
and averaging gradients over the dp x cp ranks (DDP, ZeRO, FSDP2 over the flattened mesh) gives
the gradient of that loss.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.parallel.runtime.comm import all_gather_single, reduce_scatter_single


def positions(seq: int, cp: int, rank: int) -> torch.Tensor:
    """Token positions held by cp rank ``rank``: chunks ``rank`` and ``2 cp - 1 - rank`` of
    ``2 cp`` (Megatron-LM ``get_batch_on_this_cp_rank``)."""
    if seq % (2 * cp):
        raise HwtuneInputError("seq", seq, f"a multiple of 2*cp = {2 * cp} (2 chunks per cp rank)")
    m = seq // (2 * cp)
    a = torch.arange(rank * m, (rank + 1) * m)
    b = torch.arange((2 * cp - 1 - rank) * m, (2 * cp - rank) * m)
    return torch.cat([a, b])


def causal_pairs(seq: int, cp: int, rank: int) -> int:
    """(query, key) pairs a rank attends to under the causal mask (its share of the work)."""
    p = positions(seq, cp, rank)
    return int((p + 1).sum())


def shard_sequence(t: torch.Tensor, cp: int, rank: int) -> torch.Tensor:
    """The tokens of cp rank ``rank`` of a (batch, seq, ...) tensor."""
    return t[:, positions(t.shape[1], cp, rank)].contiguous()


class GatherSequence(torch.autograd.Function):
    """All-gather along dim 0 over ``group``; backward: reduce-scatter (sum) of the gradient
    (Llama 3 §3.3.2). Ranks' blocks in group-rank order."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # noqa: ANN001
        ctx.group = group
        n = dist.get_world_size(group)
        x = x.contiguous()
        out = x.new_empty((n * x.shape[0], *x.shape[1:]))
        all_gather_single(out, x, group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        n = dist.get_world_size(ctx.group)
        out = grad.new_empty((grad.shape[0] // n, *grad.shape[1:]))
        reduce_scatter_single(out, grad.contiguous(), ctx.group)
        return out, None


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, flash: bool
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v for local queries at positions ``q_pos`` against all
    keys in token order (b, h, s, d): a query at position p sees keys 0..p (Vaswani et al.
    2017 eq. 1 with the causal mask). ``flash``: SDPA; else scores and softmax as tensors."""
    allowed = q_pos.to(q.device)[:, None] >= torch.arange(k.shape[-2], device=q.device)[None, :]
    if flash:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


def cp_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    group: dist.ProcessGroup,
    flash: bool,
) -> torch.Tensor:
    """Exact causal attention of this rank's queries (b, h, s/cp, d) over the whole sequence:
    K and V all-gathered in one collective, put in token order, attended with the mask."""
    cp = dist.get_world_size(group)
    seq = q.shape[-2] * cp
    kv = torch.stack([k, v]).permute(3, 0, 1, 2, 4)  # (s_local, 2, b, h, d): seq first
    kv = GatherSequence.apply(kv, group)  # (s, 2, b, h, d), rank 0's tokens first
    held = torch.cat([positions(seq, cp, r) for r in range(cp)])
    kv = kv[torch.argsort(held).to(kv.device)].permute(1, 2, 3, 0, 4)  # token order (2,b,h,s,d)
    return attend(q, kv[0], kv[1], q_pos, flash)


def apply_cp(model: nn.Module, group: dist.ProcessGroup, seq: int) -> torch.Tensor:
    """Make every attention of ``model`` (a whole model or a pipeline stage) context-parallel
    over ``group``: it reads the positions of this rank's tokens and all-gathers K/V. Returns
    those positions (to shard the batch with)."""
    cp, rank = dist.get_world_size(group), dist.get_rank(group)
    pos = positions(seq, cp, rank)
    for block in model.layers.values():
        block.attention.positions = pos
        block.attention.cp_group = group
    return pos
