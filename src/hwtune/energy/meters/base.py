"""The device protocol: what a measured and controlled device offers, and its errors.

One protocol covers every backend (NVML, AMD SMI, Jetson sysfs, Linux RAPL, replayed traces,
the simulated device, a user's own simulator): read cumulative energy (J) and power (W), list
and set clocks or power limits, report what is supported. Backends that cannot do something
raise `UnsupportedOperation` (a `HwtuneInputError`: the CLI prints one line and exits 2).

Failures: a reading or a control that fails raises `MeterError` and nothing else. Each backend
converts its library's exceptions (pynvml's ``NVMLError`` subclasses, amdsmi's
``AmdSmiException``), OSError from sysfs files and malformed values (a non-numeric reading,
amdsmi's ``"N/A"``) at its boundary, so a caller in a training loop (`OnlineTuner`) can treat a
`MeterError` as a failed reading and any other exception as a bug.
"""

from __future__ import annotations

import importlib
import math
import numbers
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hwtune.errors import HwtuneInputError


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a device supports. ``frequencies_hz`` lists the settable clocks (empty = none)."""

    energy: bool
    power: bool
    utilization: bool = False
    set_frequency: bool = False
    set_power_limit: bool = False
    frequencies_hz: tuple[float, ...] = ()
    power_limit_range_w: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "energy": self.energy,
            "power": self.power,
            "utilization": self.utilization,
            "set_frequency": self.set_frequency,
            "set_power_limit": self.set_power_limit,
            "frequencies_hz": list(self.frequencies_hz),
            "power_limit_range_w": list(self.power_limit_range_w)
            if self.power_limit_range_w
            else None,
        }


@dataclass(frozen=True, slots=True)
class Utilization:
    """Busy shares in [0, 1]: kernels running (``gpu``) and memory-bound work (``memory``)."""

    gpu: float
    memory: float = 0.0


@runtime_checkable
class PowerDevice(Protocol):
    """A device that can be measured and (maybe) controlled. SI units throughout."""

    name: str

    def capabilities(self) -> Capabilities: ...

    def now_s(self) -> float:
        """The device's clock (wall clock for hardware, virtual time for simulators)."""
        ...

    def energy_j(self) -> float:
        """Energy since an arbitrary origin, J; never decreases (wrap-around handled)."""
        ...

    def power_w(self) -> float:
        """Current (or most recent short-window average) power, W."""
        ...

    def utilization(self) -> Utilization | None:
        """Busy shares since the previous call, or None when the device cannot tell."""
        ...

    def frequency_hz(self) -> float | None:
        """The current (locked or maximum allowed) clock, or None when unknown."""
        ...

    def set_frequency_hz(self, hz: float) -> None: ...

    def power_limit_w(self) -> float | None: ...

    def set_power_limit_w(self, watts: float) -> None: ...

    def reset(self) -> None:
        """Give clocks and limits back to the device's defaults."""
        ...


class MeterError(HwtuneInputError):
    """A meter cannot do what was asked (missing file, bad value); one line, CLI exit 2."""


class EnergyGapError(MeterError):
    """A reading whose energy the device could not tell, counted in its `energy_gaps` (a RAPL
    counter read too seldom): the energy before it is lost, the counter goes on from it. Raised
    by the reading that found it, or, found by a background sampler, by the next `energy_j`;
    `EnergyMonitor.begin` starts a window after one."""


class MeterPermissionError(MeterError):
    """Reading or writing ``path`` was refused; the message names the privilege needed."""

    def __init__(self, path: str, privilege: str) -> None:
        super().__init__(path, "permission denied", privilege)


class UnsupportedOperation(MeterError):
    """The device does not offer this operation."""

    def __init__(self, device: str, operation: str, supported: str) -> None:
        super().__init__(operation, device, f"a device that supports it ({supported})")


