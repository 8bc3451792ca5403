"""Dataflow-accelerator descriptions: cores, shared on-chip memory, DRAM, interconnect, area.

The model follows Stream (Symons et al., arXiv 2212.10612, Sec. III-A) and ZigZag (Mei et al.,
IEEE TC 2021, Sec. III): an accelerator is a set of cores, each a PE array with a spatial
unrolling (its dataflow) fed by a local buffer; cores share an on-chip memory and an off-chip
DRAM, and exchange tiles over point-to-point links. Energy is charged per MAC and per byte moved
at each memory level.

Files use human units with the unit in the key name (``local_buffer_kib``, ``bandwidth_gbps`` in
GB/s = 1e9 B/s, ``frequency_mhz``, energies in pJ); the ``*_si`` helpers return SI units.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hwtune.errors import HwtuneInputError, from_validation_error, unknown_name

LoopDim = Literal["N", "K", "C", "R"]
"""Generic loop dimensions of every MAC op (see `workload.py`): N output pixels x batch (or
tokens), K output channels/features, C input channels/features (reduction), R filter taps."""

CATALOG_DIR = Path(__file__).with_name("catalog")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CoreType(_Frozen):
    """One kind of core; ``count`` identical instances of it sit on the chip."""

    name: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=1024)
    pe_rows: int = Field(ge=1, le=4096)
    pe_cols: int = Field(ge=1, le=4096)
    spatial: tuple[tuple[LoopDim, LoopDim], ...] = Field(
        default=(("C", "K"),),
        description="allowed (rows, cols) unrollings; the mapper picks the fastest per op",
    )
    simd_lanes: int = Field(default=16, ge=1, description="vector ops per cycle (elementwise)")
    local_buffer_kib: float = Field(gt=0)
    local_bandwidth_bytes_per_cycle: float = Field(gt=0)
    mac_energy_pj: float = Field(ge=0)
    vector_op_energy_pj: float = Field(default=0.1, ge=0)
    local_access_pj_per_byte: float = Field(ge=0)

    @field_validator("spatial")
    @classmethod
    def _distinct(cls, v: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        if not v:
            raise ValueError("at least one (rows, cols) unrolling such as [C, K]")
        for r, c in v:
            if r == c:
                raise ValueError(f"rows and cols must unroll different loops, got [{r}, {c}]")
        return v

    @property
    def pes(self) -> int:
        return self.pe_rows * self.pe_cols

    @property
    def local_buffer_bytes(self) -> float:
        return self.local_buffer_kib * 1024


class SharedMemory(_Frozen):
    """On-chip memory shared by all cores (0 MiB = none)."""

    size_mib: float = Field(ge=0)
    bandwidth_bytes_per_cycle: float = Field(gt=0)
    access_pj_per_byte: float = Field(ge=0)


class Dram(_Frozen):
    capacity_gib: float = Field(gt=0)
    bandwidth_gbps: float = Field(gt=0, description="GB/s (1e9 bytes/s)")
    access_pj_per_byte: float = Field(ge=0)


class Interconnect(_Frozen):
    """Core-to-core links (Stream's ``core_connectivity``); every pair of cores has a path."""

    link_bandwidth_bytes_per_cycle: float = Field(gt=0)
    access_pj_per_byte: float = Field(ge=0)


class AreaModel(_Frozen):
    """Silicon area per PE and per MiB of SRAM. These are assumptions unless a file says
    otherwise (defaults: a 16-bit MAC with its registers ~0.0015 mm^2 and 1 MiB of SRAM with
    periphery ~0.5 mm^2 in a 7 nm-class node; order of magnitude from TSMC N7 SRAM bit cell
    0.027 um^2, Chang et al. ISSCC 2017, doubled for periphery)."""

    pe_mm2: float = Field(default=0.0015, ge=0)
    sram_mm2_per_mib: float = Field(default=0.5, ge=0)
    core_overhead_mm2: float = Field(default=0.05, ge=0)


class Accelerator(_Frozen):
    """A (possibly heterogeneous) multi-core dataflow accelerator."""

    name: str = Field(min_length=1)
    source: str = ""
    frequency_mhz: float = Field(gt=0)
    cores: tuple[CoreType, ...] = Field(min_length=1)
    shared_memory: SharedMemory
    dram: Dram
    interconnect: Interconnect
    area: AreaModel = AreaModel()

    @field_validator("cores")
    @classmethod
    def _unique(cls, v: tuple[CoreType, ...]) -> tuple[CoreType, ...]:
        names = [c.name for c in v]
        if len(set(names)) != len(names):
            raise ValueError(f"core names must be unique, got {names}")
        return v

    def __hash__(self) -> int:  # cache key for the mapper
        return hash((self.name, self.frequency_mhz, self.cores, self.shared_memory, self.dram))

    @property
    def frequency_hz(self) -> float:
        return self.frequency_mhz * 1e6

    @cached_property
    def core_list(self) -> tuple[CoreType, ...]:
        """One entry per physical core (types repeated ``count`` times)."""
        return tuple(c for c in self.cores for _ in range(c.count))

    @property
    def n_cores(self) -> int:
        return sum(c.count for c in self.cores)

    @property
    def shared_bytes(self) -> float:
        return self.shared_memory.size_mib * 2**20

    @property
    def dram_bytes(self) -> float:
        return self.dram.capacity_gib * 2**30

    @property
    def dram_bandwidth_si(self) -> float:
        """Bytes/s."""
        return self.dram.bandwidth_gbps * 1e9

    @property
    def peak_macs_per_s(self) -> float:
        return sum(c.pes for c in self.core_list) * self.frequency_hz

    def area_mm2(self) -> float:
        """PE array + SRAM (local buffers and shared memory) + per-core overhead, mm^2."""
        a = self.area
        total = self.shared_memory.size_mib * a.sram_mm2_per_mib
        for c in self.core_list:
            total += c.pes * a.pe_mm2 + c.local_buffer_kib / 1024 * a.sram_mm2_per_mib
            total += a.core_overhead_mm2
        return total


def parse_accelerator(data: object, where: str = "accelerator") -> Accelerator:
    """Validate a mapping (parsed YAML) into an `Accelerator`, with one-line errors."""
    if not isinstance(data, dict):
        raise HwtuneInputError(where, type(data).__name__, "a mapping with name, cores, ...")
    try:
        return Accelerator.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, where) from None


def catalog_names() -> list[str]:
    return sorted(p.stem for p in CATALOG_DIR.glob("*.yaml"))


def load_accelerator(name_or_path: str | Path) -> Accelerator:
    """A catalog name (``tpu-like-quad``) or a path to a YAML accelerator file."""
    p = Path(name_or_path)
    if not p.suffix:
        cat = CATALOG_DIR / f"{name_or_path}.yaml"
        if not cat.exists():
            raise unknown_name("accelerator", str(name_or_path), catalog_names())
        p = cat
    from hwtune.structured_file import read_structured

    return parse_accelerator(read_structured(p, "accelerator"), where=p.stem)
