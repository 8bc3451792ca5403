"""`hwtune energy tune --objective/--eta`: the online tuner takes the same objectives as `energy
optimize` (the mix objective's MAXPOWER the profile's module maximum in both, as Zeus takes the
device's largest power limit); --eta without mix is refused as optimize refuses it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.energy import tuner as tuner_mod
from hwtune.energy.profiles import get_profile


def _tune(*args: str):
    return CliRunner().invoke(app, ["energy", "tune", "--steps", "60", *args])


@pytest.mark.parametrize(("args", "objective", "eta"), [
    ([], "time", None), (["--objective", "energy"], "energy", None),
    (["--objective", "mix"], "mix", None),  # the tuner's own default, Zeus's 0.5
    (["--objective", "mix", "--eta", "0.25"], "mix", 0.25),
])  # fmt: skip
def test_the_objective_reaches_the_tuner(monkeypatch, args, objective, eta):
    seen: dict = {}
    real = tuner_mod.OnlineTuner

    class Spy(real):
        def __init__(self, *a, **kw):
            seen.update(kw)
            super().__init__(*a, **kw)

    monkeypatch.setattr(tuner_mod, "OnlineTuner", Spy)
    r = _tune(*args, "--json")
    assert r.exit_code == 0, r.output
    assert seen["objective"] == objective and seen.get("eta") == eta
    assert seen["max_power_w"] == get_profile("jetson-agx-orin-64gb").module_power_w[1]
    doc = json.loads(r.output)
    assert doc["objective"] == objective
    assert ("eta" in doc) == (objective == "mix")
    if objective == "mix":
        assert doc["eta"] == (0.5 if eta is None else eta)


def test_eta_without_mix_and_a_bad_objective_are_refused():
    r = _tune("--eta", "0.3")
    assert r.exit_code == 2 and r.output.startswith(
        "error: --eta: got 0.3; expected --objective mix"
    )
    r = _tune("--objective", "fast")
    assert r.exit_code == 2 and "--objective: got 'fast'" in r.output
    r = _tune("--objective", "mix", "--eta", "1.5")
    assert r.exit_code == 2 and "--eta: got 1.5" in r.output
