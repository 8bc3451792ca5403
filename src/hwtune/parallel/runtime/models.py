"""A tiny GPT and a tiny MoE in torchtitan's layout (``tok_embeddings``, ``layers`` as a
ModuleDict keyed "0".."n-1", ``norm``, ``output``), so a pipeline stage is the model with the
other layers deleted and tensor parallelism is a plan over module names. Random weights from a
seed; float32 for exact comparisons.

Recomputation (activation checkpointing, ``torch.utils.checkpoint`` with ``use_reentrant=False``)
is a per-block attribute, as the plan resolves it per layer (Korthikanti et al. MLSys'23 §4):
``full`` keeps only the block's input and reruns the block in the backward; ``selective``
reruns the attention core (scores, softmax, weighted sum), so the s^2 tensors of a
non-fused attention are never kept; ``none`` keeps everything.

Rotary position embedding (``rope``, off by default so the measured activation bytes stay
those of the model without it): on for context-parallel runs, where a rank's tokens are not
positions 0..s/cp-1 (`context_parallel`), so a wrong position would change the loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from hwtune.model.spec import ModelSpec


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 96
    d_model: int = 32
    n_heads: int = 4
    ffn: int = 64
    n_layers: int = 4
    seq: int = 16
    n_experts: int = 0  # > 0: every layer's FFN is a mixture of experts
    top_k: int = 2
    flash: bool = True  # fused attention (SDPA); False: scores and softmax as separate tensors
    rope: bool = False  # rotary position embedding on q and k (RoFormer)


def rotary(x: torch.Tensor, pos: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of (b, h, s, d) at token positions ``pos`` (s,): pairs
    (x_j, x_{j+d/2}) rotated by pos * theta^(-2j/d) (Su et al. 2021, RoFormer eq. 34, in the
    half-split layout of Llama/torchtitan)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = pos.to(x.device, torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def _checkpoint(fn, *args: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    from torch.utils.checkpoint import checkpoint

    return checkpoint(fn, *args, use_reentrant=False)


class Attention(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.hd = c.d_model // c.n_heads
        self.flash = c.flash
        self.recompute_core = False  # selective recomputation of the attention core
        self.rope = c.rope
        # context parallelism (`context_parallel.apply_cp`): this rank's token positions and
        # the group K/V are all-gathered over; None: the whole sequence is local
        self.positions: torch.Tensor | None = None
        self.cp_group = None
        # q, k and v in one linear, its rows head by head (head, {q, k, v}, head dim), as
        # Megatron-LM's fused QKV: a column split by heads gives each rank its heads' q, k and
        # v, and tensor parallelism all-reduces the input gradient once, not three times
        self.wqkv = nn.Linear(c.d_model, 3 * c.d_model, bias=False)
        self.wo = nn.Linear(c.d_model, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: the local heads under tensor parallelism (torchtitan's convention)
        qkv = self.wqkv(x).view(b, s, -1, 3, self.hd)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        if self.rope:
            pos = self.positions if self.positions is not None else torch.arange(s, device=x.device)
            q, k = rotary(q, pos), rotary(k, pos)
        if self.recompute_core and torch.is_grad_enabled():
            o = _checkpoint(self.core, q, k, v)
        else:
            o = self.core(q, k, v)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + causal mask) v: fused (SDPA) or as separate tensors; under
        context parallelism over the whole sequence (K/V all-gathered)."""
        if self.cp_group is not None:
            from hwtune.parallel.runtime.context_parallel import cp_attention

            return cp_attention(q, k, v, self.positions, self.cp_group, self.flash)
        if self.flash:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * self.hd**-0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


class FeedForward(nn.Module):
    """SwiGLU (w2(silu(w1 x) * w3 x)), w1 and w3 in one linear ``w13`` whose rows alternate
    (hidden unit, {gate, up}), as Megatron-LM's fused gate-up ``linear_fc1``: a column split
    gives each rank its units' gate and up rows, one input-gradient all-reduce under tensor
    parallelism."""

    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.w13 = nn.Linear(d, 2 * f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w13(x).unflatten(-1, (-1, 2))
        return self.w2(F.silu(h[..., 0]) * h[..., 1])


class Block(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        from hwtune.parallel.runtime.experts import MoE

        self.attention_norm = nn.RMSNorm(c.d_model)
        self.attention = Attention(c)
        self.ffn_norm = nn.RMSNorm(c.d_model)
        self.moe = c.n_experts > 0
        self.feed_forward = MoE(c) if self.moe else FeedForward(c.d_model, c.ffn)
        self.recompute = "none"

    def set_recompute(self, mode: str) -> None:
        """``none``, ``selective`` (the attention core) or ``full`` (the whole block)."""
        if mode not in ("none", "selective", "full"):
            raise ValueError(f"recompute: got {mode!r}; expected none, selective or full")
        self.recompute = mode
        self.attention.recompute_core = mode == "selective"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full" and torch.is_grad_enabled():
            return _checkpoint(self._body, x)
        return self._body(x)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyTransformer(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.config = c
        self.tok_embeddings: nn.Module | None = nn.Embedding(c.vocab, c.d_model)
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(c.n_layers)})
        self.norm: nn.Module | None = nn.RMSNorm(c.d_model)
        self.output: nn.Module | None = nn.Linear(c.d_model, c.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h


def build(c: TinyConfig, seed: int) -> TinyTransformer:
    """The full model with seeded random weights (the same on every rank)."""
    torch.manual_seed(seed)
    return TinyTransformer(c).float()


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def batch(
    c: TinyConfig, global_batch: int, step: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and next-token targets of one step (the same on every rank)."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    t = torch.randint(0, c.vocab, (global_batch, c.seq + 1), generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def model_spec(c: TinyConfig) -> ModelSpec:
    """The tiny model as the planner sees it (the same parameters, counted by
    `hwtune.model.params`), so the compiler, the estimator's memory model and the
    annotations resolve against exactly what runs."""
    from hwtune.model.spec import ModelSpec
    from hwtune.model.spec import MoE as MoESpec

    moe = (
        MoESpec(n_routed_experts=c.n_experts, top_k=c.top_k, expert_ffn_hidden=c.ffn)
        if c.n_experts
        else None
    )
    return ModelSpec(name="tiny-moe" if moe else "tiny-gpt", n_layers=c.n_layers,
                     d_model=c.d_model, n_heads=c.n_heads, ffn_hidden=c.ffn, vocab=c.vocab,
                     moe=moe)  # fmt: skip
