"""`Cluster`: devices, how they are grouped, and the two network levels that join them.

Level 0 is the scale-up domain (NVLink/NVSwitch, xGMI; 8 GPUs in a DGX, 72 in an NVL72).
Level 1 is the scale-out network (InfiniBand/RoCE NICs, one or more per GPU) in a rail-optimized
or fat-tree topology with an oversubscription ratio. Ranks are laid out in Megatron order
(tensor-parallel innermost), so a process group is described by its size and its stride.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from hwtune.errors import HwtuneInputError, from_validation_error, unknown_name
from hwtune.frozen import FrozenModel
from hwtune.hardware.catalog import get_device
from hwtune.hardware.device import Device, device_power_figures


@dataclass(frozen=True, slots=True)
class Link:
    """One network level as seen by one rank: bandwidth each way (bytes/s) and latency (s)."""

    bandwidth: float
    latency: float


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """How a process group of ``size`` ranks sits on the cluster: ``local`` ranks share each
    scale-up domain, spread over ``domains`` domains (size == local * domains)."""

    size: int
    local: int
    domains: int


MAX_GPUS = 1 << 20
"""The most GPUs a cluster (or a serving deployment) may have: 1,048,576, several times the
largest clusters built by 2026 (a few hundred thousand GPUs). A count past it is a typo (1e20
made `hwtune plan` walk its divisors for ever), not a machine to plan for."""


class Cluster(FrozenModel):
    """A homogeneous cluster.

    Default efficiencies are the fractions of link bandwidth that NCCL reaches as bus bandwidth
    on large messages (nccl-tests PERFORMANCE.md conventions): about 0.80 on NVLink/NVSwitch
    (e.g. ~360 of 450 GB/s on DGX H100) and about 0.90 on InfiniBand NDR/HDR per rail.
    Latencies are per-step alpha terms of the same measurements (a few microseconds).
    All-reduce inside an NVSwitch domain with NVLink SHARP (``nvls_allreduce_algbw_gbps``, from
    the system preset where nccl-tests figures are published) runs faster than any ring: the
    switch reduces and multicasts (`hwtune.cost.collectives.all_reduce_time`).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False
    )

    device: Device
    n_gpus: int = Field(gt=0, le=MAX_GPUS)
    gpus_per_node: int = Field(default=8, gt=0)
    scaleup_domain: int | None = Field(default=None, gt=0, description="GPUs per NVLink domain")
    nic_gbps_per_gpu: float = Field(default=400, gt=0, description="scale-out Gb/s (bits) per GPU")
    topology: Literal["rail-optimized", "fat-tree"] = "rail-optimized"
    oversubscription: float = Field(default=1.0, ge=1.0)
    intra_efficiency: float = Field(default=0.80, gt=0, le=1)
    inter_efficiency: float = Field(default=0.90, gt=0, le=1)
    intra_latency_s: float = Field(default=3e-6, ge=0)
    inter_latency_s: float = Field(default=8e-6, ge=0)
    nvls_allreduce_algbw_gbps: float | None = Field(
        default=None,
        gt=0,
        description="all-reduce algorithm bandwidth (buffer bytes / time, GB/s) over one whole "
        "NVSwitch domain with NVLink SHARP (NCCL's NVLS algorithm; a smaller group of n runs at "
        "n/(n+1) of the per-GPU rate, hwtune.cost.collectives._nvls_algbw); None = no NVLS",
    )
    nvls_reference_gpus: int | None = Field(
        default=None,
        gt=0,
        description="GPUs the NVLS figure was measured on (its system's whole NVSwitch domain, "
        "e.g. 8 on DGX H100 even for a job of 4); None = this cluster's scale-up domain",
    )
    host_memory_gbps_per_node: float | None = Field(
        default=None,
        gt=0,
        description="peak DRAM bandwidth of one node's CPUs, GB/s (memory channels x MT/s x 8 "
        "bytes, from the CPUs' data sheets; system presets carry it with its source), shared by "
        "the node's GPUs when each runs a CPU optimizer step (ZeRO-Offload); None = unknown",
    )
    host_memory_efficiency: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="fraction of host_memory_gbps_per_node a streaming kernel sustains (STREAM "
        "triad measures 74-78% of the DDR wire rate: TI SPRAD45A Table 3-3)",
    )
    power_cap_w: float | None = Field(
        default=None, gt=0, description="per-GPU power limit (nvidia-smi -pl)"
    )
    sustained_clocks: bool = Field(
        default=True,
        description="training at the clock a power-limited GPU sustains under continuous GEMMs "
        "(the device's sustained_gemm_fraction); False = short-burst rates",
    )
    name: str = ""

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.n_gpus > self.gpus_per_node and self.n_gpus % self.gpus_per_node:
            raise HwtuneInputError(
                "n_gpus", self.n_gpus, f"a multiple of gpus_per_node (= {self.gpus_per_node})"
            )
        dom = self.domain
        if dom % self.gpus_per_node and self.gpus_per_node % dom:
            raise HwtuneInputError(
                "scaleup_domain",
                dom,
                f"a divisor or multiple of gpus_per_node (= {self.gpus_per_node})",
            )
        if self.power_cap_w is not None:
            static = device_power_figures(self.device)[0]
            if not (self.power_cap_w > static and math.isfinite(self.power_cap_w)):
                raise HwtuneInputError(
                    "power_cap_w", self.power_cap_w,
                    f"a finite power above the static power of {self.device.name} ({static:g} W)",
                )  # fmt: skip
            if self.power_cap_w > self.device.tdp_w:  # was taken as no cap (clock 1.0), silently
                raise HwtuneInputError(
                    "power_cap_w", self.power_cap_w,
                    f"at most {self.device.name}'s board power limit, tdp_w = "
                    f"{self.device.tdp_w:g} W (nvidia-smi -pl refuses a higher one)",
                )  # fmt: skip
        return self

    @property
    def domain(self) -> int:
        """GPUs in one scale-up domain."""
        return self.scaleup_domain or self.gpus_per_node

    @property
    def n_nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)

    @property
    def host_memory_per_gpu(self) -> float | None:
        """Host memory bandwidth one GPU's CPU optimizer step streams at, bytes/s: the node's
        sustained DRAM bandwidth shared by its GPUs (every rank offloads under ZeRO-Offload,
        and a job smaller than a node has ``gpus_per_node`` = its GPUs); None when the node's
        memory is unknown."""
        if self.host_memory_gbps_per_node is None:
            return None
        node = self.host_memory_gbps_per_node * 1e9 * self.host_memory_efficiency
        return node / self.gpus_per_node

    def intra_link(self) -> Link:
        """Scale-up link of one GPU (achievable bandwidth, bytes/s each way); with a measured
        profile, the alpha-beta fit of its all-reduce measurements (tier 2)."""
        prof = self.device.profile
        if prof is not None:
            fit = prof.collective_fit("all_reduce")
            if fit is not None:
                return Link(fit[1], fit[0])
        return Link(self.device.scaleup_bandwidth_si * self.intra_efficiency, self.intra_latency_s)

    def inter_link(self, share: float = 1.0) -> Link:
        """Scale-out bandwidth of one GPU, divided by oversubscription (fat-tree) and by ``share``
        concurrent flows that use the same NIC."""
        bw = self.nic_gbps_per_gpu * 1e9 / 8 * self.inter_efficiency
        if self.topology == "fat-tree" or self.oversubscription > 1:
            bw /= self.oversubscription
        return Link(bw / max(share, 1.0), self.inter_latency_s)

    def crosses_domain(self, first_a: int, first_b: int, size: int) -> bool:
        """Whether two blocks of ``size`` consecutive ranks starting at ``first_a`` and
        ``first_b`` (e.g. two pipeline ranks of tp x cp x dp GPUs each) talk across a scale-up
        domain: rank ``first_a + j`` pairs with ``first_b + j``, and one pair in different
        domains puts the exchange on the network."""
        lo, hi = sorted((first_a, first_b))
        if size < 1 or lo == hi:
            return False
        # pair j crosses iff a domain edge lies in (lo + j, hi + j]; over j in [0, size) these
        # intervals join into (lo, hi + size - 1]
        return (hi + size - 1) // self.domain != lo // self.domain

    def span(self, size: int, stride: int) -> GroupSpan:
        """Placement of a group of ``size`` ranks whose members are ``stride`` ranks apart."""
        if size <= 1:
            return GroupSpan(1, 1, 1)
        dom = self.domain
        local = 1 if stride >= dom else min(size, max(1, dom // stride))
        while size % local:
            local -= 1
        return GroupSpan(size, local, size // local)


def _system_entries() -> list[dict]:
    try:
        text = resources.files("hwtune.hardware").joinpath("catalog/systems.yaml").read_text()
    except FileNotFoundError:
        return []
    return list(yaml.safe_load(text).get("systems", []))


@functools.cache
def systems() -> dict[str, dict]:
    """Named cluster presets (DGX, NVL72, ...) from the catalog."""
    return {e["name"]: e for e in _system_entries()}


def require_cluster(value: object, alternative: str = "") -> Cluster:
    """``value`` when it is a `Cluster`, else a one-line error naming ``cluster`` (the API's
    argument) with how to make one, and ``alternative`` (another way the caller takes)."""
    if not isinstance(value, Cluster):
        hint = f" ({alternative})" if alternative else ""
        raise HwtuneInputError("cluster", value, "a Cluster, e.g. hwtune.hardware.cluster."
                               f"make_cluster('h100-sxm-80gb', 64){hint}")  # fmt: skip
    return value


def make_cluster(
    gpu: str | Device = "h100-sxm-80gb",
    gpus: int = 8,
    gpus_per_node: int | None = None,
    nic_gbps: float | None = None,
    scaleup_domain: int | None = None,
    **kw: object,
) -> Cluster:
    """A cluster from the common flags; unspecified network figures come from the device's
    catalog system preset when there is one (e.g. DGX H100: 8 GPUs, 400 Gb/s per GPU)."""
    dev = get_device(gpu)
    preset = next((s for s in systems().values() if s.get("device") == dev.name), {})
    fields = {
        "device": dev,
        "n_gpus": gpus,
        # None (not 0) means "from the preset": a 0 is validated and rejected, not replaced
        "gpus_per_node": preset.get("gpus_per_node", 8) if gpus_per_node is None else gpus_per_node,
        "nic_gbps_per_gpu": preset.get("nic_gbps_per_gpu", 400) if nic_gbps is None else nic_gbps,
        "scaleup_domain": preset.get("scaleup_domain")
        if scaleup_domain is None
        else scaleup_domain,
        "topology": preset.get("topology", "rail-optimized"),
        "oversubscription": preset.get("oversubscription", 1.0),
        "nvls_allreduce_algbw_gbps": preset.get("nvls_allreduce_algbw_gbps"),
        "host_memory_gbps_per_node": preset.get("host_memory_gbps_per_node"),
        **kw,
    }
    if fields["nvls_allreduce_algbw_gbps"] is not None and "nvls_reference_gpus" not in kw:
        # the figure is the whole domain's, whatever part of it this job takes
        fields["nvls_reference_gpus"] = fields["scaleup_domain"] or fields["gpus_per_node"]
    if 0 < fields["n_gpus"] < fields["gpus_per_node"]:  # a job smaller than a node
        fields["gpus_per_node"] = fields["n_gpus"]
        if fields["scaleup_domain"] and fields["scaleup_domain"] > fields["n_gpus"]:
            fields["scaleup_domain"] = fields["n_gpus"]
    try:
        return Cluster(**fields)
    except ValidationError as e:
        raise from_validation_error(e, where="cluster") from None


def load_cluster_file(path: str | Path) -> Cluster:
    """A cluster from YAML: either ``system: <preset>`` plus overrides, or the Cluster fields with
    ``device`` as a catalog name or device-file path."""
    from hwtune.structured_file import read_structured

    p = Path(path)
    data = read_structured(p, "cluster")
    if not isinstance(data, dict):
        raise HwtuneInputError(str(path), type(data).__name__, "a mapping of cluster fields")
    if "system" in data:
        name = data.pop("system")
        if name not in systems():
            raise unknown_name(f"{p.name}.system", name, systems().keys())
        base = dict(systems()[name])
        base.pop("name", None)
        base.pop("source", None)
        base.pop("nvls_source", None)
        base.pop("host_memory_source", None)
        base.update(data)
        data = base
    if "device" not in data:
        raise HwtuneInputError(
            f"{p.name}.device", None, "a catalog device name or a device YAML path"
        )
    try:
        data["device"] = get_device(str(data["device"]))
    except HwtuneInputError as e:  # name the file's field, not the --gpu option
        if e.field != "gpu":
            raise
        raise HwtuneInputError(f"{p.name}.device", e.value, e.expected) from None
    if "n_gpus" not in data:
        raise HwtuneInputError(f"{p.name}.n_gpus", None, "the number of GPUs (a positive integer)")
    try:
        return Cluster(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None
