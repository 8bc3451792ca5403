"""Step time as a function of batch size and clocks, from the foundation estimator or measured.

    T(B, f, f_mem) = host(B) + memory(B) * f_mem,ref / f_mem + compute(B) * f_ref / f

with each part affine in the batch B (``fixed + per_sample * B``). ``compute`` is the
compute-bound kernel time, which scales with the SM clock; ``memory`` the memory-bound kernel
time, which scales with the memory clock (roofline: Williams, Waterman & Patterson, CACM 2009;
on GPUs the SM clock does not change DRAM bandwidth — the premise of `hwtune.cost.power`);
``host`` the time the GPU waits on the CPU (data loading, Python, synchronisation), which
neither clock changes. The GPU's busy share u = (memory + compute) / T and its memory-bound
share u_mem = memory / T feed the power model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwtune.energy.power_model import nonneg_lstsq
from hwtune.errors import HwtuneInputError


@dataclass(frozen=True, slots=True)
class StepParts:
    """Seconds of one step by kind, at the given clocks."""

    host_s: float
    memory_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.host_s + self.memory_s + self.compute_s

    @property
    def utilization(self) -> float:
        t = self.total_s
        return (self.memory_s + self.compute_s) / t if t > 0 else 0.0

    @property
    def mem_utilization(self) -> float:
        t = self.total_s
        return self.memory_s / t if t > 0 else 0.0


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Per-step seconds, each part ``(fixed, per_sample)`` at the reference clocks."""

    f_ref_hz: float
    compute_s: tuple[float, float]
    memory_s: tuple[float, float] = (0.0, 0.0)
    host_s: tuple[float, float] = (0.0, 0.0)
    fmem_ref_hz: float | None = None

    def __post_init__(self) -> None:
        if not (self.f_ref_hz > 0 and math.isfinite(self.f_ref_hz)):
            raise HwtuneInputError("f_ref_hz", self.f_ref_hz, "a positive finite clock in Hz")
        for name in ("compute_s", "memory_s", "host_s"):
            v = getattr(self, name)
            if len(v) != 2 or not all(x >= 0 and math.isfinite(x) for x in v):
                raise HwtuneInputError(name, v, "(fixed, per-sample) non-negative finite seconds")
        if self.fmem_ref_hz is not None and not (
            self.fmem_ref_hz > 0 and math.isfinite(self.fmem_ref_hz)
        ):
            raise HwtuneInputError("fmem_ref_hz", self.fmem_ref_hz, "a positive finite clock in Hz")

    def parts(self, batch: float, f_hz: float, fmem_hz: float | None = None) -> StepParts:
        if not (batch > 0 and math.isfinite(batch)):
            raise HwtuneInputError("batch size", batch, "a positive number of samples")
        if not (f_hz > 0 and math.isfinite(f_hz)):
            raise HwtuneInputError("frequency", f_hz, "a positive clock in Hz")
        if fmem_hz is not None and not (fmem_hz > 0 and math.isfinite(fmem_hz)):
            raise HwtuneInputError("memory frequency", fmem_hz, "a positive clock in Hz")
        r_mem = 1.0
        if fmem_hz is not None and self.fmem_ref_hz:
            r_mem = self.fmem_ref_hz / fmem_hz
        return StepParts(
            host_s=self.host_s[0] + self.host_s[1] * batch,
            memory_s=(self.memory_s[0] + self.memory_s[1] * batch) * r_mem,
            compute_s=(self.compute_s[0] + self.compute_s[1] * batch) * self.f_ref_hz / f_hz,
        )

    def step_time_s(self, batch: float, f_hz: float, fmem_hz: float | None = None) -> float:
        return self.parts(batch, f_hz, fmem_hz).total_s

    def to_dict(self) -> dict[str, object]:
        return {
            "f_ref_hz": self.f_ref_hz,
            "compute_s": list(self.compute_s),
            "memory_s": list(self.memory_s),
            "host_s": list(self.host_s),
            "fmem_ref_hz": self.fmem_ref_hz,
        }


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One measured operating point: mean step time, and the busy shares when the meter has
    them (None when it does not)."""

    batch: float
    f_hz: float
    time_s: float
    utilization: float | None = None
    mem_utilization: float | None = None


def _affine(batches: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if len(set(batches.tolist())) < 2:
        c = float(max(0.0, np.mean(y)))
        return (c, 0.0)
    coef = nonneg_lstsq(np.column_stack([np.ones_like(batches), batches]), y)
    return (float(coef[0]), float(coef[1]))


def fit_step_model(points: Sequence[StepPoint], f_ref_hz: float) -> StepTimeModel:
    """Fit `StepTimeModel` to measured points (non-negative least squares).

    With utilization readings the step splits directly: host = T (1 - u), memory = T u_mem,
    compute = T (u - u_mem), and each part is fitted affine in B (compute after rescaling to
    ``f_ref_hz``). Without them T = K(B) + C(B) f_ref / f is fitted and K is booked as
    memory-bound (GPU-busy) time: power predictions then take the GPU as always busy, which
    overestimates power at small batches — the safe side of a cap."""
    pts = list(points)
    if len(pts) < 2:
        raise HwtuneInputError("step points", len(pts), "at least two measured points")
    if not (isinstance(f_ref_hz, int | float) and f_ref_hz > 0 and math.isfinite(f_ref_hz)):
        raise HwtuneInputError("reference clock", f_ref_hz, "a positive finite clock in Hz")
    for p in pts:  # NaN passes every comparison: a NaN reading used to fit a zero-time model
        shares = [x for x in (p.utilization, p.mem_utilization) if x is not None]
        if not all(math.isfinite(x) for x in (p.batch, p.f_hz, p.time_s, *shares)):
            raise HwtuneInputError("step point", p, "finite numbers")
        if p.batch <= 0 or p.f_hz <= 0 or p.time_s <= 0:
            raise HwtuneInputError("step point", p, "batch > 0, f_hz > 0, time_s > 0")
    b = np.array([p.batch for p in pts], dtype=float)
    t = np.array([p.time_s for p in pts])
    r = np.array([f_ref_hz / p.f_hz for p in pts])
    if all(p.utilization is not None for p in pts):
        u = np.clip(np.array([p.utilization for p in pts], dtype=float), 0.0, 1.0)
        um = np.array([p.mem_utilization or 0.0 for p in pts], dtype=float)
        um = np.minimum(np.clip(um, 0.0, 1.0), u)
        return StepTimeModel(
            f_ref_hz=f_ref_hz,
            compute_s=_affine(b, t * (u - um) / r),
            memory_s=_affine(b, t * um),
            host_s=_affine(b, t * (1.0 - u)),
        )
    if len({round(p.f_hz) for p in pts}) < 2:
        raise HwtuneInputError("step points", "one clock", "points at two or more clocks")
    a = np.column_stack([np.ones_like(b), b, r, b * r])
    k0, k1, c0, c1 = (float(x) for x in nonneg_lstsq(a, t))
    return StepTimeModel(f_ref_hz=f_ref_hz, compute_s=(c0, c1), memory_s=(k0, k1))


def step_model_from_estimator(
    model: object,
    device: object,
    seq: int,
    batches: Sequence[int] = (1, 2, 4, 8),
    precision: str | None = None,
    host_s: tuple[float, float] = (0.0, 0.0),
    f_ref_hz: float | None = None,
    gpus: int = 1,
) -> StepTimeModel:
    """A step model for a transformer from the foundation estimator: each batch is estimated at
    the full clock and at half the clock; the time that doubles is the compute-bound part, the
    rest is memory-bound (and launch, and with ``gpus`` > 1 communication) time. ``host_s`` adds
    CPU-side time the estimator does not model; ``f_ref_hz`` names the clock the estimator's
    step holds at when it differs from ``boost_clock_mhz`` (a profile's exact table top, or
    the sustained clock of a power-limited data-center part). ``gpus`` > 1: the step of one GPU
    of a data-parallel job that shards parameters, gradients and optimizer state over them
    (ZeRO-3 / FSDP) on one node of the device's catalog system; the batch is per GPU.

    ``model``: a `ModelSpec` or catalog name; ``device``: a `Device` or catalog name."""
    from hwtune.hardware.catalog import get_device
    from hwtune.hardware.cluster import make_cluster
    from hwtune.hardware.device import Device, PeakTflops
    from hwtune.train.estimator import estimate

    dev = device if isinstance(device, Device) else get_device(str(device))
    half = dev.model_copy(
        update={
            "peak_tflops": PeakTflops(
                **{k: (v * 0.5 if v else v) for k, v in dev.peak_tflops.model_dump().items()}
            )
        }
    )
    if not (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1):
        raise HwtuneInputError("gpus", gpus, "a positive number of GPUs")
    comp, mem = [], []
    for bt in batches:
        kw = {"micro_batch": int(bt), "seq": seq, "precision": precision,
              "zero": 3 if gpus > 1 else 0}  # fmt: skip
        t_full = estimate(model, make_cluster(dev, gpus), **kw).step_time_s  # type: ignore[arg-type]
        t_half = estimate(model, make_cluster(half, gpus), **kw).step_time_s  # type: ignore[arg-type]
        c = max(0.0, t_half - t_full)
        comp.append(c)
        mem.append(max(0.0, t_full - c))
    b = np.array(batches, dtype=float)
    return StepTimeModel(
        f_ref_hz=f_ref_hz or dev.boost_clock_mhz * 1e6,
        compute_s=_affine(b, np.array(comp)),
        memory_s=_affine(b, np.array(mem)),
        host_s=host_s,
    )
