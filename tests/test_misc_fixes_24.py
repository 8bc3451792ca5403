"""misc-fixes 24: RAPL background sampling for windows longer than one counter range, and CLI
errors that name the flag the user typed rather than the Python field."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from hwtune.energy.meters import EnergyMonitor
from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.rapl import RaplDevice

R_UJ = 1_000_000_000  # a 1 kJ package counter range: at 100 W it wraps every 10 s


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _write(path: Path, text: str) -> None:
    """Atomically (a rename), so the sampler thread never reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _tree(root: Path, dram: bool = False) -> Path:
    """One package zone (1 kJ range, 100 W max power); ``dram``: a DRAM zone beside it with a
    1 kJ range and no limit files (so the 500 W default)."""
    z = root / "intel-rapl:0"
    _write(z / "name", "package-0\n")
    _write(z / "energy_uj", "0\n")
    _write(z / "max_energy_range_uj", f"{R_UJ}\n")
    _write(z / "constraint_0_max_power_uw", "100000000\n")
    if dram:
        d = root / "intel-rapl:0:1"
        _write(d / "name", "dram\n")
        _write(d / "energy_uj", "0\n")
        _write(d / "max_energy_range_uj", f"{R_UJ}\n")
    return root


def _set(root: Path, joules: float, zone: str = "intel-rapl:0") -> None:
    _write(root / zone / "energy_uj", f"{int(joules * 1e6) % R_UJ}\n")


def _wait(cond, timeout_s: float = 2.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "background sampler did not tick"
        time.sleep(0.002)


# -- 1. RAPL: start_sampling / stop_sampling ---------------------------------------------------


def test_rapl_default_sampling_interval_is_a_quarter_of_the_safe_one(tmp_path):
    dev = RaplDevice(_tree(tmp_path), domains=("package",), clock=_Clock())
    assert dev.max_read_interval_s == pytest.approx(10.0)  # 1 kJ at 100 W
    assert dev.default_sampling_interval_s() == pytest.approx(2.5)
    # the smallest zone's interval rules: the DRAM zone's 1 kJ at 500 W is 2 s
    both = RaplDevice(_tree(tmp_path / "b", dram=True), clock=_Clock())
    assert both.max_read_interval_s == pytest.approx(2.0)
    assert both.default_sampling_interval_s() == pytest.approx(0.5)
    # a tiny range (1 J at 100 W: 10 ms) is not sampled more often than every 50 ms
    tiny = RaplDevice(_tree(tmp_path / "c"), domains=("package",), max_power_w=100e3)
    assert tiny.default_sampling_interval_s() == pytest.approx(0.05)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 10.5])
def test_rapl_sampling_interval_is_checked(tmp_path, bad):
    dev = RaplDevice(_tree(tmp_path), domains=("package",), clock=_Clock())
    with pytest.raises(MeterError, match="sampling interval") as ei:
        dev.start_sampling(bad)
    assert "\n" not in str(ei.value)
    assert not dev.sampling and dev.sampling_interval_s is None


def test_rapl_window_longer_than_one_range_is_exact_with_the_sampler(tmp_path):
    """24 s at 75 W on a counter that wraps every 10 s at 100 W: 1800 J, one wrap. Read only at
    the window's ends, the 800 J reading cannot be told from 1800 J (or 2800 J: 100 W x 24 s
    allows 2400 J), so it raises; with the sampler reading in between it is exact."""
    clock = _Clock()
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
            _wait(lambda n=n: dev.samples >= n + 2)  # a whole reading after the change
    finally:
        dev.stop_sampling()
    m = mon.end("epoch")
    assert m.energy_j == pytest.approx(1800.0)
    assert m.time_s == pytest.approx(24.0)
    assert dev.wraps == 1 and dev.gaps == 0 and dev.sampler_errors == 0
    assert not dev.sampling and dev.sampling_interval_s is None

    # the same walk without the sampler: the window's end raises instead of measuring 800 J
    clock2, root2 = _Clock(), _tree(tmp_path / "plain")
    plain = RaplDevice(root2, domains=("package",), clock=clock2)
    mon2 = EnergyMonitor(plain)
    mon2.begin("epoch")
    clock2.t = 24.0
    _set(root2, 1800.0)
    with pytest.raises(MeterError, match="start_sampling"):
        mon2.end("epoch")


