"""review 24b: RAPL sampler errors against EnergyMonitor windows, and `estimate`'s GPU count
error naming a flag the user did not set."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hwtune.energy.meters import EnergyMonitor
from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.rapl import RaplDevice

R_UJ = 1_000_000_000  # 1 kJ range at up to 100 W: read at least every 10 s


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _device(root: Path, clock: _Clock) -> RaplDevice:
    z = root / "intel-rapl:0"
    _write(z / "name", "package-0\n")
    _write(z / "energy_uj", "0\n")
    _write(z / "max_energy_range_uj", f"{R_UJ}\n")
    _write(z / "constraint_0_max_power_uw", "100000000\n")
    return RaplDevice(root, domains=("package",), clock=clock)


def _set(root: Path, joules: float) -> None:
    _write(root / "intel-rapl:0" / "energy_uj", f"{int(joules * 1e6) % R_UJ}\n")


def _wait(cond, timeout_s: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "background sampler did not tick"
        time.sleep(0.002)


def test_a_gap_the_sampler_found_before_a_window_begins_is_not_the_windows(tmp_path):
    """With the sampler running, a gap (the process stalled past the safe interval) is found by
    the thread and kept for the next `energy_j`. `EnergyMonitor.begin` re-baselines after a gap
    its own first reading finds, but raised this one as "a failed reading": the gap had been
    counted before begin looked at the count. A window already open across it still refuses."""
    clock = _Clock()
    dev = _device(tmp_path, clock)
    mon = EnergyMonitor(dev)
    mon.begin("run")
    dev.start_sampling(0.005)
    try:
        _set(tmp_path, 500.0)  # (the energy first: the gap is found at the new time)
        clock.t = 60.0  # 60 s at up to 100 W could hide a wrap of the 1 kJ counter
        _wait(lambda: dev.gaps == 1 and dev.sampler_errors == 1)
        mon.begin("step")  # the gap is before this window
        clock.t = 61.0
        _set(tmp_path, 550.0)
        n = dev.samples
        _wait(lambda: dev.samples >= n + 2)
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
    clock = _Clock()
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
        _wait(lambda: dev.sampler_errors == 1)
        assert began == [1]  # the window began after the gap, in that moment
        clock.t = 61.0
        _set(tmp_path, 550.0)
        n = dev.samples
        _wait(lambda: dev.samples >= n + 2)
        assert mon.end("step").energy_j == pytest.approx(50.0)
    finally:
        dev.stop_sampling()


def test_estimate_does_not_name_gpus_for_a_count_derived_from_dp(rejects):
    """Without --gpus, estimate derives the GPU count from --dp*--tp*--pp*--cp; a bad count
    was reported as '--gpus: got -1', a flag the user never typed."""
    msg = rejects(["estimate", "--dp", "-1"], "dp*tp*pp*cp", "-1")
    assert "--gpus" not in msg
    msg = rejects(["estimate", "--dp", "2", "--pp", "0"], "dp*tp*pp*cp", "0")
    assert "--gpus" not in msg
    msg = rejects(["estimate", "--dp", "3", "--gpus-per-node", "2"], "dp*tp*pp*cp", "3")
    assert "--gpus:" not in msg
    # typed (or its default 8), it is still named
    rejects(["estimate", "--gpus-per-node", "3"], "--gpus", "8")
    msg = rejects(["estimate", "--gpus", "0"], "--gpus", "0")
    assert msg.startswith("error: --gpus: got 0")


@pytest.mark.parametrize("hz", [0.0, -5.0, float("nan"), float("inf")])
def test_jetson_sampling_rate_is_checked(tmp_path, hz):
    """`JetsonDevice.start_sampling(hz)` took any rate: 0 raised ZeroDivisionError (a
    traceback, not a one-line `MeterError`), a negative or infinite one started a thread that
    spun without pause (``Event.wait`` of a period <= 0 returns at once), nan as well. RAPL's
    `start_sampling` checks its interval; Jetson's rate now is checked the same way."""
    from hwtune.energy.meters.jetson import JetsonDevice

    h = tmp_path / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    _write(h / "in1_label", "VDD_IN\n")
    _write(h / "in1_input", "5000\n")
    _write(h / "curr1_input", "1000\n")
    dev = JetsonDevice(tmp_path, clock=_Clock())
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
