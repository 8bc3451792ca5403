"""NVIDIA Jetson through sysfs: INA3221 power rails and the GPU's devfreq clocks.

Power rails (NVIDIA Jetson Linux Developer Guide, "Platform Power and Performance", Jetson
Orin: "Software-based power consumption modeling"): each INA3221 monitor is an I2C device
under ``/sys/bus/i2c/drivers/ina3221/<bus-addr>/hwmon/hwmonK/`` with ``inN_label`` (rail name),
``inN_input`` (bus voltage, mV) and ``currN_input`` (current, mA) for channels N = 1..3; older
kernels (driver ``ina3221x``, JetPack 4) expose ``iio:deviceK/rail_name_N`` and
``in_power{N}_input`` in mW. Orin NX/Nano report the module input as ``VDD_IN``; AGX Orin has
no total rail, and its module power is the sum of its rails (VDD_GPU_SOC, VDD_CPU_CV,
VIN_SYS_5V0, VDDQ_VDD2_1V8AO), as jtop sums them. Channels labelled ``NC`` are unconnected.

GPU clocks (Linux devfreq ABI, Documentation/ABI/testing/sysfs-class-devfreq):
``/sys/class/devfreq/17000000.gpu`` (``17000000.ga10b`` on JetPack 5) with
``available_frequencies``, ``cur_freq``, ``min_freq``, ``max_freq`` (Hz) and ``governor``;
writing min and max to the same step locks the clock (root only). GPU load, 0..1000, is in the
GPU platform device's ``load`` file.

The rails give power only; energy is the trapezoid integral of the samples taken — call
`JetsonDevice.start_sampling` for a steady sampling rate inside long windows.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    Utilization,
    nearest_frequency,
)
from hwtune.energy.meters.sysfs import read_number, read_text, write_text

READ_PRIVILEGE = (
    "read access to the INA3221 hwmon files: run as root or grant read access with a udev rule"
)
WRITE_PRIVILEGE = "root (sudo) to write {path} (GPU clock limits)"
TOTAL_RAILS = ("VDD_IN",)
GPU_DEVFREQ_HINTS = ("gpu", "ga10b", "gv11b", "gp10b", "gm20b")


@dataclass(frozen=True, slots=True)
class Rail:
    """One INA3221 channel: voltage and current files (hwmon), or a power file (iio, mW)."""

    name: str
    voltage: Path | None = None
    current: Path | None = None
    power_mw: Path | None = None

    def read_w(self) -> float:
        if self.voltage is not None and self.current is not None:
            mv = read_number(self.voltage, READ_PRIVILEGE)
            ma = read_number(self.current, READ_PRIVILEGE)
            return mv * ma / 1e6
        assert self.power_mw is not None
        return read_number(self.power_mw, READ_PRIVILEGE) / 1e3


def discover_rails(root: Path) -> dict[str, Rail]:
    """Every labelled INA3221 channel under ``root``/sys/bus/i2c/drivers/ina3221{,x}."""
    rails: dict[str, Rail] = {}
    for driver in ("ina3221", "ina3221x"):
        base = root / "sys/bus/i2c/drivers" / driver
        if not base.is_dir():
            continue
        for dev in sorted(base.iterdir()):
            scan = [dev, *sorted(dev.glob("hwmon/hwmon*"))]
            for d in scan:
                for label in sorted(d.glob("in*_label")):
                    idx = label.name[2:].split("_")[0]
                    name = read_text(label, READ_PRIVILEGE)
                    if not name or name.upper() == "NC":
                        continue
                    v, c = d / f"in{idx}_input", d / f"curr{idx}_input"
                    if v.exists() and c.exists():
                        rails[name] = Rail(name, voltage=v, current=c)
            for iio in sorted(dev.glob("iio:device*")):
                for label in sorted(iio.glob("rail_name_*")):
                    idx = label.name.rsplit("_", 1)[1]
                    name = read_text(label, READ_PRIVILEGE)
                    p = iio / f"in_power{idx}_input"
                    if name and name.upper() != "NC" and p.exists():
                        rails[name] = Rail(name, power_mw=p)
    return rails


def find_gpu_devfreq(root: Path) -> Path | None:
    base = root / "sys/class/devfreq"
    if not base.is_dir():
        return None
    for d in sorted(base.iterdir()):
        if any(h in d.name for h in GPU_DEVFREQ_HINTS) and (d / "available_frequencies").exists():
            return d
    return None


class JetsonDevice(BaseDevice):
    """Module power from INA3221 rails; GPU clock control through devfreq.

    ``rails``: names to sum (default: ``VDD_IN`` when present, else every rail).
    ``root``: the filesystem root (a fake tree in tests)."""

    def __init__(
        self,
        root: str | Path = "/",
        rails: Sequence[str] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(clock)
        self.root = Path(root)
        self.name = "jetson"
        found = discover_rails(self.root)
        if not found:
            raise MeterError(
                str(self.root / "sys/bus/i2c/drivers/ina3221"),
                "no INA3221 rails",
                "a Jetson with its power monitors (driver ina3221 or ina3221x loaded)",
            )
        if rails is None:
            total = [r for r in TOTAL_RAILS if r in found]
            rails = total or sorted(found)
        missing = [r for r in rails if r not in found]
        if missing:
            raise MeterError(
                "rail", missing[0], f"one of the rails found: {', '.join(sorted(found))}"
            )
        self.all_rails = found
        self.rails = [found[r] for r in rails]
        self.devfreq = find_gpu_devfreq(self.root)
        self._lock = threading.Lock()
        self._sampler: threading.Thread | None = None
        self._sampling_guard = threading.Lock()
        self._stop = threading.Event()
        self._sampler_error: MeterError | None = None
        self.sampler_errors = 0
        """Background samples that failed (`start_sampling`)."""

    # -- power and energy ----------------------------------------------------------------
    def rail_power_w(self) -> dict[str, float]:
        """Every rail's power now, W."""
        return {name: rail.read_w() for name, rail in self.all_rails.items()}

    def power_w(self) -> float:
        watts = sum(r.read_w() for r in self.rails)
        with self._lock:
            self._integrate(watts)
        return watts

    def energy_j(self) -> float:
        """Energy integrated from the samples so far, J. Raises the `MeterError` of a
        background sample that failed since the last call (once): the energy across that gap
        is integrated from the samples around it, so a window that spans it is less exact and
        the caller should know (the online tuner drops that interval)."""
        with self._lock:
            err, self._sampler_error = self._sampler_error, None
        if err is not None:
            raise err
        self.power_w()
        with self._lock:
            return self._integrated_j

    def start_sampling(self, hz: float = 100.0) -> None:
        """Sample power in a background thread (energy accuracy inside long windows), ``hz``
        times a second (positive and finite). A no-op while sampling."""
        with self._sampling_guard:  # one owner at a time starts or stops it
            if self._sampler is not None:
                return
            if not (hz > 0 and math.isfinite(hz)):
                raise MeterError("sampling rate", hz, "a positive finite rate in Hz")
            self._stop.clear()
            period = 1.0 / hz

            def run() -> None:  # a failed sample is kept for `energy_j` to raise; sampling goes on
                while not self._stop.wait(period):
                    try:
                        self.power_w()
                    except MeterError as e:
                        with self._lock:
                            self._sampler_error = e
                            self.sampler_errors += 1

            self._sampler = threading.Thread(target=run, name="hwtune-jetson-sampler", daemon=True)
            self._sampler.start()

    def stop_sampling(self) -> None:
        with self._sampling_guard:  # one owner at a time starts or stops it
            if self._sampler is not None:
                self._stop.set()
                self._sampler.join()
                self._sampler = None

    # -- clocks --------------------------------------------------------------------------

    def _devfreq_file(self, name: str) -> Path:
        if self.devfreq is None:
            raise MeterError(
                str(self.root / "sys/class/devfreq"), "no GPU devfreq", "a devfreq node of the GPU"
            )
        return self.devfreq / name

    def frequencies_hz(self) -> tuple[float, ...]:
        if self.devfreq is None:
            return ()
        path = self._devfreq_file("available_frequencies")
        text = read_text(path, READ_PRIVILEGE)
        try:
            table = sorted(float(x) for x in text.split())
        except ValueError:
            raise MeterError(str(path), text, "clocks in Hz separated by spaces") from None
        if not all(f > 0 and math.isfinite(f) for f in table):
            raise MeterError(str(path), text, "positive finite clocks in Hz")
        return tuple(table)

    def frequency_hz(self) -> float | None:
        if self.devfreq is None:
            return None
        return read_number(self._devfreq_file("cur_freq"), READ_PRIVILEGE)

    def governor(self) -> str | None:
        f = self._devfreq_file("governor") if self.devfreq else None
        return read_text(f, READ_PRIVILEGE) if f is not None and f.exists() else None

    def set_frequency_hz(self, hz: float) -> None:
        """Lock the GPU clock to one step (min = max = ``hz``)."""
        self._devfreq_file("available_frequencies")  # no devfreq node: say so
        f = nearest_frequency(hz, self.frequencies_hz(), "frequency")
        lo, hi = self._devfreq_file("min_freq"), self._devfreq_file("max_freq")
        cur_max = read_number(hi, READ_PRIVILEGE)
        # keep min <= max at every moment: raise max first when going up, min first going down
        order = (hi, lo) if f > cur_max else (lo, hi)
        for path in order:
            write_text(path, str(int(f)), WRITE_PRIVILEGE.format(path=path))

    def reset(self) -> None:
        """Unlock: the full table back as the devfreq range."""
        table = self.frequencies_hz()
        if not table:
            return
        hi, lo = self._devfreq_file("max_freq"), self._devfreq_file("min_freq")
        write_text(hi, str(int(table[-1])), WRITE_PRIVILEGE.format(path=hi))
        write_text(lo, str(int(table[0])), WRITE_PRIVILEGE.format(path=lo))

    def utilization(self) -> Utilization | None:
        cands = [
            self.devfreq / "device/load" if self.devfreq else None,
            self.root / "sys/devices/gpu.0/load",
            self.root / "sys/devices/platform/gpu.0/load",
        ]
        for c in cands:
            if c is not None and c.exists():
                return Utilization(gpu=min(1.0, read_number(c, READ_PRIVILEGE) / 1000.0))
        return None

    def capabilities(self) -> Capabilities:
        table = self.frequencies_hz()
        return Capabilities(
            energy=True,
            power=True,
            utilization=self.utilization() is not None,
            set_frequency=bool(table),
            frequencies_hz=table,
        )
