"""RAPL's background sampler (`RaplDevice.start_sampling`): windows longer than one counter
range, failed background readings, and a gap found by the sampler against `EnergyMonitor`
windows (races included)."""

from __future__ import annotations

from pathlib import Path

import pytest
from energy_fakes import Clock, wait_for, write

from hwtune.energy.meters import EnergyMonitor
from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.rapl import RaplDevice

R_UJ = 1_000_000_000  # a 1 kJ package counter range: at 100 W it wraps every 10 s


def _tree(root: Path, dram: bool = False) -> Path:
    """One package zone (1 kJ range, 100 W max power); ``dram``: a DRAM zone beside it with a
    1 kJ range and no limit files (so the 500 W default)."""
    z = root / "intel-rapl:0"
    write(z / "name", "package-0\n")
    write(z / "energy_uj", "0\n")
    write(z / "max_energy_range_uj", f"{R_UJ}\n")
    write(z / "constraint_0_max_power_uw", "100000000\n")
    if dram:
        d = root / "intel-rapl:0:1"
        write(d / "name", "dram\n")
        write(d / "energy_uj", "0\n")
        write(d / "max_energy_range_uj", f"{R_UJ}\n")
    return root


def _device(root: Path, clock: Clock) -> RaplDevice:
    return RaplDevice(_tree(root), domains=("package",), clock=clock)


def _set(root: Path, joules: float, zone: str = "intel-rapl:0") -> None:
    write(root / zone / "energy_uj", f"{int(joules * 1e6) % R_UJ}\n")


def test_rapl_default_sampling_interval_is_a_quarter_of_the_safe_one(tmp_path):
    dev = RaplDevice(_tree(tmp_path), domains=("package",), clock=Clock())
    assert dev.max_read_interval_s == pytest.approx(10.0)  # 1 kJ at 100 W
    assert dev.default_sampling_interval_s() == pytest.approx(2.5)
    # the smallest zone's interval rules: the DRAM zone's 1 kJ at 500 W is 2 s
    both = RaplDevice(_tree(tmp_path / "b", dram=True), clock=Clock())
    assert both.max_read_interval_s == pytest.approx(2.0)
    assert both.default_sampling_interval_s() == pytest.approx(0.5)
    # a tiny range (1 J at 100 W: 10 ms) is not sampled more often than every 50 ms
    tiny = RaplDevice(_tree(tmp_path / "c"), domains=("package",), max_power_w=100e3)
    assert tiny.default_sampling_interval_s() == pytest.approx(0.05)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 10.5])
def test_rapl_sampling_interval_is_checked(tmp_path, bad):
    dev = RaplDevice(_tree(tmp_path), domains=("package",), clock=Clock())
    with pytest.raises(MeterError, match="sampling interval") as ei:
        dev.start_sampling(bad)
    assert "\n" not in str(ei.value)
    assert not dev.sampling and dev.sampling_interval_s is None


def test_rapl_window_longer_than_one_range_is_exact_with_the_sampler(tmp_path):
    """24 s at 75 W on a counter that wraps every 10 s at 100 W: 1800 J, one wrap. Read only at
    the window's ends, the 800 J reading cannot be told from 1800 J (or 2800 J: 100 W x 24 s
    allows 2400 J), so it raises; with the sampler reading in between it is exact."""
    clock = Clock()
    root = _tree(tmp_path)
    dev = RaplDevice(root, domains=("package",), clock=clock)
    mon = EnergyMonitor(dev)
    mon.begin("epoch")
    assert not dev.sampling  # the monitor starts no thread itself
    dev.start_sampling(0.01)
    try:
        assert dev.sampling and dev.sampling_interval_s == 0.01
        for k in range(1, 7):  # every 4 s of device time, 300 J more
            n = dev.samples
            clock.t = 4.0 * k
            _set(root, 300.0 * k)
            wait_for(lambda n=n: dev.samples >= n + 2)  # a whole reading after the change
    finally:
        dev.stop_sampling()
    m = mon.end("epoch")
    assert m.energy_j == pytest.approx(1800.0)
    assert m.time_s == pytest.approx(24.0)
    assert dev.wraps == 1 and dev.gaps == 0 and dev.sampler_errors == 0
    assert not dev.sampling and dev.sampling_interval_s is None

    # the same walk without the sampler: the window's end raises instead of measuring 800 J
    clock2, root2 = Clock(), _tree(tmp_path / "plain")
    plain = RaplDevice(root2, domains=("package",), clock=clock2)
    mon2 = EnergyMonitor(plain)
    mon2.begin("epoch")
    clock2.t = 24.0
    _set(root2, 1800.0)
    with pytest.raises(MeterError, match="start_sampling"):
        mon2.end("epoch")


