"""Hardening of the energy package: meters that fail only with MeterError (library errors,
unreadable or malformed files, amdsmi's "N/A"), the online tuner surviving a failing meter,
RAPL readings too far apart to tell how often the counter wrapped, and the one clock-table
check shared by the tuner, the co-optimizer and the stage planner."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
from energy_fakes import run_steps, write

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.cooptimizer import co_optimize, evaluate
from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.power_model import PowerModel
from hwtune.energy.step_model import StepTimeModel
from hwtune.energy.tuner import OnlineTuner

# A small hand-made device: 8 clocks in whole MHz (NVML's unit), a GPT-2-small-like step.
TABLE = tuple(f * 1e6 for f in (306, 408, 510, 612, 714, 816, 918, 1020))
POWER = PowerModel(static_w=8.0, dynamic_w=36.0, f_ref_hz=TABLE[-1], v_floor=0.6, memory_w=6.0)
STEP = StepTimeModel(f_ref_hz=TABLE[-1], compute_s=(0.004, 0.0065), memory_s=(0.013, 0.005),
                     host_s=(0.03, 0.0005))  # fmt: skip
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CAP = 20.0


def _tuner(device, **kw):
    args = {"batch_sizes": BATCHES, "base_batch": 64, "b_noise": 32.0,
            "control_interval_s": 2.0, **kw}  # fmt: skip
    return OnlineTuner(device, CAP, **args)


def _assert_good_choice(tuner):
    """The tuner committed to a feasible point within 3% of the offline optimum."""
    conv = CriticalBatch(32.0, 1.0)
    best = co_optimize(STEP, POWER, conv, BATCHES, TABLE, CAP).best
    got = evaluate(tuner.batch_size, tuner.frequency_hz, STEP, POWER, conv, CAP)
    assert tuner.phase == "run" and got.feasible
    assert got.time_to_target_s <= 1.03 * best.time_to_target_s


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


def _pynvml_base():
    """A pynvml stand-in with one GPU and pynvml's error classes: ``NVMLError`` and its
    per-return-code subclass ``NVMLError_GpuIsLost`` (code 15)."""
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
    m.NVML_ERROR_NO_PERMISSION, m.NVML_ERROR_NOT_SUPPORTED, m.NVML_CLOCK_SM = 4, 3, 1
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    return m


def _fake_pynvml(fail_energy=False, mem_clocks=(2619,)):
    m = _pynvml_base()
    NVMLError_GpuIsLost = m.NVMLError_GpuIsLost  # noqa: N806 - pynvml's name
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


# -- the online tuner survives a failing meter --------------------------------------------------


class _OsErrorSim(SimulatedDevice):
    """A user's own device reading a file: its energy reading fails with OSError, and its
    clock change too (``fail_reads`` / ``fail_sets`` calls from now)."""

    fail_reads = 0
    fail_sets = 0

    def energy_j(self):
        if self.fail_reads:
            self.fail_reads -= 1
            raise OSError(5, "Input/output error", "/sys/fake/energy")
        return super().energy_j()

    def set_frequency_hz(self, hz):
        if self.fail_sets:
            self.fail_sets -= 1
            raise OSError(16, "Device or resource busy", "/sys/fake/clock")
        super().set_frequency_hz(hz)


@pytest.mark.parametrize("at_step", [0, 5, 13, 40, 150])
def test_tuner_survives_a_device_raising_oserror(at_step):
    sim = _OsErrorSim(STEP, POWER, TABLE)
    tuner = _tuner(sim)

    def fail():
        sim.fail_reads = 2

    run_steps(tuner, sim, 400, events={at_step: fail})
    assert tuner.meter_errors >= 1
    _assert_good_choice(tuner)
    for pr, step_s, _ in tuner.points:  # every learned point is its own batch and clock
        assert step_s == pytest.approx(STEP.step_time_s(pr.batch, pr.f_hz), rel=1e-6)


@pytest.mark.parametrize("at_step", [0, 9, 60])
def test_a_failed_clock_change_is_retried_and_its_steps_are_not_learned(at_step):
    """set_frequency_hz used to be called outside any guard: one failure stopped training."""
    sim = _OsErrorSim(STEP, POWER, TABLE)
    tuner = _tuner(sim, warmup_steps=0)

    def fail():
        sim.fail_sets = 2
        tuner._applied_f = None  # the next step_begin changes the clock (and fails twice)

    run_steps(tuner, sim, 400, events={at_step: fail})
    assert tuner.meter_errors == 2 and sim.fail_sets == 0
    assert sim.frequency_hz() == tuner.frequency_hz  # retried until it took
    _assert_good_choice(tuner)
    for pr, step_s, _ in tuner.points:
        assert step_s == pytest.approx(STEP.step_time_s(pr.batch, pr.f_hz), rel=1e-6)


def test_a_clock_that_never_changes_is_reported_after_max_meter_errors():
    sim = _OsErrorSim(STEP, POWER, TABLE)
    tuner = _tuner(sim, max_meter_errors=2)
    run_steps(tuner, sim, 5)
    sim.fail_sets = 10**9
    tuner._applied_f = None
    with pytest.raises(OSError, match="busy"):
        run_steps(tuner, sim, 10)
    assert tuner.meter_errors == 3


def test_a_programming_error_in_a_device_is_not_swallowed():
    class Buggy(SimulatedDevice):
        def energy_j(self):
            raise ZeroDivisionError("a bug, not a meter failure")

    sim = SimulatedDevice(STEP, POWER, TABLE)
    tuner = _tuner(sim)
    run_steps(tuner, sim, 3)
    tuner.device = Buggy(STEP, POWER, TABLE)
    with pytest.raises(ZeroDivisionError):
        run_steps(tuner, tuner.device, 10)
    assert tuner.meter_errors == 0


def _pynvml_over(sim, lost):
    """A pynvml stand-in whose GPU is the simulated device; ``lost[0]`` calls of the energy
    counter fail with NVMLError_GpuIsLost (a subclass, as pynvml raises per return code)."""
    m = _pynvml_base()
    NVMLError_GpuIsLost = m.NVMLError_GpuIsLost  # noqa: N806 - pynvml's name
    m.nvmlDeviceGetHandleByIndex = lambda i: "h0"
    m.nvmlDeviceGetName = lambda h: b"simulated"

    def energy(h):
        if lost[0]:
            lost[0] -= 1
            raise NVMLError_GpuIsLost()
        return sim.energy_j() * 1e3  # mJ

    m.nvmlDeviceGetTotalEnergyConsumption = energy

    def utilization(h):
        u = sim.utilization()
        u = u or SimpleNamespace(gpu=0.0, memory=0.0)  # nothing ran: NVML reads 0%
        return SimpleNamespace(gpu=100 * u.gpu, memory=100 * u.memory)

    m.nvmlDeviceGetUtilizationRates = utilization
    m.nvmlDeviceGetSupportedMemoryClocks = lambda h: [2619]
    m.nvmlDeviceGetSupportedGraphicsClocks = lambda h, mem: [round(f / 1e6) for f in TABLE]
    m.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: (10_000, 60_000)
    m.nvmlDeviceSetGpuLockedClocks = lambda h, lo, hi: sim.set_frequency_hz(lo * 1e6)
    return m


@pytest.mark.parametrize("at_step", [2, 30, 150])
def test_tuner_on_nvml_survives_an_nvml_error_subclass(monkeypatch, at_step):
    sim = SimulatedDevice(STEP, POWER, TABLE)
    lost = [0]
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml_over(sim, lost))
    from hwtune.energy.meters.nvml import NvmlDevice

    dev = NvmlDevice(0, clock=sim.now_s)
    tuner = _tuner(dev)

    def fail():
        lost[0] = 2

    run_steps(tuner, sim, 400, events={at_step: fail})
    assert tuner.meter_errors >= 1 and lost[0] == 0
    _assert_good_choice(tuner)


def test_mix_objective_reads_the_device_max_power_once_at_construction():
    """A commit used to read capabilities(); a failure there mid-profile left the tuner in
    the profile phase with no probe (IndexError at the next step)."""

    class FlakyCaps(SimulatedDevice):
        calls = 0

        def capabilities(self):
            self.calls += 1
            if self.calls > 1:
                raise MeterError("capabilities", "read failed", "a readable device")
            return super().capabilities()

    sim = FlakyCaps(STEP, POWER, TABLE, supports_power_limit=True)
    tuner = _tuner(sim, objective="mix")
    run_steps(tuner, sim, 300)
    assert tuner.phase == "run" and tuner.meter_errors == 0


def test_set_cap_with_a_failing_meter_applies_the_cap_and_keeps_training():
    sim = _OsErrorSim(STEP, POWER, TABLE)
    tuner = _tuner(sim)
    run_steps(tuner, sim, 300)
    while not tuner._iv_steps:  # an interval with steps in it, for set_cap to close
        run_steps(tuner, sim, 1)
    sim.fail_reads = 2  # closing the interval and opening the next both fail
    tuner.set_cap(15.0)
    assert tuner.cap_w == 15.0 and tuner.meter_errors == 2
    run_steps(tuner, sim, 300)
    assert tuner.history[-1].cap_w == 15.0
    assert not any(iv.over_cap for iv in tuner.history[-5:])


# -- RAPL: readings too far apart to tell how often the counter wrapped --------------------------

R_UJ = 1_000_000_000  # a 1 kJ counter range keeps the numbers readable


def _rapl(root, clock, limits=None, **kw):
    """One package zone with a 1 kJ range; ``limits`` maps constraint file names to µW."""
    from hwtune.energy.meters.rapl import RaplDevice

    z = root / "intel-rapl:0"
    write(z / "name", "package-0\n")
    write(z / "energy_uj", "0\n")
    write(z / "max_energy_range_uj", f"{R_UJ}\n")
    for name, uw in (
        limits if limits is not None else {"constraint_0_max_power_uw": 100e6}
    ).items():
        write(z / name, f"{int(uw)}\n")
    return RaplDevice(root, domains=("package",), clock=clock, **kw)


def _set_uj(root, uj):
    write(root / "intel-rapl:0" / "energy_uj", f"{int(uj)}\n")


def test_rapl_safe_read_interval_is_range_over_max_power(tmp_path):
    from energy_fakes import Clock

    dev = _rapl(tmp_path, Clock())
    assert dev.max_read_interval_s == pytest.approx(10.0)  # 1 kJ at 100 W


def test_rapl_reading_after_more_than_a_range_could_pass_raises_and_resyncs(tmp_path):
    from energy_fakes import Clock

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    e0 = dev.energy_j()
    clock.t = 10.5  # 100 W x 10.5 s = 1050 J could have passed: 50 J read could be 1050 J
    _set_uj(tmp_path, 50e6)
    with pytest.raises(MeterError) as ei:
        dev.energy_j()  # used to return 50 J as if certain
    msg = str(ei.value)
    assert "energy_uj" in msg and "10.5 s" in msg and "at most 10.0 s apart" in msg
    assert "\n" not in msg and dev.gaps == 1
    # the counter is read again from here: later deltas are exact
    clock.t = 11.5
    _set_uj(tmp_path, 130e6)
    assert dev.energy_j() - e0 == pytest.approx(50.0 + 80.0)
    assert dev.gaps == 1


def test_rapl_a_delta_that_only_one_wrap_explains_is_kept(tmp_path):
    from energy_fakes import Clock

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    _set_uj(tmp_path, 900e6)
    clock.t = 9.0
    e0 = dev.energy_j()  # 900 J in 9 s: at 100 W, as much as could be, and certain
    assert e0 == pytest.approx(900.0)
    clock.t = 20.0  # 11 s later, read 100 J: one wrap = 200 J; two = 1200 J > 100 W x 11 s
    _set_uj(tmp_path, 100e6)
    assert dev.energy_j() - e0 == pytest.approx(200.0)
    assert dev.wraps == 1 and dev.gaps == 0
    clock.t = 36.0  # 16 s later, read +50 J: an unseen wrap (1050 J) fits in 100 W x 16 s
    _set_uj(tmp_path, 150e6)
    with pytest.raises(MeterError, match="wrapped more than once"):
        dev.energy_j()


@pytest.mark.parametrize(
    "limits, expected_w",
    [
        ({}, 500.0),  # no constraint files (DRAM, AMD's energy-only zones): the default
        ({"constraint_0_max_power_uw": 0}, 500.0),  # zero means unknown, not 0 W
        ({"constraint_0_max_power_uw": 100e6, "constraint_1_power_limit_uw": 250e6}, 250.0),
        ({"constraint_0_power_limit_uw": 125e6}, 125.0),
    ],
)
def test_rapl_zone_max_power_is_its_largest_constraint(tmp_path, limits, expected_w):
    from energy_fakes import Clock

    from hwtune.energy.meters.rapl import DEFAULT_MAX_POWER_W

    assert DEFAULT_MAX_POWER_W == 500.0
    dev = _rapl(tmp_path, Clock(), limits)
    assert dev.zones[0].max_power_w == expected_w
    assert dev.max_read_interval_s == pytest.approx(1000.0 / expected_w)


def test_rapl_max_power_can_be_given_and_is_checked(tmp_path):
    from energy_fakes import Clock

    dev = _rapl(tmp_path, Clock(), max_power_w=20.0)
    assert dev.max_read_interval_s == pytest.approx(50.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(MeterError, match="max power"):
            _rapl(tmp_path, Clock(), max_power_w=bad)


def test_tuner_over_rapl_treats_an_uncertain_reading_as_a_failed_one(tmp_path):
    """The tuner's clock stalls for longer than the safe interval (a checkpoint, a pause):
    the interval is dropped, not learned as a wrong power."""
    from energy_fakes import Clock

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    dev.capabilities = lambda: SimpleNamespace(frequencies_hz=TABLE, power_limit_range_w=None)
    dev.set_frequency_hz = lambda hz: None
    tuner = _tuner(dev, profile_steps=50)  # a constant-power fake: stay in profiling
    e = [0.0]

    def step(seconds):  # one training step at 10 W
        tuner.step_begin()
        clock.t += seconds
        e[0] += 10e6 * seconds
        _set_uj(tmp_path, e[0])
        tuner.step_end()

    for _ in range(6):
        step(0.5)
    assert tuner.meter_errors == 0
    step(30.0)  # 300 J read, but 100 W x 30 s could hide a wrap: 1300 J
    assert tuner.meter_errors == 1 and dev.gaps == 1
    for _ in range(12):
        step(0.5)
    assert tuner.meter_errors == 1 and len(tuner.history) >= 3
    assert all(iv.avg_power_w == pytest.approx(10.0) for iv in tuner.history)


# -- one clock-table check for the tuner, the co-optimizer, the stage planner, the simulator ----


def test_clock_table_sorts_and_drops_repeats():
    import numpy as np

    from hwtune.energy.meters.base import clock_table

    assert clock_table([1020e6, 306e6, 1020e6, np.int64(510_000_000)]) == (306e6, 510e6, 1020e6)
    assert clock_table(np.array([2e9, 1e9])) == (1e9, 2e9)


@pytest.mark.parametrize("bad", [[], [0.0], [-1e9], [float("nan")], [float("inf")], [True],
                                 ["1e9"], [None]])  # fmt: skip
def test_clock_table_refuses_what_is_not_a_clock(bad):
    from hwtune.energy.meters.base import clock_table
    from hwtune.errors import HwtuneInputError

    with pytest.raises(HwtuneInputError) as ei:
        clock_table([*bad, 1e9] if bad else bad, "gpu clocks")
    assert ei.value.field == "gpu clocks" and "\n" not in str(ei.value)
    assert ei.value.expected == "positive finite clocks in Hz"


def _callers():
    from hwtune.energy.cluster import StageWork, plan_stage_frequencies

    conv = CriticalBatch(32.0, 1.0)
    return {
        "co_optimize": lambda t: co_optimize(STEP, POWER, conv, BATCHES, t, CAP),
        "plan_stage_frequencies": lambda t: plan_stage_frequencies(
            [StageWork(0.01, 0.02)], 4, t, POWER
        ),
        "OnlineTuner": lambda t: _tuner(SimulatedDevice(STEP, POWER, TABLE), frequencies_hz=t),
        "SimulatedDevice": lambda t: SimulatedDevice(STEP, POWER, t),
    }


@pytest.mark.parametrize("caller", sorted(_callers()))
@pytest.mark.parametrize("bad", [[float("nan"), *TABLE], [0.0, *TABLE], ["fast", *TABLE]])
def test_every_caller_refuses_a_bad_clock_table_with_one_message(caller, bad):
    """The planner used to raise TypeError for a non-number, and the simulated device took
    nan clocks; all four now give the same one-line error."""
    from hwtune.errors import HwtuneInputError

    with pytest.raises(HwtuneInputError) as ei:
        _callers()[caller](bad)
    assert str(ei.value) == f"frequencies: got {bad!r}; expected positive finite clocks in Hz"


def test_tuner_table_has_no_repeated_clock():
    """A repeated clock made 'one clock up' a step to the same clock."""
    tuner = _tuner(SimulatedDevice(STEP, POWER, TABLE), frequencies_hz=[*TABLE, *TABLE])
    assert tuner.table == TABLE


def test_a_window_across_an_uncertain_rapl_reading_raises(tmp_path):
    """Another reader hit the gap (and got the error); the window's own end reading is fine,
    but its energy would miss the unknown span."""
    from energy_fakes import Clock

    from hwtune.energy.meters import EnergyMonitor

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    mon = EnergyMonitor(dev)
    mon.begin("epoch")
    mon.begin("late")
    clock.t = 30.0
    _set_uj(tmp_path, 300e6)
    with pytest.raises(MeterError):
        dev.energy_j()  # someone else's reading: 30 s at up to 100 W could hide a wrap
    clock.t = 31.0
    _set_uj(tmp_path, 310e6)
    with pytest.raises(MeterError, match="1 reading.* of unknown energy") as ei:
        mon.end("epoch")
    assert "\n" not in str(ei.value)
    mon.begin("after")
    clock.t = 32.0
    _set_uj(tmp_path, 320e6)
    assert mon.end("after").energy_j == pytest.approx(10.0)
    with pytest.raises(MeterError, match="unknown energy"):
        mon.end("late")


def test_tuner_drops_an_interval_across_another_readers_uncertain_rapl_reading(tmp_path):
    """A stall of 30 s in which the counter truly wrapped once more (1300 J: 43 W) than it
    shows; another reader (an EnergyMonitor) hits the gap and gets the error. The tuner's
    interval across it used to be learned as 10 W."""
    from energy_fakes import Clock

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    dev.capabilities = lambda: SimpleNamespace(frequencies_hz=TABLE, power_limit_range_w=None)
    dev.set_frequency_hz = lambda hz: None
    tuner = _tuner(dev, profile_steps=50)  # a constant-power fake: stay in profiling
    true_uj = [0.0]

    def step(seconds, joules):
        tuner.step_begin()
        clock.t += seconds
        true_uj[0] += joules * 1e6
        _set_uj(tmp_path, true_uj[0] % R_UJ)
        tuner.step_end()

    for _ in range(5):
        step(0.5, 5.0)
    tuner.step_begin()
    t_stall = clock.t
    clock.t += 30.0
    true_uj[0] += 1300e6
    _set_uj(tmp_path, true_uj[0] % R_UJ)
    with pytest.raises(MeterError):
        dev.energy_j()  # the other reader
    clock.t += 0.5
    tuner.step_end()
    assert tuner.meter_errors == 1
    for _ in range(10):
        step(0.5, 5.0)
    assert len(tuner.history) >= 3
    assert not any(iv.start_s <= t_stall < iv.end_s for iv in tuner.history)
    assert all(iv.avg_power_w == pytest.approx(10.0) for iv in tuner.history)


def test_a_gap_before_a_window_begins_is_not_the_windows(tmp_path):
    """Opened, then read again only after a long pause (a model load): the first reading
    finds the gap, but the window that begins there measures from it; a window already open
    across the gap still refuses."""
    from energy_fakes import Clock

    from hwtune.energy.meters import EnergyMonitor

    clock = Clock()
    dev = _rapl(tmp_path, clock)
    mon = EnergyMonitor(dev)
    mon.begin("run")
    clock.t = 60.0  # 60 s at up to 100 W could hide a wrap of the 1 kJ counter
    _set_uj(tmp_path, 500e6)
    mon.begin("step")  # the gap is before this window
    assert dev.gaps == 1
    clock.t = 61.0
    _set_uj(tmp_path, 550e6)
    assert mon.end("step").energy_j == pytest.approx(50.0)
    with pytest.raises(MeterError, match="unknown energy"):
        mon.end("run")
