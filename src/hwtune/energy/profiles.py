"""Energy profiles, as data (``profiles/*.yaml``; every figure names its source there).

- Edge (Jetson Orin family, `EdgeProfile`): frequency tables, power modes, memory bandwidth and a
  default power model.
- Data center (V100/A100/H100/H200 SXM, `DatacenterProfile`): the SM clock table and the
  ``nvidia-smi -pl`` range; peaks, memory and power figures come from the hardware catalog entry it
  names (one place for each number)."""

from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hwtune.energy.power_model import PowerModel
from hwtune.errors import HwtuneInputError, from_validation_error, suggest
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


class _Clocks:
    """The clock table in Hz, from a profile's ``gpu_frequencies_mhz`` and ``gpu_max_mhz``."""

    @property
    def frequencies_hz(self) -> tuple[float, ...]:
        return tuple(x * 1e6 for x in self.gpu_frequencies_mhz)  # type: ignore[attr-defined]

    @property
    def f_max_hz(self) -> float:
        return self.gpu_max_mhz * 1e6  # type: ignore[attr-defined]


class EdgeProfile(_Clocks, BaseModel):
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
    def kind(self) -> str:
        return "edge"

    @property
    def reference_clock_hz(self) -> float:
        """The clock the estimator's step times hold at: the table top (edge modules run their
        peaks at it; no sustained derating is modelled for them)."""
        return self.f_max_hz

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


class DatacenterProfile(_Clocks, BaseModel):
    """A data-center GPU under ``nvidia-smi -pl``: its SM clock table and settable power-limit
    range; everything else is the catalog `Device` named by ``catalog_device``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    kind: Literal["data-center"] = "data-center"
    aliases: tuple[str, ...] = ()
    catalog_device: str = Field(min_length=1)
    gpu_clock_mhz: tuple[float, float, float] | None = Field(
        default=None, description="[min, max, step] of the SUPPORTED_CLOCKS graphics table, MHz"
    )
    gpu_clock_list_mhz: tuple[float, ...] | None = Field(
        default=None,
        description="the SUPPORTED_CLOCKS graphics table as listed, MHz, where it is not an "
        "evenly spaced grid (Volta: 7.5 MHz steps printed as whole MHz); instead of gpu_clock_mhz",
    )
    power_limit_w: tuple[float, float] = Field(description="[min, max] of nvidia-smi -pl, W")
    v_floor: float = Field(default=0.6, ge=0, le=1)
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> DatacenterProfile:
        grid, listed = self.gpu_clock_mhz, self.gpu_clock_list_mhz
        if (grid is None) == (listed is None):
            raise HwtuneInputError(
                "gpu_clock_mhz", grid, "a clock table given once: gpu_clock_mhz [min, max, step] "
                "or gpu_clock_list_mhz [every clock, ascending], not both or neither",
            )  # fmt: skip
        if grid is not None:
            lo, hi, step = grid
            if not all(math.isfinite(x) for x in grid) or not (0 < lo < hi and step > 0):
                raise ValueError(
                    "gpu_clock_mhz must be [min, max, step] with 0 < min < max, step > 0"
                )
            n = (hi - lo) / step
            if abs(n - round(n)) > 1e-6:
                raise ValueError(
                    f"gpu_clock_mhz: max - min ({hi - lo:g}) must be a multiple of step"
                )
        if listed is not None:
            ok = len(listed) >= 2 and all(x > 0 and math.isfinite(x) for x in listed)
            if not (ok and all(a < b for a, b in zip(listed, listed[1:], strict=False))):
                raise HwtuneInputError(
                    "gpu_clock_list_mhz", list(listed),
                    "at least two positive finite clocks in strictly increasing order",
                )  # fmt: skip
        plo, phi = self.power_limit_w
        if not (0 < plo <= phi and math.isfinite(phi)):
            raise ValueError("power_limit_w must be [min, max] with 0 < min <= max")
        return self

    # the names the energy commands read on either kind of profile
    @property
    def gpu_frequencies_mhz(self) -> tuple[float, ...]:
        """The clock table, ascending: the listed clocks, or the [min, max, step] grid."""
        if self.gpu_clock_list_mhz is not None:
            return self.gpu_clock_list_mhz
        grid = self.gpu_clock_mhz
        assert grid is not None  # the validator admits exactly one of the two tables
        lo, hi, step = grid
        return tuple(lo + k * step for k in range(round((hi - lo) / step) + 1))

    @property
    def gpu_max_mhz(self) -> float:
        return self.gpu_frequencies_mhz[-1]

    @property
    def module_power_w(self) -> tuple[float, float]:
        """The power-limit range (the edge profiles' module range): max is Zeus's MAXPOWER."""
        return self.power_limit_w

    @property
    def power_modes(self) -> tuple[PowerMode, ...]:
        return ()

    @property
    def sm_count(self) -> int:
        return self.to_device().sm_count

    @property
    def memory_bandwidth_gbps(self) -> float:
        return self.to_device().memory_bandwidth_tbps * 1000.0

    def to_device(self) -> Device:
        from hwtune.hardware.catalog import get_device

        return get_device(self.catalog_device)

    @property
    def reference_clock_hz(self) -> float:
        """The clock at which the catalog device draws its reference (board) power fully busy,
        and at which the training estimator's default step time holds: ``boost_clock_mhz`` x
        ``sustained_gemm_fraction`` where `cost.power.power_limited` applies that fraction (the
        clock a power-limited chip settles at under back-to-back GEMMs), else the boost clock."""
        return catalog_reference_clock_hz(self.to_device())

    def default_power_model(self) -> PowerModel:
        """Board power from the catalog (`catalog_power_model`) with this profile's floor."""
        return catalog_power_model(self.to_device(), self.v_floor)


def catalog_reference_clock_hz(device: Device) -> float:
    """See `DatacenterProfile.reference_clock_hz`."""
    from hwtune.cost.power import sustained_fraction_applies

    f = device.boost_clock_mhz * 1e6
    if sustained_fraction_applies(device):
        f *= device.sustained_gemm_fraction  # type: ignore[operator]
    return f


def catalog_power_model(device: Device, v_floor: float = 0.6) -> PowerModel:
    """Board power of a catalog device as a `PowerModel`: static and dynamic power from
    `device_power_figures` (idle_w or STATIC_FRACTION of the reference power, the rest dynamic),
    the dynamic part drawn fully busy at `catalog_reference_clock_hz`. Above the voltage floor,
    the highest clock whose full-load power fits a cap P is then
    ``f_ref * ((P - static) / dynamic) ** (1/3)``: the clock `cost.power.power_limited` derates
    the estimator's peaks to. DRAM power is inside these board figures (no separate term)."""
    from hwtune.hardware.device import device_power_figures

    static, dynamic = device_power_figures(device)
    return PowerModel(static_w=static, dynamic_w=dynamic,
                      f_ref_hz=catalog_reference_clock_hz(device), v_floor=v_floor)  # fmt: skip


Profile = EdgeProfile | DatacenterProfile


@functools.cache
def _builtin_all() -> tuple[dict[str, EdgeProfile], dict[str, DatacenterProfile]]:
    edge: dict[str, EdgeProfile] = {}
    dc: dict[str, DatacenterProfile] = {}
    folder = resources.files("hwtune.energy") / "profiles"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".yaml"):
            continue
        data = yaml.safe_load(entry.read_text())
        for key, cls, out in (("profiles", EdgeProfile, edge),
                              ("datacenter_profiles", DatacenterProfile, dc)):  # fmt: skip
            for raw in data.get(key, []):
                try:
                    prof = cls(**raw)
                except ValidationError as e:  # a packaging defect, but say where
                    raise from_validation_error(
                        e, where=f"{entry.name}:{raw.get('name')}"
                    ) from None
                out[prof.name] = prof  # type: ignore[index]
    return edge, dc


