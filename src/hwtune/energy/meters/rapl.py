"""Linux RAPL through the powercap sysfs tree (Intel, and AMD since Linux 5.8).

Layout (Linux kernel docs, Documentation/power/powercap/powercap.rst):
``<root>/intel-rapl:N/{name,energy_uj,max_energy_range_uj,constraint_0_power_limit_uw,...}``
for package N, and subzones ``intel-rapl:N:M`` (``core``, ``uncore``, ``dram``). Since Linux
5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, the PLATYPUS power side channel).

Wrap-around (Documentation/ABI/testing/sysfs-class-powercap: ``energy_uj`` is the zone's
energy counter in µJ, ``max_energy_range_uj`` the range of that counter, and
``constraint_X_max_power_uw`` / ``constraint_X_power_limit_uw`` the zone's maximum allowed power
and its power limits): the counter counts up and starts again from 0 past its range, so two
readings tell the energy between them only up to a whole number of ranges. A reading below the
previous one is taken as one wrap. Whether a second wrap (or a first one, unseen) could have
happened depends on the time between the readings: at most ``max_power x dt`` was consumed,
so a delta ``d`` is certain while ``d + range > max_power x dt``. A package counter with a
262 kJ range (2^32 units of 61 µJ) at 125 W wraps every 35 minutes; a 65.7 kJ DRAM range
(15.3 µJ units) at 500 W, every 2 minutes. `RaplDevice` takes ``max_power`` per zone as the
largest of its ``constraint_*_max_power_uw`` and ``constraint_*_power_limit_uw`` (the firmware
holds the average power under each limit over that limit's time window, so over seconds a
package stays near or under its largest one), else ``DEFAULT_MAX_POWER_W``, or the
``max_power_w`` given; a reading whose delta is not certain raises `MeterError`
instead of returning a wrong energy (read at least every `RaplDevice.max_read_interval_s`).

Long windows: there is no kernel-side accumulator, so a caller that reads the counters less
often than that (an `EnergyMonitor` window around a long epoch, a training step stalled by a
checkpoint) calls `RaplDevice.start_sampling`: a daemon thread reads every zone's counter at a
quarter of `RaplDevice.max_read_interval_s` (the counters are exact, so the sampling rate only
has to keep each delta certain), and `RaplDevice.stop_sampling` ends it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwtune.energy.meters.base import BaseDevice, Capabilities, EnergyGapError, MeterError
from hwtune.energy.meters.sysfs import read_number, read_text, write_text

READ_PRIVILEGE = (
    "read access: run as root, or `sudo chmod o+r {path}` (Linux >= 5.10 makes RAPL energy_uj "
    "root-only, CVE-2020-8694)"
)
WRITE_PRIVILEGE = "root (sudo) to write RAPL power limits"
DEFAULT_ROOT = "/sys/class/powercap"
# A zone that reports no power limit (DRAM zones, AMD's energy-only zones): a bound above the
# highest server-CPU package TDP shipping today (AMD EPYC 9965 and Intel Xeon 6980P, 500 W),
# and far above any DRAM zone. Too high a bound only shortens the safe read interval.
DEFAULT_MAX_POWER_W = 500.0
# `RaplDevice.start_sampling` by default reads every quarter of the safe interval (three
# missed or late ticks in a row still leave every delta certain), but not more often than this
MIN_SAMPLING_INTERVAL_S = 0.05


@dataclass
class _Zone:
    path: Path
    name: str
    max_range_uj: float
    max_power_w: float
    last_raw_uj: float | None = None
    last_t: float = 0.0
    total_uj: float = 0.0
    wraps: int = 0
    gaps: int = 0  # readings too far apart to tell how often the counter wrapped

    @property
    def max_read_interval_s(self) -> float:
        """The longest time between readings in which the counter cannot pass a whole range."""
        return self.max_range_uj / (self.max_power_w * 1e6)


class RaplDevice(BaseDevice):
    """Energy of the selected RAPL domains (default: every package and DRAM zone), summed."""

    def __init__(
        self,
        root: str | Path = DEFAULT_ROOT,
        domains: Sequence[str] = ("package", "dram"),
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        interval_s: float = 0.1,
        max_power_w: float | None = None,
    ) -> None:
        """``max_power_w``: an upper bound on any one zone's power, W, for the wrap check
        (default: each zone's largest power constraint, else ``DEFAULT_MAX_POWER_W``)."""
        super().__init__(clock)
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise MeterError("interval", interval_s, "a positive finite sampling time in s")
        if max_power_w is not None and not (max_power_w > 0 and math.isfinite(max_power_w)):
            raise MeterError("max power", max_power_w, "a positive finite power in W")
        self._max_power_w = max_power_w
        self.root = Path(root)
        self.name = f"rapl:{self.root}"
        self._sleep = sleep
        self.interval_s = interval_s
        # the zones' counter state is shared with the sampler thread (`start_sampling`)
        self._lock = threading.Lock()
        self._sampler: threading.Thread | None = None
        self._sampling_guard = threading.Lock()
        self._stop = threading.Event()
        self._sampler_error: MeterError | None = None
        self.sampling_interval_s: float | None = None
        """The background sampler's period, s, while it runs (`start_sampling`), else None."""
        self.samples = 0
        """Background readings of every zone so far (`start_sampling`), failed ones included."""
        self.sampler_errors = 0
        """Background readings that failed (`start_sampling`)."""
        self.zones = self._discover(tuple(domains))

    def _discover(self, domains: tuple[str, ...]) -> list[_Zone]:
        if not self.root.is_dir():
            raise MeterError(str(self.root), "missing", "a powercap sysfs tree (intel-rapl zones)")
        zones = []
        for d in sorted(self.root.glob("*-rapl:*")):
            name_file = d / "name"
            if not (d / "energy_uj").exists() or not name_file.exists():
                continue
            name = read_text(name_file, READ_PRIVILEGE.format(path=name_file))
            if not any(name.startswith(x) for x in domains):
                continue
            rng_file = d / "max_energy_range_uj"
            rng = read_number(rng_file, READ_PRIVILEGE.format(path=rng_file))
            if not (rng > 0 and math.isfinite(rng)):
                raise MeterError(str(rng_file), rng, "a positive counter range in uJ")
            zones.append(_Zone(d, name, rng, self._max_power_w or _zone_max_power_w(d)))
        if not zones:
            raise MeterError(
                str(self.root),
                "no RAPL zone named " + " or ".join(domains),
                "intel-rapl:N directories with name and energy_uj (kernel CONFIG_INTEL_RAPL)",
            )
        for z in zones:  # first reading sets each counter's origin
            self._read_zone(z)
        return zones

    def _read_zones(self, background: bool = False) -> None:
        """Read every zone (under the lock), then raise the first failure: a zone that could
        not be read does not leave the others unread, and so closer to their own limit.
        ``background`` (the sampler thread): count the reading and keep the failure for the
        next `energy_j` instead, under the same hold of the lock as the readings, so that no
        `energy_j` sees a gap counted whose error is not kept yet (a window begun there would
        have raised that earlier gap at its end)."""
        first: MeterError | None = None
        with self._lock:
            for z in self.zones:
                try:
                    self._read_zone(z)
                except MeterError as e:
                    first = first or e
            if background:
                self.samples += 1
                if first is not None:
                    self._sampler_error = self._sampler_error or first
                    self.sampler_errors += 1
                return
        if first is not None:
            raise first

    def _read_zone(self, z: _Zone) -> None:
        f = z.path / "energy_uj"
        raw = read_number(f, READ_PRIVILEGE.format(path=f))
        now = self.now_s()
        last, dt = z.last_raw_uj, now - z.last_t
        z.last_raw_uj, z.last_t = raw, now
        if last is None:
            return
        wrapped = raw < last
        step = (z.max_range_uj - last) + raw if wrapped else raw - last
        z.total_uj += step  # the least it can have been
        z.wraps += int(wrapped)
        if step + z.max_range_uj <= z.max_power_w * 1e6 * dt:  # a further range could fit
            z.gaps += 1
            raise EnergyGapError(
                str(f),
                f"{dt:.1f} s since the last reading",
                f"readings at most {z.max_read_interval_s:.1f} s apart (a range of "
                f"{z.max_range_uj:.0f} uJ at up to {z.max_power_w:g} W: the energy between "
                "these two readings is unknown, the counter may have wrapped more than once; "
                "RaplDevice.start_sampling() reads it in the background)",
            )

    def capabilities(self) -> Capabilities:
        lim = self._limit_files()
        return Capabilities(
            energy=True, power=True, set_power_limit=bool(lim), power_limit_range_w=None
        )

    def energy_j(self) -> float:
        """Energy of the selected zones since the device was opened, J. Raises the first
        `MeterError` of a background reading that failed since the last call (once, without
        reading): a reading too late to be certain also counts in `gaps`, so a window across it
        raises as well (`EnergyMonitor`, the online tuner's intervals)."""
        with self._lock:
            err, self._sampler_error = self._sampler_error, None
        if err is not None:
            raise err
        self._read_zones()
        with self._lock:
            return sum(z.total_uj for z in self.zones) / 1e6

    def default_sampling_interval_s(self) -> float:
        """A quarter of `max_read_interval_s`, at least ``MIN_SAMPLING_INTERVAL_S``."""
        return max(MIN_SAMPLING_INTERVAL_S, self.max_read_interval_s / 4)

    @property
    def sampling(self) -> bool:
        """Whether the background sampler runs (`start_sampling`)."""
        return self._sampler is not None

    def start_sampling(self, interval_s: float | None = None) -> None:
        """Read every zone's counter in a daemon thread every ``interval_s`` (default
        `default_sampling_interval_s`), so that readings any time apart stay exact (a window
        longer than `max_read_interval_s`). A failed background reading is kept and raised once
        by the next `energy_j`; sampling goes on. A no-op while sampling; `stop_sampling` ends it.
        """
        with self._sampling_guard:  # one owner at a time starts or stops it
            if self._sampler is not None:
                return
            if interval_s is None:
                interval_s = self.default_sampling_interval_s()
            elif not (interval_s > 0 and math.isfinite(interval_s)):
                raise MeterError("sampling interval", interval_s, "a positive finite time in s")
            elif interval_s > self.max_read_interval_s:
                raise MeterError(
                    "sampling interval", interval_s,
                    f"at most max_read_interval_s, {self.max_read_interval_s:g} s",
                )  # fmt: skip
            self._stop.clear()
            self.sampling_interval_s = float(interval_s)

            def run(period: float = self.sampling_interval_s) -> None:
                while not self._stop.wait(period):
                    self._read_zones(background=True)

            self._sampler = threading.Thread(target=run, name="hwtune-rapl-sampler", daemon=True)
            self._sampler.start()

    def stop_sampling(self) -> None:
        """End the background sampler (a no-op when none runs); a failure it kept is still
        raised by the next `energy_j`."""
        with self._sampling_guard:  # one owner at a time starts or stops it
            if self._sampler is not None:
                self._stop.set()
                self._sampler.join()
                self._sampler = None
                self.sampling_interval_s = None

    def power_w(self) -> float:
        """Average power since the previous call (sampling ``interval_s`` on the first)."""
        p = self._power_from_energy(self.energy_j())
        if p is None:
            self._sleep(self.interval_s)
            p = self._power_from_energy(self.energy_j())
        return max(0.0, p or 0.0)

    @property
    def wraps(self) -> int:
        with self._lock:
            return sum(z.wraps for z in self.zones)

    @property
    def gaps(self) -> int:
        """Readings that raised because the counter could have wrapped more than once."""
        with self._lock:
            return sum(z.gaps for z in self.zones)

    @property
    def max_read_interval_s(self) -> float:
        """Read `energy_j` at least this often (or `start_sampling`), or a reading raises
        `MeterError`."""
        return min(z.max_read_interval_s for z in self.zones)

    def _limit_files(self) -> list[Path]:
        return [
            z.path / "constraint_0_power_limit_uw"
            for z in self.zones
            if z.name.startswith("package") and (z.path / "constraint_0_power_limit_uw").exists()
        ]

    def power_limit_w(self) -> float | None:
        files = self._limit_files()
        if not files:
            return None
        return sum(read_number(f, READ_PRIVILEGE.format(path=f)) for f in files) / 1e6

    def set_power_limit_w(self, watts: float) -> None:
        """Split ``watts`` evenly over the packages' long-term limits."""
        files = self._limit_files()
        if not files:
            super().set_power_limit_w(watts)
        if not (watts > 0 and math.isfinite(watts)):
            raise MeterError("power limit", watts, "a positive finite power in W")
        each = int(watts * 1e6 / len(files))
        for f in files:
            write_text(f, str(each), WRITE_PRIVILEGE)


def _zone_max_power_w(zone: Path) -> float:
    """The largest of a zone's ``constraint_*_max_power_uw`` and ``constraint_*_power_limit_uw``
    (unreadable or zero ones skipped), else ``DEFAULT_MAX_POWER_W``."""
    found = []
    for f in sorted(zone.glob("constraint_*_max_power_uw")) + sorted(
        zone.glob("constraint_*_power_limit_uw")
    ):
        try:
            uw = read_number(f, READ_PRIVILEGE.format(path=f))
        except MeterError:
            continue
        if uw > 0:
            found.append(uw / 1e6)
    return max(found, default=DEFAULT_MAX_POWER_W)
