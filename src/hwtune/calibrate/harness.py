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
    device_time: bool = True,
    calls: int | None = None,
    graph: bool = True,
) -> float:
    """Median seconds of ``fn()`` after ``warmup`` runs: at least ``min_repeats`` timed runs, more
    (up to ``max_repeats``) while their total stays under ``target_s``.

    On a CPU each run is one call, timed by the backend's clock. On a GPU (``device_time``) it
    is the device time of a batch of back-to-back calls (`gpu_device_time`): what a kernel
    costs inside a stream of kernels, as a step of a training loop or of a CUDA-graph serving
    engine runs it, without the host's launch and synchronization (~13 us per call on the H200
    of BENCHMARKS.md, more than a decode GEMM's own time). ``device_time=False`` times single
    calls bracketed by synchronizations instead (the launch-overhead figure)."""
    if backend.is_gpu and device_time:
        return gpu_device_time(
            fn, backend, warmup, min_repeats, max_repeats, target_s, calls, graph
        )
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


BATCH_S = 1e-3
"""Device time one timed GPU batch aims at (so that event resolution, ~0.5 us, is negligible)."""
MAX_BATCH_CALLS = 1024


def gpu_device_time(
    fn: Callable[[], Any],
    backend: Backend,
    warmup: int = 1,
    min_repeats: int = 3,
    max_repeats: int = 20,
    target_s: float = 0.2,
    calls: int | None = None,
    graph: bool = True,
) -> float:
    """Device seconds per call of ``fn`` on a GPU: ``calls`` back-to-back calls (default: enough
    for ``BATCH_S`` of work, at most ``MAX_BATCH_CALLS``) captured once in a CUDA graph and
    replayed between CUDA events, the median over the replays divided by ``calls``.

    Replaying a graph launches its kernels without the host in the loop, so a small kernel is
    timed at its device time rather than at the rate the host can launch it (the method of
    ``triton.testing.do_bench_cudagraph``). Where capture fails (an op that cannot be captured)
    (or with ``graph=False``: autograd's backward runs on its own thread and streams, which a
    capture on this one does not cover) the batch is issued eagerly between the same events
    instead. ``calls`` matters for cold
    weights (`hwtune.calibrate.gemm.WeightPool`): a batch must sweep the whole pool so that
    replays do not find its windows in L2."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(backend.device)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) * 1e-3, 1e-7)
    n = calls or int(min(MAX_BATCH_CALLS, max(1, BATCH_S // one)))
    captured = None
    try:
        if not graph:
            raise NotImplementedError("graph capture not asked for")
        side = torch.cuda.Stream(backend.device)
        side.wait_stream(torch.cuda.current_stream(backend.device))
        with torch.cuda.stream(side):  # capture needs its allocations warmed on a side stream
            for _ in range(n):
                fn()
        torch.cuda.current_stream(backend.device).wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            for _ in range(n):
                fn()
        run: Callable[[], Any] = captured.replay
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        captured = None
        torch.cuda.synchronize(backend.device)

        def run() -> None:
            for _ in range(n):
                fn()

    run()  # the first replay uploads the graph
    times: list[float] = []
    total = 0.0
    while len(times) < max_repeats and (len(times) < min_repeats or total < target_s):
        start.record()
        run()
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end) * 1e-3
        times.append(dt / n)
        total += dt
    del captured
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
    "gpu_device_time",
    "guarded",
    "resolve_clock",
    "time_fn",
]
