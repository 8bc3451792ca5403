"""GEMM microbenchmark: achieved FLOP/s over a grid of shapes and dtypes.

The grid spans square, skinny (a few rows to a few hundred) and MoE-like shapes (a batch of
expert GEMMs of a few dozen to a few hundred rows each, `torch.bmm`), in powers of two so that
`DeviceProfile.gemm_rate` interpolates in log-size between neighbours. FLOPs are 2mnk per problem
(one multiply and one add per inner-product term). On a CPU rates include the call's
own cost; on a GPU they are device time (`hwtune.calibrate.harness.gpu_device_time`: back-to-back
calls in a CUDA graph), the time a kernel takes in a stream of kernels. Either way
`cost.compute.gemm_time` adds no overhead to a measured rate; an engine's host time is its own
calibration (`hwtune.serve.profile`).

Skinny shapes are measured as a serving step runs them (``cold`` points): ``x @ W.T`` with the
weight stored as `torch.nn.Linear` stores it (n x k, `torch.nn.functional.linear`), and a weight
that is not in any cache. A step reads every weight of the model once, so by the time a layer's
weight is read again (the next step) the whole model has gone through the caches; a benchmark
that re-reads one matrix measures the cache instead. With few rows the weight read is the time
(Williams et al., CACM 2009: operational intensity ~m/2 FLOP/byte), and up to a few hundred
rows it is still a visible share, as the GEMM packs the weight before it computes. Each call
therefore reads the next window of a pool of at least twice the last-level cache (the STREAM
rule, McCalpin 1995), so every read streams from DRAM/HBM. On the 2-core Xeon of VALIDATION.md
the 28 layer GEMMs of a 4-layer h512 Llama take 5.4 ms at m = 1 (12 GB/s of weights, the STREAM
copy figure) and 26 ms at m = 128, as the model runs them and as these cold points measure; hot
``torch.mm`` points of the same shapes take 0.74x of that at m = 128 (and a 1x1024x1024 one
re-reads its 4 MiB at ~30 GB/s); from m = 512 up the three agree.

fp8 (E4M3) GEMMs run through ``torch._scaled_mm`` with per-tensor scales and a bf16 output, the
call Transformer Engine's and vLLM's per-tensor fp8 linears reduce to (cuBLASLt fp8 GEMM); they
are measured on GPUs with fp8 tensor cores (compute capability 8.9 and up: Ada, Hopper,
Blackwell), hot and cold, not batched (``_scaled_mm`` takes 2-D operands).
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
    cold: bool = False  # x @ W.T, the weight (n x k) read from DRAM/HBM (see the module doc)

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
        skinny = (1, 4, 16, 64, 256)
        cap = 2.0 * 16384**3
        moe = [(64, 4096, 2048, 8), (256, 4096, 2048, 8), (512, 2048, 7168, 16)]
    else:
        dims = (64, 256, 1024, 4096) if mode == "quick" else (64, 128, 256, 512, 1024, 2048, 4096)
        skinny = (1, 2, 4, 8, 16, 64, 256)
        cap = 2.0 * 1024 * 1024 * 4096 * (1 if mode == "quick" else 4)
        moe = [(64, 1024, 512, 8), (256, 1024, 1024, 8)]
    shapes = {GemmShape(m, n, k) for m, n, k in itertools.product(dims, dims, dims)}
    shapes |= {GemmShape(m, n, n, cold=True) for m in skinny for n in dims}  # weights streamed
    shapes |= {GemmShape(m, n, k, b) for m, n, k, b in moe}
    return sorted((s for s in shapes if s.flops <= cap), key=lambda s: (s.flops, s.m, s.n, s.k))


def cache_bytes(backend: Backend) -> int:
    """The last-level cache a weight must not sit in: the GPU's L2, or the CPU's largest cache."""
    if backend.is_gpu:
        props = torch.cuda.get_device_properties(backend.device)
        return int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
    from hwtune.calibrate.memory import last_level_cache_bytes

    return last_level_cache_bytes()


class WeightPool:
    """One flat buffer of at least twice the last-level cache (and twice the largest weight)
    whose consecutive windows serve as the weights of cold GEMMs: a window is read again only
    after the whole pool has gone through the cache, so every weight read streams from memory."""

    def __init__(self, backend: Backend, dtype: str, largest: int) -> None:
        dt = DTYPES[dtype]
        esize = torch.empty((), dtype=dt).element_size()
        n = max(2 * cache_bytes(backend) // esize, 2 * largest)
        self.buf = torch.full((n,), 0.01, dtype=dt, device=backend.device)

    def windows(self, n: int, k: int) -> Windows:
        """A function returning the next (n x k) window each call, cycling through the pool
        (the views are made here, so a timed call does no indexing of its own)."""
        count = max(2, self.buf.numel() // (n * k))
        views = itertools.cycle([self.buf[i * n * k : (i + 1) * n * k].view(n, k)
                                 for i in range(count)])  # fmt: skip
        return Windows(views.__next__, count)


@dataclass(frozen=True)
class Windows:
    """The next window of a `WeightPool` at each call; ``count`` calls sweep the whole pool."""

    next: Callable[[], torch.Tensor]
    count: int

    def __call__(self) -> torch.Tensor:
        return self.next()


@dataclass(frozen=True)
class PoolCall:
    """A cold GEMM: ``fn`` reads the next pool window each call; a timed GPU batch makes
    ``calls`` of them (one sweep of the pool, `hwtune.calibrate.harness.gpu_device_time`)."""

    fn: Callable[[], object]
    calls: int

    def __call__(self) -> object:
        return self.fn()


def _gemm_fn(
    shape: GemmShape, dtype: str, backend: Backend, pool: WeightPool | None = None
) -> Callable[[], object]:
    dt = DTYPES[dtype]
    g = torch.Generator(device=backend.device).manual_seed(0)
    if dtype == "fp8":
        return _fp8_fn(shape, backend, g, pool)
    if shape.cold:
        x = torch.randn(shape.m, shape.k, device=backend.device, generator=g).to(dt)
        return _cold(shape, pool, lambda w: torch.nn.functional.linear(x, w))
    if shape.batch > 1:
        a = torch.randn(shape.batch, shape.m, shape.k, device=backend.device, generator=g).to(dt)
        b = torch.randn(shape.batch, shape.k, shape.n, device=backend.device, generator=g).to(dt)
        return lambda: torch.bmm(a, b)
    a = torch.randn(shape.m, shape.k, device=backend.device, generator=g).to(dt)
    b = torch.randn(shape.k, shape.n, device=backend.device, generator=g).to(dt)
    return lambda: torch.mm(a, b)


def _cold(
    shape: GemmShape, pool: WeightPool | None, op: Callable[[torch.Tensor], object]
) -> PoolCall:
    """``op`` applied to the next (n x k) window of ``pool`` at each call (a cold GEMM)."""
    if pool is None:
        raise ValueError("no memory for the cold-weight pool")
    weight = pool.windows(shape.n, shape.k)
    return PoolCall(lambda: op(weight()), weight.count)


def _fp8_fn(
    shape: GemmShape, backend: Backend, g: torch.Generator, pool: WeightPool | None
) -> Callable[[], object]:
    """``x @ W.T`` in fp8 E4M3 (``torch._scaled_mm``: A row-major, B column-major, i.e. the
    (n x k) weight transposed, per-tensor fp32 scales, bf16 out)."""
    if shape.batch > 1:
        raise ValueError("batched fp8 GEMMs are not measured (torch._scaled_mm is 2-D)")
    fp8 = DTYPES["fp8"]
    one = torch.ones((), device=backend.device, dtype=torch.float32)
    x = torch.randn(shape.m, shape.k, device=backend.device, generator=g).to(fp8)

    def mm(w: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    if shape.cold:
        return _cold(shape, pool, mm)
    w = torch.randn(shape.n, shape.k, device=backend.device, generator=g).to(fp8)
    return lambda: mm(w)


def fp8_capable(backend: Backend) -> bool:
    """Whether the GPU has fp8 tensor cores (CUDA compute capability 8.9 or higher)."""
    if backend.kind != "cuda":
        return False
    return torch.cuda.get_device_capability(backend.device) >= (8, 9)


def check_dtype(dtype: str, backend: Backend) -> str | None:
    """Why ``dtype`` cannot be measured on ``backend`` (None when it can)."""
    if dtype not in DTYPES:
        return f"unknown dtype (measurable: {', '.join(DTYPES)})"
    if dtype == "fp8" and not fp8_capable(backend):
        return "fp8 GEMMs need fp8 tensor cores (CUDA compute capability 8.9+)"
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
    largest = max((s.n * s.k for s in grid if s.cold), default=0)
    for i, dt in enumerate(ok):
        share = Budget(budget.left / (len(ok) - i))
        prev_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        pool: WeightPool | None = None  # allocated at the first cold shape, freed after the dtype
        tried = False
        try:
            for j, s in enumerate(grid):
                what = f"{dt} {s.m}x{s.n}x{s.k}" + (f" x{s.batch}" if s.batch > 1 else "")
                advance(f"gemm {what}")
                if j > 0 and share.spent:  # the smallest shape always runs: no empty curve
                    skips.append(
                        Skip("gemm", f"{dt}: {len(grid) - j} larger shapes", "time budget")
                    )
                    break
                if s.cold:
                    what += " cold"
                    if not tried:  # a failed allocation is recorded once, as a skip
                        tried = True
                        pool = guarded(
                            skips,
                            "gemm",
                            f"{dt} cold-weight pool",
                            lambda dt=dt: WeightPool(backend, dt, largest),
                            backend,
                        )
                fn = guarded(
                    skips,
                    "gemm",
                    what,
                    lambda s=s, dt=dt, pool=pool: _gemm_fn(s, dt, backend, pool),
                    backend,
                )
                if fn is None:
                    continue
                calls = fn.calls if isinstance(fn, PoolCall) else None
                secs = guarded(skips, "gemm", what,
                               lambda fn=fn, c=calls: time_fn(fn, backend, calls=c),
                               backend)  # fmt: skip
                del fn
                if secs:
                    pt = {"dtype": dt, "m": s.m, "n": s.n, "k": s.k, "batch": s.batch,
                          "seconds": secs}  # fmt: skip
                    if s.cold:
                        pt["cold"] = True
                    points.append(pt)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
            del pool
            backend.empty_cache()
    return points


def best_rates(points: list[dict]) -> dict[str, float]:
    """The best measured FLOP/s per dtype (what a CPU profile takes as its peak)."""
    best: dict[str, float] = {}
    for p in points:
        r = 2.0 * p["m"] * p["n"] * p["k"] * p["batch"] / p["seconds"]
        best[p["dtype"]] = max(best.get(p["dtype"], 0.0), r)
    return best
