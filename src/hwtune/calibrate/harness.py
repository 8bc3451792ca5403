"""Timing harness of the microbenchmarks: the backend (CPU, CUDA, ROCm), warm-up and median
timing, time budgets, and skips recorded with their reason.

Timing follows the usual microbenchmark practice (nccl-tests, PyTorch ``torch.utils.benchmark``):
warm-up runs first (allocator, JIT-compiled kernels, caches), then repeated timed runs with the
device synchronized around each, and the median kept (robust to the odd descheduling of a shared
machine). A benchmark that raises (out of memory, an unsupported dtype, a missing backend) is
recorded as skipped with its reason and the run goes on.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,  # fp32 storage, TF32 math (allow_tf32 on CUDA)
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8": torch.float8_e4m3fn,  # GEMM inputs only: torch._scaled_mm, bf16 output
}


def clock_fn(clock: str) -> Callable[[], float]:
    """The timer of ``clock``: wall time (``perf_counter``) or this process's CPU time
    (``process_time``: all its threads, user + system, not the time it waits descheduled)."""
    return time.process_time if clock == "cpu" else time.perf_counter


def resolve_clock(clock: str, kind: str, threads: int) -> str:
    """``auto``: CPU time for a single-threaded CPU run, wall time otherwise.

    On a machine shared with other work, a single-threaded process's CPU time is the time it
    would take alone (compute and memory stalls count, time descheduled does not), whereas wall
    time measures the neighbours' load as much as the kernel. With several threads, CPU time
    sums them and says nothing about elapsed time, and GPU kernels run off the CPU: wall time."""
    if clock not in ("auto", "wall", "cpu"):
        raise ValueError(f"clock {clock!r}: expected auto, wall or cpu")
    if clock == "cpu" and (kind != "cpu" or threads != 1):
        raise ValueError("clock 'cpu' needs a CPU run with one thread per process")
    if clock == "auto":
        return "cpu" if kind == "cpu" and threads == 1 else "wall"
    return clock


@dataclass(frozen=True)
class Backend:
    """Where the benchmarks run: ``kind`` is cpu, cuda or rocm (ROCm is torch's cuda device);
    ``clock`` is wall or cpu (see `resolve_clock`)."""

    kind: str
    device: torch.device
    name: str
    threads: int
    clock: str = "wall"

    def now(self) -> float:
        return clock_fn(self.clock)()

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "rocm")

    def sync(self) -> None:
        if self.is_gpu:
            torch.cuda.synchronize(self.device)

    def empty_cache(self) -> None:
        if self.is_gpu:
            torch.cuda.empty_cache()


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def detect_backend(
    device: str = "auto", threads: int | None = None, clock: str = "auto"
) -> Backend:
    """The GPU when torch sees one (CUDA or ROCm), else the CPU; ``threads`` sets torch's intra-op
    threads (default: the CPUs this process may use)."""
    threads = threads or cpu_count()
    torch.set_num_threads(threads)
    want_gpu = device in ("auto", "cuda", "rocm", "gpu")
    if want_gpu and torch.cuda.is_available():
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        dev = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(dev)
        return Backend(kind, dev, name, threads, resolve_clock(clock, kind, threads))
    if device not in ("auto", "cpu"):
        raise RuntimeError(f"device {device!r} requested but torch sees no GPU")
    return Backend("cpu", torch.device("cpu"), "cpu", threads, resolve_clock(clock, "cpu", threads))


@dataclass
class Skip:
    """A benchmark that did not run, and why."""

    section: str
    what: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"section": self.section, "what": self.what, "reason": self.reason}


@dataclass
class Budget:
    """Wall-clock budget of one section: benchmarks past it are skipped (quick mode bound), except
    the first (smallest) shape of each sweep, so that every requested curve has a point."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    @property
    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    @property
    def spent(self) -> bool:
        return self.left <= 0


def time_fn(
    fn: Callable[[], Any],
    backend: Backend,
    *,
    warmup: int = 1,
    min_repeats: int = 3,
    max_repeats: int = 20,
    target_s: float = 0.2,
) -> float:
    """Median seconds of ``fn()`` after ``warmup`` runs: at least ``min_repeats`` timed runs, more
    (up to ``max_repeats``) while their total stays under ``target_s``. Each run is bracketed by
    device synchronizations, so GPU kernels are timed to completion."""
    for _ in range(warmup):
        fn()
    backend.sync()
    times: list[float] = []
    total = 0.0
    now = backend.now
    while len(times) < max_repeats and (len(times) < min_repeats or total < target_s):
        t0 = now()
        fn()
        backend.sync()
        dt = now() - t0
        times.append(dt)
        total += dt
    return statistics.median(times)


def failure_reason(e: BaseException) -> str:
    """One line saying why a benchmark failed (OOM, unsupported dtype, missing backend, ...)."""
    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
        return "out of memory"
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{type(e).__name__}: {msg[:160]}"


def guarded(
    skips: list[Skip], section: str, what: str, fn: Callable[[], Any], backend: Backend
) -> Any:
    """``fn()``, or None with a `Skip` recorded when it raises; memory is released either way."""
    try:
        return fn()
    except (RuntimeError, TypeError, ValueError, NotImplementedError, MemoryError) as e:
        skips.append(Skip(section, what, failure_reason(e)))
        return None
    finally:
        backend.empty_cache()


__all__ = [
    "DTYPES",
    "Backend",
    "Budget",
    "Skip",
    "clock_fn",
    "cpu_count",
    "detect_backend",
    "failure_reason",
    "guarded",
    "resolve_clock",
    "time_fn",
]
