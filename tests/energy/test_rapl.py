"""RAPL powercap backend against fake sysfs trees: summing zones, wrap-around, missing zones,
root-only energy_uj (CVE-2020-8694) and limit writes."""

from __future__ import annotations

import pytest
from energy_fakes import Clock, write

from hwtune.energy.meters.base import MeterError, MeterPermissionError
from hwtune.energy.meters.rapl import RaplDevice

RANGE = 262143328850  # a real package max_energy_range_uj (2^38 µJ class)


def make_tree(root, pkg_uj=1_000_000, dram_uj=500_000, packages=1):
    for n in range(packages):
        z = root / f"intel-rapl:{n}"
        write(z / "name", f"package-{n}\n")
        write(z / "energy_uj", f"{pkg_uj}\n")
        write(z / "max_energy_range_uj", f"{RANGE}\n")
        write(z / "constraint_0_power_limit_uw", "125000000\n")
        write(z / f"intel-rapl:{n}:0" / "name", "core\n")
        write(z / f"intel-rapl:{n}:0" / "energy_uj", "1\n")
        write(z / f"intel-rapl:{n}:0" / "max_energy_range_uj", f"{RANGE}\n")
        d = root / f"intel-rapl:{n}:1"  # dram as a top-level-named subzone, as on servers
        write(d / "name", "dram\n")
        write(d / "energy_uj", f"{dram_uj}\n")
        write(d / "max_energy_range_uj", "65712999613\n")
    return root


def test_energy_is_the_sum_of_package_and_dram_deltas(tmp_path):
    root = make_tree(tmp_path)
    dev = RaplDevice(root)
    assert {z.name for z in dev.zones} == {"package-0", "dram"}  # core is inside package
    e0 = dev.energy_j()
    write(root / "intel-rapl:0" / "energy_uj", "3000000")  # +2 J
    write(root / "intel-rapl:0:1" / "energy_uj", "1500000")  # +1 J
    assert dev.energy_j() - e0 == pytest.approx(3.0)


def test_wrap_around_adds_the_rest_of_the_range(tmp_path):
    root = make_tree(tmp_path, pkg_uj=RANGE - 1_000_000)
    dev = RaplDevice(root, domains=("package",))
    e0 = dev.energy_j()
    write(root / "intel-rapl:0" / "energy_uj", "2500000")  # wrapped: 1 J before + 2.5 J after
    assert dev.energy_j() - e0 == pytest.approx(3.5)
    assert dev.wraps == 1
    write(root / "intel-rapl:0" / "energy_uj", "4500000")
    assert dev.energy_j() - e0 == pytest.approx(5.5)
    assert dev.wraps == 1


def test_power_from_energy_difference(tmp_path):
    root = make_tree(tmp_path)
    clock = Clock(10.0)
    dev = RaplDevice(root, domains=("package",), clock=clock)
    dev._power_from_energy(dev.energy_j())
    clock.t = 12.0
    write(root / "intel-rapl:0" / "energy_uj", str(1_000_000 + 90_000_000))  # 90 J in 2 s
    assert dev.power_w() == pytest.approx(45.0)


def test_first_power_reading_samples_an_interval(tmp_path):
    root = make_tree(tmp_path)
    clock = Clock(0.0)

    def sleep(dt):
        clock.t += dt
        write(root / "intel-rapl:0" / "energy_uj", str(1_000_000 + int(20e6 * dt)))

    dev = RaplDevice(root, domains=("package",), clock=clock, sleep=sleep, interval_s=0.5)
    assert dev.power_w() == pytest.approx(20.0)


def test_energy_uj_root_only_names_file_and_privilege(tmp_path, deny):
    root = make_tree(tmp_path)
    deny(root / "intel-rapl:0" / "energy_uj")
    with pytest.raises(MeterPermissionError) as err:
        RaplDevice(root)
    msg = str(err.value)
    assert str(root / "intel-rapl:0" / "energy_uj") in msg
    assert "root" in msg and "CVE-2020-8694" in msg
    assert "\n" not in msg


def test_no_zones_is_a_clear_error(tmp_path):
    write(tmp_path / "intel-rapl:0" / "name", "psys")
    write(tmp_path / "intel-rapl:0" / "energy_uj", "1")
    write(tmp_path / "intel-rapl:0" / "max_energy_range_uj", "10")
    with pytest.raises(MeterError, match="no RAPL zone named package"):
        RaplDevice(tmp_path, domains=("package",))
    with pytest.raises(MeterError, match="missing"):
        RaplDevice(tmp_path / "nope")


def test_power_limit_split_over_packages_and_write_privilege(tmp_path, deny):
    root = make_tree(tmp_path, packages=2)
    dev = RaplDevice(root, domains=("package",))
    assert dev.power_limit_w() == pytest.approx(250.0)
    dev.set_power_limit_w(200.0)
    assert (root / "intel-rapl:1" / "constraint_0_power_limit_uw").read_text() == "100000000"
    deny(root / "intel-rapl:0" / "constraint_0_power_limit_uw", "w")
    with pytest.raises(MeterPermissionError, match="root"):
        dev.set_power_limit_w(150.0)
    with pytest.raises(MeterError, match="positive"):
        dev.set_power_limit_w(-1)