def test_rapl_failed_background_reading_is_raised_once_and_sampling_goes_on(tmp_path):
    root = _tree(tmp_path)
    dev = RaplDevice(root, domains=("package",), clock=Clock())
    dev.start_sampling(0.01)
    try:
        thread = dev._sampler
        dev.start_sampling()  # already sampling: a no-op
        assert dev._sampler is thread and dev.sampling_interval_s == 0.01
        write(root / "intel-rapl:0" / "energy_uj", "garbled\n")
        wait_for(lambda: dev.sampler_errors >= 1)
        _set(root, 5.0)
        n = dev.samples
        wait_for(lambda: dev.samples >= n + 2)
        assert thread.is_alive()
    finally:
        dev.stop_sampling()
    assert not thread.is_alive()
    with pytest.raises(MeterError, match="garbled"):
        dev.energy_j()
    assert dev.energy_j() == pytest.approx(5.0)  # raised once; the counter kept counting


def test_rapl_a_zone_that_fails_does_not_leave_the_others_unread(tmp_path):
    clock = Clock()
    root = _tree(tmp_path, dram=True)
    dev = RaplDevice(root, clock=clock)
    clock.t = 1.0
    _set(root, 50.0)
    _set(root, 7.0, "intel-rapl:0:1")
    write(root / "intel-rapl:0" / "energy_uj", "garbled\n")
    with pytest.raises(MeterError, match="garbled"):
        dev.energy_j()
    dram = next(z for z in dev.zones if z.name == "dram")
    assert dram.total_uj == pytest.approx(7e6) and dram.last_t == 1.0
    _set(root, 50.0)
    assert dev.energy_j() == pytest.approx(57.0)


def test_a_gap_the_sampler_found_before_a_window_begins_is_not_the_windows(tmp_path):
    """With the sampler running, a gap (the process stalled past the safe interval) is found by
    the thread and kept for the next `energy_j`. `EnergyMonitor.begin` re-baselines after a gap
    its own first reading finds, but raised this one as "a failed reading": the gap had been
    counted before begin looked at the count. A window already open across it still refuses."""
    clock = Clock()
    dev = _device(tmp_path, clock)
    mon = EnergyMonitor(dev)
    mon.begin("run")
    dev.start_sampling(0.005)
    try:
        _set(tmp_path, 500.0)  # (the energy first: the gap is found at the new time)
        clock.t = 60.0  # 60 s at up to 100 W could hide a wrap of the 1 kJ counter
        wait_for(lambda: dev.gaps == 1 and dev.sampler_errors == 1)
        mon.begin("step")  # the gap is before this window
        clock.t = 61.0
        _set(tmp_path, 550.0)
        n = dev.samples
        wait_for(lambda: dev.samples >= n + 2)
        assert mon.end("step").energy_j == pytest.approx(50.0)
        with pytest.raises(MeterError, match="unknown energy"):
            mon.end("run")
    finally:
        dev.stop_sampling()
    assert dev.gaps == 1


class _HookLock:
    """A lock that, once the sampler thread has counted a gap and released the lock, runs
    ``hook`` before the thread goes on: the moment between counting the gap and keeping its
    error for `energy_j`."""

    def __init__(self, dev: RaplDevice) -> None:
        import threading

        self._lock = threading.Lock()
        self._dev = dev
        self.hook = None

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        import threading

        hook = self.hook
        if (
            hook is not None
            and threading.current_thread().name == "hwtune-rapl-sampler"
            and sum(z.gaps for z in self._dev.zones) == 1
        ):
            self.hook = None
            hook()


def test_a_sampler_gap_is_counted_and_kept_for_energy_j_at_once(tmp_path):
    """The thread counted a gap under the lock and kept its error for `energy_j` under a second
    hold of the lock: a window opened in between (begin: no error kept yet, the gap already
    counted in its baseline) began cleanly, then its end raised that gap from before it."""
    clock = Clock()
    dev = _device(tmp_path, clock)
    lock = _HookLock(dev)
    dev._lock = lock  # type: ignore[assignment]
    mon = EnergyMonitor(dev)
    began = []

    def open_window() -> None:
        mon.begin("step")
        began.append(dev.gaps)

    lock.hook = open_window
    dev.start_sampling(0.005)
    try:
        _set(tmp_path, 500.0)  # (the energy first: the window begins after it)
        clock.t = 60.0
        wait_for(lambda: dev.sampler_errors == 1)
        assert began == [1]  # the window began after the gap, in that moment
        clock.t = 61.0
        _set(tmp_path, 550.0)
        n = dev.samples
        wait_for(lambda: dev.samples >= n + 2)
        assert mon.end("step").energy_j == pytest.approx(50.0)
    finally:
        dev.stop_sampling()