class BaseDevice:
    """Defaults for the optional parts of the protocol: unsupported controls, wall clock,
    power from energy differences, energy from power integration (trapezoid rule)."""

    name = "device"

    def __init__(self, clock: object = None) -> None:
        self._clock = clock or time.monotonic
        self._last_power_sample: tuple[float, float] | None = None  # (t, W) for integration
        self._integrated_j = 0.0
        self._last_energy_sample: tuple[float, float] | None = None  # (t, J) for power
        self._counter_last: float | None = None  # raw reading of a vendor energy counter, J
        self._counter_total = 0.0
        self.counter_resets = 0
        self.counter_glitches = 0  # readings a little below the previous one (ignored)

    # -- clock -------------------------------------------------------------------------
    def now_s(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    # -- energy from power (backends that only read power) ------------------------------
    def _integrate(self, watts: float) -> float:
        """Add the trapezoid since the last power sample; returns the running energy, J."""
        t = self.now_s()
        if self._last_power_sample is not None:
            t0, w0 = self._last_power_sample
            self._integrated_j += 0.5 * (w0 + watts) * max(0.0, t - t0)
        self._last_power_sample = (t, watts)
        return self._integrated_j

    # -- a vendor energy counter that can restart ----------------------------------------
    def _monotone(self, raw_j: float) -> float:
        """The counter's reading, kept monotone across restarts of a cumulative counter from
        zero (NVML's total energy after a driver reload or GPU reset, AMD SMI's 64-bit
        accumulator after a reset): a reading below half the previous one is a restart and adds
        the reading itself, the energy since the restart, so `energy_j` never decreases (the
        protocol's promise). A reading a little below the previous one is a glitch of the
        counter, not a restart (AMD SMI's accumulator has been reported stepping back,
        ROCm/amdsmi#115): it adds nothing and the previous reading stays the reference, so the
        next one adds only what is new; taken as a restart it would add the whole since-boot
        total. Not a wrap handler: a counter that wraps at a fixed range (RAPL's) also needs
        the energy between the last reading and the range, which `RaplDevice` adds itself."""
        if self._counter_last is None:
            self._counter_total = raw_j
        elif raw_j >= self._counter_last:
            self._counter_total += raw_j - self._counter_last
        elif raw_j < 0.5 * self._counter_last:
            self._counter_total += raw_j
            self.counter_resets += 1
        else:
            self.counter_glitches += 1
            return self._counter_total
        self._counter_last = raw_j
        return self._counter_total

    # -- power from energy (backends that only count energy) ----------------------------
    def _power_from_energy(self, energy_j: float) -> float | None:
        """Average power since the previous call (None on the first call)."""
        t = self.now_s()
        prev = self._last_energy_sample
        self._last_energy_sample = (t, energy_j)
        if prev is None or t <= prev[0]:
            return None
        return (energy_j - prev[1]) / (t - prev[0])

    # -- optional parts ------------------------------------------------------------------
    def utilization(self) -> Utilization | None:
        return None

    def frequency_hz(self) -> float | None:
        return None

    def set_frequency_hz(self, hz: float) -> None:
        raise UnsupportedOperation(self.name, "set_frequency_hz", self._supported())

    def power_limit_w(self) -> float | None:
        return None

    def set_power_limit_w(self, watts: float) -> None:
        raise UnsupportedOperation(self.name, "set_power_limit_w", self._supported())

    def reset(self) -> None:
        return None

    def _supported(self) -> str:
        caps = self.capabilities()  # type: ignore[attr-defined]
        names = [k for k, v in caps.to_dict().items() if v is True]
        return f"{self.name} supports: {', '.join(names) or 'nothing'}"


def energy_gaps(device: PowerDevice) -> int:
    """Readings so far whose energy the device could not tell and after which its counter went
    on from an unknown origin (`RaplDevice.gaps`; 0 for devices that do not count them): an
    energy difference across one is too low. Not part of `PowerDevice`, so that every device
    written to the protocol still satisfies it."""
    return int(getattr(device, "gaps", 0))


def check_energy_gaps(device: PowerDevice, since: int, what: str) -> None:
    """A `MeterError` naming ``what`` (a window, an interval) when the device had a reading of
    unknown energy after ``since`` (its `energy_gaps` then): an energy difference across it
    would be too low, and reading it as a measurement is what the error prevents."""
    lost = energy_gaps(device) - since
    if lost:
        raise MeterError(
            what, f"{lost} reading(s) of unknown energy inside it",
            f"a counter read often enough to tell every delta ({device.name})",
        )  # fmt: skip


def import_vendor(module: str, backend: str, hint: str) -> Any:
    """A vendor library (pynvml, amdsmi), imported only when its device is opened so that the
    package works without it; a `MeterError` naming ``backend`` and ``hint`` (how to install
    it) when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MeterError("backend", backend, hint) from None


def check_gpu_index(index: int, count: int) -> None:
    """A `MeterError` unless ``index`` names one of the ``count`` GPUs a library found."""
    if not 0 <= index < count:
        raise MeterError("gpu index", index, f"an index below the {count} GPUs found")


def clock_table(frequencies_hz: Iterable[object], field: str = "frequencies") -> tuple[float, ...]:
    """A table of clocks as every part of `hwtune.energy` takes one (the tuner, the
    co-optimizer, the stage planner, the simulated device): Hz, ascending, without repeats.
    An empty table, or a clock that is not a positive finite number, is a one-line
    `HwtuneInputError` naming ``field``, the clocks given and what was expected."""
    given = list(frequencies_hz)
    if not given or not all(_is_clock(f) for f in given):
        raise HwtuneInputError(field, given, "positive finite clocks in Hz")
    return tuple(sorted({float(f) for f in given}))  # type: ignore[arg-type]


def _is_clock(f: object) -> bool:
    return (
        isinstance(f, numbers.Real)
        and not isinstance(f, bool)
        and math.isfinite(f)  # type: ignore[arg-type]
        and f > 0
    )


def nearest_frequency(hz: float, table: tuple[float, ...] | list[float], field: str) -> float:
    """``hz`` when it is in ``table`` (within 0.5 MHz), else an error listing the table."""
    for f in table:
        if abs(f - hz) <= 0.5e6:
            return f
    shown = ", ".join(f"{f / 1e6:g}" for f in table)
    raise MeterError(field, hz, f"one of the supported clocks in MHz: {shown}")
