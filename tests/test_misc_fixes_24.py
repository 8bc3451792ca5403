"""misc-fixes 24: CLI errors that name the flag the user typed rather than the Python field.
(Its RAPL sampling tests are in tests/energy/test_rapl_sampling.py.)"""

from __future__ import annotations

import re

import pytest

# -- 2. CLI errors name the flag the user typed, not the Python field -------------------------

SMALL = ["-m", "llama3.1-8b", "--gpus", "8"]


def _options(command: str) -> set[str]:
    """Every option string of ``hwtune COMMAND`` (what its --help lists)."""
    import typer

    from hwtune.cli.main import app

    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize(
    ("args", "flag", "words"),
    [
        # dp = 8: 12 sequences are not whole micro-batches of 1 on every data-parallel rank
        (["estimate", *SMALL, "--global-batch", "12"], "--global-batch", ("12",)),
        (["estimate", *SMALL, "--global-batch", "0"], "--global-batch", ("0",)),  # pydantic
        (["estimate", *SMALL, "--micro-batch", "0"], "--micro-batch", ("0",)),  # pydantic
        # no --global-batch: dp*micro-batch = 1 sequence, under DualPipe's 2*pp micro-batches;
        # the flag that fixes it is named
        (
            ["estimate", "--gpus", "2", "--pp", "2", "--schedule", "dualpipe"],
            "--global-batch",
            ("DualPipe",),
        ),
        (["plan", *SMALL, "--global-batch", "-3"], "--global-batch", ("-3",)),
        (["plan", *SMALL, "--global-batch-tokens", "0"], "--global-batch-tokens", ("0",)),
        (
            ["plan", *SMALL, "--seq", "4096", "--global-batch-tokens", "1000"],
            "--global-batch-tokens",
            ("1000", "--seq"),
        ),
        (
            ["plan", *SMALL, "--objective", "cost", "--price-per-gpu-hour", "-1"],
            "--price-per-gpu-hour",
            ("-1",),
        ),
        (["scale", "--gpus", "8,16", "--global-batch", "0"], "--global-batch", ("0",)),
        (
            ["scale", "-m", "llama3.1-8b,llama3.1-70b", "--fixed-gpus", "8", "--global-batch", "0"],
            "--global-batch",
            ("0",),
        ),
        # 0.3 x 8 GPUs = 2.4 sequences: not whole
        (
            ["scale", "--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "0.3"],
            "--seqs-per-gpu",
            ("0.3", "2.4"),
        ),
        (
            ["scale", "--gpus", "8,16", "--policy", "weak", "--seqs-per-gpu", "nan"],
            "--seqs-per-gpu",
            ("nan",),
        ),
    ],
)
def test_batch_errors_name_the_flag_and_every_flag_named_exists(rejects, args, flag, words):
    line = rejects(args, flag, *words)
    assert f"error: {flag}: got" in line  # the flag is the field, not a Python name
    assert "global_batch" not in line.split(";")[0] and "seqs_per_gpu" not in line
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line))
    assert named <= _options(args[0]), named - _options(args[0])


def test_the_python_api_keeps_its_field_names():
    from hwtune.errors import HwtuneInputError
    from hwtune.train.scaling import scale_sweep

    for kw, field in ((dict(policy="strong", global_batch=0), "global_batch"),
                      (dict(policy="weak", seqs_per_gpu=0.3), "seqs_per_gpu")):  # fmt: skip
        with pytest.raises(HwtuneInputError) as ei:
            scale_sweep(None, None, [8, 16], 4096, **kw)
        assert ei.value.field == field


def test_flag_error_renames_only_the_fields_it_is_given():
    from hwtune.cli.parsing import flag_error
    from hwtune.errors import HwtuneInputError

    flags = {"global_batch": "--global-batch"}
    for field in ("global_batch", "strategy.global_batch"):
        e = flag_error(HwtuneInputError(field, 7, "x"), flags)
        assert (e.field, e.value, e.expected) == ("--global-batch", 7, "x")
    other = HwtuneInputError("cluster.global_batch", 7, "x")  # not a strategy field: kept
    assert flag_error(other, flags) is other
    tp = HwtuneInputError("tp", 3, "x")
    assert flag_error(tp, flags) is tp


def test_compile_and_energy_step_name_the_batch_flag_the_user_typed(rejects, tmp_path):
    """`compile` and `energy step` named the strategy's field (``global_batch``) for a batch set
    by ``--global-batch``; a batch from a strategy file keeps the file's key (after its name)."""
    msg = rejects(["compile", "--gpus", "8", "--dp", "8", "--global-batch", "3"],
                  "--global-batch", "3")  # fmt: skip
    assert msg.startswith("error: --global-batch: got 3;")
    msg = rejects(["energy", "step", "--gpus", "8", "--global-batch", "3"], "--global-batch", "3")
    assert msg.startswith("error: --global-batch: got 3;")
    f = tmp_path / "s.yaml"
    f.write_text("mesh: {dp: 8}\nglobal_batch: 3\n")
    msg = rejects(["compile", "--gpus", "8", "--strategy", str(f)], "global_batch", "3")
    assert msg.startswith("error: s.yaml.global_batch: got 3;")


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["estimate", "--seq", "0"], "--seq"), (["estimate", "--moe-imbalance", "0.5"], "--moe-imbalance"),
     (["estimate", "--sequence-parallel", "--tp", "1"], "--sequence-parallel"),
     (["estimate", "--overlap-a2a"], "--overlap-a2a"), (["estimate", "--gpus", "0"], "--gpus"),
     (["energy", "step", "--gpus", "0"], "--gpus"), (["plan", "--seq", "0"], "--seq"),
     (["scale", "--seq", "0", "--gpus", "8,16"], "--seq"),
     (["size", "--micro-batch", "0"], "--micro-batch"), (["size", "--precision", "FP8"], "--precision"),
     (["study", "--models", "llama3.1-8b", "--scales", "8", "--seq", "0", "-o", "unused"], "--seq"),
     (["estimate", "--precision", "FP8"], "--precision"), (["plan", "--precision", "FP8"], "--precision"),
     (["scale", "--precision", "FP8", "--gpus", "8,16"], "--precision")],
)  # fmt: skip
def test_estimate_plan_and_scale_name_the_flags_of_the_strategy_fields(args, flag, rejects):
    """The strategy's and cluster's checks name their fields (strategy.seq, cluster.n_gpus,
    overlap_moe_a2a); the command names the flag that set them."""
    msg = rejects(args, flag)
    assert msg.startswith(f"error: {flag}: got ")
