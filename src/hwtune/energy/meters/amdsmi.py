"""AMD GPUs through AMD SMI (the ``amdsmi`` Python package of ROCm, imported only when a device
is opened).

AMD SMI Python API (ROCm docs, "AMD SMI Python API reference"): ``amdsmi_get_energy_count``
(accumulator x ``counter_resolution`` µJ; the key is ``energy_accumulator``, ``power`` in
releases before ROCm 6.4), ``amdsmi_get_power_info`` (``current_socket_power``,
``average_socket_power``, W), ``amdsmi_get_gpu_activity`` (``gfx_activity``, ``umc_activity``,
percent), ``amdsmi_get_clk_freq`` (supported GFX clocks, Hz), ``amdsmi_set_gpu_clk_range``
(MHz) and ``amdsmi_get_power_cap_info`` / ``amdsmi_set_power_cap`` (µW) — setters need root.

Every library exception derives from ``AmdSmiException`` (``AmdSmiLibraryException`` with an
error code, ``AmdSmiParameterException``, ``AmdSmiKeyException``, ...), and a field a GPU does
not report comes back as the string ``"N/A"``: both become a `MeterError` here, so a caller (the
online tuner in a training loop) sees one kind of meter failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    MeterPermissionError,
    Utilization,
    check_gpu_index,
    import_vendor,
    nearest_frequency,
)

INSTALL_HINT = "amdsmi installed (pip install 'hwtune[amd]', matching the ROCm version)"
ROOT_HINT = "root (sudo), as `amd-smi set` needs"
AMDSMI_STATUS_NO_PERM = 10  # amdsmi_wrapper.AMDSMI_STATUS_NO_PERM


class AmdSmiDevice(BaseDevice):
    """One AMD GPU by index."""

    def __init__(self, index: int = 0, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock)
        self._smi = import_vendor("amdsmi", "amdsmi", INSTALL_HINT)
        self._call("amdsmi_init")
        handles = self._call("amdsmi_get_processor_handles")
        check_gpu_index(index, len(handles))
        self.index = index
        self.handle = handles[index]
        self.name = f"amd-gpu{index}"

    def _call(self, fn: str, *args: object, **kw: object) -> Any:
        smi = self._smi
        # the base class of every amdsmi exception (older stand-ins define only the library one)
        base = getattr(smi, "AmdSmiException", smi.AmdSmiLibraryException)
        try:
            return getattr(smi, fn)(*args, **kw)
        except base as e:
            code = getattr(e, "err_code", None)
            if code is None and hasattr(e, "get_error_code"):
                code = e.get_error_code()
            if code == AMDSMI_STATUS_NO_PERM:
                raise MeterPermissionError(fn, ROOT_HINT) from None
            raise MeterError(fn, str(e), INSTALL_HINT) from None

    def energy_j(self) -> float:
        fn = "amdsmi_get_energy_count"
        d = self._call(fn, self.handle)
        key = next((k for k in ("energy_accumulator", "power") if k in d), None)
        if key is None:
            raise MeterError(fn, sorted(d), "an energy_accumulator field")
        return self._monotone(_number(d, key, fn) * _number(d, "counter_resolution", fn) / 1e6)

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
        return tuple(sorted(self._clocks()[0]))

    def frequency_hz(self) -> float | None:
        table, current = self._clocks()
        if not (isinstance(current, int) and 0 <= current < len(table)):
            raise MeterError("amdsmi_get_clk_freq current", current, f"an index below {len(table)}")
        return table[current]

    def _clocks(self) -> tuple[list[float], object]:
        """The GFX clock table (Hz, in the library's order) and the index of the current one."""
        info = self._call("amdsmi_get_clk_freq", self.handle, self._smi.AmdSmiClkType.GFX)
        info = info if isinstance(info, dict) else {}
        freqs = info.get("frequency")
        try:
            table = [float(f) for f in freqs]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise MeterError(
                "amdsmi_get_clk_freq frequency", freqs, "a list of clocks in Hz"
            ) from None
        return table, info.get("current")

    def set_frequency_hz(self, hz: float) -> None:
        f = nearest_frequency(hz, self.frequencies_hz(), "frequency")
        mhz = int(round(f / 1e6))
        self._call("amdsmi_set_gpu_clk_range", self.handle, mhz, mhz, self._smi.AmdSmiClkType.GFX)

    def _cap_info(self) -> dict[str, Any]:
        return self._call("amdsmi_get_power_cap_info", self.handle)

    def _cap_w(self, *keys: str) -> tuple[float, ...]:
        """The power-cap fields ``keys`` of one `amdsmi_get_power_cap_info` call, W."""
        info = self._cap_info()
        return tuple(_number(info, k, "amdsmi_get_power_cap_info") / 1e6 for k in keys)

    def power_limit_w(self) -> float | None:
        return self._cap_w("power_cap")[0]

    def set_power_limit_w(self, watts: float) -> None:
        lo, hi = self._cap_w("min_power_cap", "max_power_cap")
        if not lo <= watts <= hi:
            raise MeterError("power limit", watts, f"a limit in [{lo:g}, {hi:g}] W for {self.name}")
        self._call("amdsmi_set_power_cap", self.handle, 0, int(round(watts * 1e6)))

    def reset(self) -> None:
        default_uw = int(round(self._cap_w("default_power_cap")[0] * 1e6))
        self._call("amdsmi_set_power_cap", self.handle, 0, default_uw)
        self._call("amdsmi_set_gpu_perf_level", self.handle, self._smi.AmdSmiDevPerfLevel.AUTO)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            energy=True,
            power=True,
            utilization=True,
            set_frequency=True,
            set_power_limit=True,
            frequencies_hz=self.frequencies_hz(),
            power_limit_range_w=self._cap_w("min_power_cap", "max_power_cap"),  # type: ignore[arg-type]
        )


def _number(info: object, key: str, fn: str) -> float:
    """``info[key]`` as a finite number; a `MeterError` for a missing field or the ``"N/A"``
    amdsmi returns for a value the GPU does not report."""
    v = info.get(key) if isinstance(info, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise MeterError(f"{fn} {key}", v, "a finite number")
    return float(v)
