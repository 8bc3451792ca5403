"""Measured device profiles: what `hwtune bench` measured on a device, as plain data.

A profile is written by `hwtune.calibrate` and read by the cost models (`hwtune.cost`), which
then use the measured curves — interpolated over shape and message size — instead of the
spec-sheet roofline, and fall back to the spec sheet outside them. Nothing here imports torch.

File format (YAML or JSON), version 1::

    profile_version: 1
    device: {...}                 # a full Device description (name, peaks, memory, ...)
    software: {torch: "2.13.0", backend: cpu, threads: 2, ...}
    gemm:        [{dtype: fp32, m: 1024, n: 1024, k: 1024, batch: 1, seconds: 0.0031},
                  {dtype: fp32, m: 8, n: 1024, k: 1024, batch: 1, seconds: 6.1e-4, cold: true}, ...]
    memory:      {copy_bytes_per_s: 1.2e10, triad_bytes_per_s: 1.1e10, launch_s: 5e-6}
    elementwise: [{op: layer_norm, bytes: 4.0e6, seconds: 4.1e-4}, ...]   # op optional
    attention:   [{dtype: fp32, phase: fwd, batch: 1, heads: 8, seq_q: 512, seq_k: 512,
                   head_dim: 64, causal: true, flops: 1.1e9, seconds: 0.012}, ...]
    collectives: [{op: all_reduce, ranks: 2, bytes: 1048576, seconds: 0.0012}, ...]
    skipped:     [{section: gemm, what: tf32, reason: "..."}, ...]          # optional
    gemm_clocks: burst                                                       # optional

Fields added since the first version 1 files (``elementwise[].op``, ``skipped``,
``gemm[].cold``, ``gemm_clocks``) are optional, so those files still load.

``gemm_clocks`` says which clock the GEMM and attention timings ran at. ``burst`` (the default,
and what `hwtune bench` writes): each shape is timed for at most about 0.2 s, in replays of about
1 ms (`hwtune.calibrate.harness.time_fn`'s ``target_s``, ``BATCH_S``), and a power-limited GPU
runs such bursts at its boost clock: the H200 of VALIDATION.md ("Calibration on a GPU") measured
800 TFLOP/s bf16 in the bench, "short bursts at the 1980 MHz boost clock", and 657 TFLOP/s at
1440 MHz after 8 s of back-to-back GEMMs at its 700 W limit. The bench reads no clock while it
times: the label comes from how it times, not from a reading. ``sustained``: the rates were
taken after seconds of back-to-back GEMMs, at the clock the chip holds (a profile made so by
hand).
`hwtune.cost.power.power_limited` applies the device's ``sustained_gemm_fraction`` to burst
rates under sustained clocks, and not to sustained ones.
"""

from __future__ import annotations

import bisect
import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.frozen import FrozenModel

if TYPE_CHECKING:
    from hwtune.hardware.device import Device

D = TypeVar("D", bound="Device")

PROFILE_VERSION = 1

MEASURED_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
"""The dtypes `hwtune bench` measures (`hwtune.calibrate.harness.DTYPES`); a point of any other
dtype would be read and never used, so it is refused."""


POINT_CONFIG = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, strict=True)
"""The measured points and figures of a profile: strict types, so that a hand-edited ``true``
or ``"1e-3"`` is refused by name instead of read as 1 or 0.001 (an int is a valid float)."""


def _measured_dtype(v: str) -> str:
    if v not in MEASURED_DTYPES:
        raise ValueError(f"one of {', '.join(MEASURED_DTYPES)}")
    return v


class GemmPoint(BaseModel):
    """A measured GEMM. ``cold``: ``x @ W.T`` with few rows (decode, small prefill chunks) whose
    weight streamed from DRAM/HBM (not in any cache; `hwtune.calibrate.gemm`), as every weight
    GEMM of a serving step does."""

    model_config = POINT_CONFIG
    dtype: str
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    batch: int = Field(default=1, gt=0)
    seconds: float = Field(gt=0)
    cold: bool = False
    _dtype = field_validator("dtype")(_measured_dtype)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


class MemoryFigures(BaseModel):
    model_config = POINT_CONFIG
    copy_bytes_per_s: float = Field(gt=0)  # the streaming bandwidth (see calibrate.memory)
    triad_bytes_per_s: float | None = Field(default=None, gt=0)
    launch_s: float = Field(default=0.0, ge=0)
    memcpy_bytes_per_s: float | None = Field(default=None, gt=0)  # GPU: D2D copy_ (DMA)


class SizedPoint(BaseModel):
    """A memory-bound op moving ``bytes`` (read + written, as `model.lowering` counts them) in
    ``seconds``; ``op`` names the kernel (add, gelu, layer_norm, ...; optional, None in files
    that predate it, which stay version 1)."""

    model_config = POINT_CONFIG
    bytes: float = Field(gt=0)
    seconds: float = Field(gt=0)
    op: str | None = None


class AttentionPoint(BaseModel):
    model_config = POINT_CONFIG
    dtype: str
    phase: Literal["fwd", "bwd"]
    batch: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq_q: int = Field(gt=0)
    seq_k: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    causal: bool = True
    flops: float = Field(gt=0)
    seconds: float = Field(gt=0)
    _dtype = field_validator("dtype")(_measured_dtype)


class CollectivePoint(BaseModel):
    model_config = POINT_CONFIG
    op: Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"]
    ranks: int = Field(gt=0)
    bytes: float = Field(gt=0)
    seconds: float = Field(gt=0)


class SkippedBenchmark(BaseModel):
    """A benchmark `hwtune bench` did not run (unsupported dtype, missing backend, out of memory,
    time budget), and why."""

    model_config = POINT_CONFIG
    section: str
    what: str
    reason: str


