"""`hwtune accel ...`: bad input exits 2 with one line naming the field and the value, without
a traceback; size options a workload does not take are errors, not ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

SEARCH = ["accel", "search", "--evaluations", "10", "--pop-size", "5"]


def test_fusion_above_the_largest_group(rejects):
    rejects(["accel", "evaluate", "--fusion", "1000"], "fusion", "1000")


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_activation_limits(value: str, rejects):
    rejects(["accel", "evaluate", "--activation-limit-mib", value], "activation-limit-mib", value)
    rejects(["accel", "checkpoint", "--limit-mib", value], "limit-mib", value)


@pytest.mark.parametrize(("args", "field"), [(["-w", "resnet18", "--seq", "512"], "seq"),
                                             (["-w", "gpt2", "--seq", "16", "--image", "64"], "image")])  # fmt: skip
def test_size_option_the_workload_does_not_take(args: list[str], field: str, rejects):
    rejects(["accel", "graph", *args], field)


def test_size_option_with_a_graph_file(tmp_path: Path, rejects):
    f = tmp_path / "g.yaml"
    f.write_text("input: {name: x, shape: [8, 16]}\nlayers:\n  - {name: r, op: relu, input: x}\n")
    assert CliRunner().invoke(app, ["accel", "graph", "-w", str(f)]).exit_code == 0
    rejects(["accel", "graph", "-w", str(f), "--batch", "4"], "batch", "4")


def test_search_population_named(rejects):
    rejects([*SEARCH[:4], "--pop-size", "0"], "pop-size", "0")


@pytest.mark.parametrize(("opt", "value"), [("--area-budget-mm2", "-1"), ("--area-budget-mm2", "0"),
                                            ("--power-budget-w", "nan")])  # fmt: skip
def test_search_budgets(opt: str, value: str, rejects):
    rejects([*SEARCH, opt, value], opt.lstrip("-"), value)


@pytest.mark.parametrize(("opt", "name"), [("--plot", "missing/p.png"), ("--plot", "p.txt"),
                                           ("--table", "missing/t.csv")])  # fmt: skip
def test_search_output_paths_checked_first(tmp_path: Path, opt: str, name: str, rejects):
    rejects([*SEARCH, opt, str(tmp_path / name)], opt.lstrip("-"), name)


def test_search_table_with_no_pareto_points_is_not_skipped_silently(tmp_path: Path, rejects):
    out = tmp_path / "t.csv"
    rejects([*SEARCH, "--power-budget-w", "1e-6", "--table", str(out)], "table", "Pareto")


def test_non_utf8_accelerator_and_graph(tmp_path: Path, rejects):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"\xff\xfe\x00bad")
    rejects(["accel", "evaluate", "-a", str(f)], "accelerator", "UTF-8")
    rejects(["accel", "graph", "-w", str(f)], "workload", "UTF-8")


GRAPHS = {
    "bad-int": ("  - {name: c, op: conv, input: x, out_channels: abc, kernel: 3}", "out_channels"),
    "float": ("  - {name: c, op: conv, input: x, out_channels: 3.7, kernel: 3}", "3.7"),
    "missing": ("  - {name: c, op: conv, input: x, kernel: 3}", "layers[0].out_channels"),
    "linear": ("  - {name: l, op: linear, input: x}", "out_features"),
}


@pytest.mark.parametrize("case", list(GRAPHS))
def test_malformed_graph_layers(tmp_path: Path, case: str, rejects):
    layer, word = GRAPHS[case]
    f = tmp_path / "g.yaml"
    f.write_text(f"input: {{name: x, shape: [8, 3, 32, 32]}}\nlayers:\n{layer}\n")
    rejects(["accel", "graph", "-w", str(f)], word)


@pytest.mark.parametrize(("text", "word"), [
    ("input: {shape: [8, 3]}\nlayers:\n  - {name: r, op: relu, input: x}\n", "g.yaml.input"),
    ("input: {name: x, shape: [8, 3]}\nlayers: []\n", "g.yaml.layers"),
    ("elem_bytes: x\ninput: {name: x, shape: [8, 3]}\nlayers:\n  - {name: r, op: relu, input: x}\n",
     "g.yaml.elem_bytes"),
])  # fmt: skip
def test_malformed_graph_document(tmp_path: Path, text: str, word: str, rejects):
    f = tmp_path / "g.yaml"
    f.write_text(text)
    rejects(["accel", "graph", "-w", str(f)], word)


@pytest.mark.parametrize(
    "text",
    [
        "input: {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"
        "  - {name: c, op: conv, input: x, out_channels: 4, kernel: 3, kernel: 5}\n",
        "input: {name: x, shape: [1, 3, 8, 8]}\ninput: {name: y, shape: [1, 3, 8, 8]}\nlayers:\n"
        "  - {name: r, op: relu, input: y}\n",
    ],
)
def test_graph_key_given_twice(tmp_path: Path, text: str, rejects):
    # yaml.safe_load kept the last of the two silently (a kernel of 5, not 3)
    f = tmp_path / "g.yaml"
    f.write_text(text)
    rejects(["accel", "graph", "-w", str(f)], "--workload", "g.yaml", "each key once",
            "given twice")  # fmt: skip


def test_search_workers_beyond_the_cpus(rejects):
    import os

    n = str(100 * (os.cpu_count() or 1))
    rejects([*SEARCH, "--workers", n], "workers", n)
