"""Power meters: one device protocol, backends for NVML, AMD SMI, Jetson sysfs, Linux RAPL,
recorded traces and a simulated device, and measurement windows over any of them."""

from __future__ import annotations

from pathlib import Path

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    MeterPermissionError,
    PowerDevice,
    UnsupportedOperation,
    Utilization,
)
from hwtune.energy.meters.windows import EnergyMonitor, Measurement

BACKENDS = ("nvml", "amdsmi", "jetson", "rapl", "replay")


def open_device(backend: str, index: int = 0, root: str | Path | None = None,
                trace: str | Path | None = None) -> PowerDevice:  # fmt: skip
    """A device by backend name: ``nvml``/``amdsmi`` (GPU ``index``), ``jetson`` and ``rapl``
    (sysfs under ``root``), ``replay`` (a ``trace`` CSV)."""
    from hwtune.errors import HwtuneInputError

    if backend == "nvml":
        from hwtune.energy.meters.nvml import NvmlDevice

        return NvmlDevice(index)
    if backend == "amdsmi":
        from hwtune.energy.meters.amdsmi import AmdSmiDevice

        return AmdSmiDevice(index)
    if backend == "jetson":
        from hwtune.energy.meters.jetson import JetsonDevice

        return JetsonDevice(root or "/")
    if backend == "rapl":
        from hwtune.energy.meters.rapl import DEFAULT_ROOT, RaplDevice

        return RaplDevice(root or DEFAULT_ROOT)
    if backend == "replay":
        from hwtune.energy.meters.replay import ReplayDevice

        if trace is None:
            raise HwtuneInputError("trace", None, "a CSV trace file for the replay backend")
        return ReplayDevice(trace)
    raise HwtuneInputError("backend", backend, f"one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "BaseDevice",
    "Capabilities",
    "EnergyMonitor",
    "Measurement",
    "MeterError",
    "MeterPermissionError",
    "PowerDevice",
    "UnsupportedOperation",
    "Utilization",
    "open_device",
]
