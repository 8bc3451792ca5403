"""`hwtune compile`: --json prints one JSON document; trace and Gantt files; bad annotations
exit 2 with one line (the command is registered here on a test app; the lead registers it in
hwtune.cli.main)."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from hwtune.cli.compile import compile_cmd

app = typer.Typer()
app.command("compile")(compile_cmd)


@app.callback()
def _root() -> None:
    """test root"""


runner = CliRunner()


def test_json_trace_and_gantt(tmp_path):
    r = runner.invoke(app, ["compile", "--pp", "4", "--global-batch", "8", "--seq", "4096",
                            "--schedule", "zb-h1", "--trace", str(tmp_path / "t.json"),
                            "--gantt", str(tmp_path / "g.png"), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan"]["pp"] == 4 and doc["simulation"]["step_time_s"] > 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_yaml_strategy_and_orders(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("mesh: {pp: 2}\nglobal_batch: 4\nstages: [20, 12]\nschedule: {name: 1f1b}\n")
    r = runner.invoke(app, ["compile", "--strategy", str(p), "--orders"])
    assert r.exit_code == 0, r.output
    assert "0F0" in r.stdout and "simulated step time" in r.stdout


def test_bad_annotation_exits_2_with_one_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("mesh: {tp: 2}\nmodules:\n  - {match: layers.*.attention, tp: 3}\n")
    r = runner.invoke(app, ["compile", "--strategy", str(p)])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "modules[0] 'layers.*.attention'.tp: got 3" in lines[0]


def test_context_parallel_run_from_the_cli():
    """``--cp 2 --run``: the plan of llama3.1-8b with cp=2, and the tiny GPT trained with its
    sequences split over 2 gloo processes, equal to one process."""
    r = runner.invoke(app, ["compile", "--cp", "2", "--global-batch", "2", "--zero", "0",
                            "--run", "--steps", "2", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["strategy"]["mesh"]["cp"] == 2 and doc["n_gpus"] == 2
    assert doc["run"]["world"] == 2 and len(doc["run"]["losses"]) == 2
    # within 16 float32 ulps of the loss (attention over gathered K/V sums in another order)
    assert doc["run"]["max_abs_diff"] <= 16 * 2.0**-23 * max(map(abs, doc["run"]["reference"]))


def test_context_parallel_the_runtime_cannot_run_exits_2_with_one_line():
    r = runner.invoke(app, ["compile", "--cp", "2", "--tp", "2", "--pp", "2", "--zero", "1",
                            "--global-batch", "8", "--run"])  # fmt: skip
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "--cp: got 2; expected tp = 1, or pp = 1, with context" in lines[0]


def test_zero_gpus_exits_2_instead_of_the_mesh_default():
    r = runner.invoke(app, ["compile", "--gpus", "0"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "--gpus: got 0" in lines[0]
