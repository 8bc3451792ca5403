"""``hwtune estimate --megatron-args``: a Megatron-LM command line as the strategy to estimate.
Parsing only; the reading is `hwtune.train.launch.strategy_from_megatron`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hwtune.errors import HwtuneInputError
from hwtune.train.launch import MegatronJob, split_command, strategy_from_megatron

STRATEGY_OPTIONS = (
    "tp", "pp", "dp", "ep", "cp", "micro_batch", "global_batch", "seq", "vpp", "schedule",
    "recompute", "zero", "sequence_parallel", "precision", "optimizer", "offload", "overlap_tp",
    "overlap_a2a", "overlap_grad", "overlap_p2p", "flash", "fp8_recipe", "moe_dispatch",
)  # fmt: skip
"""`hwtune estimate` options that a Megatron-LM command line sets (refused beside it)."""


def read_megatron_args(text: str, ctx: Any) -> MegatronJob:
    """The job of ``--megatron-args`` (the command line, or ``@FILE`` holding it); any
    strategy option typed beside it is a one-line error (the command line sets it)."""
    for name in STRATEGY_OPTIONS:
        source = ctx.get_parameter_source(name)  # typer may bring its own click: by name
        if source is not None and source.name == "COMMANDLINE":
            opt = next(p for p in ctx.command.params if p.name == name)
            value = ctx.params[name]
            flag = opt.opts[0]
            if isinstance(value, bool):  # a switch: name the one typed
                flag = flag if value or not opt.secondary_opts else opt.secondary_opts[0]
                value = True
            raise HwtuneInputError(flag, value, "no value with --megatron-args (they set it)")
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise HwtuneInputError("--megatron-args", text, f"a readable text file ({e})") from None
    try:
        tokens = split_command(text)
    except ValueError as e:  # shlex: an unclosed quote
        raise HwtuneInputError("--megatron-args", text[:60], f"a command line ({e})") from None
    if not tokens:
        raise HwtuneInputError("--megatron-args", text, "a Megatron-LM command line")
    return strategy_from_megatron(tokens)


def job_gpus(job: MegatronJob, gpus: int | None) -> int | None:
    """The GPU count: ``torchrun``'s in the command line, else ``--gpus``; both must agree."""
    if job.n_gpus is not None and gpus is not None and gpus != job.n_gpus:
        raise HwtuneInputError(
            "--gpus", gpus, f"{job.n_gpus}, the torchrun --nnodes x --nproc-per-node of "
            "--megatron-args (or leave it out)",
        )  # fmt: skip
    return job.n_gpus if job.n_gpus is not None else gpus


def megatron_flags() -> dict[str, str]:
    """`Strategy` fields as the Megatron-LM option that set them, for errors found after
    reading (`hwtune.cli.parsing.flag_error`): ``--expert-model-parallel-size (in
    --megatron-args)``."""
    from hwtune.train.launch import MEGATRON_VALUES

    out = {f: f"{k} (in --megatron-args)" for k, f in MEGATRON_VALUES.items() if f[0] != "_"}
    out["vpp"] = "--num-virtual-stages-per-pipeline-rank (in --megatron-args)"
    out["sequence_parallel"] = "--sequence-parallel (in --megatron-args)"
    out["precision"] = "--bf16/--fp16/--fp8-format (in --megatron-args)"
    return out
