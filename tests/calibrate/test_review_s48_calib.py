"""Session 48's calibration review: a runs CSV survives a measurement that lands nothing, a serve
profile is strict and finite, a missing .json profile is named as a file, the default
collectives do not time-slice on one CPU, and a loaded CPU is warned about."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from hwtune.calibrate import bench as bench_mod
from hwtune.calibrate.bench import BUSY_LOAD_PER_CPU, BenchConfig, _busy_cpu_note, run_bench
from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.serve.endpoint_bench import Endpoint


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_measurement_that_lands_nothing_leaves_the_csv_as_it_was(tmp_path):
    out = tmp_path / "runs.csv"
    before = "concurrency,input_len,output_len,ttft_ms,tpot_ms\n1,128,16,20.0,5.0\n"
    out.write_text(before)
    r = CliRunner().invoke(app, ["serve", "measure", "--url", f"http://127.0.0.1:{_closed_port()}",
                                 "--served-model", "m", "--concurrency", "1", "--out", str(out)])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert out.read_text() == before  # it used to be cut to a header before the server was asked


def test_an_unwritable_out_still_fails_before_measuring(tmp_path, rejects):
    rejects(["serve", "measure", "--url", f"http://127.0.0.1:{_closed_port()}", "--served-model",
             "m", "--out", str(tmp_path / "no" / "dir.csv")], "--out", "existing directory")  # fmt: skip


@pytest.mark.parametrize(
    "line, words",
    [
        ("host_overhead_per_iteration_s: .inf", ("finite",)),
        ("gemm_efficiency: '0.7'", ("valid number",)),
        ("fused_elementwise: 'yes'", ("valid boolean",)),
    ],
)
def test_a_serve_profile_is_strict_and_finite(tmp_path, rejects, line, words):
    f = tmp_path / "p.yaml"
    f.write_text(line + "\n")
    field = "p.yaml." + line.split(":")[0]
    rejects(["serve", "--concurrency", "2", "--input-len", "64", "--output-len", "4",
             "--profile", str(f)], field, *words)  # fmt: skip


def test_a_missing_json_profile_is_named_as_a_file():
    with pytest.raises(HwtuneInputError, match="readable file"):
        get_device("no-such-profile.json")


def test_an_endless_timeout_is_refused():
    with pytest.raises(HwtuneInputError, match="finite"):
        Endpoint("http://127.0.0.1:1", "m", timeout_s=float("inf"))


def _backend(clock: str = "wall", gpu: bool = False) -> SimpleNamespace:
    return SimpleNamespace(clock=clock, is_gpu=gpu)


def test_a_loaded_cpu_is_warned_about(monkeypatch):
    monkeypatch.setattr(bench_mod, "cpu_count", lambda: 2)
    over = 2 * BUSY_LOAD_PER_CPU + 0.5
    assert "load average" in _busy_cpu_note(_backend(), over)
    assert _busy_cpu_note(_backend(), 2 * BUSY_LOAD_PER_CPU) == ""  # at the line: quiet enough
    # the CPU clock counts this process's time only; a GPU times on the device; unknown load
    assert _busy_cpu_note(_backend("cpu"), over) == ""
    assert _busy_cpu_note(_backend(gpu=True), over) == ""
    assert _busy_cpu_note(_backend(), None) == ""


def test_the_default_collectives_skip_on_one_cpu(monkeypatch):
    # two gloo ranks on one usable CPU would time-slice (as --ranks 2 is refused there)
    monkeypatch.setattr(bench_mod, "cpu_count", lambda: 1)
    cfg = BenchConfig(sections=("gemm", "memory", "collectives"), budget_s=3.0, threads=1)
    res = run_bench(cfg)
    assert not res.document.get("collectives")
    assert any(s.section == "collectives" and "time-slice" in s.reason for s in res.skipped)
