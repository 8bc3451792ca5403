"""`hwtune accel`: --json prints one document; bad input exits 2 with one line, no traceback."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hwtune.cli.accel import app

runner = CliRunner()


def test_evaluate_json():
    r = runner.invoke(
        app, ["evaluate", "--workload", "resnet18", "--image", "64", "--fusion", "3", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    for k in ("latency_s", "energy_j", "energy_by_component_j", "peak_bytes", "dram_traffic_bytes"):
        assert k in doc
    assert set(doc["peak_bytes"]) == {"local", "shared", "dram"}


def test_checkpoint_and_graph_and_list():
    r = runner.invoke(
        app, ["checkpoint", "--limit-mib", "2", "--workload", "resnet18", "--image", "64", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["checkpointing"]["kept_bytes"] >= 0
    r = runner.invoke(app, ["graph", "--workload", "gpt2", "--seq", "16", "--json"])
    assert json.loads(r.stdout)["weight_bytes"] == 2 * 124_439_808
    assert runner.invoke(app, ["list"]).exit_code == 0


def test_bad_input_exits_2():
    for args in (["evaluate", "--arch", "nosuch"], ["evaluate", "--workload", "vgg"], ["evaluate", "--fusion", "0"],
                 ["checkpoint", "--limit-mib", "-1"]):  # fmt: skip
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
