"""NVML and AMD SMI back ends against stand-in modules (the vendor libraries are optional and
there is no GPU here), the lazy import, and — where a GPU is present — the real NVML."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from hwtune.energy.meters.base import MeterError, MeterPermissionError


def fake_pynvml(energy_mj=123_456, power_mw=250_000, energy_supported=True):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value):
            self.value = value
            super().__init__(f"NVML error {value}")

    m.NVMLError = NVMLError
    m.NVML_ERROR_NO_PERMISSION = 4
    m.NVML_ERROR_NOT_SUPPORTED = 3
    m.NVML_CLOCK_SM = 1
    state = {"locked": None, "limit": 700_000, "calls": []}
    m.state = state
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"

    def energy(h):
        if not energy_supported:
            raise NVMLError(3)
        return energy_mj

    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetPowerUsage = lambda h: power_mw
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=87, memory=40)
    m.nvmlDeviceGetSupportedMemoryClocks = lambda h: [2619, 1593]
    m.nvmlDeviceGetSupportedGraphicsClocks = lambda h, mem: (
        [1980, 1410, 1005] if mem == 2619 else [1]
    )
    m.nvmlDeviceGetClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetPowerManagementLimit = lambda h: state["limit"]
    m.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: (200_000, 700_000)
    m.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: 700_000

    def lock(h, lo, hi):
        if state.get("deny"):
            raise NVMLError(4)
        state["locked"] = (lo, hi)

    def set_limit(h, mw):
        state["limit"] = mw

    m.nvmlDeviceSetGpuLockedClocks = lock
    m.nvmlDeviceResetGpuLockedClocks = lambda h: state.update(locked=None)
    m.nvmlDeviceSetPowerManagementLimit = set_limit
    return m


def test_nvml_reads_and_controls_through_the_library(monkeypatch):
    m = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", m)
    from hwtune.energy.meters.nvml import NvmlDevice

    dev = NvmlDevice(1)
    assert dev.name == "NVIDIA H100 80GB HBM3"
    assert dev.energy_j() == pytest.approx(123.456)  # mJ -> J
    assert dev.power_w() == pytest.approx(250.0)
    assert dev.utilization().gpu == pytest.approx(0.87)
    caps = dev.capabilities()
    assert caps.frequencies_hz == (1005e6, 1410e6, 1980e6)  # at the top memory clock
    assert caps.power_limit_range_w == (200.0, 700.0)
    dev.set_frequency_hz(1410e6)
    assert m.state["locked"] == (1410, 1410)
    dev.set_power_limit_w(450)
    assert m.state["limit"] == 450_000
    with pytest.raises(MeterError, match=r"\[200, 700\] W"):
        dev.set_power_limit_w(900)
    with pytest.raises(MeterError, match="supported clocks"):
        dev.set_frequency_hz(1500e6)
    dev.reset()
    assert m.state["locked"] is None and m.state["limit"] == 700_000


def test_nvml_permission_error_names_call_and_privilege(monkeypatch):
    m = fake_pynvml()
    m.state["deny"] = True
    monkeypatch.setitem(sys.modules, "pynvml", m)
    from hwtune.energy.meters.nvml import NvmlDevice

    with pytest.raises(MeterPermissionError) as err:
        NvmlDevice(0).set_frequency_hz(1005e6)
    assert "nvmlDeviceSetGpuLockedClocks" in str(err.value) and "root" in str(err.value)


def test_nvml_without_energy_counter_integrates_power(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(energy_supported=False))
    from hwtune.energy.meters.nvml import NvmlDevice

    t = [0.0]
    dev = NvmlDevice(0, clock=lambda: t[0])
    e0 = dev.energy_j()
    t[0] = 4.0
    assert dev.energy_j() - e0 == pytest.approx(1000.0)  # 250 W x 4 s


def test_nvml_bad_index_and_missing_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    from hwtune.energy.meters.nvml import NvmlDevice

    with pytest.raises(MeterError, match="below the 2 GPUs"):
        NvmlDevice(5)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(MeterError, match="nvidia-ml-py"):
        NvmlDevice(0)


def test_package_imports_without_vendor_libraries(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    import importlib

    import hwtune.energy.meters as meters

    importlib.reload(meters)
    assert "nvml" in meters.BACKENDS


def fake_amdsmi(old_key=False):
    m = types.ModuleType("amdsmi")

    class AmdSmiLibraryException(Exception):
        def __init__(self, code):
            self.err_code = code
            super().__init__(f"amdsmi error {code}")

    m.AmdSmiLibraryException = AmdSmiLibraryException
    m.AmdSmiClkType = SimpleNamespace(GFX="gfx", MEM="mem")
    m.AmdSmiDevPerfLevel = SimpleNamespace(AUTO="auto")
    state = {"range": None, "cap": 750_000_000, "deny": False}
    m.state = state
    m.amdsmi_init = lambda *a: None
    m.amdsmi_get_processor_handles = lambda: ["g0"]
    key = "power" if old_key else "energy_accumulator"
    m.amdsmi_get_energy_count = lambda h: {
        key: 2_000_000,
        "counter_resolution": 15.3,
        "timestamp": 1,
    }
    m.amdsmi_get_power_info = lambda h: {"current_socket_power": 612, "average_socket_power": "N/A"}
    m.amdsmi_get_gpu_activity = lambda h: {
        "gfx_activity": 95,
        "umc_activity": 30,
        "mm_activity": "N/A",
    }
    m.amdsmi_get_clk_freq = lambda h, t: {
        "num_supported": 3,
        "current": 2,
        "frequency": [500e6, 1300e6, 2100e6],
    }

    def clk_range(h, lo, hi, t):
        if state["deny"]:
            raise AmdSmiLibraryException(10)
        state["range"] = (lo, hi, t)

    m.amdsmi_set_gpu_clk_range = clk_range
    m.amdsmi_get_power_cap_info = lambda h: {
        "power_cap": state["cap"], "min_power_cap": 200_000_000, "max_power_cap": 750_000_000,
        "default_power_cap": 750_000_000,
    }  # fmt: skip
    m.amdsmi_set_power_cap = lambda h, s, cap: state.update(cap=cap)
    m.amdsmi_set_gpu_perf_level = lambda h, lvl: None
    return m


@pytest.mark.parametrize("old_key", [False, True])
def test_amdsmi_reads_and_controls(monkeypatch, old_key):
    m = fake_amdsmi(old_key)
    monkeypatch.setitem(sys.modules, "amdsmi", m)
    from hwtune.energy.meters.amdsmi import AmdSmiDevice

    dev = AmdSmiDevice(0)
    assert dev.energy_j() == pytest.approx(2_000_000 * 15.3 / 1e6)
    assert dev.power_w() == pytest.approx(612.0)
    u = dev.utilization()
    assert (u.gpu, u.memory) == pytest.approx((0.95, 0.30))
    assert dev.frequency_hz() == 2100e6
    dev.set_frequency_hz(1300e6)
    assert m.state["range"] == (1300, 1300, "gfx")
    dev.set_power_limit_w(500)
    assert m.state["cap"] == 500_000_000 and dev.power_limit_w() == pytest.approx(500)
    with pytest.raises(MeterError, match=r"\[200, 750\] W"):
        dev.set_power_limit_w(100)
    m.state["deny"] = True
    with pytest.raises(MeterPermissionError, match="root"):
        dev.set_frequency_hz(500e6)


def test_amdsmi_missing_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    from hwtune.energy.meters.amdsmi import AmdSmiDevice

    with pytest.raises(MeterError, match="amdsmi installed") as err:
        AmdSmiDevice(0)
    assert "\n" not in str(err.value)


def _real_gpu_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(not _real_gpu_available(), reason="no NVIDIA GPU / NVML here")
def test_real_nvml_reads_energy_power_and_clocks():
    """Reads only: a shared machine's clocks and limits are left as they are."""
    from hwtune.energy.meters import EnergyMonitor
    from hwtune.energy.meters.nvml import NvmlDevice

    dev = NvmlDevice(0)
    assert 0 < dev.power_w() < 2000
    caps = dev.capabilities()
    assert caps.frequencies_hz and caps.frequencies_hz == tuple(sorted(caps.frequencies_hz))
    mon = EnergyMonitor(dev)
    mon.begin("idle")
    import time

    time.sleep(0.5)
    m = mon.end("idle")
    assert m.time_s > 0.4 and m.energy_j >= 0
    assert 0 <= m.avg_power_w < 2000