def test_rapl_failed_background_reading_is_raised_once_and_sampling_goes_on(tmp_path):
    root = _tree(tmp_path)
    dev = RaplDevice(root, domains=("package",), clock=_Clock())
    dev.start_sampling(0.01)
    try:
        thread = dev._sampler
        dev.start_sampling()  # already sampling: a no-op
        assert dev._sampler is thread and dev.sampling_interval_s == 0.01
        _write(root / "intel-rapl:0" / "energy_uj", "garbled\n")
        _wait(lambda: dev.sampler_errors >= 1)
        _set(root, 5.0)
        n = dev.samples
        _wait(lambda: dev.samples >= n + 2)
        assert thread.is_alive()
    finally:
        dev.stop_sampling()
    assert not thread.is_alive()
    with pytest.raises(MeterError, match="garbled"):
        dev.energy_j()
    assert dev.energy_j() == pytest.approx(5.0)  # raised once; the counter kept counting


def test_rapl_a_zone_that_fails_does_not_leave_the_others_unread(tmp_path):
    clock = _Clock()
    root = _tree(tmp_path, dram=True)
    dev = RaplDevice(root, clock=clock)
    clock.t = 1.0
    _set(root, 50.0)
    _set(root, 7.0, "intel-rapl:0:1")
    _write(root / "intel-rapl:0" / "energy_uj", "garbled\n")
    with pytest.raises(MeterError, match="garbled"):
        dev.energy_j()
    dram = next(z for z in dev.zones if z.name == "dram")
    assert dram.total_uj == pytest.approx(7e6) and dram.last_t == 1.0
    _set(root, 50.0)
    assert dev.energy_j() == pytest.approx(57.0)


# -- 2. CLI errors name the flag the user typed, not the Python field -------------------------

SMALL = ["-m", "llama3.1-8b", "--gpus", "8"]


def _options(command: str) -> set[str]:
    """Every option string of ``hwtune COMMAND`` (what its --help lists)."""
    import typer

    from hwtune.cli.main import app

    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize(
    ("args", "flag", "words"),
    [
        # dp = 8: 12 sequences are not whole micro-batches of 1 on every data-parallel rank
        (["estimate", *SMALL, "--global-batch", "12"], "--global-batch", ("12",)),
        (["estimate", *SMALL, "--global-batch", "0"], "--global-batch", ("0",)),  # pydantic
        (["estimate", *SMALL, "--micro-batch", "0"], "--micro-batch", ("0",)),  # pydantic
        # no --global-batch: dp*micro-batch = 1 sequence, under DualPipe's 2*pp micro-batches;
        # the flag that fixes it is named
        (
            ["estimate", "--gpus", "2", "--pp", "2", "--schedule", "dualpipe"],
            "--global-batch",
            ("DualPipe",),
        ),
        (["plan", *SMALL, "--global-batch", "-3"], "--global-batch", ("-3",)),
        (["plan", *SMALL, "--global-batch-tokens", "0"], "--global-batch-tokens", ("0",)),
        (
            ["plan", *SMALL, "--seq", "4096", "--global-batch-tokens", "1000"],
            "--global-batch-tokens",
            ("1000", "--seq"),
        ),
        (
            ["plan", *SMALL, "--objective", "cost", "--price-per-gpu-hour", "-1"],
            "--price-per-gpu-hour",
            ("-1",),
        ),
        (["scale", "--gpus", "8,16", "--global-batch", "0"], "--global-batch", ("0",)),
        (
            ["scale", "-m", "llama3.1-8b,llama3.1-70b", "--fixed-gpus", "8", "--global-batch", "0"],
            "--global-batch",
            ("0",),
        ),
        # 0.3 x 8 GPUs = 2.4 sequences: not whole
        (
            ["scale", "--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "0.3"],
            "--seqs-per-gpu",
            ("0.3", "2.4"),
        ),
        (
            ["scale", "--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "nan"],
            "--seqs-per-gpu",
            ("nan",),
        ),
    ],
)
def test_batch_errors_name_the_flag_and_every_flag_named_exists(rejects, args, flag, words):
    line = rejects(args, flag, *words)
    assert f"error: {flag}: got" in line  # the flag is the field, not a Python name
    assert "global_batch" not in line.split(";")[0] and "seqs_per_gpu" not in line
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line))
    assert named <= _options(args[0]), named - _options(args[0])


