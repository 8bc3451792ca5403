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
    dtype: torch.dtype, layers: int = 12, seed: int = 0, d: int = 768, device: str = "cpu"
) -> nn.ParameterList:
    """GPT-2-shaped parameters of ``dtype`` with gradients of the same dtype, on ``device``:
    seeded random values (drawn on the device itself: a 1.5 B-parameter draw on one CPU thread
    takes minutes), or uninitialised on ``meta`` (which dispatches ops without computing)."""
    gen = None if device == "meta" else torch.Generator(device=device).manual_seed(seed)
    params = nn.ParameterList()
    for shape in gpt2_shapes(layers, d):
        if gen is None:
            p = nn.Parameter(torch.empty(shape, dtype=dtype, device=device))
            p.grad = torch.empty_like(p)
        else:
            w = torch.randn(shape, generator=gen, device=device) * 0.02
            p = nn.Parameter(w.to(dtype))
            p.grad = (torch.randn(shape, generator=gen, device=device) * 1e-3).to(dtype)
        params.append(p)
    return params
