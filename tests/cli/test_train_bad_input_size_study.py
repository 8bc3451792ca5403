"""`hwtune size` and `hwtune study`: bad numbers, names, option combinations and output paths
are one line naming the option (exit 2), never a traceback, a silently ignored option or a
grid point quietly recorded as "no fit"."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--tp", "0"], "--tp", ("0",)),  # was ZeroDivisionError
        (["--tp", "-1"], "--tp", ("-1",)),  # was a table of negative shapes
        (["--micro-batch", "0"], "--micro-batch", ("0",)),  # was ZeroDivisionError
        (["--micro-batch", "-2"], "--micro-batch", ("-2",)),  # was a table
        (["--seq", "0"], "--seq", ("0",)),  # was ZeroDivisionError
        (["--seq", "-5"], "--seq", ("-5",)),  # was ZeroDivisionError
        (["--precision", "FP8"], "precision", ("FP8", "fp8")),  # was KeyError
        (["--precision", "fp4"], "precision", ("fp4",)),
        (["--gpu", "a100-sxm4-80gb", "--precision", "fp8"], "precision", ("a100",)),
        (["--target", "nan"], "target", ("nan", "positive")),  # was "not reachable"
        (["--target", "inf"], "target", ("inf", "positive")),
        (["--target", "-7B"], "target", ("'-7B'",)),  # was named as -7000000000.0
        (["--target", "0"], "target", ("'0'",)),
        (["--target", "7B", "--micro-batch", "-1", "--seq", "-1"], "--micro-batch", ()),  # 1 token
        (["--target", "7B", "--tp", "2"], "--tp", ("--target",)),  # tp was ignored
        (["--tolerance", "0.1"], "--tolerance", ("--target",)),  # was ignored
    ],
)
def test_size_bad_values_are_named(rejects, args, field, words):
    rejects(["size", *args], field, *words)


def test_size_target_with_tolerance_still_runs():
    r = CliRunner().invoke(app, ["size", "--target", "7B", "--tolerance", "0.05", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["proposals"]


STUDY = ["study", "--models", "llama3.1-8b", "--scales", "8", "--global-batch", "16"]


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--scales", "0"], "--scales", ("0",)),  # was a "no fit" row
        (["--scales", "-8"], "--scales", ("-8",)),
        (["--scales", "8,,16"], "--scales", ("8,,16",)),  # the empty item was dropped
        (["--scales", "12"], "--scales", ("12", "GPUs per node (= 8)")),  # was a "no fit" row
        (["--scales", "8,8"], "scales", ("8", "twice")),  # the point ran and was written twice
        (["--models", "llama3.1-8b,llama3.1-8b"], "models", ("llama3.1-8b",)),
        (["--global-batch", "0"], "--global-batch", ("0",)),  # was a "no fit" row
        (["--seq", "-1"], "--seq", ("-1",)),
        (["--precision", "FP8"], "precision", ("FP8",)),
        (["--gpus", "a100-sxm4-80gb", "--precision", "fp8"], "precision", ("a100",)),
        (["--models", "nosuch"], "model", ("nosuch",)),  # was a "no fit" row
        (["--gpus", "nosuch"], "gpu", ("nosuch",)),
        (["--topologies", "nic=-100,domain=8"], "--topologies nic", ("-100",)),
        (["--topologies", "nic=nan"], "--topologies nic", ("nan",)),
        (["--topologies", "domain=7.5"], "--topologies domain", ("7.5",)),  # was truncated to 7
        (["--topologies", "domain=0"], "--topologies domain", ()),
        (["--topologies", "oversubscription=0.5"], "--topologies oversubscription", ("0.5",)),
    ],
)
def test_study_bad_values_are_named_before_any_point_runs(rejects, tmp_path, args, field, words):
    rejects([*STUDY, "-o", str(tmp_path / "out"), "--workers", "1", *args], field, *words)
    assert not (tmp_path / "out").exists()


def test_study_output_must_be_a_directory(rejects, tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    rejects([*STUDY, "-o", str(f)], "output", str(f), "directory")  # was FileExistsError


def test_study_output_in_a_missing_place_is_named(rejects, tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    rejects([*STUDY, "-o", str(f / "sub")], "output", str(f / "sub"))  # was NotADirectoryError


def test_study_does_not_overwrite_a_foreign_csv(rejects, tmp_path):
    (tmp_path / "study.csv").write_text("a,b\n1,2\n")
    rejects([*STUDY, "-o", str(tmp_path)], "output", "study.csv", "header")  # was overwritten
    assert (tmp_path / "study.csv").read_text() == "a,b\n1,2\n"


def test_study_non_utf8_csv_is_named(rejects, tmp_path):
    (tmp_path / "study.csv").write_bytes(b"model,gpu\xff\n")
    rejects([*STUDY, "-o", str(tmp_path)], "output", "study.csv", "UTF-8")  # was a traceback


def test_study_topology_key_given_twice_is_refused(rejects, tmp_path):
    # nic=100,nic=200 ran with 200 only
    rejects([*STUDY, "-o", str(tmp_path), "--topologies", "nic=100,nic=200"], "--topologies nic")


def test_study_table_shows_why_a_point_has_no_strategy(tmp_path, monkeypatch):
    import hwtune.train.study as study

    def no_layout(p):
        return {**study.asdict(p), "fits": False, "error": "gpus: got 7; expected a layout"}

    monkeypatch.setattr(study, "run_point", no_layout)
    r = CliRunner().invoke(app, [*STUDY, "-o", str(tmp_path), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "layout" in r.output and "no fit" not in r.output  # was "no fit" only


def test_study_unwritable_output_is_named(rejects, tmp_path, monkeypatch):
    import os
    from types import SimpleNamespace

    import hwtune.train.study as study

    denied = SimpleNamespace(access=lambda *a, **k: False, W_OK=os.W_OK, X_OK=os.X_OK)
    monkeypatch.setattr(study, "os", denied)  # root can write anywhere
    rejects([*STUDY, "-o", str(tmp_path)], "output", "writable")  # was PermissionError


def test_study_malformed_ray_address_is_named(rejects, tmp_path):
    pytest.importorskip("ray")
    rejects([*STUDY, "-o", str(tmp_path), "--ray", "foo"], "--ray", "'foo'")  # was ValueError
