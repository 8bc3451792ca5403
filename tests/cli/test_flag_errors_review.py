"""Bad input to the training commands (`estimate`, `plan`, `scale`, `size`, `study`) is named as
the user typed it: the option (``--nic-gbps``, ``--micro-batch``) or the file's key
(``c.yaml.n_gpus``), never a Python field (``cluster.nic_gbps_per_gpu``,
``strategy.attention_kernel``), with what was expected in the same terms; an option the three
commands share gets the same line from each."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import expected_from_pydantic

# a Python name: a dotted field (strategy.tp, cluster.n_gpus) or a snake_case identifier
PYTHON_NAME = re.compile(r"\b(strategy|cluster)\.|\b[a-z0-9]+_[a-z0-9_]+\b")


def _user_terms(rejects, args: list[str], field: str, *words: str) -> str:
    line = rejects(args, field, *words)
    assert not PYTHON_NAME.search(line), line
    return line


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        # the cluster built from flags: named "cluster.gpus_per_node" etc.
        (["--gpus-per-node", "0"], "--gpus-per-node", ("got 0", "a positive integer")),
        (["--nic-gbps", "-5"], "--nic-gbps", ("-5", "greater than 0")),
        (["--scaleup-domain", "3", "--gpus", "16"], "--scaleup-domain",
         ("got 3", "a divisor or multiple of --gpus-per-node (= 8)")),
        (["--gpus", "12"], "--gpus", ("got 12", "a multiple of --gpus-per-node (= 8)")),
        (["--gpus", "16", "--gpus-per-node", "3"], "--gpus", ("--gpus-per-node (= 3)",)),
        # "a multiple of micro_batch*dp = 3*8 = 24"
        (["--micro-batch", "3", "--global-batch", "8"], "--global-batch",
         ("got 8", "a multiple of --micro-batch x dp (= 3 x 8 = 24)")),
        (["--global-batch", "12"], "--global-batch", ("--micro-batch x dp (= 1 x 8 = 8)",)),
        # the strategy's fields: "strategy.tp", "ep", "strategy.schedule", ...
        (["--tp", "0"], "--tp", ("got 0", "a positive integer")),
        (["--tp", "3"], "--tp x --pp x --cp", ("got 3", "a divisor of the 8 GPUs")),
        (["--pp", "64", "--gpus", "64"], "--pp x --vpp", ("got 64", "the 32 layers")),
        (["--dp", "2", "--gpus", "8"], "--dp x --tp x --pp x --cp", ("got 2", "8")),
        (["-m", "deepseek-v3", "--gpus", "64", "--ep", "3"], "--ep", ("256 experts",)),
        (["-m", "deepseek-v3", "--gpus", "64", "--ep", "128"], "--ep",
         ("got 128", "a divisor of tp x cp x dp (= 64)")),
        (["--cp", "2", "--seq", "4097"], "--cp", ("4097",)),
        (["--pp", "3", "--schedule", "dualpipe", "--gpus", "24"], "--pp", ("even",)),
        (["--pp", "2", "--schedule", "dualpipe"], "--global-batch", ("2 x pp (= 4)",)),
        (["--pp", "2", "--schedule", "interleaved", "--vpp", "2", "--global-batch", "12"],
         "--global-batch", ("divisible by pp (= 2)",)),
        (["--schedule", "nope"], "--schedule", ("'nope'", "one of gpipe, 1f1b,")),
        (["--recompute", "nope"], "--recompute", ("one of none, selective",)),
        (["--optimizer", "nope"], "--optimizer", ("one of adam,",)),
        (["--precision", "fp32", "--optimizer", "sgd"], "--optimizer", ("'sgd'",)),
        (["--zero", "4"], "--zero", ("got 4", "0, 1, 2 or 3")),
        (["--moe-dispatch", "nope"], "--moe-dispatch", ("one of alltoall, deepep",)),
        # the kernel options, also beside a --framework preset that sets the same fields
        (["--attention-kernel", "nope"], "--attention-kernel", ("'nope'", "one of best, fa2")),
        (["--framework", "torchtitan", "--attention-kernel", "fa3"], "--attention-kernel",
         ("'fa3'",)),
        (["--loss", "nope"], "--loss", ("one of fused, te, flash, pytorch",)),
        (["--zero3-gather", "nope"], "--zero3-gather", ("one of layer, module, parameter",)),
        (["--grad-accumulation", "nope"], "--grad-accumulation", ("one of fused, fp32-copy",)),
        # catalog names and files: "model", "gpu", "framework", "cluster"
        (["-m", "nope"], "--model", ("'nope'",)),
        (["--gpu", "nope"], "--gpu", ("'nope'",)),
        (["--framework", "nope"], "--framework", ("one of megatron",)),
        (["--cluster", "/nonexistent-dir/c.yaml"], "--cluster", ("a readable file",)),
    ],
)  # fmt: skip
def test_estimate_names_the_option(rejects, args, field, words):
    _user_terms(rejects, ["estimate", *args], field, *words)


def test_a_cluster_file_keeps_its_keys(tmp_path, rejects):
    # the file's key names the field and the expectation; no flag the user did not type
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 12\n")
    line = rejects(["estimate", "--cluster", str(f)], "c.yaml.n_gpus", "gpus_per_node (= 8)")
    assert "--gpus-per-node" not in line
    f.write_text("device: h100\nn_gpus: 8\nnic_gbps_per_gpu: -1\n")
    line = rejects(["plan", "--cluster", str(f)], "c.yaml.nic_gbps_per_gpu", "got -1")
    assert "--nic-gbps" not in line


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--what-if", "nic=0"], "--what-if nic", ("got 0.0", "greater than 0")),
        # was "--what-if domain.n_gpus: got 64": the GPU count, not the domain typed
        (["--what-if", "domain=3"], "--what-if domain", ("got 3;", "a divisor of the 64 GPUs")),
        (["--what-if", "domain=0,8"], "--what-if domain", ("got 0.0", "positive whole")),
        (["--what-if", "oversubscription=0.5"], "--what-if oversubscription: got 0.5", ()),
        (["--what-if", "nic=100", "--target-efficiency", "2"], "--target-efficiency", ("2.0",)),
        (["--objective", "nope"], "--objective", ("one of throughput",)),
        # was "global batch: got 'both'"
        (["--global-batch", "8", "--global-batch-tokens", "8192"], "--global-batch-tokens",
         ("got 8192", "no value with --global-batch")),
        (["--top", "0"], "--top", ("a positive integer",)),
        (["--objective", "time-to-train", "--tokens", "-1"], "--tokens", ("-1.0",)),
        (["--fix", "tp=3"], "--fix/--max", ("'tp': 3", "a layout of 64 GPUs")),
        (["--zero3-gather", "nope"], "--zero3-gather", ("one of layer, module, parameter",)),
    ],
)  # fmt: skip
def test_plan_names_the_option(rejects, args, field, words):
    _user_terms(rejects, ["plan", *args], field, *words)


def test_plan_fixed_micro_batch_that_divides_nothing_is_bad_input(rejects):
    # was exit 1 "no strategy fits ...: the closest (-) needs 0.0 GiB more per GPU": no
    # candidate at all is a constraint that cannot be met, not a memory shortfall
    line = rejects(["plan", "--fix", "micro_batch=3"], "--fix/--max", "'micro_batch': 3", "512")
    assert "GiB" not in line


def test_plan_rejects_moe_dispatch_on_a_dense_model_as_estimate_does(rejects):
    # plan searched the dense model and ignored --moe-dispatch deepep
    rejects(["plan", "-m", "llama3.1-8b", "--moe-dispatch", "deepep"], "--moe-dispatch", "dense")


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--policy", "nope"], "--policy", ("'nope'",)),
        (["--global-batch", "0"], "--global-batch", ("a positive integer",)),
        (["--policy", "weak", "--seqs-per-gpu", "-1"], "--seqs-per-gpu", ("a positive finite",)),
        (["-m", "llama3.1-8b,llama3.1-70b", "--fixed-gpus", "12"], "--fixed-gpus",
         ("got 12", "--gpus-per-node (= 8)")),
        (["--gpus-per-node", "0"], "--gpus-per-node", ("a positive integer",)),
    ],
)  # fmt: skip
def test_scale_names_the_option(rejects, args, field, words):
    _user_terms(rejects, ["scale", *args], field, *words)


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["-m", "nope"], "--model", ()),
        (["--gpu", "nope"], "--gpu", ()),
        (["--target", "0"], "--target", ("'0'",)),
        (["--target", "7B", "--tolerance", "2"], "--tolerance", ("2.0", "(0, 0.5)")),
    ],
)
def test_size_names_the_option(rejects, args, field, words):
    _user_terms(rejects, ["size", *args], field, *words)


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        # was "study grid: 'an empty axis'"; an empty value is refused before any command
        (["--models", ""], "--models", ("a non-empty value",)),
        (["--models", ","], "--models", ("without empty items",)),
        (["--models", "nope"], "--models", ("'nope'",)),
        (["--gpus", "nope"], "--gpus", ("'nope'",)),
        # was "cluster.n_gpus: got 8; expected a multiple of gpus_per_node=3"
        (["--topologies", "domain=3"], "--scales", ("got 8", "GPUs per node (= 3)", "domain=3")),
        (["--scales", "12"], "--scales", ("got 12", "GPUs per node (= 8)")),
        (["--workers", "0"], "--workers", ("got 0",)),
    ],
)  # fmt: skip
def test_study_names_the_option(tmp_path, rejects, args, field, words):
    _user_terms(rejects, ["study", "-o", str(tmp_path), "--scales", "8", *args], field, *words)


def test_study_output_that_is_a_file_names_the_option(tmp_path, rejects):
    f = tmp_path / "f.txt"
    f.write_text("")
    rejects(["study", "-o", str(f)], "--output", "a directory")


@pytest.mark.parametrize(
    "args",
    [
        ["--gpus-per-node", "0"],
        ["--nic-gbps", "0"],
        ["--scaleup-domain", "3", "--gpus", "16"],
        ["--gpus", "12"],
        ["--seq", "0"],
        ["--global-batch", "0"],
        ["--precision", "nope"],
        ["-m", "nope"],
        ["--gpu", "nope"],
    ],
)
def test_shared_options_get_one_wording_in_estimate_plan_and_scale(rejects, args):
    lines = {cmd: rejects([cmd, *args], args[0]) for cmd in ("estimate", "plan", "scale")}
    assert len(set(lines.values())) == 1, lines


@pytest.mark.parametrize(
    "args",
    [
        ["--attention-kernel", "nope"],
        ["--fp8-recipe", "current"],  # bf16 training: no fp8 casts to scale
        ["-m", "llama3.1-8b", "--moe-dispatch", "deepep"],
        ["--framework", "nope"],
    ],
)
def test_kernel_options_get_one_wording_in_estimate_and_plan(rejects, args):
    flag = next(a for a in args if a.startswith("--") and a != "-m")
    lines = {cmd: rejects([cmd, *args], flag) for cmd in ("estimate", "plan")}
    assert len(set(lines.values())) == 1, lines


def test_usage_still_runs():
    # the same options with good values still run (the mapping only renames errors)
    r = CliRunner().invoke(app, ["estimate", "--gpus", "16", "--gpus-per-node", "8",
                                 "--nic-gbps", "200", "--framework", "torchtitan", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ("Input should be 'best' or 'fa2'", "one of best, fa2"),
        ("Input should be 'a', 'b' or 'c'", "one of a, b, c"),
        ("Input should be 'only'", "'only'"),  # one choice: not a list
        ("Input should be greater than 0", "a value greater than 0"),
    ],
)
def test_a_literals_choices_read_as_hwtunes_own_checks(msg, expected):
    assert expected_from_pydantic(msg) == expected


def test_a_zero3_gather_that_changes_nothing_is_refused(rejects):
    # --zero3-gather sets the ZeRO-3 gather unit; at ZeRO stage 1 it was silently ignored
    rejects(["estimate", "--zero3-gather", "module", "--zero", "1"], "--zero3-gather",
            "'module'", "stage 1")  # fmt: skip
    rejects(["estimate", "--zero3-gather", "parameter", "--pp", "2"], "--zero3-gather", "stage 1")
    # a preset's unit is no typed flag: DeepSpeed with pipeline parallelism (stage 1) still runs
    r = CliRunner().invoke(app, ["estimate", "--framework", "huggingface-deepspeed", "--pp", "2",
                                 "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
