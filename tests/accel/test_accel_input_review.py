"""Review of `hwtune accel` input handling: graph YAML sizes and shapes are refused with one line
naming `<file>.layers[i].<key>` (no traceback, nothing clamped, truncated or dropped); an
unreachable activation limit is printed as given with the least reachable; the search runs
exactly its evaluation budget and says when a budget admits no architecture."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.accel.architecture import load_accelerator
from hwtune.accel.graph_yaml import graph_from_yaml
from hwtune.accel.models import GPT2Config, gpt2
from hwtune.accel.search import search, smallest_area_mm2
from hwtune.accel.training import lower_training
from hwtune.cli.main import app

CNN = """name: tiny-cnn
elem_bytes: 2
input: {{name: image, shape: {shape}}}
layers:
  - {{name: c1, op: conv, input: image, out_channels: 16, kernel: {kernel}, stride: {stride}, padding: {padding}}}
  - {{name: r1, op: relu, input: c1}}
  - {{name: r1_flat, op: view, input: r1, shape: {view}}}
  - {{name: fc, op: linear, input: r1_flat, out_features: 10}}
"""
OK = {"shape": "[8, 3, 32, 32]", "kernel": 3, "stride": 1, "padding": 1, "view": "[8, 16384]"}


def _cnn(tmp_path: Path, **change: object) -> str:
    f = tmp_path / "g.yaml"
    f.write_text(CNN.format(**{**OK, **change}))
    return str(f)


def _graph(tmp_path: Path, text: str) -> str:
    f = tmp_path / "g.yaml"
    f.write_text(text)
    return str(f)


def test_the_reference_graph_still_loads(tmp_path: Path):
    g = graph_from_yaml(_cnn(tmp_path))
    assert [x.kind for x in g.layers] == ["conv", "relu", "linear", "loss"]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        # 1. was a ZeroDivisionError traceback from the output-size formula
        ({"stride": 0}, "g.yaml.layers[0].stride", ("got 0", "a positive integer")),
        # 2. was a ValueError traceback from int('a')
        ({"shape": '"abc"'}, "g.yaml.input.shape", ("'abc'", "list of positive integers")),
        # 3. were accepted
        ({"kernel": -3}, "g.yaml.layers[0].kernel", ("-3", "a positive integer")),
        ({"padding": -5}, "g.yaml.layers[0].padding", ("-5", "a non-negative integer")),
        ({"shape": "[8, 3.5, 32, 32]"}, "g.yaml.input.shape[1]", ("3.5", "a positive integer")),
        ({"view": "[8, 100]"}, "g.yaml.layers[2].shape", ("[8, 100]", "131072 elements")),
        ({"kernel": 100}, "g.yaml.layers[0].kernel", ("100", "padded by 1 (34x34)")),
    ],
)  # fmt: skip
def test_bad_conv_graph_sizes(tmp_path: Path, rejects, change: dict, field: str, words: tuple):
    path = _cnn(tmp_path, **change)
    for cmd in ("graph", "evaluate"):
        rejects(["accel", cmd, "-w", path], field, *words)


GRAPHS = {
    # 3. a window larger than the (padded) input
    "pool": ("input: {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"
             "  - {name: y, op: maxpool, input: x, shape: [1, 3, 100, 100]}\n",
             "g.yaml.layers[0].shape", ("[1, 3, 100, 100]", "at most 9x9", "8x8 input")),
    # 3. an elementwise add of [4, 8] and [8, 4] (evaluated to 0.000 ms / 0.000 mJ)
    "add": ("input: {name: x, shape: [4, 8]}\nlayers:\n"
            "  - {name: a, op: view, input: x, shape: [8, 4]}\n"
            "  - {name: y, op: add, input: [x, a]}\n",
            "g.yaml.layers[1].input", ("x is [4, 8], a is [8, 4]", "broadcasts")),
    # 4. was "expected integer sizes and list shapes (tuple index out of range)"
    "bn-rank": ("input: {name: x, shape: [4]}\nlayers:\n  - {name: y, op: batchnorm, input: x}\n",
                "g.yaml.layers[0].input", ("batchnorm", "rank 2 or more", "x has rank 1")),
    # nothing dropped: a key the op does not take, a second input to a one-input op
    "key": ("input: {name: x, shape: [4, 8]}\nlayers:\n"
            "  - {name: y, op: relu, input: x, kernel: 3}\n",
            "g.yaml.layers[0].kernel", ("no such key for relu",)),
    "inputs": ("input: {name: x, shape: [4, 8]}\nlayers:\n"
               "  - {name: y, op: linear, input: [x, x], out_features: 2}\n",
               "g.yaml.layers[0].input", ("1 tensor name for linear",)),
    "bias": ("input: {name: x, shape: [4, 8]}\nlayers:\n"
             "  - {name: y, op: linear, input: x, out_features: 2, bias: 'no'}\n",
             "g.yaml.layers[0].bias", ("'no'", "true or false")),
    "elementwise-shape": ("input: {name: x, shape: [4, 8]}\nlayers:\n"
                          "  - {name: y, op: relu, input: x, shape: [2, 8]}\n",
                          "g.yaml.layers[0].shape", ("[4, 8]", "keeps its input's shape")),
    "matmul-rank": ("input: {name: x, shape: [8]}\nlayers:\n"
                    "  - {name: y, op: matmul, input: [x, x]}\n",
                    "g.yaml.layers[0].input", ("rank 2 or more", "x has rank 1")),
    "groups-zero": ("input: {name: x, shape: [1, 4, 8, 8]}\nlayers:\n"
                    "  - {name: y, op: conv, input: x, out_channels: 4, kernel: 3, groups: 0}\n",
                    "g.yaml.layers[0].groups", ("got 0", "a positive integer")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(GRAPHS))
def test_bad_graphs(tmp_path: Path, rejects, case: str):
    text, field, words = GRAPHS[case]
    rejects(["accel", "graph", "-w", _graph(tmp_path, text)], field, *words)


def test_add_broadcasts_a_second_input_to_the_first(tmp_path: Path):
    g = graph_from_yaml(_graph(tmp_path, "input: {name: x, shape: [1, 4, 8]}\nlayers:\n"
                                         "  - {name: v, op: view, input: x, shape: [4, 8]}\n"
                                         "  - {name: y, op: relu, input: x}\n"
                                         "  - {name: s, op: add, input: [y, v]}\n"
                                         "  - {name: t, op: add, input: [s, y]}\n"))  # fmt: skip
    assert g.tensors["s"].shape == g.tensors["t"].shape == (1, 4, 8)


def test_pooling_within_the_window_rule_is_accepted(tmp_path: Path):
    g = graph_from_yaml(_graph(tmp_path, "input: {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"
                                         "  - {name: p, op: maxpool, input: x, shape: [1, 3, 4, 4]}\n"
                                         "  - {name: q, op: avgpool, input: p, shape: [1, 3, 1, 1]}\n"))  # fmt: skip
    assert g.tensors["q"].shape == (1, 3, 1, 1)


# ---- 5. an unreachable limit: exit 1, the limit as given and the least reachable --------------


@pytest.mark.parametrize(
    ("args", "given"),
    [(["checkpoint", "--limit-mib", "1"], "--limit-mib: 1 MiB cannot be met"),
     (["evaluate", "--activation-limit-mib", "0.001"],
      "--activation-limit-mib: 0.001 MiB cannot be met")],
)  # fmt: skip
def test_unreachable_limit_names_the_limit_as_given(args: list[str], given: str):
    r = CliRunner().invoke(app, ["accel", *args])
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output, r.output
    assert given in r.output and "0.00 MiB" not in r.output, r.output
    least = r.output.split("the least any checkpoint plan reaches is ")[1].split(" MiB")[0]
    # that figure is met (it is rounded up)
    opt = args[1]
    assert CliRunner().invoke(app, ["accel", args[0], opt, least]).exit_code == 0


# ---- 6. the search's evaluation budget and an area budget that admits nothing ----------------

GPT = gpt2(seq=16, config=GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab=128))
TEMPLATE = load_accelerator("edge-hetero")


def test_search_runs_exactly_its_evaluations():
    """40 evaluations with a population of 7 ran 42 (pymoo checks per generation)."""
    res = search(lower_training(GPT), TEMPLATE, evaluations=40, pop_size=7, seed=0)
    assert res.evaluations == 40
    args = ["accel", "search", "-w", "gpt2", "--seq", "16", "--evaluations", "40", "--pop-size",
            "7"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("gpt2") and ": 40 evaluations in" in r.output, r.output


def test_search_budget_that_divides_is_unchanged():
    a = search(lower_training(GPT), TEMPLATE, evaluations=12, pop_size=4, seed=1)
    assert a.evaluations == 12


def test_area_budget_below_the_smallest_architecture(rejects):
    """Exited 0 with an empty table and no message."""
    least = smallest_area_mm2(TEMPLATE)
    line = rejects(["accel", "search", "--area-budget-mm2", "0.001"], "area-budget-mm2", "0.001",
                   "smallest area in the search space")  # fmt: skip
    shown = float(line.split("at least ")[1].split(" mm2")[0])
    assert least <= shown < least + 0.001


def test_no_architecture_meets_the_power_budget_exits_1_with_one_line():
    args = ["accel", "search", "-w", "gpt2", "--seq", "16", "--evaluations", "8", "--pop-size",
            "4", "--power-budget-w", "1e-9"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output, r.output
    assert "none of the 8 architectures evaluated meets --power-budget-w 1e-09" in r.output
