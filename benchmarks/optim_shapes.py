"""Parameter shapes of GPT-2 small (Radford et al. 2019; 124 M parameters with the vocabulary padded
to 50,304 as in nanoGPT), shared by the optim_* benchmarks, which need the tensors, not a forward."""

from __future__ import annotations

import torch
from torch import nn


def gpt2_shapes(layers: int = 12, d: int = 768, vocab: int = 50304, ctx: int = 1024):
    shapes = [(vocab, d), (ctx, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,)]  # ln_1, attention
        shapes += [(d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]  # ln_2, MLP
    return shapes + [(d,), (d,)]  # ln_f (the head is tied to the embedding)


def parameters(
    dtype: torch.dtype, layers: int = 12, seed: int = 0, d: int = 768
) -> nn.ParameterList:
    """GPT-2-shaped parameters of ``dtype`` with gradients of the same dtype (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    params = nn.ParameterList()
    for shape in gpt2_shapes(layers, d):
        p = nn.Parameter((torch.randn(shape, generator=gen) * 0.02).to(dtype))
        p.grad = (torch.randn(shape, generator=gen) * 1e-3).to(dtype)
        params.append(p)
    return params
