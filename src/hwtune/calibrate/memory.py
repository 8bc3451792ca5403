"""Memory benchmarks: STREAM copy/scale/triad bandwidth, launch overhead, and the memory-bound
ops of a transformer (residual add, scaling, GeLU, LayerNorm, RMSNorm, softmax) over sizes.

Bytes are counted as STREAM does (McCalpin 1995, "Memory Bandwidth and Machine Balance": copy
and scale move 2 words per element, add and triad 3) and as `model.lowering` counts memory-bound
ops (bytes read + written once), so the measured curve plugs into `cost.compute.memory_time`.
The bandwidth arrays are 4x the last-level cache or more, so they stream from DRAM/HBM.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from hwtune.calibrate.harness import Backend, Budget, Skip, guarded, time_fn

ELEMENTWISE_OPS: dict[str, int] = {
    "add": 3,  # a + b: read 2, write 1 (residual add)
    "scale": 2,  # a * s (dropout-free scaling, bias-free casts)
    "gelu": 2,
    "layer_norm": 2,
    "rms_norm": 2,
    "softmax": 2,
}
"""Tensor passes of each op (reads + writes of an activation-sized tensor)."""


def last_level_cache_bytes() -> int:
    """The largest CPU cache the OS reports (sysfs), or 64 MiB when it says nothing."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            txt = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(txt[-1:], 1)
        try:
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or 64 * 2**20


STREAM_KEYS = ("copy_bytes_per_s", "scale_bytes_per_s", "triad_bytes_per_s")


def bench_stream(backend: Backend, mode: str, skips: list[Skip]) -> dict | None:
    """Copy, scale and triad bandwidth (bytes/s) over arrays beyond the caches, and the launch
    overhead (seconds of a one-element add): the profile's ``memory`` block.

    On a GPU ``copy_bytes_per_s`` (the bandwidth a profile stands for) is the best of the
    three kernels, and the ``copy_`` figure is kept as ``memcpy_bytes_per_s``: a device-to-device
    ``copy_`` is a DMA memcpy, which a CUDA graph hands to the copy engines. On the H200 of
    VALIDATION.md it moved 2.38 TB/s in a graph (3.60 TB/s issued eagerly) where the triad
    kernel moved 4.33 TB/s, what memory-bound kernels reach."""
    if backend.is_gpu:
        total = torch.cuda.get_device_properties(backend.device).total_memory
        n_bytes = min(2**30, total // 16)
    else:
        # 2x the last-level cache per array (3 arrays in all), 4x in thorough mode
        n_bytes = min((2 if mode == "quick" else 4) * last_level_cache_bytes(), 2**31)
        n_bytes = max(n_bytes, 64 * 2**20)
    n = n_bytes // 4

    def run() -> dict:
        a = torch.ones(n, device=backend.device)
        b = torch.ones(n, device=backend.device)
        c = torch.ones(n, device=backend.device)
        kw = {"warmup": 1, "min_repeats": 2 if mode == "quick" else 5, "max_repeats": 5,
              "target_s": 0.3}  # fmt: skip
        t_copy = time_fn(lambda: b.copy_(a), backend, **kw)
        t_scale = time_fn(lambda: torch.mul(a, 3.0, out=b), backend, **kw)
        t_triad = time_fn(lambda: torch.add(b, c, alpha=3.0, out=a), backend, **kw)
        one = torch.ones(1, device=backend.device)
        t_launch = time_fn(lambda: one + one, backend, warmup=10, min_repeats=50, max_repeats=200,
                           device_time=False)  # fmt: skip
        out = {
            "copy_bytes_per_s": 2 * 4 * n / t_copy,
            "scale_bytes_per_s": 2 * 4 * n / t_scale,
            "triad_bytes_per_s": 3 * 4 * n / t_triad,
            "launch_s": t_launch,
            "array_bytes": 4 * n,
        }
        if backend.is_gpu:
            out["memcpy_bytes_per_s"] = out["copy_bytes_per_s"]
            out["copy_bytes_per_s"] = max(out[k] for k in STREAM_KEYS)
        return out

    return guarded(skips, "memory", f"stream {4 * n / 2**20:.0f} MiB", run, backend)


def _op_fn(op: str, x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    w = x.shape[-1]
    if op == "add":
        return lambda: x + y
    if op == "scale":
        return lambda: x * 0.5
    if op == "gelu":
        return lambda: F.gelu(x)
    if op == "layer_norm":
        wt = torch.ones(w, device=x.device, dtype=x.dtype)
        return lambda: F.layer_norm(x, (w,), wt, wt)
    if op == "rms_norm":
        wt = torch.ones(w, device=x.device, dtype=x.dtype)
        return lambda: F.rms_norm(x, (w,), wt)
    if op == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    raise ValueError(f"unknown op {op}")


def elementwise_sizes(backend: Backend, mode: str) -> list[int]:
    """Element counts, 4x apart (quick) or 2x apart (thorough), from 4 Ki to 16 Mi (CPU quick),
    64 Mi (CPU thorough) or 256 Mi (GPU) elements."""
    top = 28 if backend.is_gpu else (24 if mode == "quick" else 26)
    step = 2 if mode == "quick" else 1
    return [2**e for e in range(12, top + 1, step)]


def bench_elementwise(
    backend: Backend,
    mode: str,
    budget: Budget,
    skips: list[Skip],
    advance: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict], str]:
    """(profile ``elementwise`` points, the dtype used): each op at each size, rows of 1024.
    Activations are fp32 on a CPU (CPU training runs fp32) and bf16 on a GPU."""
    dtype = torch.bfloat16 if backend.is_gpu else torch.float32
    eb = 2 if backend.is_gpu else 4
    points: list[dict] = []
    sizes = elementwise_sizes(backend, mode)
    for i, n in enumerate(sizes):
        if i > 0 and budget.spent:  # the smallest size always runs: no empty curve
            skips.append(
                Skip("elementwise", f"{len(sizes) - i} sizes from {n} elements", "time budget")
            )
            break

        def run(n: int = n) -> list[dict]:
            x = torch.randn(n // 1024, 1024, device=backend.device).to(dtype)
            y = torch.randn(n // 1024, 1024, device=backend.device).to(dtype)
            out = []
            for op, passes in ELEMENTWISE_OPS.items():
                advance(f"elementwise {op} {n * eb / 2**20:.2f} MiB")
                secs = time_fn(_op_fn(op, x, y), backend, target_s=0.05)
                out.append({"op": op, "bytes": float(passes * n * eb), "seconds": secs})
            return out

        got = guarded(skips, "elementwise", f"{n} elements", run, backend)
        if got:
            points.extend(got)
    return points, "bf16" if backend.is_gpu else "fp32"
