"""Jetson sysfs backend against fake trees laid out as on JetPack 5/6 (hwmon) and JetPack 4
(iio): rail discovery, module power, missing rails, unreadable files, devfreq clock locking."""

from __future__ import annotations

import pytest
from energy_fakes import Clock, write

from hwtune.energy.meters.base import MeterError, MeterPermissionError
from hwtune.energy.meters.jetson import JetsonDevice

AGX_RAILS = {  # AGX Orin: two INA3221s, no total rail (Jetson Linux developer guide, Orin)
    "1-0040": [("VDD_GPU_SOC", 5000, 2000), ("VDD_CPU_CV", 5000, 600), ("VIN_SYS_5V0", 5000, 700)],
    "1-0041": [("NC", 0, 0), ("VDDQ_VDD2_1V8AO", 5000, 300), ("NC", 0, 0)],
}
NX_RAILS = {
    "1-0040": [("VDD_IN", 5000, 3000), ("VDD_CPU_GPU_CV", 5000, 1200), ("VDD_SOC", 5000, 500)]
}
TABLE = [306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000,
         1020000000, 1122000000, 1224000000, 1300500000]  # fmt: skip


def make_tree(root, rails=AGX_RAILS, devfreq=True, load=None):
    for dev, chans in rails.items():
        h = root / "sys/bus/i2c/drivers/ina3221" / dev / "hwmon/hwmon3"
        for n, (label, mv, ma) in enumerate(chans, start=1):
            write(h / f"in{n}_label", label + "\n")
            write(h / f"in{n}_input", f"{mv}\n")
            write(h / f"curr{n}_input", f"{ma}\n")
    if devfreq:
        d = root / "sys/class/devfreq/17000000.gpu"
        write(d / "available_frequencies", " ".join(str(f) for f in TABLE) + "\n")
        write(d / "cur_freq", "1300500000\n")
        write(d / "min_freq", "306000000\n")
        write(d / "max_freq", "1300500000\n")
        write(d / "governor", "nvhost_podgov\n")
        if load is not None:
            write(d / "device/load", f"{load}\n")
    return root


def set_rail(root, dev, n, ma):
    write(root / "sys/bus/i2c/drivers/ina3221" / dev / "hwmon/hwmon3" / f"curr{n}_input", f"{ma}\n")


def test_agx_orin_module_power_is_the_sum_of_rails_and_nc_is_skipped(tmp_path):
    dev = JetsonDevice(make_tree(tmp_path))
    assert sorted(dev.all_rails) == ["VDDQ_VDD2_1V8AO", "VDD_CPU_CV", "VDD_GPU_SOC", "VIN_SYS_5V0"]
    # 5 V x (2.0 + 0.6 + 0.7 + 0.3) A = 18 W
    assert dev.power_w() == pytest.approx(18.0)
    assert dev.rail_power_w()["VDD_GPU_SOC"] == pytest.approx(10.0)


def test_orin_nx_uses_vdd_in_only(tmp_path):
    dev = JetsonDevice(make_tree(tmp_path, NX_RAILS))
    assert dev.power_w() == pytest.approx(15.0)  # VDD_IN alone, not VDD_IN + its parts


def test_energy_is_the_trapezoid_of_the_samples(tmp_path):
    root = make_tree(tmp_path, NX_RAILS)
    clock = Clock(0.0)
    dev = JetsonDevice(root, clock=clock)
    e0 = dev.energy_j()  # 15 W at t = 0
    clock.t = 2.0
    set_rail(root, "1-0040", 1, 5000)  # 25 W at t = 2
    assert dev.energy_j() - e0 == pytest.approx(0.5 * (15 + 25) * 2)


def test_legacy_iio_rails(tmp_path):
    iio = tmp_path / "sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0"
    write(iio / "rail_name_0", "VDD_IN\n")
    write(iio / "in_power0_input", "7250\n")  # mW
    write(iio / "rail_name_1", "VDD_SYS_GPU\n")
    write(iio / "in_power1_input", "1000\n")
    dev = JetsonDevice(tmp_path)
    assert dev.power_w() == pytest.approx(7.25)


def test_missing_rail_lists_the_rails_found(tmp_path):
    with pytest.raises(MeterError) as err:
        JetsonDevice(make_tree(tmp_path), rails=["VDD_GPU"])
    assert "VDD_GPU" in str(err.value) and "VDD_GPU_SOC" in str(err.value)


def test_no_rails_at_all(tmp_path):
    with pytest.raises(MeterError, match="no INA3221 rails"):
        JetsonDevice(tmp_path)


