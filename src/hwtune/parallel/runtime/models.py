"""A tiny GPT and a tiny MoE in torchtitan's layout (``tok_embeddings``, ``layers`` as a
ModuleDict keyed "0".."n-1", ``norm``, ``output``), so a pipeline stage is the model with the
other layers deleted and tensor parallelism is a plan over module names. Random weights from a
seed; float32 for exact comparisons."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


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


class Attention(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.hd = c.d_model // c.n_heads
        self.wq = nn.Linear(c.d_model, c.d_model, bias=False)
        self.wk = nn.Linear(c.d_model, c.d_model, bias=False)
        self.wv = nn.Linear(c.d_model, c.d_model, bias=False)
        self.wo = nn.Linear(c.d_model, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: the local heads under tensor parallelism (torchtitan's convention)
        q, k, v = (
            w(x).view(b, s, -1, self.hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU (w2(silu(w1 x) * w3 x))."""

    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        from hwtune.parallel.runtime.experts import MoE

        self.attention_norm = nn.RMSNorm(c.d_model)
        self.attention = Attention(c)
        self.ffn_norm = nn.RMSNorm(c.d_model)
        self.moe = c.n_experts > 0
        self.feed_forward = MoE(c) if self.moe else FeedForward(c.d_model, c.ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
