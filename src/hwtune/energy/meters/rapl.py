"""Linux RAPL through the powercap sysfs tree (Intel, and AMD since Linux 5.8).

Layout (Linux kernel docs, Documentation/power/powercap/powercap.rst):
``<root>/intel-rapl:N/{name,energy_uj,max_energy_range_uj,constraint_0_power_limit_uw,...}``
for package N, and subzones ``intel-rapl:N:M`` (``core``, ``uncore``, ``dram``). ``energy_uj``
counts up and wraps to 0 after ``max_energy_range_uj``; a package counter at 200 W wraps about
every 20 minutes (a 2^38 µJ range), so the meter must be read at least that often. Since Linux
5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, the PLATYPUS power side channel).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwtune.energy.meters.base import BaseDevice, Capabilities, MeterError
from hwtune.energy.meters.sysfs import read_number, read_text, write_text

READ_PRIVILEGE = (
    "read access: run as root, or `sudo chmod o+r {path}` (Linux >= 5.10 makes RAPL energy_uj "
    "root-only, CVE-2020-8694)"
)
WRITE_PRIVILEGE = "root (sudo) to write RAPL power limits"
DEFAULT_ROOT = "/sys/class/powercap"


@dataclass
class _Zone:
    path: Path
    name: str
    max_range_uj: float
    last_raw_uj: float | None = None
    total_uj: float = 0.0
    wraps: int = 0


class RaplDevice(BaseDevice):
    """Energy of the selected RAPL domains (default: every package and DRAM zone), summed."""

    def __init__(
        self,
        root: str | Path = DEFAULT_ROOT,
        domains: Sequence[str] = ("package", "dram"),
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        interval_s: float = 0.1,
    ) -> None:
        super().__init__(clock)
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise MeterError("interval", interval_s, "a positive finite sampling time in s")
        self.root = Path(root)
        self.name = f"rapl:{self.root}"
        self._sleep = sleep
        self.interval_s = interval_s
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
            zones.append(_Zone(path=d, name=name, max_range_uj=rng))
        if not zones:
            raise MeterError(
                str(self.root),
                "no RAPL zone named " + " or ".join(domains),
                "intel-rapl:N directories with name and energy_uj (kernel CONFIG_INTEL_RAPL)",
            )
        for z in zones:  # first reading sets each counter's origin
            self._read_zone(z)
        return zones

    def _read_zone(self, z: _Zone) -> None:
        f = z.path / "energy_uj"
        raw = read_number(f, READ_PRIVILEGE.format(path=f))
        if z.last_raw_uj is not None:
            if raw >= z.last_raw_uj:
                z.total_uj += raw - z.last_raw_uj
            else:  # wrapped once since the last reading
                z.total_uj += (z.max_range_uj - z.last_raw_uj) + raw
                z.wraps += 1
        z.last_raw_uj = raw

    def capabilities(self) -> Capabilities:
        lim = self._limit_files()
        return Capabilities(
            energy=True, power=True, set_power_limit=bool(lim), power_limit_range_w=None
        )

    def energy_j(self) -> float:
        for z in self.zones:
            self._read_zone(z)
        return sum(z.total_uj for z in self.zones) / 1e6

    def power_w(self) -> float:
        """Average power since the previous call (sampling ``interval_s`` on the first)."""
        p = self._power_from_energy(self.energy_j())
        if p is None:
            self._sleep(self.interval_s)
            p = self._power_from_energy(self.energy_j())
        return max(0.0, p or 0.0)

    @property
    def wraps(self) -> int:
        return sum(z.wraps for z in self.zones)

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
