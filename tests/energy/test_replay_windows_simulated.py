"""Replay traces, measurement windows, and the simulated device."""

from __future__ import annotations

import pytest
from energy_fakes import write

from hwtune.energy.meters import EnergyMonitor, open_device
from hwtune.energy.meters.base import MeterError, PowerDevice, UnsupportedOperation
from hwtune.energy.meters.replay import ReplayDevice
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.power_model import PowerModel
from hwtune.energy.step_model import StepTimeModel


def test_replay_energy_is_the_trapezoid_of_a_ramp(tmp_path):
    # power ramps 10 -> 30 W over 4 s: energy = mean power x time = 20 W x 4 s
    f = write(tmp_path / "t.csv", "time_s,power_w\n0,10\n1,15\n2,20\n3,25\n4,30\n")
    dev = ReplayDevice(f)
    mon = EnergyMonitor(dev)
    mon.begin("all")
    dev.advance(4.0)
    m = mon.end("all")
    assert m.energy_j == pytest.approx(80.0)
    assert m.avg_power_w == pytest.approx(20.0)
    dev.seek(1.5)
    assert dev.power_w() == pytest.approx(17.5)


def test_replay_energy_column_wins_and_window_math(tmp_path):
    f = write(tmp_path / "t.csv", "time_s,power_w,energy_j\n0,10,100\n2,10,130\n")
    dev = open_device("replay", trace=f)
    e0 = dev.energy_j()
    dev.advance(1.0)
    assert dev.energy_j() - e0 == pytest.approx(15.0)  # the counter, not 10 W x 1 s


@pytest.mark.parametrize(
    "text, match",
    [
        ("time_s,watts\n0,1\n1,2\n", "power_w"),
        ("time_s,power_w\n0,1\n", "two samples"),
        ("time_s,power_w\n0,1\n0,2\n", "increasing"),
        ("time_s,power_w\n0,1\n1,x\n", "numbers"),
        ("time_s,power_w\n0,1\n1,-2\n", r"in \[0, 100,000\] W"),
        ("time_s,power_w\n0,1\n1,1e308\n", r"in \[0, 100,000\] W"),
    ],
)
def test_replay_bad_traces(tmp_path, text, match):
    with pytest.raises(MeterError, match=match):
        ReplayDevice(write(tmp_path / "t.csv", text))


def test_replay_trailing_comma_and_unknown_column(tmp_path):
    # an empty header cell over empty cells (a spreadsheet's trailing comma) reads as before
    dev = ReplayDevice(write(tmp_path / "t.csv", "time_s,power_w,\n0,10,\n2,10,\n"))
    assert dev.duration_s == 2.0
    with pytest.raises(MeterError, match=r"trace header: got 'watt'; expected only the columns"):
        ReplayDevice(
            [{"time_s": 0, "power_w": 1, "watt": 1}, {"time_s": 1, "power_w": 1, "watt": 1}]
        )


def test_replay_outside_the_trace_and_read_only(tmp_path):
    dev = ReplayDevice([{"time_s": 0, "power_w": 5}, {"time_s": 1, "power_w": 5}])
    with pytest.raises(MeterError, match=r"within the trace \[0, 1\]"):
        dev.advance(2.0)
    with pytest.raises(UnsupportedOperation, match="set_frequency_hz"):
        dev.set_frequency_hz(1e9)


def test_windows_nest_and_check_names():
    dev = ReplayDevice([{"time_s": 0, "power_w": 10}, {"time_s": 10, "power_w": 10}])
    mon = EnergyMonitor(dev)
    mon.begin("outer")
    dev.advance(2)
    with mon.window("inner") as out:
        dev.advance(3)
    dev.advance(1)
    outer = mon.end("outer")
    assert out[0].energy_j == pytest.approx(30) and out[0].time_s == pytest.approx(3)
    assert outer.energy_j == pytest.approx(60) and outer.start_s == 0
    with pytest.raises(MeterError, match="open window"):
        mon.end("outer")
    mon.begin("a")
    with pytest.raises(MeterError, match="not already open"):
        mon.begin("a")


def make_sim(**kw):
    step = StepTimeModel(f_ref_hz=1e9, compute_s=(0.01, 0.002), memory_s=(0.005, 0.001),
                         host_s=(0.02, 0.0))  # fmt: skip
    power = PowerModel(static_w=10, dynamic_w=40, f_ref_hz=1e9, v_floor=0.6, memory_w=5)
    return SimulatedDevice(step, power, [0.4e9, 0.7e9, 1e9], **kw)


def test_simulated_energy_is_power_times_time_and_it_is_a_power_device():
    sim = make_sim()
    assert isinstance(sim, PowerDevice)
    sim.set_frequency_hz(0.7e9)
    dt = sim.run_step(16)
    # T = 0.02 host + (0.005 + 0.016) memory + (0.01 + 0.032)/0.7 compute
    assert dt == pytest.approx(0.02 + 0.021 + 0.042 / 0.7)
    assert sim.energy_j() == pytest.approx(sim.true_power_w(16, 0.7e9) * dt)
    u = sim.utilization()
    assert u.gpu == pytest.approx((dt - 0.02) / dt) and u.memory == pytest.approx(0.021 / dt)
    with pytest.raises(MeterError, match="supported clocks"):
        sim.set_frequency_hz(0.5e9)


def test_simulated_power_limit_acts_like_firmware_capping():
    sim = make_sim(supports_power_limit=True)
    top = sim.true_power_w(64, 1e9)
    sim.set_power_limit_w(top - 1.0)
    assert sim.effective_frequency_hz(64) == 0.7e9
    sim.run_step(64)
    assert sim.trace[-1][4] == 0.7e9
    with pytest.raises(UnsupportedOperation):
        make_sim().set_power_limit_w(20)


def test_simulated_noise_is_seeded():
    a, b = make_sim(seed=3, time_noise=0.1), make_sim(seed=3, time_noise=0.1)
    assert [a.run_step(8) for _ in range(5)] == [b.run_step(8) for _ in range(5)]
    c = make_sim(seed=4, time_noise=0.1)
    assert [c.run_step(8) for _ in range(5)] != [a.run_step(8) for _ in range(5)]
