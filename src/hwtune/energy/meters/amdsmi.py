"""AMD GPUs through AMD SMI (the ``amdsmi`` Python package of ROCm, imported only when a device
is opened).

AMD SMI Python API (ROCm docs, "AMD SMI Python API reference"): ``amdsmi_get_energy_count``
(accumulator x ``counter_resolution`` µJ; the key is ``energy_accumulator``, ``power`` in
releases before ROCm 6.4), ``amdsmi_get_power_info`` (``current_socket_power``,
``average_socket_power``, W), ``amdsmi_get_gpu_activity`` (``gfx_activity``, ``umc_activity``,
percent), ``amdsmi_get_clk_freq`` (supported GFX clocks, Hz), ``amdsmi_set_gpu_clk_range``
(MHz) and ``amdsmi_get_power_cap_info`` / ``amdsmi_set_power_cap`` (µW) — setters need root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    MeterPermissionError,
    Utilization,
    nearest_frequency,
)

INSTALL_HINT = "amdsmi installed (pip install 'hwtune[amd]', matching the ROCm version)"
ROOT_HINT = "root (sudo), as `amd-smi set` needs"
AMDSMI_STATUS_NO_PERM = 10  # amdsmi_wrapper.AMDSMI_STATUS_NO_PERM


def _import_amdsmi() -> Any:
    try:
        import amdsmi
    except ImportError:
        raise MeterError("backend", "amdsmi", INSTALL_HINT) from None
    return amdsmi


class AmdSmiDevice(BaseDevice):
    """One AMD GPU by index."""

    def __init__(self, index: int = 0, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock)
        self._smi = _import_amdsmi()
        self._call("amdsmi_init")
        handles = self._call("amdsmi_get_processor_handles")
        if not 0 <= index < len(handles):
            raise MeterError("gpu index", index, f"an index below the {len(handles)} GPUs found")
        self.index = index
        self.handle = handles[index]
        self.name = f"amd-gpu{index}"

    def _call(self, fn: str, *args: object, **kw: object) -> Any:
        smi = self._smi
        try:
            return getattr(smi, fn)(*args, **kw)
        except smi.AmdSmiLibraryException as e:  # type: ignore[attr-defined]
            code = getattr(e, "err_code", None)
            if code is None and hasattr(e, "get_error_code"):
                code = e.get_error_code()
            if code == AMDSMI_STATUS_NO_PERM:
                raise MeterPermissionError(fn, ROOT_HINT) from None
            raise MeterError(fn, str(e), INSTALL_HINT) from None

    def energy_j(self) -> float:
        d = self._call("amdsmi_get_energy_count", self.handle)
        acc = d.get("energy_accumulator", d.get("power"))
        if acc is None:
            raise MeterError("amdsmi_get_energy_count", sorted(d), "an energy_accumulator field")
        return self._monotone(float(acc) * float(d["counter_resolution"]) / 1e6)

    def power_w(self) -> float:
        info = self._call("amdsmi_get_power_info", self.handle)
        for key in ("current_socket_power", "average_socket_power"):
            v = info.get(key)
            if isinstance(v, int | float) and v >= 0:
                return float(v)
        raise MeterError("amdsmi_get_power_info", info, "a numeric socket power")

    def utilization(self) -> Utilization | None:
        a = self._call("amdsmi_get_gpu_activity", self.handle)
        gfx, umc = a.get("gfx_activity"), a.get("umc_activity")
        if not isinstance(gfx, int | float):
            return None
        mem = umc / 100.0 if isinstance(umc, int | float) else 0.0
        return Utilization(gpu=gfx / 100.0, memory=mem)

    def frequencies_hz(self) -> tuple[float, ...]:
        info = self._call("amdsmi_get_clk_freq", self.handle, self._smi.AmdSmiClkType.GFX)
        return tuple(sorted(float(f) for f in info["frequency"]))

    def frequency_hz(self) -> float | None:
        info = self._call("amdsmi_get_clk_freq", self.handle, self._smi.AmdSmiClkType.GFX)
        return float(info["frequency"][info["current"]])

    def set_frequency_hz(self, hz: float) -> None:
        f = nearest_frequency(hz, self.frequencies_hz(), "frequency")
        mhz = int(round(f / 1e6))
        self._call("amdsmi_set_gpu_clk_range", self.handle, mhz, mhz, self._smi.AmdSmiClkType.GFX)

    def _cap_info(self) -> dict[str, Any]:
        return self._call("amdsmi_get_power_cap_info", self.handle)

    def power_limit_w(self) -> float | None:
        return self._cap_info()["power_cap"] / 1e6

    def set_power_limit_w(self, watts: float) -> None:
        info = self._cap_info()
        lo, hi = info["min_power_cap"] / 1e6, info["max_power_cap"] / 1e6
        if not lo <= watts <= hi:
            raise MeterError("power limit", watts, f"a limit in [{lo:g}, {hi:g}] W for {self.name}")
        self._call("amdsmi_set_power_cap", self.handle, 0, int(round(watts * 1e6)))

    def reset(self) -> None:
        self._call(
            "amdsmi_set_power_cap", self.handle, 0, int(self._cap_info()["default_power_cap"])
        )
        self._call("amdsmi_set_gpu_perf_level", self.handle, self._smi.AmdSmiDevPerfLevel.AUTO)

    def capabilities(self) -> Capabilities:
        info = self._cap_info()
        return Capabilities(
            energy=True,
            power=True,
            utilization=True,
            set_frequency=True,
            set_power_limit=True,
            frequencies_hz=self.frequencies_hz(),
            power_limit_range_w=(info["min_power_cap"] / 1e6, info["max_power_cap"] / 1e6),
        )