def test_channel_with_label_but_no_readings_is_not_a_rail(tmp_path):
    root = make_tree(tmp_path, NX_RAILS)
    (root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3/curr3_input").unlink()
    dev = JetsonDevice(root)
    assert "VDD_SOC" not in dev.all_rails and "VDD_IN" in dev.all_rails


def test_unreadable_rail_names_the_file_and_privilege(tmp_path, deny):
    root = make_tree(tmp_path, NX_RAILS)
    dev = JetsonDevice(root)
    f = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3/curr1_input"
    deny(f)
    with pytest.raises(MeterPermissionError) as err:
        dev.power_w()
    assert str(f) in str(err.value) and "root" in str(err.value)


def test_lock_clock_writes_max_then_min_going_up_and_validates(tmp_path):
    root = make_tree(tmp_path)
    d = root / "sys/class/devfreq/17000000.gpu"
    dev = JetsonDevice(root)
    assert dev.capabilities().frequencies_hz[0] == 306e6
    dev.set_frequency_hz(612e6)  # going down from max 1300.5: min first, then max
    assert d.joinpath("min_freq").read_text() == "612000000"
    assert d.joinpath("max_freq").read_text() == "612000000"
    dev.set_frequency_hz(918e6)  # going up: max first so min never exceeds max
    assert d.joinpath("max_freq").read_text() == "918000000"
    assert d.joinpath("min_freq").read_text() == "918000000"
    with pytest.raises(MeterError, match="supported clocks"):
        dev.set_frequency_hz(700e6)
    dev.reset()
    assert d.joinpath("min_freq").read_text() == "306000000"
    assert d.joinpath("max_freq").read_text() == "1300500000"


def test_clock_write_without_root_names_the_file(tmp_path, deny):
    root = make_tree(tmp_path)
    dev = JetsonDevice(root)
    f = root / "sys/class/devfreq/17000000.gpu/min_freq"
    deny(f, "w")
    with pytest.raises(MeterPermissionError) as err:
        dev.set_frequency_hz(408e6)
    assert str(f) in str(err.value) and "sudo" in str(err.value)


def test_utilization_from_gpu_load_and_no_devfreq(tmp_path):
    dev = JetsonDevice(make_tree(tmp_path, load=734))
    assert dev.utilization().gpu == pytest.approx(0.734)
    bare = JetsonDevice(make_tree(tmp_path / "b", NX_RAILS, devfreq=False))
    assert bare.capabilities().set_frequency is False
    assert bare.frequency_hz() is None
    with pytest.raises(MeterError, match="devfreq"):
        bare.set_frequency_hz(306e6)


def test_a_failed_background_sample_is_raised_once_and_sampling_goes_on(tmp_path):
    """A rail that cannot be read for a moment (a garbled sysfs value) used to end the sampler
    thread with a traceback, leaving later windows integrated over one long gap in silence."""
    import time

    root = make_tree(tmp_path, NX_RAILS)
    dev = JetsonDevice(root)
    dev.start_sampling(hz=500)
    try:
        h = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
        write(h / "curr1_input", "garbled\n")
        deadline = time.monotonic() + 5
        while dev.sampler_errors == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        set_rail(root, "1-0040", 1, 3000)
        assert dev.sampler_errors >= 1
        time.sleep(0.05)
        assert dev._sampler is not None and dev._sampler.is_alive()  # still sampling
    finally:
        dev.stop_sampling()
    with pytest.raises(MeterError):
        dev.energy_j()
    assert dev.energy_j() >= 0  # raised once


def test_threads_starting_sampling_together_start_one_sampler(tmp_path):
    import threading

    dev = JetsonDevice(make_tree(tmp_path, NX_RAILS))
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        dev.start_sampling(hz=50)

    starters = [threading.Thread(target=start) for _ in range(8)]
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    try:
        alive = [t for t in threading.enumerate() if t.name == "hwtune-jetson-sampler"]
        assert len(alive) == 1
    finally:
        dev.stop_sampling()
    assert not [t for t in threading.enumerate() if t.name == "hwtune-jetson-sampler"]


@pytest.mark.parametrize("hz", [0.0, -5.0, float("nan"), float("inf")])
def test_jetson_sampling_rate_is_checked(tmp_path, hz):
    """`JetsonDevice.start_sampling(hz)` took any rate: 0 raised ZeroDivisionError (a
    traceback, not a one-line `MeterError`), a negative or infinite one started a thread that
    spun without pause (``Event.wait`` of a period <= 0 returns at once), nan as well. RAPL's
    `start_sampling` checks its interval; Jetson's rate now is checked the same way."""
    from hwtune.energy.meters.jetson import JetsonDevice

    h = tmp_path / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    write(h / "in1_label", "VDD_IN\n")
    write(h / "in1_input", "5000\n")
    write(h / "curr1_input", "1000\n")
    dev = JetsonDevice(tmp_path, clock=Clock())
    try:
        with pytest.raises(MeterError, match="sampling rate"):
            dev.start_sampling(hz)
        assert dev._sampler is None
    finally:
        dev.stop_sampling()
    dev.start_sampling(200.0)  # a valid rate still starts
    try:
        assert dev._sampler is not None and dev._sampler.is_alive()
    finally:
        dev.stop_sampling()
