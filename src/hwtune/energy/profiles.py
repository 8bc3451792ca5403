"""Edge device profiles (Jetson Orin family): frequency tables, power modes, memory bandwidth and
a default power model, as data (``profiles/*.yaml``; every figure names its source there)."""

from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hwtune.energy.power_model import PowerModel
from hwtune.errors import HwtuneInputError, from_validation_error, unknown_name
from hwtune.hardware.device import Device, PeakTflops


class PowerMode(BaseModel):
    """One nvpmodel mode: caps on the GPU clock, active TPCs, online CPU cores, CPU and EMC."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int = Field(ge=0)
    name: str = Field(min_length=1)
    budget_w: float | None = Field(default=None, gt=0)
    gpu_max_mhz: float | None = Field(default=None, gt=0, description="None = module maximum")
    tpcs: int = Field(gt=0)
    cpu_online: int = Field(gt=0)
    cpu_max_mhz: float | None = Field(default=None, gt=0)
    emc_max_mhz: float | None = Field(default=None, gt=0)


class ProfilePowerModel(BaseModel):
    """Default power-model figures (see `hwtune.energy.power_model.PowerModel`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    static_w: float = Field(ge=0)
    gpu_dynamic_w: float = Field(gt=0, description="dynamic W at ref_mhz and full utilization")
    memory_w: float = Field(default=0.0, ge=0)
    v_floor: float = Field(default=0.6, ge=0, le=1)
    ref_mhz: float = Field(
        default=1300.5, gt=0, description="clock of gpu_dynamic_w (T234's top GPU clock)"
    )


class EdgeProfile(BaseModel):
    """An edge module: what the energy tools need beyond the catalog `Device`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    catalog_device: str | None = None
    sm_count: int = Field(gt=0)
    cpu_cores: int = Field(gt=0)
    gpu_max_mhz: float = Field(gt=0)
    gpu_frequencies_mhz: tuple[float, ...] = Field(min_length=1)
    gpu_frequencies_mhz_jetpack5: tuple[float, ...] = ()
    emc_frequencies_mhz: tuple[float, ...] = ()
    memory_bandwidth_gbps: float = Field(gt=0)
    module_power_w: tuple[float, float]
    power_modes: tuple[PowerMode, ...] = ()
    power_model: ProfilePowerModel
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> EdgeProfile:
        f = self.gpu_frequencies_mhz
        if not all(x > 0 and math.isfinite(x) for x in f):
            raise ValueError("gpu_frequencies_mhz must be positive finite clocks")
        lo, hi = self.module_power_w
        if not (0 <= lo <= hi and hi > 0 and math.isfinite(hi)):  # hi is Zeus's MAXPOWER
            raise ValueError("module_power_w must be [min, max] with 0 <= min <= max, max > 0")
        if list(f) != sorted(set(f)):
            raise ValueError("gpu_frequencies_mhz must be strictly increasing")
        if abs(f[-1] - self.gpu_max_mhz) > 1e-6:
            raise ValueError(
                f"the last frequency {f[-1]} must equal gpu_max_mhz {self.gpu_max_mhz}"
            )
        return self

    @property
    def frequencies_hz(self) -> tuple[float, ...]:
        return tuple(x * 1e6 for x in self.gpu_frequencies_mhz)

    @property
    def f_max_hz(self) -> float:
        return self.gpu_max_mhz * 1e6

    def default_power_model(self) -> PowerModel:
        """The profile's starting power model (module power; see the YAML for sources)."""
        pm = self.power_model
        return PowerModel(
            static_w=pm.static_w,
            dynamic_w=pm.gpu_dynamic_w,
            f_ref_hz=pm.ref_mhz * 1e6,
            v_floor=pm.v_floor,
            memory_w=pm.memory_w,
        )

    def mode(self, name_or_id: str | int) -> PowerMode:
        """A power mode by name (case-insensitive) or nvpmodel id."""
        for m in self.power_modes:
            if str(m.id) == str(name_or_id) or m.name.lower() == str(name_or_id).lower():
                return m
        names = ", ".join(f"{m.id}={m.name}" for m in self.power_modes)
        raise HwtuneInputError("power mode", name_or_id, f"one of {names}")

    def to_device(self) -> Device:
        """The profile as a catalog `Device` for the step-time estimator: the catalog entry when
        there is one, else the AGX Orin 64GB entry scaled by SMs x clock (peaks) and by the
        data-sheet bandwidth (DERIVED: Ampere throughput per SM per clock is the same on every
        T234 part)."""
        from hwtune.hardware.catalog import get_device

        if self.catalog_device:
            return get_device(self.catalog_device)
        ref = get_device("jetson-agx-orin-64gb")
        k = (self.sm_count / ref.sm_count) * (self.gpu_max_mhz / ref.boost_clock_mhz)
        peaks = {
            key: (v * k if v is not None else None)
            for key, v in ref.peak_tflops.model_dump().items()
        }
        return ref.model_copy(
            update={
                "name": self.name,
                "aliases": (),
                "peak_tflops": PeakTflops(**peaks),
                "sm_count": self.sm_count,
                "boost_clock_mhz": self.gpu_max_mhz,
                "memory_bandwidth_tbps": self.memory_bandwidth_gbps / 1000.0,
                "tdp_w": self.module_power_w[1],
                "sources": {"derived": f"scaled from jetson-agx-orin-64gb by profile {self.name}"},
            }
        )


@functools.cache
def _builtin() -> dict[str, EdgeProfile]:
    out: dict[str, EdgeProfile] = {}
    folder = resources.files("hwtune.energy") / "profiles"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".yaml"):
            continue
        data = yaml.safe_load(entry.read_text())
        for raw in data.get("profiles", []):
            try:
                prof = EdgeProfile(**raw)
            except ValidationError as e:  # a packaging defect, but say where
                raise from_validation_error(e, where=f"{entry.name}:{raw.get('name')}") from None
            out[prof.name] = prof
    return out


def profiles() -> dict[str, EdgeProfile]:
    """All built-in edge profiles by name."""
    return dict(_builtin())


def get_profile(name: str | EdgeProfile) -> EdgeProfile:
    """A built-in profile by name or alias (case-insensitive), or a path to a YAML profile."""
    if isinstance(name, EdgeProfile):
        return name
    table = _builtin()
    key = name.lower()
    for prof in table.values():
        if key == prof.name or key in (a.lower() for a in prof.aliases):
            return prof
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return load_profile_file(p)
    raise unknown_name("profile", name, table)


def load_profile_file(path: str | Path) -> EdgeProfile:
    """A user's edge profile (one mapping with the same keys as the built-in ones)."""
    from hwtune.structured_file import read_structured

    p = Path(path)
    data = read_structured(p, "profile")
    if isinstance(data, dict) and "profiles" in data:
        listed = data["profiles"]
        if not isinstance(listed, list) or len(listed) != 1:  # more would be ignored
            n = len(listed) if isinstance(listed, list) else type(listed).__name__
            raise HwtuneInputError(f"{p.name}.profiles", n, "a list of exactly one profile")
        data = listed[0]
    if not isinstance(data, dict):
        raise HwtuneInputError(str(path), type(data).__name__, "a mapping of profile fields")
    try:
        return EdgeProfile(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