class DeviceProfile(FrozenModel):
    """Measured curves of one device (see the module docstring for the file format)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    profile_version: int = PROFILE_VERSION
    software: dict[str, str | int | float] = Field(default_factory=dict)
    gemm: tuple[GemmPoint, ...] = ()
    memory: MemoryFigures | None = None
    elementwise: tuple[SizedPoint, ...] = ()
    attention: tuple[AttentionPoint, ...] = ()
    collectives: tuple[CollectivePoint, ...] = ()
    skipped: tuple[SkippedBenchmark, ...] = ()
    gemm_clocks: Literal["burst", "sustained"] = "burst"
    clock_fraction: float = Field(
        default=1.0,
        gt=0,
        le=1,
        exclude=True,
        description="the SM clock the compute-bound rates (hot GEMMs, training and prefill "
        "attention) are priced at, as a fraction of the clock they were measured at; set by "
        "hwtune.cost.power.power_limited, never read from a file",
    )
    _ew_curves: list | None = PrivateAttr(default=None)  # per-op sorted elementwise curves
    _cold: dict | None = PrivateAttr(default=None)  # dtype -> _ColdCurves
    _grids: dict | None = PrivateAttr(default=None)  # dtype -> (_GemmGrid or None, of hot points)

    def _hash_key(self) -> tuple:
        return (self.profile_version, self.gemm, self.memory, self.elementwise, self.attention,
                self.collectives, self.gemm_clocks, self.clock_fraction)  # fmt: skip

    # ---- interpolation -------------------------------------------------------------------
    def gemm_rate(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float | None:
        """Measured FLOP/s for a GEMM of this shape; None when none of ``dtype`` was measured.

        Up to the largest row count of the cold (weight-streaming) points: `cold_gemm_time`.
        A batch of ``batch`` such GEMMs (the experts of an MoE layer) is priced as one grouped
        kernel: ``m`` rows against one (n * batch) x k weight, the same FLOPs and weight bytes
        with one kernel's fixed cost, as the engines run them (vLLM's and SGLang's fused MoE
        Triton kernel, TensorRT-LLM's grouped GEMM: one launch per layer) and as tier 1 prices
        a batched GEMM (`cost.compute.gemm_time`); per-expert launches are ``launches`` there.
        On the H200 profile a 4096 x 4096 fp8 expert weight read alone takes 7.3 us, ~3 us of
        it the kernel's floor (a 256 x 256 one takes 2.9 us): 32 such experts as 32 kernels
        cost 234 us, as one grouped kernel ~141 us.

        Above the cold row counts: the time on the grid of the measured hot shapes of the same
        dtype (``m * batch`` rows), `_GemmGrid`: log(time) multilinear in (log m, log n,
        log k) between the grid's values, the time of the smallest grid shape below the grid
        (a kernel's fixed cost), the rate of the grid's edge above it (time grows with the
        FLOPs); and never less than the cold time at the largest cold row count (the same
        weight is read, with fewer rows: no drop where the cold points end; a hot point
        measured faster than that is priced at it). The time is therefore non-decreasing in
        m, n, k and batch. Cold points serve as the grid only when no hot one was measured;
        batched points only when no unbatched one was (the bench measures them off the grid:
        on the H200 profile these rules price them within 10% in bf16, fp16 and fp32 and 25%
        in tf32, `tests/hardware/test_profile_gemm_monotone.py`).

        At a ``clock_fraction`` below 1 (a power-limited clock, `cost.power.power_limited`) the
        grid's times grow by its inverse, as tier 1 scales the peaks (tensor throughput follows
        the SM clock); the cold points, weight reads bound by memory, whose clock is separate,
        do not."""
        flops = 2.0 * m * n * k * batch
        t = self.cold_gemm_time(m, n * batch, k, dtype)
        if t is not None:
            return flops / t
        grids = self.__pydantic_private__.get("_grids")
        if grids is None:
            grids = self.__pydantic_private__["_grids"] = {}
        entry = grids.get(dtype)
        if entry is None:
            pts = [p for p in self.gemm if p.dtype == dtype]
            hot = [p for p in pts if not p.cold]
            grid_pts = hot or pts
            grid_pts = [p for p in grid_pts if p.batch == 1] or grid_pts
            entry = grids[dtype] = (_GemmGrid(grid_pts) if grid_pts else None, bool(hot))
        grid, of_hot = entry
        if grid is None:
            return None
        t = grid.seconds(m * batch, n, k)
        if of_hot:  # compute-bound: the SM clock (a grid of cold points is memory-bound)
            t /= self.clock_fraction
        cold = self._cold_curves().get(dtype)
        if cold:  # the weight read of the largest cold row count bounds the time from below
            t = max(t, cold.seconds(m, n * batch, k))
        return flops / t

    def _cold_curves(self) -> dict[str, _ColdCurves]:
        cold = self.__pydantic_private__.get("_cold")
        if cold is None:
            fams: dict[str, dict[int, list[tuple[float, float]]]] = {}
            for p in self.gemm:
                if p.cold and p.batch == 1:
                    fams.setdefault(p.dtype, {}).setdefault(p.m, []).append(
                        (float(p.n) * p.k, p.seconds)
                    )
            cold = {dt: _ColdCurves(f) for dt, f in fams.items()}
            self.__pydantic_private__["_cold"] = cold
        return cold

    def cold_gemm_time(self, m: int, n: int, k: int, dtype: str) -> float | None:
        """Seconds of one GEMM of ``m`` rows against an (n x k) weight read from memory, from
        the cold points; None above their largest ``m`` or without any.

        At a fixed ``m`` the FLOPs (2mnk) and the weight bytes both grow as the weight's size
        nk, so the time is a fixed cost plus a term in nk: piecewise linear in nk between that
        m's measured sizes (the fixed cost below the smallest, proportional above the largest),
        whatever the weight's aspect ratio (to first order). Between two measured row counts
        m0 < m < m1 the time is linear in m, which is exact at both ends of the roofline:
        constant while the weight read bounds it, proportional to m once the FLOPs do
        (Williams et al., CACM 2009). Below the smallest row count: its time.

        The measured times are first made non-decreasing in rows and size (`_ColdCurves`): a
        point slower than a measured point of more rows or a larger weight is priced at that
        point's time (the smaller GEMM can run as the larger one, padded), so the time never
        falls as m, n or k grows."""
        curves = self._cold_curves().get(dtype)
        if curves is None or m > curves.rows[-1]:
            return None
        return curves.seconds(m, n, k)

    def attention_rate(
        self, phase: str, dtype: str, flops: float | None = None, decode: bool = False
    ) -> float | None:
        """Measured FLOP/s of the attention kernels of ``phase`` (forward model FLOPs for fwd,
        2.5x of them for bwd, as `cost.compute.attention_time` counts), over the training and
        prefill shapes (seq_q > 1) or, with ``decode``, the single-query shapes.

        Without ``flops``: the median rate. With ``flops``: log(time per FLOP) interpolated
        linearly in log(FLOPs) between the measured kernels that bracket it (sizes within
        SAME_SIZE_REL are one size, their times averaged), at the largest one's rate above them
        and, below them, at the time of a power law through the two smallest (exponent kept in
        [0, 1]) — kernel rates grow with size as fixed costs amortize, so the size of the kernel
        is the first-order variable. In log-log the time is a power law between two kernels, so
        it never leaves their range: time per FLOP itself linear in log(FLOPs) priced a kernel
        between two of equal time (a latency-bound pair 100x apart in size) at up to 5x that
        time. Training and prefill rates scale with ``clock_fraction`` (as tier 1 scales the
        peak attention runs at); decode rates, KV-cache reads, do not."""
        pts = [
            p
            for p in self.attention
            if p.phase == phase and p.dtype == dtype and (p.seq_q == 1) == decode
        ]
        if not pts:
            return None
        scale = 1.0 if decode else self.clock_fraction  # decode attention reads the KV cache
        if flops is None or flops <= 0:
            r = sorted(p.flops / p.seconds for p in pts)
            return r[len(r) // 2] * scale
        per_size = _one_per_size(sorted((p.flops, p.seconds / p.flops) for p in pts))
        curve = [(math.log(f), math.log(v)) for f, v in per_size]
        x = math.log(flops)
        x0, y0 = curve[0]
        nxt = curve[1] if len(curve) > 1 else None
        if x < x0 and nxt is not None:
            # below the smallest kernel: its time scaled as a power of the size whose exponent is
            # the log-log slope of the two smallest, kept in [0, 1] (between a fixed cost and
            # proportional scaling, as `_sized_time` extends a memory-bound op; Hockney 1994).
            # The rate of the smallest alone sent a small kernel's time to zero, under the
            # launch cost every measured kernel pays.
            slope = min(1.0, max(0.0, 1.0 + (nxt[1] - y0) / (nxt[0] - x0)))  # of log t = y + x
            return scale * flops / math.exp(y0 + x0 + slope * (x - x0))
        return scale / math.exp(_interp(curve, x))

    def memory_bandwidth(self) -> float | None:
        if self.memory is not None:
            return self.memory.copy_bytes_per_s
        return None

    def elementwise_time(self, nbytes: float) -> float | None:
        """Seconds for a memory-bound op moving ``nbytes``: per measured op kind, time linearly
        interpolated over the measured sizes (extended linearly below the smallest, between
        proportional scaling and the smallest point's time; `_sized_time`), at the largest
        measured bandwidth above it); the median over op kinds (the cost model does not know
        which kernel a memory-bound op is: norms, activations and adds run at different speeds
        on CPUs, within a few percent of each other on GPUs)."""
        if not self.elementwise:
            return None
        if nbytes <= 0:
            return 0.0
        curves = self.__pydantic_private__.get("_ew_curves")
        if curves is None:
            groups: dict[str | None, list[SizedPoint]] = {}
            for p in self.elementwise:
                groups.setdefault(p.op, []).append(p)
            curves = [sorted(g, key=lambda p: p.bytes) for g in groups.values()]
            self.__pydantic_private__["_ew_curves"] = curves
        times = sorted(_sized_time(c, nbytes) for c in curves)
        n = len(times)
        return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])

    def collective_fit(self, op: str = "all_reduce") -> tuple[float, float] | None:
        """(alpha seconds per step, bytes/s per rank) fit of the ring model
        t = 2(n-1) alpha + 2 (n-1)/n S / beta (all-reduce; (n-1) for the others) to the
        measured points (Thakur et al. 2005); None where the points do not determine it
        (`collective_fit_note` says why, and the spec sheet's link prices the collective)."""
        return self._collective_fit(op)[0]

    def collective_fit_note(self, op: str = "all_reduce") -> str:
        """Why the fit of ``op`` is not a plain two-parameter fit of the points (no fit, or
        alpha set to 0), or '' (a plain fit, or no point of ``op`` at all)."""
        return self._collective_fit(op)[1]

    def _collective_fit(self, op: str) -> tuple[tuple[float, float] | None, str]:
        """The fit and its note. Least squares on the relative error (each equation divided by
        its measured time), so that the microsecond points pin alpha and the large messages pin
        beta. Degenerate points fall back explicitly, each with its note:

        - one point, or points of one message size and rank count (the two unknowns' columns
          proportional, a determinant under ``DEGENERATE_REL`` of its scale): alpha and beta
          cannot be told apart; no fit;
        - a time that does not grow with the size (fitted 1/beta <= 0): no bandwidth; no fit;
        - a bandwidth term under ``MIN_BANDWIDTH_SHARE`` of the largest message's measured
          time: every point is latency-bound, and a beta that timing noise of a few percent
          moves by orders of magnitude (points flat in size fit 1e21 B/s) is not measured; no fit;
        - a negative alpha (latency below the timer's resolution): alpha 0 and the
          bandwidth-only fit of the same relative residuals."""
        pts = [p for p in self.collectives if p.op == op]
        if not pts:
            return None, ""
        name = op.replace("_", "-")
        one = (f"{name}: the measured points span one message size and rank count, which "
               "cannot tell latency from bandwidth; the spec sheet's link prices it")  # fmt: skip
        if len(pts) < 2:
            return None, one
        c = 2.0 if op == "all_reduce" else 1.0
        xs = [c * (p.ranks - 1) / p.seconds for p in pts]  # alpha coefficient / t
        zs = [c * (p.ranks - 1) / p.ranks * p.bytes / p.seconds for p in pts]  # 1/beta coef. / t
        # normal equations of 1 = a*x + g*z (relative residuals); a >= 0
        sxx = sum(x * x for x in xs)
        szz = sum(z * z for z in zs)
        sxz = sum(x * z for x, z in zip(xs, zs, strict=True))
        sx, sz = sum(xs), sum(zs)
        det = sxx * szz - sxz * sxz  # >= 0 (Cauchy-Schwarz), 0 for proportional columns
        if det <= DEGENERATE_REL * sxx * szz:
            return None, one
        a = (sx * szz - sz * sxz) / det
        g = (sz * sxx - sx * sxz) / det
        note = ""
        if a < 0:  # latency below resolution: bandwidth-only fit
            a, g = 0.0, sz / szz
            note = (f"{name}: the fitted latency was negative (below the timer's resolution): "
                    "latency 0 and a bandwidth-only fit")  # fmt: skip
        if g <= 0:
            return None, (f"{name}: the measured time does not grow with the message size (no "
                          "bandwidth fits); the spec sheet's link prices it")  # fmt: skip
        big = max(pts, key=lambda p: p.bytes)
        if c * (big.ranks - 1) / big.ranks * big.bytes * g < MIN_BANDWIDTH_SHARE * big.seconds:
            return None, (f"{name}: every measured point is latency-bound (the bandwidth term "
                          f"is under {MIN_BANDWIDTH_SHARE:.0%} of the largest message's time), "
                          "so the bandwidth is not measured; the spec sheet's link prices it")  # fmt: skip
        return (a, 1.0 / g), note


DEGENERATE_REL = 1e-9
"""`DeviceProfile.collective_fit`: the determinant of the normal equations, relative to the
product of its diagonal, under which the alpha and beta columns count as proportional (one
message size and rank count): a sum of rounding errors there, 1e-16 relative, fitted a latency of
244 us and 1.07 GB/s to three points of one size, one of them a rounding step larger."""

MIN_BANDWIDTH_SHARE = 0.01
"""`DeviceProfile.collective_fit`: the least share of the largest measured message's time that the
fitted bandwidth term must explain for the bandwidth to count as measured. An assumption, not a
measured figure: repeated timings of one collective are taken to vary by a few percent, so a term
under 1% of the time is within their noise, and beta then ranges over orders of magnitude."""


def _suffix_min(vals: list[float], shape: tuple[int, ...]) -> None:
    """In place: each entry of the row-major array ``vals`` of ``shape`` becomes the least
    entry at or above it along every axis (so the array is non-decreasing along each axis)."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    for d, size in enumerate(shape):
        st = strides[d]
        for i in range(len(vals) - 1, -1, -1):
            if (i // st) % size < size - 1 and vals[i + st] < vals[i]:
                vals[i] = vals[i + st]


class _ColdCurves:
    """The cold points of one dtype as a grid of (rows, weight size n*k) -> seconds, for
    `DeviceProfile.cold_gemm_time`.

    Sizes a row did not measure take that row's own curve (piecewise linear in n*k, its
    smallest point's time below, proportional above). Then each value becomes the least
    measured-or-filled time at or above it in rows and size (a GEMM can run padded to a larger
    one, so it takes no longer than it): the grid is non-decreasing in both, and a point keeps
    its measured time unless a GEMM of more rows or a larger weight was measured faster (on
    the H200 profile the GEMV-like 1- and 4-row kernels of a 1024^2 weight, 7.5 and 7.1 us in
    bf16 where 16 rows take 4.5 us)."""

    def __init__(self, fams: dict[int, list[tuple[float, float]]]) -> None:
        self.rows = sorted(fams)
        self.sizes = sorted({s for c in fams.values() for s, _ in c})
        vals = []
        for r in self.rows:
            curve = sorted(fams[r])
            for s in self.sizes:
                if s <= curve[0][0]:
                    vals.append(curve[0][1])
                elif s >= curve[-1][0]:
                    vals.append(curve[-1][1] * s / curve[-1][0])
                else:
                    vals.append(_interp(curve, s))
        _suffix_min(vals, (len(self.rows), len(self.sizes)))
        ns = len(self.sizes)
        self.curves = [list(zip(self.sizes, vals[i * ns : (i + 1) * ns], strict=True))
                       for i in range(len(self.rows))]  # fmt: skip

    def _at(self, i: int, size: float) -> float:  # seconds at (rows[i], size)
        curve = self.curves[i]
        if size >= curve[-1][0]:
            return curve[-1][1] * size / curve[-1][0]
        return _interp(curve, size)

    def seconds(self, m: int, n: int, k: int) -> float:
        """Seconds at (m, n, k); above the largest row count, that row count's time."""
        rows, size = self.rows, float(n) * k
        hi = bisect.bisect_left(rows, m)
        if hi == len(rows):
            return self._at(hi - 1, size)
        if rows[hi] == m or hi == 0:
            return self._at(hi, size)  # measured, or below the smallest row count
        lo = hi - 1
        t0, t1 = self._at(lo, size), self._at(hi, size)
        return t0 + (m - rows[lo]) / (rows[hi] - rows[lo]) * (t1 - t0)


class _GemmGrid:
    """Measured GEMM times of one dtype on their grid (the product of the measured m, n and k
    values; `hwtune.calibrate.gemm.gemm_grid` measures the whole product, up to a FLOP cap),
    for `DeviceProfile.gemm_rate`.

    Grid shapes the bench did not measure (above the cap, or a hand-written profile) take the
    rate of the nearest measured shape below them, and no less than the time of any measured
    shape below them; with none below, the least time of those above (none either: the
    nearest one's time, or its rate if slower). Then, as for the cold points (`_ColdCurves`),
    each value becomes the least time at or above it along m, n and k, so the grid never falls
    as a dimension grows and every measured shape keeps its time unless a larger one was
    measured faster (on the H200 profile: bf16 256^3 in 3.75 us, 256 x 1024 x 256 in 3.54 us).

    Between grid values log(time) is multilinear in (log m, log n, log k): exact where the
    time is a power of the sizes (constant at a kernel's fixed cost, proportional to m, n or
    k once the FLOPs bound it), and non-decreasing between non-decreasing values. Below the
    smallest grid value of a dimension the time is held there (a smaller kernel still pays
    the fixed cost every measured kernel pays); above the largest, the rate is held (the time
    grows with the FLOPs), the conservative extension: the largest shapes run at the peak."""

    def __init__(self, pts: list[GemmPoint]) -> None:
        sums: dict[tuple[int, int, int], list[float]] = {}
        for p in pts:
            sums.setdefault((p.m * p.batch, p.n, p.k), []).append(p.seconds)
        measured = {key: sum(ts) / len(ts) for key, ts in sums.items()}
        self.axes = tuple(sorted({key[d] for key in measured}) for d in range(3))
        self.logs = tuple([math.log(v) for v in ax] for ax in self.axes)
        shape = tuple(len(ax) for ax in self.axes)
        items = [(key, math.log(key[0]) + math.log(key[1]) + math.log(key[2]), t)
                 for key, t in measured.items()]  # fmt: skip
        vals = []
        for node in itertools.product(*self.axes):
            t = measured.get(node)
            if t is None:
                t = self._fill(node, items)
            vals.append(t)
        _suffix_min(vals, shape)
        self.shape = shape
        self.log_t = [math.log(t) for t in vals]

    @staticmethod
    def _fill(node: tuple[int, int, int], items: list) -> float:
        lf = math.log(node[0]) + math.log(node[1]) + math.log(node[2])
        ln = [math.log(v) for v in node]

        def dist(key: tuple[int, int, int]) -> float:
            return math.dist(ln, [math.log(v) for v in key])

        below = [it for it in items if all(a <= b for a, b in zip(it[0], node, strict=True))]
        if below:  # the nearest one's rate; of equally near ones the faster
            _, lfp, t = min(below, key=lambda it: (dist(it[0]), it[2] / math.exp(it[1])))
            return max(max(it[2] for it in below), t * math.exp(lf - lfp))
        above = [t for key, _, t in items if all(a >= b for a, b in zip(key, node, strict=True))]
        if above:
            return min(above)
        _, lfp, t = min(items, key=lambda it: dist(it[0]))  # the nearest one's time and rate
        return max(t, t * math.exp(lf - lfp))

    def seconds(self, m: int, n: int, k: int) -> float:
        """Seconds at (m, n, k) (see the class docstring)."""
        idx, wts, scale = [], [], 1.0
        for ax, lg, v in zip(self.axes, self.logs, (m, n, k), strict=True):
            if v <= ax[0]:
                idx.append(0)
                wts.append(0.0)
            elif v >= ax[-1]:
                idx.append(len(ax) - 1)
                wts.append(0.0)
                scale *= v / ax[-1]
            else:
                i = bisect.bisect_right(ax, v) - 1
                idx.append(i)
                wts.append((math.log(v) - lg[i]) / (lg[i + 1] - lg[i]))
        (i, j, h), (wi, wj, wh) = idx, wts
        _, sn, sk = self.shape
        lt = self.log_t
        acc = 0.0
        for di, fi in ((0, 1.0 - wi), (1, wi)):
            if fi == 0.0:
                continue
            for dj, fj in ((0, 1.0 - wj), (1, wj)):
                if fj == 0.0:
                    continue
                base = ((i + di) * sn + j + dj) * sk + h
                acc += fi * fj * ((1.0 - wh) * lt[base] + (wh * lt[base + 1] if wh else 0.0))
        return math.exp(acc) * scale


SAME_SIZE_REL = 1e-6
"""Two measured sizes closer than this (relative) are one size: the slope between them is
rounding noise (1,000 and 1,000.0000000000001 bytes gave a line that priced 333 bytes at the
smallest point's time)."""


def _one_per_size(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted (size, value) points with sizes within SAME_SIZE_REL of a group's smallest made
    one point: the smallest size and the mean value. Averaging only exactly equal sizes left two
    kernels 2e-12 apart (1e12 FLOPs and a rounding step under it) as a segment of zero width in
    log space, and one of their two measured times was never returned."""
    out: list[tuple[float, float]] = []
    group: list[float] = []
    start = 0.0
    for size, value in pts:
        if group and size <= start * (1 + SAME_SIZE_REL):
            group.append(value)
            continue
        if group:
            out.append((start, sum(group) / len(group)))
        start, group = size, [value]
    if group:
        out.append((start, sum(group) / len(group)))
    return out


def _interp(curve: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear y(x) through sorted (x, y) points, constant beyond the ends."""
    if x <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    return curve[-1][1]


def _sized_time(pts: list[SizedPoint], nbytes: float) -> float:
    """Seconds at ``nbytes`` on one op's sorted curve (see `DeviceProfile.elementwise_time`).

    Below the smallest size: the line through the two smallest sizes (a fixed cost plus bytes
    over bandwidth, t = t0 + S / B, the latency-bandwidth model of Hockney, Parallel Computing
    1994), kept between proportional scaling and the smallest point's time. Proportional
    scaling alone sent a small kernel's time to zero, below the launch cost every measured
    point pays (a 4 KiB op priced under the measured launch overhead)."""
    if nbytes <= pts[0].bytes:
        a = pts[0]
        prop = a.seconds * nbytes / a.bytes
        # the next size apart from the smallest (one a rounding step away is the same size)
        b = next((p for p in pts[1:] if p.bytes > a.bytes * (1 + SAME_SIZE_REL)), None)
        if b is None:
            return prop  # no second size to draw a line through
        line = a.seconds + (nbytes - a.bytes) * (b.seconds - a.seconds) / (b.bytes - a.bytes)
        return min(max(line, prop), a.seconds)
    for a, b in zip(pts, pts[1:], strict=False):
        if nbytes <= b.bytes:
            f = (nbytes - a.bytes) / (b.bytes - a.bytes)
            return a.seconds + f * (b.seconds - a.seconds)
    last = pts[-1]
    return last.seconds * nbytes / last.bytes


PLAUSIBLE_MARGIN = 0.15
"""How far above the device's peak a measured rate may be before `implausible_points` names it:
a GEMM or attention rate over (1 + margin) x the dtype's peak FLOP/s, a streaming bandwidth over
(1 + margin) x the memory bandwidth (for a memory-bound op larger than the cache, of the bytes
beyond it), a collective's least traffic per rank over (1 + margin) x its links. A data-center GPU's data-sheet peak is its rate at the
highest boost clock, so a correct timing stays under it (the H200 profile's best: bf16 0.81 of
the peak, fp8 0.71, STREAM triad 0.90 of the 4.8 TB/s); the margin, an assumption, leaves room
for boards whose GPU Boost runs above the rated boost clock the data sheet is computed at
(GeForce cards) and for timer resolution. A rate above it is a timing that missed the work (an
unsynchronized or lazily evaluated kernel) or a profile of another device."""


MEASURED_PEAKS = "measured by hwtune bench"
"""Words of a profile device's ``sources["peak_tflops"]`` when its peaks are the bench's best
GEMMs (`hwtune.calibrate.device_info.device_fields`), not a data sheet."""


PARTIAL_LINK_DEVICES: tuple[str, ...] = ("mi250",)
"""Devices (a name or alias containing these words) whose ``scaleup_gbps_per_direction`` is a
stand-in below what two of them can move, so no ceiling for a collective: the MI250X's two GCDs
of one package are joined at 200 GB/s where the catalog prices its uniform domain at the 100 of
two links (devices.yaml, its interconnect source: OLCF Frontier user guide)."""

LARGEST_GPU_CACHE_MIB = 256.0
"""The last-level cache assumed where ``l2_cache_mib`` does not give it: AMD parts (the catalog
counts their L2 only, devices.yaml; the MI300X/MI325X/MI350-series also carry a 256 MB Infinity
Cache, AMD CDNA 3 white paper) and a device that gives none (0). The largest on-package cache of
any GPU the catalog knows, so that no point a cache can serve is held to the memory bandwidth."""


def _min_traffic_share(op: str, n: int) -> float:
    """The least bytes per direction, as a share of the point's ``bytes`` S (nccl-tests sizes,
    `hwtune.calibrate.collectives`), that any algorithm must move through one rank's links for
    ``op`` over ``n`` ranks: all-reduce 1 (a rank receives the reduced buffer, S bytes it cannot
    compute alone, and sends its own S, however the reduction is split: ring, tree, or in the
    switch with NVLink SHARP), send/recv 1 (S sent), reduce-scatter, all-gather and all-to-all
    (n-1)/n (the other ranks' shares of its input it must send, or theirs it must receive)."""
    if n < 2:
        return 0.0
    return 1.0 if op in ("all_reduce", "send_recv") else (n - 1) / n


def _link_ceiling(device: Device) -> tuple[float, str] | None:
    """(bytes/s each way, how it is made up) that one rank's links can carry at most, or None
    where the device's figures bound no collective: a CPU (gloo ranks exchange through memory,
    not a link), a device without a scale-up figure (the catalog models PCIe cards whose NVLink
    bridge joins pairs as PCIe-only, devices.yaml; a GPU the catalog does not know has no link
    figure at all), or one of `PARTIAL_LINK_DEVICES`. Every byte a rank sends or receives
    crosses one of its links, so the ceiling is their sum: the scale-up fabric (NVLink or xGMI,
    the GPU's whole share of it), PCIe (behind which the NIC of a multi-node group sits) and a
    separate host link (NVLink-C2C)."""
    if device.form_factor.lower() == "cpu" or device.scaleup_gbps_per_direction <= 0:
        return None
    names = [device.name, *device.aliases]
    if any(w in x.lower() for w in PARTIAL_LINK_DEVICES for x in names):
        return None
    parts = [(device.scaleup_link or "scale-up", device.scaleup_gbps_per_direction),
             ("PCIe", device.pcie_gbps_per_direction)]  # fmt: skip
    if device.host_link_gbps_per_direction is not None:
        parts.append(("host link", device.host_link_gbps_per_direction))
    gbs = sum(v for _, v in parts)
    return gbs * 1e9, " + ".join(f"{k} {v:g}" for k, v in parts)


def _cache_bytes(device: Device) -> float:
    """The last-level cache a memory-bound op may run from (`LARGEST_GPU_CACHE_MIB` for AMD
    parts and where ``l2_cache_mib`` is 0)."""
    mib = device.l2_cache_mib
    if device.vendor == "amd" or mib <= 0:
        mib = max(mib, LARGEST_GPU_CACHE_MIB)
    return mib * 2**20


def implausible_points(device: Device) -> list[tuple[str, str, str]]:
    """(field, value, expected) for each point of ``device.profile`` faster than ``device`` can
    physically run (`PLAUSIBLE_MARGIN`): GEMMs and attention kernels against the peak of their
    dtype (a dtype without a peak is not checked), the STREAM and D2D copy bandwidths against
    the memory bandwidth, memory-bound ops (``elementwise``) larger than the cache against the
    memory bandwidth, collectives (each point, and the alpha-beta fit of each op) against the
    links. Where the peaks are the bench's own best GEMMs (a CPU, a GPU the catalog does not
    know: ``sources`` ``peak_tflops`` says "measured by hwtune bench"), no GEMM can exceed them
    and attention is not checked against them: they are no ceiling (a spent budget measures one
    1 x 64 x 64 GEMM, far under the CPU's attention rate). Such a device's bandwidth is its own
    STREAM copy figure, which the copy check then passes. Empty without a profile.

    Memory-bound ops: an op moving W bytes (read + written, its working set) on a device with a
    cache of C bytes (`_cache_bytes`) finds at most C of them in the cache when it starts, so at
    least W - C cross the memory interface: W / t may reach (1 + margin) x the bandwidth x
    W / (W - C), no ceiling at all up to C (the H200 profile: 6.7 TB/s against 4.8 at 24 MiB),
    and the bandwidth itself as W grows past C. Not checked on a CPU (the cache sysfs reports
    is one core complex's, and threads on several see several) or where the bandwidth is the
    bench's own STREAM figure (a measurement of the same kind, no ceiling above it).

    Collectives: each point's least traffic per direction through one rank's links
    (`_min_traffic_share` x bytes / seconds) against the sum of the links (`_link_ceiling`). For
    reduce-scatter, all-gather, all-to-all and send/recv that traffic is nccl-tests' busbw; for
    all-reduce it is the algbw (bytes / time), not the busbw (2(n-1)/n x algbw, the ring's
    traffic): NVLink SHARP (NCCL's NVLS) reduces in the switch, so that each GPU moves S(1 + 1/n)
    each way instead of 2S(n-1)/n (`hwtune.cost.collectives._nvls_algbw`), and its busbw exceeds
    the link (8 H100s: ~480 GB/s busbw, 275 algbw, over 450 GB/s of NVLink each way; nccl-tests
    #212, systems.yaml), but no algorithm delivers the reduced S bytes to a GPU faster than its
    links bring them in. The fit of an op (`DeviceProfile.collective_fit`, over the op's points
    not named here) is checked the same way at its large-message limit, at the largest rank
    count measured. Which ranks shared a node is not recorded, nor the NIC (a cluster figure, not
    the device's): a multi-node point is held to the same links (its NIC sits behind PCIe), not
    to the NIC's lower bandwidth."""
    prof = device.profile
    if prof is None:
        return []
    measured_peaks = MEASURED_PEAKS in device.sources.get("peak_tflops", "")
    limit = 1.0 + PLAUSIBLE_MARGIN
    out: list[tuple[str, str, str]] = []
    stale = "a faster timing missed work or is of another device (re-run hwtune bench)"

    def peak(dtype: str) -> float | None:
        tf = getattr(device.peak_tflops, dtype, None)
        return tf * 1e12 if tf else None

    for what, pts in (("gemm", prof.gemm), ("attention", () if measured_peaks else prof.attention)):
        for i, p in enumerate(pts):
            top = peak(p.dtype)
            rate = p.flops / p.seconds
            if top is None or rate <= limit * top:
                continue
            shape = (f"{p.m}x{p.n}x{p.k}" + (f" x{p.batch}" if p.batch > 1 else "")
                     if what == "gemm" else f"{p.phase} b{p.batch} h{p.heads} "
                     f"{p.seq_q}x{p.seq_k} d{p.head_dim}")  # fmt: skip
            out.append((f"{what}[{i}]", f"{rate / 1e12:.3g} TFLOP/s ({p.dtype} {shape} in "
                        f"{p.seconds:.3g} s)", f"at most {limit:g} x the {p.dtype} peak of "
                        f"{device.name} ({top / 1e12:.3g} TFLOP/s): {stale}"))  # fmt: skip
    bw = device.memory_bandwidth_si
    if prof.memory is not None:
        for key in ("copy_bytes_per_s", "memcpy_bytes_per_s"):
            v = getattr(prof.memory, key)
            if v is not None and v > limit * bw:
                out.append((f"memory.{key}", f"{v / 1e12:.3g} TB/s", f"at most {limit:g} x the "
                            f"memory bandwidth of {device.name} ({bw / 1e12:.3g} TB/s): {stale}"))  # fmt: skip
    bw_src = device.sources.get("memory_bandwidth_tbps", "")
    bw_measured = "hwtune bench" in bw_src and "data sheet" not in bw_src
    if prof.elementwise and device.form_factor.lower() != "cpu" and not bw_measured:
        cache = _cache_bytes(device)
        for i, p in enumerate(prof.elementwise):
            if p.bytes <= cache:
                continue  # may run from the cache
            rate, top = p.bytes / p.seconds, limit * bw * p.bytes / (p.bytes - cache)
            if rate > top:
                out.append((f"elementwise[{i}]", f"{rate / 1e12:.3g} TB/s ({p.op or 'op'} of "
                            f"{p.bytes / 2**20:.4g} MiB in {p.seconds:.3g} s)", f"at most "
                            f"{top / 1e12:.3g} TB/s: {limit:g} x the memory bandwidth of "
                            f"{device.name} ({bw / 1e12:.3g} TB/s) for the bytes beyond its "
                            f"{cache / 2**20:g} MiB cache, which must cross it; {stale}"))  # fmt: skip
    link = _link_ceiling(device) if prof.collectives else None
    if link is not None:
        top, parts = limit * link[0], link[1]
        ceiling = (f"at most {limit:g} x the {link[0] / 1e9:.4g} GB/s each way of {device.name}'s "
                   f"links ({parts} GB/s)")  # fmt: skip
        named: set[int] = set()
        for i, p in enumerate(prof.collectives):
            rate = _min_traffic_share(p.op, p.ranks) * p.bytes / p.seconds
            if rate <= top:
                continue
            named.add(i)
            ar = p.op == "all_reduce"
            bus = f"; busbw {2.0 * (p.ranks - 1) / p.ranks * rate / 1e9:.3g} GB/s" if ar else ""
            why = ("the all-reduce's algbw: each rank receives the whole reduced buffer through "
                   "its links, with NVLink SHARP too" if ar else
                   "the busbw: the bytes each rank must send or receive")  # fmt: skip
            out.append((f"collectives[{i}]", f"{rate / 1e9:.3g} GB/s {'algbw' if ar else 'busbw'} "
                        f"({p.op} of {p.bytes:.4g} B over {p.ranks} ranks in {p.seconds:.3g} s"
                        f"{bus})", f"{ceiling} for {why}; {stale}"))  # fmt: skip
        kept = tuple(p for i, p in enumerate(prof.collectives) if i not in named)
        rest = DeviceProfile(collectives=kept)
        for op in sorted({p.op for p in kept}):
            fit = rest.collective_fit(op)
            n = max(p.ranks for p in kept if p.op == op)
            if fit is None or n < 2:
                continue
            c = 2.0 if op == "all_reduce" else 1.0  # the fit's model, `_collective_fit`
            rate = _min_traffic_share(op, n) * fit[1] * n / (c * (n - 1))
            if rate > top:
                out.append((f"collectives({op} fit)", f"{rate / 1e9:.3g} GB/s at {n} ranks "
                            f"(fitted bandwidth {fit[1] / 1e9:.3g} GB/s, latency "
                            f"{fit[0] * 1e6:.3g} us)", f"{ceiling} for large messages; points "
                            "that fit a bandwidth beyond what each of them measured are no "
                            "measurement of it (re-run hwtune bench)"))  # fmt: skip
    return out


def check_plausible(device: Device, where: str) -> None:
    """Refuse ``device``'s profile (read from the file ``where``) when a measured point is faster
    than the device can run (`implausible_points`): the first such point, in one line."""
    bad = implausible_points(device)
    if bad:
        field, value, expected = bad[0]
        raise HwtuneInputError(f"{where}.{field}", value, expected)


def load_profile_file(path: str | Path) -> tuple[dict, DeviceProfile]:
    """(device fields, profile) from a profile file; errors name the bad field."""
    from hwtune.structured_file import read_structured

    p = Path(path)
    data = read_structured(p, "profile")
    if not isinstance(data, dict) or "device" not in data:
        raise HwtuneInputError(
            f"{p.name}.device", None, "a device description (hwtune bench writes one)"
        )
    ver = data.get("profile_version")
    if type(ver) is not int or ver != PROFILE_VERSION:  # `true` and 1.0 equal 1 in Python
        raise HwtuneInputError(
            f"{p.name}.profile_version", ver, f"{PROFILE_VERSION} (re-run hwtune bench)"
        )
    if "clock_fraction" in data:  # a pricing setting: from a file it would apply twice
        raise HwtuneInputError(f"{p.name}.clock_fraction", data["clock_fraction"], "no such key "
                               "in a profile (hwtune sets it when it prices a power-limited "
                               "clock; gemm_clocks says what the timings ran at)")  # fmt: skip
    dev = data.pop("device")
    if not isinstance(dev, dict):
        raise HwtuneInputError(f"{p.name}.device", dev, "a mapping of device fields "
                               "(name, peak_tflops, ...; hwtune bench writes one)")  # fmt: skip
    try:
        prof = DeviceProfile(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
    return dev, prof


def attach_profile(device: D, path: str | Path) -> D:
    """``device`` (a catalog `Device`) with the measured curves of the profile at ``path``.

    Refused when the profile was measured on another device (its ``device.name`` is neither the
    device's name nor one of its aliases, case-insensitive): a profile of one GPU applied to
    another would silently mix two devices' figures."""
    fields, prof = load_profile_file(path)
    theirs = str(fields.get("name", "")).strip().lower()
    ours = {device.name.lower(), *(a.lower() for a in device.aliases)}
    if theirs not in ours:
        raise HwtuneInputError(
            f"{Path(path).name}.device.name",
            fields.get("name"),
            f"a profile measured on {device.name} (this one is from another device)",
        )
    out = device.model_copy(update={"profile": prof})
    check_plausible(out, Path(path).name)
    return out
