"""Measurement windows: named, nestable ``begin``/``end`` pairs that return time, energy and
average power (the pattern of Zeus's ``ZeusMonitor.begin_window``/``end_window``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from hwtune.energy.meters.base import (
    EnergyGapError,
    MeterError,
    PowerDevice,
    check_energy_gaps,
    energy_gaps,
)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One closed window, SI units."""

    name: str
    start_s: float
    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, float | str]:
        d = asdict(self)
        d["avg_power_w"] = self.avg_power_w
        return d


class EnergyMonitor:
    """Windows over one device. Windows nest and overlap freely; names must be unique among
    the open ones. A window across a reading the device could not tell the energy of (its
    ``gaps`` count went up: a RAPL counter read too seldom) raises instead of measuring.

    The monitor reads the device only at ``begin`` and ``end`` and starts no thread: a window
    longer than a RAPL device's ``max_read_interval_s`` needs ``device.start_sampling()``
    first (and ``stop_sampling()`` after), as does a Jetson window that should integrate more
    than its two end samples. Whoever opened the device owns that thread, since a device is
    often shared (several monitors, the online tuner) and outlives any one window."""

    def __init__(self, device: PowerDevice) -> None:
        self.device = device
        self._open: dict[str, tuple[float, float, int]] = {}

    def begin(self, name: str) -> None:
        """Open window ``name``. A first reading that finds the RAPL counter read too seldom
        before it (a gap: say, a long model load since the device was opened), or raises the
        gap a background sampler found before it (`EnergyGapError`), concerns the energy
        before this window, not in it: the counter goes on from that reading, so it is read
        once more and the window starts there. Windows already open still see the gap at their
        ``end``."""
        if name in self._open:
            raise MeterError("window", name, "a name not already open")
        dev = self.device
        gaps = energy_gaps(dev)
        try:
            e0 = dev.energy_j()
        except MeterError as e:
            if not isinstance(e, EnergyGapError) and energy_gaps(dev) == gaps:
                raise  # not a gap: a failed reading
            e0 = dev.energy_j()
        self._open[name] = (dev.now_s(), e0, energy_gaps(dev))

    def end(self, name: str) -> Measurement:
        if name not in self._open:
            shown = ", ".join(self._open) or "none open"
            raise MeterError("window", name, f"an open window ({shown})")
        t0, e0, g0 = self._open.pop(name)
        t1, e1 = self.device.now_s(), self.device.energy_j()
        check_energy_gaps(self.device, g0, f"window {name}")
        # a silent 0 J (or a negative time) would pass for a measurement; say it is none
        if t1 < t0:
            raise MeterError(
                f"window {name}", f"clock went back {t0 - t1:g} s", "a clock that runs forward"
            )
        if e1 < e0:
            raise MeterError(
                f"window {name}", f"energy went down {e0 - e1:g} J",
                f"a counter that never decreases ({self.device.name})",
            )  # fmt: skip
        return Measurement(name=name, start_s=t0, time_s=t1 - t0, energy_j=e1 - e0)

    @property
    def open_windows(self) -> tuple[str, ...]:
        return tuple(self._open)

    @contextmanager
    def window(self, name: str) -> Iterator[list[Measurement]]:
        """``with monitor.window("step") as out: ...`` then ``out[0]`` is the measurement."""
        out: list[Measurement] = []
        self.begin(name)
        try:
            yield out
        finally:
            out.append(self.end(name))
