"""`hwtune estimate`: bad or contradictory options are one line naming the option (exit 2);
options that would change nothing are errors, not silently ignored; an out-of-memory strategy
is flagged at the top."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--nic-gbps", "0"], "--nic-gbps"),  # was replaced by the preset's 400
        (["--nic-gbps", "inf"], "--nic-gbps"),
        (["--gpus-per-node", "0"], "--gpus-per-node"),  # was replaced by 8
        (["--scaleup-domain", "0"], "--scaleup-domain"),  # was replaced by the preset's
        (["--moe-imbalance", "inf"], "--moe-imbalance"),
        (["--zero", "-1"], "--zero"),  # the internal "default" sentinel, not a stage
        (["--tp", "-1"], "--tp"),  # was named as a derived dp=-8
    ],
)
def test_bad_numbers_are_named(rejects, args, field):
    rejects(["estimate", *args], field)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--fp8-recipe", "current"], "--fp8-recipe"),  # bf16 training: no fp8 casts
        (["--schedule", "interleaved", "--vpp", "2"], "vpp"),  # pp=1: no pipeline
        (["--schedule", "dualpipe"], "schedule"),
        (["--moe-imbalance", "2"], "--moe-imbalance"),  # dense model: no experts
        (["--overlap-a2a"], "--overlap-a2a"),
        (["--moe-dispatch", "deepep"], "--moe-dispatch"),
    ],
)
def test_ignored_options_are_errors(rejects, args, field):
    rejects(["estimate", *args], field)


def test_options_that_cluster_replaces_are_errors(tmp_path, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 8\n")
    rejects(["estimate", "--cluster", str(f), "--gpus", "16"], "--gpus")
    rejects(["estimate", "--cluster", str(f), "--gpu", "a100"], "--gpu")
    rejects(["estimate", "--cluster", str(f), "--nic-gbps", "100"], "--nic-gbps")
    assert CliRunner().invoke(app, ["estimate", "--cluster", str(f)]).exit_code == 0


def test_moe_options_still_run_on_an_moe_model():
    r = CliRunner().invoke(app, ["estimate", "-m", "deepseek-v3", "--gpus", "64", "--ep", "8",
                                 "--moe-imbalance", "1.5", "--overlap-a2a", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["strategy"]["moe_imbalance"] == 1.5


def test_out_of_memory_is_flagged_at_the_top():
    r = CliRunner().invoke(app, ["estimate", "-m", "llama3.1-405b", "--gpus", "8"])
    assert r.exit_code == 0, r.output
    assert "OUT OF MEMORY" in r.output.splitlines()[1]
    fits = CliRunner().invoke(app, ["estimate"])
    assert "OUT OF MEMORY" not in fits.output
