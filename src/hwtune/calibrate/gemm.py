"""GEMM microbenchmark: achieved FLOP/s over a grid of shapes and dtypes.

The grid spans square, skinny (decode-size m of 1-16 rows) and MoE-like shapes (a batch of
expert GEMMs of a few dozen to a few hundred rows each, `torch.bmm`), in powers of two so that
`DeviceProfile.gemm_rate` interpolates in log-size between neighbours. FLOPs are 2mnk per problem
(one multiply and one add per inner-product term). Rates include the launch cost, which is how
the cost model uses them (`cost.compute.gemm_time` adds no overhead to a measured rate).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hwtune.calibrate.harness import DTYPES, Backend, Budget, Skip, guarded, time_fn


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


def gemm_grid(backend: Backend, mode: str) -> list[GemmShape]:
    """Shapes to measure, smallest first. CPUs get a grid up to 4096 (a 2-core CPU runs a
    4096^3 GEMM in about a second), GPUs up to 16384; a FLOP cap keeps quick mode short."""
    if backend.is_gpu:
        dims = (
            (256, 1024, 4096, 16384)
            if mode == "quick"
            else (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
        )
        skinny = (1, 16, 64)
        cap = 2.0 * 16384**3
        moe = [(64, 4096, 2048, 8), (256, 4096, 2048, 8), (512, 2048, 7168, 16)]
    else:
        dims = (64, 256, 1024, 4096) if mode == "quick" else (64, 128, 256, 512, 1024, 2048, 4096)
        skinny = (1, 16)
        cap = 2.0 * 1024 * 1024 * 4096 * (1 if mode == "quick" else 4)
        moe = [(64, 1024, 512, 8), (256, 1024, 1024, 8)]
    shapes = {GemmShape(m, n, k) for m, n, k in itertools.product(dims, dims, dims)}
    shapes |= {GemmShape(m, n, n) for m in skinny for n in dims}
    shapes |= {GemmShape(m, n, k, b) for m, n, k, b in moe}
    return sorted((s for s in shapes if s.flops <= cap), key=lambda s: (s.flops, s.m, s.n, s.k))


def _gemm_fn(shape: GemmShape, dtype: str, backend: Backend) -> Callable[[], object]:
    dt = DTYPES[dtype]
    g = torch.Generator(device=backend.device).manual_seed(0)
    if shape.batch > 1:
        a = torch.randn(shape.batch, shape.m, shape.k, device=backend.device, generator=g).to(dt)
        b = torch.randn(shape.batch, shape.k, shape.n, device=backend.device, generator=g).to(dt)
        return lambda: torch.bmm(a, b)
    a = torch.randn(shape.m, shape.k, device=backend.device, generator=g).to(dt)
    b = torch.randn(shape.k, shape.n, device=backend.device, generator=g).to(dt)
    return lambda: torch.mm(a, b)


def check_dtype(dtype: str, backend: Backend) -> str | None:
    """Why ``dtype`` cannot be measured on ``backend`` (None when it can)."""
    if dtype not in DTYPES:
        if dtype == "fp8":
            return "fp8 GEMMs (torch._scaled_mm) are not measured by this version"
        return f"unknown dtype (measurable: {', '.join(DTYPES)})"
    if dtype == "tf32" and not backend.is_gpu:
        return "tf32 is a CUDA/ROCm math mode; CPUs run fp32"
    if dtype == "bf16" and backend.is_gpu and not torch.cuda.is_bf16_supported():
        return "the GPU does not support bf16"
    return None


def bench_gemm(
    backend: Backend,
    dtypes: list[str],
    mode: str,
    budget: Budget,
    skips: list[Skip],
    advance: Callable[[str], None] = lambda _: None,
) -> list[dict]:
    """Measured GEMM points (profile ``gemm`` entries); each dtype gets an equal share of the
    budget, shapes beyond it are recorded as skipped."""
    points: list[dict] = []
    grid = gemm_grid(backend, mode)
    ok = []
    for dt in dtypes:
        why = check_dtype(dt, backend)
        if why:
            skips.append(Skip("gemm", dt, why))
        else:
            ok.append(dt)
    for i, dt in enumerate(ok):
        share = Budget(budget.left / (len(ok) - i))
        prev_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        try:
            for j, s in enumerate(grid):
                what = f"{dt} {s.m}x{s.n}x{s.k}" + (f" x{s.batch}" if s.batch > 1 else "")
                advance(f"gemm {what}")
                if j > 0 and share.spent:  # the smallest shape always runs: no empty curve
                    skips.append(
                        Skip("gemm", f"{dt}: {len(grid) - j} larger shapes", "time budget")
                    )
                    break
                fn = guarded(
                    skips, "gemm", what, lambda s=s, dt=dt: _gemm_fn(s, dt, backend), backend
                )
                if fn is None:
                    continue
                secs = guarded(skips, "gemm", what, lambda fn=fn: time_fn(fn, backend), backend)
                del fn
                if secs:
                    points.append({"dtype": dt, "m": s.m, "n": s.n, "k": s.k, "batch": s.batch,
                                   "seconds": secs})  # fmt: skip
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return points


def best_rates(points: list[dict]) -> dict[str, float]:
    """The best measured FLOP/s per dtype (what a CPU profile takes as its peak)."""
    best: dict[str, float] = {}
    for p in points:
        r = 2.0 * p["m"] * p["n"] * p["k"] * p["batch"] / p["seconds"]
        best[p["dtype"]] = max(best.get(p["dtype"], 0.0), r)
    return best
