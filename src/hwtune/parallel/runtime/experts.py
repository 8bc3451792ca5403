"""Mixture of experts with expert parallelism: top-k routing, all-to-all dispatch and combine.

The experts of a layer are split over the expert-parallel group (contiguous blocks, or the
spec's placement); that group is the inner "ep" dimension of the DeviceMesh, a sub-group of the
data-parallel ranks when ep < dp (each of the dp/ep groups holds all experts once); tokens
travel with ``torch.distributed.nn.functional.all_to_all_single`` (differentiable; variable
splits), as in DeepSpeed-MoE / Megatron-Core's all-to-all token
dispatcher. Without a group every expert is local and the same code runs (the reference).
Dropless: no capacity factor, so the result does not depend on the layout.

Expert parallelism folded over tensor parallelism with unsharded experts (Megatron-Core's MoE
"parallel folding", expert-TP = 1): attention is split over the tp ranks, whose hidden states
are therefore replicated; each tp rank routes all tokens (the router sees the same input
everywhere), keeps 1/tp of the (token, expert) pairs (`_Split`: backward all-gathers the
slices' gradients), dispatches them over the ep group (here the tp group), and the experts'
outputs are all-gathered back before the weighted combine (`_Gather`: backward keeps this
rank's slice of the replicated gradient). The router's and the norms' gradients stay whole
and equal on the tp ranks; each pair's gradient reaches its expert once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Experts(nn.Module):
    """The routed experts' SwiGLU weights, (experts, in, out) each, as torchtitan's
    ``GroupedExperts``: a module of their own, with a forward, so that FSDP2 can shard them over
    another mesh than the router's and the dense weights' (their edp replicas) and gather them
    around that forward."""

    def __init__(self, e: int, d: int, f: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(e, d, f) / d**0.5)
        self.w3 = nn.Parameter(torch.randn(e, d, f) / d**0.5)
        self.w2 = nn.Parameter(torch.randn(e, f, d) / f**0.5)

    def forward(self, tok: torch.Tensor, eid: torch.Tensor, local: list[int]) -> torch.Tensor:
        """Each (token, expert) pair through its expert: ``local[j]`` is the global id of the
        j-th expert held here."""
        # zeros tied to the received tokens (tok * 0, not zeros_like): a rank whose experts
        # got no token still has the all-to-alls in its backward graph, so every rank of the
        # group runs the same backward collectives (else one skips them and its peers hang;
        # e.g. the pipeline runtime's shape inference on an empty tensor routes all tokens to
        # the same experts). Exact: 0 * a finite value adds nothing.
        out = tok * 0
        for j, g in enumerate(local):
            sel = (eid == g).nonzero(as_tuple=True)[0]
            if sel.numel():
                h = tok[sel]
                y = (F.silu(h @ self.w1[j]) * (h @ self.w3[j])) @ self.w2[j]
                out = out.index_add(0, sel, y)
        return out

    def keep(self, idx: torch.Tensor) -> None:
        """Keep only the experts at positions ``idx``."""
        with torch.no_grad():
            self.w1 = nn.Parameter(self.w1[idx].clone())
            self.w3 = nn.Parameter(self.w3[idx].clone())
            self.w2 = nn.Parameter(self.w2[idx].clone())


class MoE(nn.Module):
    def __init__(self, c) -> None:  # noqa: ANN001 - TinyConfig (avoids a cycle)
        super().__init__()
        e, d, f = c.n_experts, c.d_model, c.ffn
        self.n_experts, self.top_k = e, c.top_k
        self.router = nn.Linear(d, e, bias=False)
        self.experts = Experts(e, d, f)
        self.group = None
        self.fold_group = None  # tp group the pairs are split over (experts folded over tp)
        self.local = list(range(e))  # global ids of the experts held here
        self.owner = [0] * e  # expert -> rank in the expert-parallel group

    def shard_experts(self, group, placement: list[list[int]] | None = None) -> None:  # noqa: ANN001
        """Keep only this rank's experts; tokens reach the others by all-to-all."""
        import torch.distributed as dist

        n, r = dist.get_world_size(group), dist.get_rank(group)
        per = self.n_experts // n
        placement = placement or [list(range(i * per, (i + 1) * per)) for i in range(n)]
        self.owner = [0] * self.n_experts
        for rank, ids in enumerate(placement):
            for x in ids:
                self.owner[x] = rank
        self.local = list(placement[r])
        self.experts.keep(torch.tensor(self.local, device=self.experts.w1.device))
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(t).float(), dim=-1)
        w, ids = probs.topk(self.top_k, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(t.dtype)
        flat = ids.reshape(-1)
        owner = torch.tensor(self.owner, device=flat.device)  # the index's device (CPU or GPU)
        order = torch.argsort(owner[flat] * self.n_experts + flat, stable=True)
        tok = t[order // self.top_k]
        eid = flat[order]
        if self.fold_group is not None:  # this tp rank's share of the pairs
            tok, eid = _Split.apply(tok, self.fold_group), _split(eid, self.fold_group)
        if self.group is not None:
            tok, eid, back = self._dispatch(tok, eid)
        out = self.experts(tok, eid, self.local)
        if self.group is not None:
            out = back(out)
        if self.fold_group is not None:
            out = _Gather.apply(out, self.fold_group)
        y = torch.zeros_like(t).index_add(0, order // self.top_k, out * w.reshape(-1)[order, None])
        return y.reshape(shape)

    def _dispatch(self, tok: torch.Tensor, eid: torch.Tensor):  # noqa: ANN202
        import torch.distributed as dist

        n = dist.get_world_size(self.group)
        owner = torch.tensor(self.owner, device=eid.device)[eid]
        send = torch.bincount(owner, minlength=n)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        s, rcv = send.tolist(), recv.tolist()
        out_tok = tok.new_empty((sum(rcv), tok.shape[1]))
        tok_r = _all_to_all_autograd(out_tok, tok, rcv, s, self.group)
        eid_r = eid.new_empty((sum(rcv),))
        dist.all_to_all_single(eid_r, eid, rcv, s, group=self.group)

        def back(y: torch.Tensor) -> torch.Tensor:
            buf = y.new_empty((sum(s), y.shape[1]))
            return _all_to_all_autograd(buf, y, s, rcv, self.group)

        return tok_r, eid_r, back


def _all_to_all_autograd(out: torch.Tensor, x: torch.Tensor, out_splits: list[int],
                         in_splits: list[int], group) -> torch.Tensor:  # noqa: ANN001  # fmt: skip
    """A differentiable all-to-all of ``x``'s rows (the backward runs the reverse exchange):
    torch's functional collective where it has one with autograd (torch >= 2.13 deprecates
    ``torch.distributed.nn.functional.all_to_all_single``), else that older autograd wrapper."""
    import torch.distributed._functional_collectives as funcol

    if hasattr(funcol, "all_to_all_single_autograd") and hasattr(funcol, "wait_tensor"):
        y = funcol.all_to_all_single_autograd(x, out_splits, in_splits, group)
        return funcol.wait_tensor(y)
    from torch.distributed.nn.functional import all_to_all_single

    return all_to_all_single(out, x, out_splits, in_splits, group=group)


def _split(x: torch.Tensor, group) -> torch.Tensor:  # noqa: ANN001
    """This rank's contiguous 1/n of ``x`` along dim 0 (n: the group's size)."""
    import torch.distributed as dist

    n, r = dist.get_world_size(group), dist.get_rank(group)
    per = x.shape[0] // n
    return x[r * per : (r + 1) * per].contiguous()


def _gather(x: torch.Tensor, group) -> torch.Tensor:  # noqa: ANN001
    """The group's slices concatenated along dim 0, in rank order."""
    import torch.distributed as dist

    from hwtune.parallel.runtime.comm import all_gather_single

    n = dist.get_world_size(group)
    out = x.new_empty((n * x.shape[0], *x.shape[1:]))
    all_gather_single(out, x.contiguous(), group)
    return out


class _Split(torch.autograd.Function):
    """Forward: this rank's slice of a replicated tensor; backward: the slices' gradients
    all-gathered (the replicated tensor's whole gradient on every rank)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:  # noqa: ANN001
        ctx.group = group
        return _split(x, group)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        return _gather(g, ctx.group), None


class _Gather(torch.autograd.Function):
    """Forward: the slices all-gathered into the replicated tensor; backward: this rank's
    slice of its (replicated, identical on every rank) gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:  # noqa: ANN001
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        return _split(g, ctx.group), None
