"""Measured device profiles: what `hwtune bench` measured on a device, as plain data.

A profile is written by `hwtune.calibrate` and read by the cost models (`hwtune.cost`), which
then use the measured curves — interpolated over shape and message size — instead of the
spec-sheet roofline, and fall back to the spec sheet outside them. Nothing here imports torch.

File format (YAML or JSON), version 1::

    profile_version: 1
    device: {...}                 # a full Device description (name, peaks, memory, ...)
    software: {torch: "2.13.0", backend: cpu, threads: 2, ...}
    gemm:        [{dtype: fp32, m: 1024, n: 1024, k: 1024, batch: 1, seconds: 0.0031}, ...]
    memory:      {copy_bytes_per_s: 1.2e10, triad_bytes_per_s: 1.1e10, launch_s: 5e-6}
    elementwise: [{bytes: 4.0e6, seconds: 4.1e-4}, ...]
    attention:   [{dtype: fp32, phase: fwd, batch: 1, heads: 8, seq_q: 512, seq_k: 512,
                   head_dim: 64, causal: true, flops: 1.1e9, seconds: 0.012}, ...]
    collectives: [{op: all_reduce, ranks: 2, bytes: 1048576, seconds: 0.0012}, ...]
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from hwtune.errors import HwtuneInputError, from_validation_error

PROFILE_VERSION = 1


class GemmPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    dtype: str
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    batch: int = Field(default=1, gt=0)
    seconds: float = Field(gt=0)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


class MemoryFigures(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    copy_bytes_per_s: float = Field(gt=0)
    triad_bytes_per_s: float | None = Field(default=None, gt=0)
    launch_s: float = Field(default=0.0, ge=0)


class SizedPoint(BaseModel):
    """A memory-bound op moving ``bytes`` in ``seconds``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    bytes: float = Field(gt=0)
    seconds: float = Field(gt=0)


class AttentionPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
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


class CollectivePoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    op: Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"]
    ranks: int = Field(gt=0)
    bytes: float = Field(gt=0)
    seconds: float = Field(gt=0)


class DeviceProfile(BaseModel):
    """Measured curves of one device (see the module docstring for the file format)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    profile_version: int = PROFILE_VERSION
    software: dict[str, str | int | float] = Field(default_factory=dict)
    gemm: tuple[GemmPoint, ...] = ()
    memory: MemoryFigures | None = None
    elementwise: tuple[SizedPoint, ...] = ()
    attention: tuple[AttentionPoint, ...] = ()
    collectives: tuple[CollectivePoint, ...] = ()
    _hash: int | None = PrivateAttr(default=None)

    def __hash__(self) -> int:
        h = self.__pydantic_private__["_hash"]
        if h is None:
            h = hash((self.profile_version, self.gemm, self.memory, self.elementwise, self.attention,
                      self.collectives))  # fmt: skip
            self.__pydantic_private__["_hash"] = h
        return h

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__  # type: ignore[union-attr]

    # ---- interpolation -------------------------------------------------------------------
    def gemm_rate(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float | None:
        """Measured FLOP/s for a GEMM of this shape: inverse-distance weighting in
        (log m, log n, log k) over the 4 nearest measured shapes of the same dtype (rates vary
        smoothly with log-size between the measured points); None when none was measured."""
        pts = [p for p in self.gemm if p.dtype == dtype]
        if not pts:
            return None
        x = (math.log2(m * batch), math.log2(n), math.log2(k))
        scored = []
        for p in pts:
            y = (math.log2(p.m * p.batch), math.log2(p.n), math.log2(p.k))
            d = math.dist(x, y)
            if d < 1e-9:
                return p.flops / p.seconds
            scored.append((d, p.flops / p.seconds))
        scored.sort()
        near = scored[:4]
        w = [1.0 / d**2 for d, _ in near]
        # harmonic-weighted mean of rates: interpolates time per FLOP, not FLOP/s
        return sum(w) / sum(wi / r for wi, (_, r) in zip(w, near, strict=True))

    def attention_rate(self, phase: str, dtype: str) -> float | None:
        """Median measured FLOP/s of the attention kernels of ``phase`` (forward model FLOPs
        for fwd, 2.5x of them for bwd, as `cost.compute.attention_time` counts)."""
        r = sorted(
            p.flops / p.seconds for p in self.attention if p.phase == phase and p.dtype == dtype
        )
        return r[len(r) // 2] if r else None

    def memory_bandwidth(self) -> float | None:
        if self.memory is not None:
            return self.memory.copy_bytes_per_s
        return None

    def elementwise_time(self, nbytes: float) -> float | None:
        """Seconds for a memory-bound op moving ``nbytes``: linear interpolation of time over the
        measured sizes, extrapolated at the largest measured bandwidth."""
        pts = sorted(self.elementwise, key=lambda p: p.bytes)
        if not pts:
            return None
        if nbytes <= pts[0].bytes:
            return pts[0].seconds * nbytes / pts[0].bytes if nbytes > 0 else 0.0
        for a, b in zip(pts, pts[1:], strict=False):
            if nbytes <= b.bytes:
                f = (nbytes - a.bytes) / (b.bytes - a.bytes)
                return a.seconds + f * (b.seconds - a.seconds)
        last = pts[-1]
        return last.seconds * nbytes / last.bytes

    def collective_fit(self, op: str = "all_reduce") -> tuple[float, float] | None:
        """(alpha seconds per step, bytes/s per rank) least-squares fit of the ring model
        t = 2(n-1) alpha + 2 (n-1)/n S / beta (all-reduce; (n-1) for the others) to the
        measured points (Thakur et al. 2005)."""
        pts = [p for p in self.collectives if p.op == op]
        if len(pts) < 2:
            return None
        c = 2.0 if op == "all_reduce" else 1.0
        xs = [c * (p.ranks - 1) for p in pts]  # alpha coefficient
        zs = [c * (p.ranks - 1) / p.ranks * p.bytes for p in pts]  # 1/beta coefficient
        ts = [p.seconds for p in pts]
        # normal equations of t = a*x + g*z with a, g >= 0
        sxx = sum(x * x for x in xs)
        szz = sum(z * z for z in zs)
        sxz = sum(x * z for x, z in zip(xs, zs, strict=True))
        sxt = sum(x * t for x, t in zip(xs, ts, strict=True))
        szt = sum(z * t for z, t in zip(zs, ts, strict=True))
        det = sxx * szz - sxz * sxz
        if det <= 0:
            return None
        a = max(0.0, (sxt * szz - szt * sxz) / det)
        g = (szt * sxx - sxt * sxz) / det
        if g <= 0:
            return None
        return a, 1.0 / g


def load_profile_file(path: str | Path) -> tuple[dict, DeviceProfile]:
    """(device fields, profile) from a profile file; errors name the bad field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise HwtuneInputError("profile", str(path), f"a readable file ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise HwtuneInputError(
            "profile", str(path), f"valid YAML/JSON ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict) or "device" not in data:
        raise HwtuneInputError(
            f"{p.name}.device", None, "a device description (hwtune bench writes one)"
        )
    ver = data.get("profile_version")
    if ver != PROFILE_VERSION:
        raise HwtuneInputError(
            f"{p.name}.profile_version", ver, f"{PROFILE_VERSION} (re-run hwtune bench)"
        )
    dev = data.pop("device")
    try:
        prof = DeviceProfile(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
    return dev, prof
