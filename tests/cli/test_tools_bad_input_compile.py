"""`hwtune compile` (and the cluster and strategy loaders it shares with `energy step`): bad
input exits 2 with one line naming the field and the value, without a traceback; no option is
silently ignored or replaced by a default."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app


def test_cluster_check_names_the_field_not_the_whole_cluster(rejects):
    out = rejects(
        ["compile", "--gpus", "100", "--dp", "2"], "--gpus", "100", "--gpus-per-node (= 8)"
    )
    assert "Device(" not in out and len(out) < 200


def test_energy_step_cluster_check_is_short_too(rejects):
    out = rejects(["energy", "step", "--gpus", "12"], "--gpus", "12")
    assert "Device(" not in out


@pytest.mark.parametrize("cap", ["10", "inf"])
def test_power_cap_below_static_power_or_infinite(cap: str, rejects):
    rejects(["energy", "step", "--power-cap", cap], "--power-cap", cap)


def test_power_cap_below_static_power_in_a_cluster_file(tmp_path: Path, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: a100\nn_gpus: 8\npower_cap_w: 5\n")
    rejects(["compile", "--cluster", str(f), "--dp", "8"], "power_cap_w", "5.0", "static power")


def test_power_cap_above_the_board_power_limit(tmp_path: Path, rejects):
    # a cap above tdp_w was taken as no cap at all (the clock at its peak), without a word
    expected = "at most h100-sxm-80gb's board power limit, tdp_w = 700 W"
    rejects(["energy", "step", "--power-cap", "5000"], "--power-cap", "got 5000.0", expected)
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 8\npower_cap_w: 701\n")
    rejects(["estimate", "--cluster", str(f)], "c.yaml.power_cap_w", "got 701.0", expected)
    f.write_text("device: h100\nn_gpus: 8\npower_cap_w: 700\n")  # the limit itself is a cap
    r = CliRunner().invoke(app, ["estimate", "--cluster", str(f), "--json"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("opt", "value"), [("--nic-gbps", "0"), ("--gpus-per-node", "0")])
def test_zero_network_figures_are_not_replaced_by_defaults(opt: str, value: str, rejects):
    rejects(["compile", opt, value], f"{opt}: got {value}", value)  # the flag typed, by name


def test_zero_minus_one_is_not_a_stage(rejects):
    rejects(["compile", "--zero", "-1"], "zero", "-1")


def test_vpp_without_interleaved_schedule(tmp_path: Path, rejects):
    rejects(["compile", "--vpp", "2"], "vpp", "2", "interleaved")
    f = tmp_path / "s.yaml"
    f.write_text("mesh: {dp: 8}\nschedule: {name: 1f1b, vpp: 3}\n")
    rejects(["compile", "--strategy", str(f)], "vpp", "3")


@pytest.mark.parametrize(("opt", "value"), [("--steps", "5"), ("--device", "cuda")])
def test_run_options_without_run(opt: str, value: str, rejects):
    rejects(["compile", opt, value], opt.lstrip("-"), value, "--run")


def test_zero_steps_with_run(rejects):
    rejects(["compile", "--run", "--steps", "0"], "steps", "0")


@pytest.mark.parametrize(("opt", "value"), [("--gpus", "4"), ("--gpu", "a100"),
                                            ("--gpus-per-node", "4"), ("--nic-gbps", "100")])  # fmt: skip
def test_cluster_file_with_cluster_flags(tmp_path: Path, opt: str, value: str, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: a100\nn_gpus: 8\n")
    rejects(["compile", "--cluster", str(f), "--dp", "8", opt, value], opt.lstrip("-"), value)


@pytest.mark.parametrize("opt", ["--strategy", "--cluster"])
def test_non_utf8_files(tmp_path: Path, opt: str, rejects):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"\xff\xfe\x00bad")
    rejects(["compile", opt, str(f)], opt.lstrip("-"), "UTF-8")


@pytest.mark.parametrize(("opt", "name"), [("--trace", "t.json"), ("--gantt", "g.png"),
                                           ("--gantt", "g.txt")])  # fmt: skip
def test_output_paths_checked_before_the_work(tmp_path: Path, opt: str, name: str, rejects):
    where = tmp_path / name if name.endswith(".txt") else tmp_path / "missing" / name
    rejects(["compile", opt, str(where)], opt.lstrip("-"), name)


def test_model_level_error_shows_only_the_fields_it_names():
    from pydantic import BaseModel, ValidationError, model_validator

    from hwtune.errors import from_validation_error

    class M(BaseModel):
        a: int
        b: str = "x" * 500

        @model_validator(mode="after")
        def _check(self) -> M:
            raise ValueError(f"a={self.a} must be even")

    with pytest.raises(ValidationError) as info:
        M(a=3)
    e = from_validation_error(info.value, where="m")
    assert e.value == {"a": 3} and len(str(e)) < 80


@pytest.mark.parametrize("cmd", [["compile"], ["energy", "optimize"]])
def test_non_utf8_model_config(tmp_path: Path, cmd: list[str], rejects):
    f = tmp_path / "config.json"
    f.write_bytes(b"\xff\xfe\x00bad")
    rejects([*cmd, "--model", str(f)], "model", "UTF-8")
