"""Hardening of the energy package: meters that fail only with MeterError (library errors,
unreadable or malformed files, amdsmi's "N/A"), the online tuner surviving a failing meter,
RAPL readings too far apart to tell how often the counter wrapped, and the one clock-table
check shared by the tuner, the co-optimizer and the stage planner."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
from energy_fakes import write

from hwtune.energy.meters.base import MeterError

# -- meters: every failure is a MeterError ------------------------------------------------------


def test_sysfs_undecodable_or_non_finite_reading_is_a_meter_error(tmp_path):
    from hwtune.energy.meters.sysfs import read_number, read_text

    bad = tmp_path / "energy_uj"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(MeterError, match="undecodable") as ei:
        read_text(bad, "root")  # was a UnicodeDecodeError
    assert "\n" not in str(ei.value)
    for text in ("nan", "inf", "-inf"):
        write(bad, text + "\n")
        with pytest.raises(MeterError, match="a finite number"):
            read_number(bad, "root")


def _jetson_tree(root, table_text):
    h = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    write(h / "in1_label", "VDD_IN\n")
    write(h / "in1_input", "5000\n")
    write(h / "curr1_input", "3000\n")
    d = root / "sys/class/devfreq/17000000.gpu"
    write(d / "available_frequencies", table_text)
    return root


@pytest.mark.parametrize("table", ["306000000 garbled\n", "306000000 -1\n", "306000000 nan\n"])
def test_jetson_malformed_clock_table_is_a_meter_error(tmp_path, table):
    from hwtune.energy.meters.jetson import JetsonDevice

    dev = JetsonDevice(_jetson_tree(tmp_path, table))
    with pytest.raises(MeterError, match="available_frequencies"):  # was a ValueError
        dev.frequencies_hz()


def _fake_amdsmi(energy="ok"):
    m = types.ModuleType("amdsmi")

    class AmdSmiException(Exception):
        pass

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, code):
            self.err_code = code
            super().__init__(f"amdsmi error {code}")

    class AmdSmiParameterException(AmdSmiException):
        pass

    m.AmdSmiException = AmdSmiException
    m.AmdSmiLibraryException = AmdSmiLibraryException
    m.AmdSmiParameterException = AmdSmiParameterException
    m.AmdSmiClkType = SimpleNamespace(GFX="gfx")
    m.amdsmi_init = lambda *a: None
    m.amdsmi_get_processor_handles = lambda: ["g0"]

    def energy_count(h):
        if energy == "param":
            raise AmdSmiParameterException("bad handle")
        acc = "N/A" if energy == "na" else 1000
        return {"energy_accumulator": acc, "counter_resolution": 15.3}

    m.amdsmi_get_energy_count = energy_count
    m.amdsmi_get_power_cap_info = lambda h: {
        "power_cap": "N/A", "min_power_cap": "N/A", "max_power_cap": 750_000_000,
    }  # fmt: skip
    m.amdsmi_get_clk_freq = lambda h, t: {"current": 5, "frequency": [500e6, "N/A"]}
    return m


@pytest.mark.parametrize("energy", ["param", "na"])
def test_amdsmi_non_library_exception_and_na_fields_are_meter_errors(monkeypatch, energy):
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi(energy))
    from hwtune.energy.meters.amdsmi import AmdSmiDevice

    dev = AmdSmiDevice(0)
    with pytest.raises(MeterError, match="amdsmi_get_energy_count"):
        dev.energy_j()  # was AmdSmiParameterException / ValueError from float("N/A")
    with pytest.raises(MeterError, match="power_cap"):
        dev.power_limit_w()  # was TypeError: "N/A" / 1e6
    with pytest.raises(MeterError, match="amdsmi_get_"):
        dev.capabilities()
    with pytest.raises(MeterError, match="frequency"):
        dev.frequency_hz()  # was ValueError / IndexError


def _fake_pynvml(fail_energy=False, mem_clocks=(2619,)):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value):
            self.value = value
            super().__init__(f"NVML error {value}")

    class NVMLError_GpuIsLost(NVMLError):  # noqa: N801 - pynvml's name
        def __init__(self):
            super().__init__(15)

    m.NVMLError = NVMLError
    m.NVMLError_GpuIsLost = NVMLError_GpuIsLost
    m.NVML_ERROR_NO_PERMISSION, m.NVML_ERROR_NOT_SUPPORTED = 4, 3
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100"

    def energy(h):
        if fail_energy:
            raise NVMLError_GpuIsLost()
        return 1000

    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetSupportedMemoryClocks = lambda h: list(mem_clocks)
    m.nvmlDeviceGetSupportedGraphicsClocks = lambda h, mem: [1980, 1410]
    return m


def test_nvml_error_subclass_and_empty_clock_list_are_meter_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_energy=True, mem_clocks=()))
    from hwtune.energy.meters.nvml import NvmlDevice

    dev = NvmlDevice(0)
    with pytest.raises(MeterError, match="NVML error 15"):
        dev.energy_j()
    with pytest.raises(MeterError, match="nvmlDeviceGetSupportedMemoryClocks"):
        dev.frequencies_hz()  # was ValueError from max([])
