"""`Device`: one accelerator, as data (DESIGN.md, package `hardware/`).

Catalog files use human units with the unit in the key name (TFLOP/s, GiB, TB/s, GB/s, MHz, W);
the properties ending in ``_si`` (and the helper methods) return SI units for the cost models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.frozen import FrozenModel
from hwtune.hardware.profile import (
    PROFILE_VERSION,
    DeviceProfile,
    check_plausible,
    load_profile_file,
)

Dtype = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"]
DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
ARCHITECTURES: tuple[str, ...] = (
    "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "blackwell-ultra",
    "cdna", "cdna2", "cdna3", "cdna4",
)  # fmt: skip
"""The architecture names the cost models and engine checks compare against (each code path
that runs on some architectures only names them so); `Device.architecture` may hold another
(a ROCm gfx target, ``sm_XY``, a CPU), which those paths treat as unknown."""


class PeakTflops(BaseModel):
    """Dense (not 2:4 sparse) peak tensor/matrix throughput per dtype, TFLOP/s; None = unsupported."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    fp64: float | None = Field(default=None, gt=0)
    fp32: float | None = Field(default=None, gt=0)
    tf32: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    fp8: float | None = Field(default=None, gt=0)
    fp4: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)


class Device(FrozenModel):
    """An accelerator. Figures are vendor datasheet values unless the source says otherwise.

    Efficiencies (``gemm_efficiency``, ``memory_bw_efficiency``, ``attention_*_efficiency``) are
    the fractions of the datasheet peak that published microbenchmarks reach on large,
    well-shaped problems (cuBLAS/hipBLASLt GEMMs, STREAM-like copies, causal fused attention with
    head dimension 128 at 2k-16k tokens, forward and backward, as fractions of the bf16 peak). They are device facts, not fitted to training runs; calibration
    (`hwtune bench`) replaces them with the user's own measurements.
    """

    # an infinite peak or bandwidth would price every kernel at zero seconds
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    vendor: Literal["nvidia", "amd", "intel", "google", "other"] = "other"
    architecture: str = ""
    form_factor: str = ""
    peak_tflops: PeakTflops
    memory_gib: float = Field(gt=0)
    memory_bandwidth_tbps: float = Field(gt=0, description="HBM/DRAM bandwidth, TB/s (1e12 B/s)")
    sm_count: int = Field(gt=0, description="SMs (NVIDIA) or CUs (AMD)")
    l2_cache_mib: float = Field(default=0, ge=0)
    boost_clock_mhz: float = Field(gt=0)
    base_clock_mhz: float | None = Field(default=None, gt=0)
    min_clock_mhz: float | None = Field(default=None, gt=0)
    tdp_w: float = Field(gt=0)
    reference_power_w: float | None = Field(
        default=None, gt=0, description="board power at which the peak figures hold (default tdp_w)"
    )
    idle_w: float | None = Field(default=None, ge=0)
    sustained_gemm_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="dense GEMM rate held at the power limit under back-to-back large GEMMs "
        "(seconds and longer), as a fraction of the short-burst rate the efficiencies were "
        "measured at; None = the bursts hold (cost.power.power_limited)",
    )
    scaleup_link: str = ""
    scaleup_gbps_per_direction: float = Field(
        default=0, ge=0, description="NVLink/xGMI bandwidth per GPU, GB/s each way (0 = PCIe only)"
    )
    pcie_gbps_per_direction: float = Field(default=32, gt=0)
    host_link_gbps_per_direction: float | None = Field(
        default=None,
        gt=0,
        description="GPU <-> host memory bandwidth, GB/s each way (NVLink-C2C on Grace parts); "
        "None = the PCIe link",
    )
    gemm_efficiency: float = Field(default=0.75, gt=0, le=1)
    gemm_efficiency_fp8: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="fp8 GEMM fraction of the fp8 peak; None = gemm_efficiency",
    )
    memory_bw_efficiency: float = Field(default=0.85, gt=0, le=1)
    attention_fwd_efficiency: float = Field(default=0.55, gt=0, le=1)
    attention_bwd_efficiency: float = Field(default=0.40, gt=0, le=1)
    gemm_tile: tuple[PositiveInt, PositiveInt] = (128, 128)
    price_per_hour_usd: float | None = Field(default=None, ge=0)
    profile: DeviceProfile | None = Field(
        default=None, description="measured curves from `hwtune bench` (tier 2); None = spec sheet"
    )
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("architecture")
    @classmethod
    def _known_architecture_as_named(cls, v: str) -> str:
        # "Hopper" would match no architecture test and silently price the device as unknown
        if v not in ARCHITECTURES and v.strip().lower() in ARCHITECTURES:
            raise ValueError(f"{v.strip().lower()!r} (architecture names are lowercase)")
        return v

    @field_validator("peak_tflops")
    @classmethod
    def _has_some_matrix_dtype(cls, v: PeakTflops) -> PeakTflops:
        if v.bf16 is None and v.fp16 is None and v.fp32 is None:
            raise ValueError("a peak for at least one of bf16, fp16, fp32")
        return v

    @model_validator(mode="after")
    def _clocks_and_power_in_order(self) -> Device:
        # a min clock above the boost clock made the power-capped clock a multiple of the peak
        # (1.5x: 1355 W drawn by a 700 W part); an idle power at or above the board power left
        # no dynamic power, which `device_power_figures` took as 0 (and the default cap, tdp_w,
        # was then refused as an unnamed "power cap")
        top = self.boost_clock_mhz
        for name in ("base_clock_mhz", "min_clock_mhz"):
            v = getattr(self, name)
            if v is not None and v > top:
                raise HwtuneInputError(
                    name, v, f"at most boost_clock_mhz ({top:g} MHz), the highest clock"
                )
        lo, base = self.min_clock_mhz, self.base_clock_mhz
        if lo is not None and base is not None and lo > base:
            raise HwtuneInputError("min_clock_mhz", lo, f"at most base_clock_mhz ({base:g} MHz)")
        # the board runs at tdp_w unless capped, and its peaks hold at reference_power_w: idle
        # power below both leaves the clock some dynamic power at each
        powers = {"tdp_w": self.tdp_w, "reference_power_w": self.reference_power_w}
        name, watts = min(
            ((k, v) for k, v in powers.items() if v is not None), key=lambda kv: kv[1]
        )
        if self.idle_w is not None and self.idle_w >= watts:
            raise HwtuneInputError("idle_w", self.idle_w, f"below {name} ({watts:g} W)")
        return self

    def _hash_key(self) -> tuple:
        # ``sources`` (a dict) is documentation and left out; every figure takes part.
        return (
            (self.name, self.peak_tflops, self.memory_gib, self.memory_bandwidth_tbps,
             self.sm_count, self.boost_clock_mhz, self.tdp_w, self.reference_power_w,
             self.sustained_gemm_fraction, self.scaleup_gbps_per_direction,
             self.pcie_gbps_per_direction, self.host_link_gbps_per_direction, self.gemm_efficiency, self.gemm_efficiency_fp8, self.memory_bw_efficiency,
             self.attention_fwd_efficiency, self.attention_bwd_efficiency, self.gemm_tile,
             self.profile)
        )  # fmt: skip

    # --- SI accessors -----------------------------------------------------------------
    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``. A dtype without a figure is refused naming the ones
        the device has: bf16 and fp16 do not stand in for each other (V100 has fp16 tensor
        cores only, so pricing bf16 at its fp16 rate would report a precision it cannot run
        at that rate)."""
        tf = getattr(self.peak_tflops, dtype, None)
        if tf is None and dtype == "bf16" and self.sixteen_bit_dtype == "fp16":
            raise HwtuneInputError("precision", "bf16", self.no_bf16_expectation())
        if tf is None:
            raise HwtuneInputError(
                "precision",
                dtype,
                f"a dtype that {self.name} supports: {', '.join(self.supported_dtypes())}",
            )
        return tf * 1e12

    @property
    def sixteen_bit_dtype(self) -> str:
        """The 16-bit format this device computes in: bf16, or fp16 where it has no bf16 peak
        (Volta: NVIDIA's V100 whitepaper lists FP16 tensor cores only. PyTorch runs bf16 there
        only emulated, without tensor cores (``torch.cuda.is_bf16_supported`` checks a bf16
        tensor below compute capability 8.0); vLLM resolves ``--dtype auto`` to fp16 and refuses
        an explicit bfloat16)."""
        if self.peak_tflops.bf16 is None and self.peak_tflops.fp16 is not None:
            return "fp16"
        return "bf16"

    def no_bf16_expectation(self, instead: str = "fp16") -> str:
        """What to ask for instead of bf16 (``instead``) on a device without bf16 math (the
        refusal's text)."""
        return (f"{instead} on {self.name}, which has no bfloat16 tensor cores (bf16 runs only "
                "emulated there, at no rate hwtune models; vLLM refuses it)")  # fmt: skip

    def supported_dtypes(self) -> list[str]:
        return [d for d in DTYPES if getattr(self.peak_tflops, d) is not None]

    def gemm_fraction(self, dtype: str) -> float:
        """Achievable fraction of ``dtype``'s dense peak for large GEMMs (catalog microbenchmarks)."""
        if dtype == "fp8" and self.gemm_efficiency_fp8 is not None:
            return self.gemm_efficiency_fp8
        return self.gemm_efficiency

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def memory_bandwidth_si(self) -> float:
        """Datasheet memory bandwidth, bytes/s."""
        return self.memory_bandwidth_tbps * 1e12

    @property
    def host_link_si(self) -> float:
        """GPU <-> host memory bandwidth per direction, bytes/s (C2C where the catalog has it,
        else PCIe)."""
        return (self.host_link_gbps_per_direction or self.pcie_gbps_per_direction) * 1e9

    @property
    def scaleup_bandwidth_si(self) -> float:
        """Scale-up (NVLink/xGMI) bandwidth per GPU per direction, bytes/s; PCIe when none."""
        gbs = self.scaleup_gbps_per_direction or self.pcie_gbps_per_direction
        return gbs * 1e9


STATIC_FRACTION = 0.12
"""Idle/static power as a fraction of board power (H100 SXM idles near 70-90 W of 700 W in
nvidia-smi readings; an assumption where the catalog has no ``idle_w``)."""


def device_power_figures(device: Device) -> tuple[float, float]:
    """(static W, dynamic W at the reference clock) of a catalog device: ``idle_w`` (or
    ``STATIC_FRACTION`` of the reference power) and the rest of the reference power."""
    ref = device.reference_power_w or device.tdp_w
    static = device.idle_w if device.idle_w is not None else STATIC_FRACTION * ref
    return static, max(0.0, ref - static)


def _check_types(fields: dict, where: str) -> None:
    """Refuse a profile's device block whose numbers are not numbers (``true``, ``"80"``), which
    `Device` alone would coerce (to 1.0, 80.0): the measured device is validated strictly (lists
    read from the file stand for the tuples)."""
    data = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    try:
        Device.model_validate(data, strict=True)
    except ValidationError as e:
        raise from_validation_error(e, where=where) from None


def load_device_file(path: str | Path) -> Device:
    """Read a user's device description (YAML, same keys as the catalog)."""
    from hwtune.structured_file import read_structured

    p = Path(path)
    data = read_structured(p, "gpu")
    if not isinstance(data, dict):
        what = "an empty file" if data is None else type(data).__name__  # not 'NoneType'
        raise HwtuneInputError(str(path), what, "a mapping of device fields")
    if "profile_version" in data or "device" in data:  # a profile written by `hwtune bench`
        # (a device has no `device` field: without its version a profile is still one)
        fields, prof = load_profile_file(p)
        _check_types(fields, f"{p.name}.device")
        data = {**fields, "profile": prof}
        if data.get("profile_version", PROFILE_VERSION) != PROFILE_VERSION:
            raise HwtuneInputError("profile_version", data["profile_version"], str(PROFILE_VERSION))
    try:
        dev = Device(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
    check_plausible(dev, p.name)  # a point faster than the device runs is refused by name
    return dev
