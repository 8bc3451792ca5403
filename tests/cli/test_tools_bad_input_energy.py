"""`hwtune energy ...`: bad input exits 2 with one line naming the field and the value, without
a traceback; options that would be ignored are errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hwtune.cli.main import app

HEADER = "batch,frequency_hz,step_time_s,power_w\n"
ROWS = "2,1e9,0.15,12\n1,5e8,0.2,7\n2,5e8,0.3,8\n"


def points(tmp_path: Path, first: str = "1,1e9,0.1,10\n") -> str:
    f = tmp_path / "points.csv"
    f.write_text(HEADER + first + ROWS)
    return str(f)


@pytest.mark.parametrize("cmd", ["optimize", "tune"])
def test_infinite_power_cap(cmd: str, rejects):
    rejects(["energy", cmd, "--cap", "inf", "--steps" if cmd == "tune" else "--batch", "20"],
            "--cap", "inf")  # fmt: skip


def test_tune_interval_infinite_and_seed_negative(rejects):
    rejects(["energy", "tune", "--interval", "inf"], "control interval", "inf")
    rejects(["energy", "tune", "--seed", "-1"], "seed", "-1")


@pytest.mark.parametrize("eta", ["2", "-1", "nan"])
def test_eta_outside_zero_one(eta: str, rejects):
    rejects(["energy", "optimize", "--objective", "mix", "--eta", eta], "eta", eta)


def test_eta_without_mix_would_be_ignored(rejects):
    rejects(["energy", "optimize", "--eta", "0.3"], "eta", "0.3", "mix")


@pytest.mark.parametrize(("opt", "value"), [("--host-ms", "-1"), ("--host-ms", "nan"),
                                            ("--host-ms-per-sample", "-1")])  # fmt: skip
def test_host_times(opt: str, value: str, rejects):
    rejects(["energy", "optimize", opt, value], opt.lstrip("-"), value)


@pytest.mark.parametrize(("opt", "value"), [("--model", "llama3.1-8b"), ("--seq", "128"),
                                            ("--host-ms", "10"), ("--host-ms-per-sample", "1")])  # fmt: skip
def test_points_with_estimator_options(tmp_path: Path, opt: str, value: str, rejects):
    rejects(["energy", "optimize", "--cap", "100", "--points", points(tmp_path), opt, value],
            opt.lstrip("-"), value, "--points")  # fmt: skip


def test_points_still_work(tmp_path: Path):
    r = CliRunner().invoke(
        app, ["energy", "optimize", "--cap", "100", "--points", points(tmp_path)]
    )
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("first", "words"), [("1,1e9,nan,10\n", ("line 2", "finite")),
                                              ("1,1e9,0.1\n", ("line 2", "numbers")),
                                              ("1.5,1e9,0.1,10\n", ("line 2 batch", "1.5")),
                                              ("1,1e9,0.1,-10\n", ("line 2 power_w", "-10")),
                                              ("1,0,0.1,10\n", ("line 2 frequency_hz", "0")),
                                              ("1,1e9,0,10\n", ("line 2 step_time_s", "positive"))])  # fmt: skip
def test_bad_points_rows(tmp_path: Path, first: str, words: tuple[str, ...], rejects):
    rejects(["energy", "optimize", "--cap", "100", "--points", points(tmp_path, first)], *words)


def test_points_with_an_unknown_column_or_cells_past_the_header(tmp_path: Path, rejects):
    # both were ignored: a misspelt utilization fitted the power model without it, silently
    f = tmp_path / "points.csv"
    f.write_text(HEADER.replace("\n", ",utilisation\n") + "1,1e9,0.1,10,0.5\n")
    rejects(["energy", "optimize", "--points", str(f)], "points.csv header", "got 'utilisation'",
            "only the columns batch, frequency_hz, step_time_s, power_w, utilization")  # fmt: skip
    rejects(["energy", "optimize", "--points", points(tmp_path, "1,1e9,0.1,10,0.5\n")],
            "points.csv line 2", "got ['0.5']", "no cells past the header's 4 columns")  # fmt: skip


def test_a_column_given_twice(tmp_path: Path, rejects):
    # csv.DictReader kept the second: this trace replayed at 5 W, not 100
    f = tmp_path / "t.csv"
    f.write_text("time_s,power_w,power_w\n0,100,5\n1,100,5\n2,100,5\n")
    rejects(["energy", "measure", "--backend", "replay", "--trace", str(f)], "t.csv header",
            "got 'power_w'", "each column once")  # fmt: skip
    p = tmp_path / "points.csv"
    p.write_text(HEADER.replace("\n", ",power_w\n") + "1,1e9,0.1,10,1\n")
    rejects(["energy", "optimize", "--points", str(p)], "points.csv header", "got 'power_w'",
            "each column once")  # fmt: skip


def test_points_with_a_trailing_comma_still_read(tmp_path: Path):
    r = CliRunner().invoke(
        app, ["energy", "optimize", "--points", points(tmp_path, "1,1e9,0.1,10,\n")]
    )
    assert r.exit_code == 0, r.output


def test_non_utf8_points_and_trace(tmp_path: Path, rejects):
    f = tmp_path / "x.csv"
    f.write_bytes(b"\xff\xfe\x00bad")
    rejects(["energy", "optimize", "--points", str(f)], "points", "UTF-8")
    rejects(["energy", "measure", "--backend", "replay", "--trace", str(f)], "trace", "UTF-8")


def test_replay_trace_with_nan(tmp_path: Path, rejects):
    f = tmp_path / "t.csv"
    f.write_text("time_s,power_w\n0,10\n1,nan\n2,5\n")
    rejects(["energy", "measure", "--backend", "replay", "--trace", str(f)], "line 3", "nan")


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("time_s,power_w,enrgy_j\n0,10,0\n1,10,10\n", "enrgy_j"),
        # a nameless column (a trailing comma) is let be while its cells are empty
        ("time_s,power_w,,utilisation\n0,10,,0.5\n1,10,,0.5\n", "utilisation"),
        ("time_s,power_w,\n0,10,\n1,10,5\n", ""),
    ],
)
def test_replay_trace_with_an_unknown_column(tmp_path: Path, text: str, bad: str, rejects):
    # a misspelt energy_j was ignored: the energy came from the trapezoid of power, silently
    f = tmp_path / "t.csv"
    f.write_text(text)
    rejects(["energy", "measure", "--backend", "replay", "--trace", str(f)], "t.csv header",
            f"got '{bad}'", "only the columns time_s, power_w, energy_j")  # fmt: skip


@pytest.mark.parametrize("name", ["missing/p.png", "p.txt"])
def test_plot_path_checked_first(tmp_path: Path, name: str, rejects):
    rejects(["energy", "optimize", "--plot", str(tmp_path / name)], "plot", name)


def test_measure_infinite_window(rejects):
    rejects(["energy", "measure", "--seconds", "inf"], "seconds", "inf")


@pytest.mark.parametrize(("args", "field"), [(["--backend", "rapl", "--trace", "x.csv"], "trace"),
                                             (["--backend", "replay", "--root", "/"], "root"),
                                             (["--backend", "replay", "--index", "1"], "index")])  # fmt: skip
def test_measure_options_of_another_backend(tmp_path: Path, args: list[str], field: str, rejects):
    if "replay" in args:
        t = tmp_path / "t.csv"
        t.write_text("time_s,power_w\n0,10\n1,10\n2,5\n")
        args = [*args, "--trace", str(t)]
    rejects(["energy", "measure", *args], field, "--backend")


@pytest.mark.parametrize(("args", "field"), [(["--tolerance", "nan"], "tolerance"),
                                             (["--tolerance", "inf"], "tolerance"),
                                             (["--stage-ms", "nan:1"], "stage-ms"),
                                             (["--stage-ms", "1:inf"], "stage-ms"),
                                             (["--microbatches", "0"], "microbatches")])  # fmt: skip
def test_pipeline_values(args: list[str], field: str, rejects):
    rejects(["energy", "pipeline", *args], field, args[1])


def test_malformed_and_non_utf8_profile(tmp_path: Path, rejects):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    rejects(["energy", "pipeline", "--profile", str(bad)], "profile", "YAML")
    bin_ = tmp_path / "bin.yaml"
    bin_.write_bytes(b"\xff\xfe\x00bad")
    rejects(["energy", "pipeline", "--profile", str(bin_)], "profile", "UTF-8")


def test_profile_file_with_two_profiles(tmp_path: Path, rejects):
    from hwtune.energy.profiles import profiles

    two = [p.model_dump(mode="json") for p in list(profiles().values())[:2]]
    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump({"profiles": two}))
    rejects(["energy", "pipeline", "--profile", str(f)], "two.yaml.profiles", "exactly one")


@pytest.mark.parametrize("col", ["utilization", "mem_utilization"])
def test_points_utilization_outside_zero_one(tmp_path: Path, col: str, rejects):
    f = tmp_path / "u.csv"
    f.write_text(HEADER.strip() + f",{col}\n" + "1,1e9,0.1,10,1.5\n2,1e9,0.15,12,0.5\n")
    rejects(["energy", "optimize", "--cap", "100", "--points", str(f)], f"line 2 {col}", "1.5")