def test_the_python_api_keeps_its_field_names():
    from hwtune.errors import HwtuneInputError
    from hwtune.train.scaling import scale_sweep

    for kw, field in ((dict(policy="strong", global_batch=0), "global_batch"),
                      (dict(policy="weak", seqs_per_gpu=0.3), "seqs_per_gpu")):  # fmt: skip
        with pytest.raises(HwtuneInputError) as ei:
            scale_sweep(None, None, [8, 16], 4096, **kw)
        assert ei.value.field == field


def test_flag_error_renames_only_the_fields_it_is_given():
    from hwtune.cli.parsing import flag_error
    from hwtune.errors import HwtuneInputError

    flags = {"global_batch": "--global-batch"}
    for field in ("global_batch", "strategy.global_batch"):
        e = flag_error(HwtuneInputError(field, 7, "x"), flags)
        assert (e.field, e.value, e.expected) == ("--global-batch", 7, "x")
    other = HwtuneInputError("cluster.global_batch", 7, "x")  # not a strategy field: kept
    assert flag_error(other, flags) is other
    tp = HwtuneInputError("tp", 3, "x")
    assert flag_error(tp, flags) is tp


def test_compile_and_energy_step_name_the_batch_flag_the_user_typed(rejects, tmp_path):
    """`compile` and `energy step` named the strategy's field (``global_batch``) for a batch set
    by ``--global-batch``; a batch from a strategy file keeps the file's key."""
    msg = rejects(["compile", "--gpus", "8", "--dp", "8", "--global-batch", "3"],
                  "--global-batch", "3")  # fmt: skip
    assert msg.startswith("error: --global-batch: got 3;")
    msg = rejects(["energy", "step", "--gpus", "8", "--global-batch", "3"], "--global-batch", "3")
    assert msg.startswith("error: --global-batch: got 3;")
    f = tmp_path / "s.yaml"
    f.write_text("mesh: {dp: 8}\nglobal_batch: 3\n")
    msg = rejects(["compile", "--gpus", "8", "--strategy", str(f)], "global_batch", "3")
    assert msg.startswith("error: global_batch: got 3;")


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["estimate", "--seq", "0"], "--seq"), (["estimate", "--moe-imbalance", "0.5"], "--moe-imbalance"),
     (["estimate", "--sequence-parallel", "--tp", "1"], "--sequence-parallel"),
     (["estimate", "--overlap-a2a"], "--overlap-a2a"), (["estimate", "--gpus", "0"], "--gpus"),
     (["energy", "step", "--gpus", "0"], "--gpus"), (["plan", "--seq", "0"], "--seq"),
     (["scale", "--seq", "0", "--gpus", "8,16"], "--seq"),
     (["size", "--micro-batch", "0"], "--micro-batch"), (["size", "--precision", "FP8"], "--precision"),
     (["study", "--models", "llama3.1-8b", "--scales", "8", "--seq", "0", "-o", "unused"], "--seq"),
     (["estimate", "--precision", "FP8"], "--precision"), (["plan", "--precision", "FP8"], "--precision"),
     (["scale", "--precision", "FP8", "--gpus", "8,16"], "--precision")],
)  # fmt: skip
def test_estimate_plan_and_scale_name_the_flags_of_the_strategy_fields(args, flag, rejects):
    """The strategy's and cluster's checks name their fields (strategy.seq, cluster.n_gpus,
    overlap_moe_a2a); the command names the flag that set them."""
    msg = rejects(args, flag)
    assert msg.startswith(f"error: {flag}: got ")
