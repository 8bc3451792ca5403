"""NVIDIA GPUs through NVML (nvidia-ml-py, imported only when a device is opened).

NVML API reference (docs.nvidia.com/deploy/nvml-api): ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded, Volta and later; it restarts
with the driver, which `energy_j` absorbs), ``nvmlDeviceGetPowerUsage`` (mW),
``nvmlDeviceGetUtilizationRates`` (percent of the sample period a kernel ran / memory was
read or written), ``nvmlDeviceGetSupportedGraphicsClocks`` (MHz, per memory clock),
``nvmlDeviceSetGpuLockedClocks`` and ``nvmlDeviceSetPowerManagementLimit`` (mW) — the two
setters need root.

Every NVML failure is an ``NVMLError`` (pynvml raises a subclass per return code, e.g.
``NVMLError_GpuIsLost``, all caught through the base class): `NvmlDevice._call` turns it into a
`MeterError` (`MeterPermissionError`, `UnsupportedOperation`), so a caller (the online tuner in
a training loop) sees one kind of meter failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    MeterPermissionError,
    UnsupportedOperation,
    Utilization,
    check_gpu_index,
    import_vendor,
    nearest_frequency,
)

INSTALL_HINT = "nvidia-ml-py installed (pip install 'hwtune[nvidia]') and an NVIDIA driver"
ROOT_HINT = "root (sudo), as `nvidia-smi -lgc` / `nvidia-smi -pl` need"


class NvmlDevice(BaseDevice):
    """One NVIDIA GPU by index."""

    def __init__(self, index: int = 0, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock)
        self._nv = import_vendor("pynvml", "nvml", INSTALL_HINT)  # nvidia-ml-py
        self._call("nvmlInit")
        check_gpu_index(index, self._call("nvmlDeviceGetCount"))
        self.index = index
        self.handle = self._call("nvmlDeviceGetHandleByIndex", index)
        name = self._call("nvmlDeviceGetName", self.handle)
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self._energy_counter: bool | None = None

    def _call(self, fn: str, *args: object) -> Any:
        nv = self._nv
        try:
            return getattr(nv, fn)(*args)
        except nv.NVMLError as e:  # type: ignore[attr-defined]
            code = getattr(e, "value", None)
            if code == getattr(nv, "NVML_ERROR_NO_PERMISSION", -1):
                raise MeterPermissionError(fn, ROOT_HINT) from None
            if code == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", -2):
                raise UnsupportedOperation(
                    getattr(self, "name", "nvml"), fn, "not on this GPU"
                ) from None
            raise MeterError(fn, str(e), INSTALL_HINT) from None

    # -- energy and power ------------------------------------------------------------------
    def power_w(self) -> float:
        watts = self._call("nvmlDeviceGetPowerUsage", self.handle) / 1e3
        self._integrate(watts)
        return watts

    def energy_j(self) -> float:
        if self._energy_counter is not False:
            try:
                mj = self._call("nvmlDeviceGetTotalEnergyConsumption", self.handle)
                self._energy_counter = True
                return self._monotone(mj / 1e3)
            except UnsupportedOperation:
                self._energy_counter = False  # pre-Volta: integrate power samples
        self.power_w()
        return self._integrated_j

    def utilization(self) -> Utilization | None:
        u = self._call("nvmlDeviceGetUtilizationRates", self.handle)
        return Utilization(gpu=u.gpu / 100.0, memory=u.memory / 100.0)

    # -- clocks and limits -------------------------------------------------------------------
    def frequencies_hz(self) -> tuple[float, ...]:
        mems = self._call("nvmlDeviceGetSupportedMemoryClocks", self.handle)
        if not mems:
            raise MeterError("nvmlDeviceGetSupportedMemoryClocks", list(mems), "a memory clock")
        top = max(mems)
        gfx = self._call("nvmlDeviceGetSupportedGraphicsClocks", self.handle, top)
        return tuple(sorted(float(m) * 1e6 for m in set(gfx)))

    def frequency_hz(self) -> float | None:
        return self._call("nvmlDeviceGetClockInfo", self.handle, self._nv.NVML_CLOCK_SM) * 1e6

    def set_frequency_hz(self, hz: float) -> None:
        f = nearest_frequency(hz, self.frequencies_hz(), "frequency")
        mhz = int(round(f / 1e6))
        self._call("nvmlDeviceSetGpuLockedClocks", self.handle, mhz, mhz)

    def power_limit_w(self) -> float | None:
        return self._call("nvmlDeviceGetPowerManagementLimit", self.handle) / 1e3

    def power_limit_range_w(self) -> tuple[float, float]:
        lo, hi = self._call("nvmlDeviceGetPowerManagementLimitConstraints", self.handle)
        return (lo / 1e3, hi / 1e3)

    def set_power_limit_w(self, watts: float) -> None:
        lo, hi = self.power_limit_range_w()
        if not lo <= watts <= hi:
            raise MeterError("power limit", watts, f"a limit in [{lo:g}, {hi:g}] W for {self.name}")
        self._call("nvmlDeviceSetPowerManagementLimit", self.handle, int(round(watts * 1e3)))

    def reset(self) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks", self.handle)
        default = self._call("nvmlDeviceGetPowerManagementDefaultLimit", self.handle)
        self._call("nvmlDeviceSetPowerManagementLimit", self.handle, default)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            energy=True,
            power=True,
            utilization=True,
            set_frequency=True,
            set_power_limit=True,
            frequencies_hz=self.frequencies_hz(),
            power_limit_range_w=self.power_limit_range_w(),
        )

    def close(self) -> None:
        self._call("nvmlShutdown")