def _builtin() -> dict[str, EdgeProfile]:
    return _builtin_all()[0]


def profiles() -> dict[str, EdgeProfile]:
    """All built-in edge profiles by name."""
    return dict(_builtin())


def datacenter_profiles() -> dict[str, DatacenterProfile]:
    """All built-in data-center profiles by name."""
    return dict(_builtin_all()[1])


def all_profiles() -> dict[str, Profile]:
    """Every built-in profile, edge then data center, by name."""
    return {**_builtin_all()[0], **_builtin_all()[1]}


def get_profile(name: str | Profile) -> Profile:
    """A built-in profile (edge or data center) by name or alias (case-insensitive), or a path
    to a YAML profile."""
    if isinstance(name, EdgeProfile | DatacenterProfile):
        return name
    table = all_profiles()
    key = name.lower()
    for prof in table.values():
        if key == prof.name or key in (a.lower() for a in prof.aliases):
            return prof
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return load_profile_file(p)
    close = suggest(name, table)
    hint = f" (closest: {', '.join(close)})" if close else ""
    raise HwtuneInputError(
        "profile", name, f"one of {', '.join(table)}{hint}, or a path to a .yaml profile"
    )


def load_profile_file(path: str | Path) -> Profile:
    """A user's profile (one mapping with the same keys as the built-in ones; a data-center
    profile says ``kind: data-center``)."""
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
    cls = DatacenterProfile if data.get("kind") == "data-center" else EdgeProfile
    try:
        return cls(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
