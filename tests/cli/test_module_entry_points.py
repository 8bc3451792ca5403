"""The sub-apps run as modules (``python -m hwtune.cli.serve``, ``hwtune.cli.energy``) and
``python -m hwtune`` go through the root app: its one-line errors and its refusal of empty
values, which a sub-app run alone skipped (``--gpu ""`` fell back to the default GPU)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("hwtune.cli.serve", "--gpu", ""), "--gpu"),
        (("hwtune.cli.energy", "optimize", "--cap="), "--cap"),
        (("hwtune", "estimate", "--precision", " "), "--precision"),
    ],
)
def test_an_empty_value_is_one_line_and_exit_2(args, field):
    r = run(*args)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: {field}: got ") and "a non-empty value" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_an_unknown_option_of_a_sub_app_module_is_one_line():
    r = run("hwtune.cli.serve", "--no-such-option")
    assert r.returncode == 2
    assert r.stderr.startswith("error: No such option: --no-such-option")
    assert r.stderr.count("\n") == 1


def test_python_m_hwtune_runs_the_command():
    r = run("hwtune", "estimate", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step_time_s"] > 0
