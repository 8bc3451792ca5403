"""Tier-2 calibration profiles: measured efficiencies of one device that replace the spec-sheet
defaults of the catalog (tier 1).

A profile is a small YAML or JSON mapping, written by one model-agnostic microbenchmark run on the
target (GEMM, HBM copy, fused attention, NCCL all-reduce, an empty engine step). Every field is
optional; what is absent keeps the catalog value::

    device: h100-sxm-80gb            # what it was measured on (checked against --gpu when given)
    gemm_efficiency: 0.78            # large bf16 GEMM, fraction of the dense peak
    gemm_efficiency_fp8: 0.66        # large fp8 GEMM, fraction of the fp8 peak
    memory_bw_efficiency: 0.90       # STREAM-like copy, fraction of the datasheet bandwidth
    attention_fwd_efficiency: 0.60   # causal flash attention forward, fraction of bf16 peak
    intra_busbw_gbps: 360            # nccl-tests all-reduce bus bandwidth inside a node, GB/s
    host_overhead_per_iteration_s: 4.0e-4   # engine step with nothing to do
    host_overhead_per_sequence_s: 5.0e-6    # per scheduled sequence (input prep, sampling)
    fused_elementwise: true          # the engine's norms, rotary and SwiGLU are fused kernels
    source: "hwtune bench on node gpu-17, 2026-05-01"

``fused_elementwise`` describes the engine rather than the device: serving engines run RMSNorm,
rotary embeddings and SiLU-and-mul as one fused kernel each (vLLM ``csrc/layernorm_kernels.cu``,
``pos_encoding_kernels.cu``, ``activation_kernels.cu``), eager `transformers` runs them as
separate PyTorch ops, each a pass through memory (an RMSNorm is seven;
`hwtune.model.lowering.rmsnorm_bytes`, ``rope_bytes``, ``act_bytes_per_elem``).
`elementwise_fused` gives the ``Shard(fused=...)`` the iteration model should lower with.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from hwtune.hardware.cluster import Cluster
from hwtune.hardware.device import Device
from hwtune.hardware.profile import POINT_CONFIG
from hwtune.structured_file import read_model


class CalibrationProfile(BaseModel):
    """Measured figures of one device (see the module docstring for the file format)."""

    # strict and finite, as a bench profile's points (a hand-edited `.inf` overhead simulated
    # every request at inf s, a quoted '0.7' was read as 0.7)
    model_config = POINT_CONFIG

    device: str | None = None
    gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
    gemm_efficiency_fp8: float | None = Field(default=None, gt=0, le=1)
    memory_bw_efficiency: float | None = Field(default=None, gt=0, le=1)
    attention_fwd_efficiency: float | None = Field(default=None, gt=0, le=1)
    intra_busbw_gbps: float | None = Field(default=None, gt=0)
    host_overhead_per_iteration_s: float | None = Field(default=None, ge=0)
    host_overhead_per_sequence_s: float | None = Field(default=None, ge=0)
    fused_elementwise: bool | None = None
    source: str = ""

    def apply_device(self, device: Device) -> Device:
        """``device`` with the measured efficiencies in place of the catalog's."""
        keys = ("gemm_efficiency", "gemm_efficiency_fp8", "memory_bw_efficiency",
                "attention_fwd_efficiency")  # fmt: skip
        upd = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        return device.model_copy(update=upd) if upd else device

    def apply_cluster(self, cluster: Cluster) -> Cluster:
        """``cluster`` with its NVLink efficiency set from the measured bus bandwidth."""
        if self.intra_busbw_gbps is None:
            return cluster
        link = cluster.device.scaleup_bandwidth_si
        eff = min(1.0, self.intra_busbw_gbps * 1e9 / link)
        return cluster.model_copy(update={"intra_efficiency": eff})


def elementwise_fused(profile: CalibrationProfile | None) -> bool:
    """Whether the engine fuses its memory-bound ops (`hwtune.model.lowering.Shard.fused`):
    the profile's ``fused_elementwise``, True (a serving engine) when it says nothing."""
    if profile is None or profile.fused_elementwise is None:
        return True
    return profile.fused_elementwise


def check_profile_device(measured_on: str, device: Device) -> None:
    """Refuse a profile whose ``device`` names another device than ``device`` (a catalog name,
    an alias or the device's own name, case-insensitive): its efficiencies would be applied to
    a device they were not measured on. The module docstring promised this check; nothing
    made it."""
    from hwtune.errors import HwtuneInputError
    from hwtune.hardware.catalog import get_device

    try:
        theirs = get_device(measured_on).name.lower()
    except HwtuneInputError:
        theirs = measured_on.strip().lower()
    if theirs not in {device.name.lower(), *(a.lower() for a in device.aliases)}:
        raise HwtuneInputError(
            "profile.device",
            measured_on,
            f"a profile measured on {device.name} (the --gpu; this one is from another device)",
        )


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read a profile file (YAML or JSON); bad fields get the one-line error. A device profile
    written by `hwtune bench` (it has ``profile_version``) is refused by name: it goes to
    ``--gpu`` (the error used to print its whole device block as the bad value)."""
    from hwtune.errors import HwtuneInputError
    from hwtune.structured_file import read_structured

    data = read_structured(Path(path), "profile")
    if isinstance(data, dict) and "profile_version" in data:
        raise HwtuneInputError(
            "profile",
            str(path),
            "a serve profile (python -m hwtune.calibrate.serving_reference); this is a device "
            "profile from hwtune bench: pass it as --gpu",
        )
    return read_model(path, "profile", CalibrationProfile, "a mapping of profile fields")
