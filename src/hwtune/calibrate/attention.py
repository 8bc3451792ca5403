"""Attention microbenchmark: `torch.nn.functional.scaled_dot_product_attention` forward and
backward on training/prefill shapes (causal, seq_q = seq_k) and forward on decode shapes (one
query over a cache of seq_k keys).

FLOPs follow `model.lowering` and `cost.compute.attention_time`: forward model FLOPs
2 * seq_q * seq_k * (d_qk + d_v) * heads * batch, halved when causal (Dao 2023, §3.1: flash
kernels skip the masked blocks); the backward is recorded as 2.5x the forward count (5 matmuls
of the forward's size vs 2). A kernel that does not skip masked blocks (torch's CPU kernel below
its 512-key block, an unfused fallback) then simply shows a lower rate, which is what the cost
model must use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hwtune.calibrate.harness import DTYPES, Backend, Budget, Skip, guarded, time_fn

BWD_FLOP_RATIO = 2.5


@dataclass(frozen=True)
class AttnShape:
    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool

    @property
    def flops(self) -> float:
        f = 2.0 * self.seq_q * self.seq_k * 2 * self.head_dim * self.heads * self.batch
        return f / 2 if self.causal else f


def attention_grid(backend: Backend, mode: str) -> tuple[list[AttnShape], list[AttnShape]]:
    """(training/prefill shapes, decode shapes), smallest first."""
    if backend.is_gpu:
        seqs = (512, 2048, 8192) if mode == "quick" else (256, 512, 1024, 2048, 4096, 8192, 16384)
        heads, dims = 16, (64, 128)
        dec_ctx, dec_b = (1024, 8192, 32768), (1, 32)
    else:
        seqs = (128, 256, 512, 1024) if mode == "quick" else (64, 128, 256, 512, 1024, 2048, 4096)
        heads, dims = 8, (64,) if mode == "quick" else (32, 64, 128)
        dec_ctx, dec_b = (512, 4096), (1, 8)
    train = [AttnShape(b, heads, s, s, d, True) for s in seqs for d in dims for b in (1, 4)]
    decode = [AttnShape(b, heads, 1, c, d, False) for c in dec_ctx for d in dims for b in dec_b]
    key = lambda s: (s.flops, s.seq_k)  # noqa: E731
    return sorted(train, key=key), sorted(decode, key=key)


def _tensors(s: AttnShape, dtype: str, backend: Backend, grad: bool) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device=backend.device).manual_seed(0)
    dt = DTYPES[dtype]

    def one(seq: int) -> torch.Tensor:
        t = torch.randn(s.batch, s.heads, seq, s.head_dim, device=backend.device, generator=g)
        return t.to(dt).requires_grad_(grad)

    return one(s.seq_q), one(s.seq_k), one(s.seq_k)


def _point(s: AttnShape, dtype: str, phase: str, flops: float, secs: float) -> dict:
    return {"dtype": dtype, "phase": phase, "batch": s.batch, "heads": s.heads, "seq_q": s.seq_q,
            "seq_k": s.seq_k, "head_dim": s.head_dim, "causal": s.causal, "flops": flops,
            "seconds": secs}  # fmt: skip


def bench_attention(
    backend: Backend,
    dtypes: list[str],
    mode: str,
    budget: Budget,
    skips: list[Skip],
    advance: Callable[[str], None] = lambda _: None,
) -> list[dict]:
    """Profile ``attention`` points: fwd and bwd of the training shapes, fwd of decode shapes."""
    points: list[dict] = []
    train, decode = attention_grid(backend, mode)
    ok = [d for d in dtypes if d in ("fp32", "bf16", "fp16", "fp64")]
    for d in dtypes:
        if d not in ok:
            skips.append(Skip("attention", d, "attention is measured in fp32/bf16/fp16 only"))
    for i, dt in enumerate(ok):
        share = Budget(budget.left / (len(ok) - i))
        for j, s in enumerate(train):
            what = f"{dt} b{s.batch} h{s.heads} s{s.seq_q} d{s.head_dim} causal"
            advance(f"attention {what}")
            if j > 0 and share.spent:  # the smallest shape always runs: no empty curve
                skips.append(Skip("attention", f"{dt}: shapes from {what}", "time budget"))
                break

            def run(s: AttnShape = s, dt: str = dt) -> list[dict]:
                q, k, v = _tensors(s, dt, backend, grad=True)
                t_f = time_fn(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), backend
                )
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                go = torch.randn_like(o)
                t_b = time_fn(
                    lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True),
                    backend,
                    graph=False,
                )
                return [
                    _point(s, dt, "fwd", s.flops, t_f),
                    _point(s, dt, "bwd", BWD_FLOP_RATIO * s.flops, t_b),
                ]

            got = guarded(skips, "attention", what, run, backend)
            if got:
                points.extend(got)
        for j, s in enumerate(decode):
            what = f"{dt} decode b{s.batch} h{s.heads} ctx{s.seq_k} d{s.head_dim}"
            advance(f"attention {what}")
            if j > 0 and share.spent:
                skips.append(Skip("attention", f"{dt}: decode shapes from {what}", "time budget"))
                break

            def run_dec(s: AttnShape = s, dt: str = dt) -> list[dict]:
                q, k, v = _tensors(s, dt, backend, grad=False)
                t = time_fn(lambda: F.scaled_dot_product_attention(q, k, v), backend)
                return [_point(s, dt, "fwd", s.flops, t)]

            got = guarded(skips, "attention", what, run_dec, backend)
            if got:
                points.extend(got)
    return points
