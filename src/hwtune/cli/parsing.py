"""Parsing of option values shared by the commands."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NoReturn

import typer

from hwtune.errors import HwtuneInputError

SOFTWARE_FLAGS = {
    "attention_kernel": "--attention-kernel", "fused_elementwise": "--eager",
    "loss_kernel": "--loss", "moe_dispatch": "--moe-dispatch", "fp8_recipe": "--fp8-recipe",
    "zero3_gather": "--zero3-gather", "grad_accumulation": "--grad-accumulation",
    "pipeline_split": "--pipeline-split", "mtp_layers": "--mtp-layers", "fp8_saved_inputs": "--framework",
    "recompute_modules": "--recompute-modules", "fp8_param_gather": "--fp8-param-gather",
}  # fmt: skip
"""The `Strategy` fields of the kernel options that `estimate` and `plan` share
(`hwtune.cli.software`)."""


def positive_ints(text: str, field: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``; anything else names ``field`` in the error."""
    try:
        out = [int(x) for x in text.split(",")]  # an empty item ("8,,32") is an error too
    except ValueError:
        out = []
    if not out or any(x <= 0 for x in out):
        raise HwtuneInputError(field, text, "positive integers separated by commas, e.g. 8,16,32")
    return out


def listed(text: str, field: str, what: str = "names", sep: str = ",") -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; an empty item (``"a,,b"``, ``"a,"``) is a typo, not an item
    to skip, and names ``field`` in the error."""
    out = [x.strip() for x in text.split(sep)]
    if not all(out):
        word = "comma" if sep == "," else f"'{sep}'"
        raise HwtuneInputError(field, text, f"one or more {what}, {word}-separated, without "
                               "empty items")  # fmt: skip
    return out


ESTIMATE_FLAGS = {
    "model": "--model", "gpu": "--gpu", "cluster": "--cluster", "framework": "--framework",
    "global_batch": "--global-batch", "micro_batch": "--micro-batch", "seq": "--seq",
    "dp": "--dp", "tp": "--tp", "pp": "--pp", "ep": "--ep", "cp": "--cp", "vpp": "--vpp",
    "tp*pp*cp": "--tp x --pp x --cp", "pp*vpp": "--pp x --vpp", "zero": "--zero",
    "schedule": "--schedule", "recompute": "--recompute", "optimizer": "--optimizer",
    "offload_optimizer": "--offload", "moe_imbalance": "--moe-imbalance",
    "offload_activation_layers": "--offload-activations",
    "sequence_parallel": "--sequence-parallel", "overlap_moe_a2a": "--overlap-a2a",
    "overlap_tp_comm": "--overlap-tp", "overlap_grad_reduce": "--overlap-grad",
    "overlap_p2p_comm": "--overlap-p2p", "flash_attention": "--flash", "precision": "--precision",
    "cluster.n_gpus": "--gpus", **SOFTWARE_FLAGS,
}  # fmt: skip
"""The strategy's (and the cluster's GPU count's) fields that the flags of `estimate` spell
otherwise (`energy step` passes the few of them that it has). The kernel fields are named by
their flags even with ``--framework``: a preset's values are all valid, so only a typed value
can be rejected. ``cluster.n_gpus`` only where no ``--cluster`` file gave it."""

CLUSTER_FLAGS = {
    "cluster.n_gpus": "--gpus", "cluster.gpus_per_node": "--gpus-per-node",
    "cluster.nic_gbps_per_gpu": "--nic-gbps", "cluster.scaleup_domain": "--scaleup-domain",
}  # fmt: skip
"""The cluster's fields that `estimate`, `plan` and `scale` build from their flags
(`hwtune.hardware.cluster.make_cluster`); not where a ``--cluster`` file gave them, whose
errors name the file's keys (``c.yaml.nic_gbps_per_gpu``)."""

_PY_NAME = re.compile(r"(?<![\w.-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w-])")


def flag_error(e: HwtuneInputError, flags: Mapping[str, str]) -> HwtuneInputError:
    """``e`` naming the flag the user typed instead of the Python field that a check below the
    CLI named (the strategy's, the search's and the scaling sweep's checks name the API's
    fields): ``flags`` maps a field, bare or under pydantic's ``strategy.`` prefix, to the
    command's option that set it (``global_batch`` -> ``--global-batch``); a field of two words
    (``topology nic``) maps by its first. The expected text is put in the same terms: a Python
    name in it (``micro_batch``, ``gpus_per_node``; the part after the last dot of a key)
    becomes its flag, and "a value greater than 0" for an integer option "a positive integer"
    (the wording of the search's checks). Each command passes only its own options; any other
    error comes back unchanged."""
    field = e.field.removeprefix("strategy.")
    flag = flags.get(field)
    if flag is None and " " in field:
        head, _, rest = field.partition(" ")
        flag = f"{flags[head]} {rest}" if head in flags else None
    names = {k.rpartition(".")[2]: v for k, v in flags.items()}
    expected = _PY_NAME.sub(lambda m: names.get(m.group(1), m.group(1)), e.expected)
    if flag is not None and expected == "a value greater than 0" and type(e.value) is int:
        expected = "a positive integer"
    if flag is None and expected == e.expected:
        return e
    return HwtuneInputError(flag or e.field, e.value, expected)


def fail(e: Exception) -> NoReturn:
    """Print ``e`` as one line on stderr and exit with code 2: the one way every command ends on
    bad input. A field that is the Python spelling of one of the running command's options
    (``max_num_seqs``, ``prefix-groups``; checks below the CLI name the API's fields) is shown
    as that option (``--max-num-seqs``), so that the user reads the flag they typed (the
    expected text is left as the check wrote it). Written plainly: a rich console would wrap a
    long message over several lines."""
    if isinstance(e, HwtuneInputError):
        e = _as_option(e)
    sys.stderr.write(f"error: {e}\n")
    raise typer.Exit(2)


def _as_option(e: HwtuneInputError) -> HwtuneInputError:
    # the running command's context, from typer's click (recent typers carry their own copy)
    click = typer.Context.__mro__[1].__module__.rpartition(".")[0]
    ctx = importlib.import_module(click + ".globals").get_current_context(silent=True)
    if ctx is None or e.field.startswith("-"):
        return e
    opt = "--" + e.field.replace("_", "-")
    if any(opt in p.opts for p in ctx.command.params):
        return HwtuneInputError(opt, e.value, e.expected)
    return e


def cluster_only(**options: object) -> None:
    """With --cluster, the options it replaces must be left out (they would be ignored)."""
    for name, value in options.items():
        if value is not None:
            raise HwtuneInputError(
                "--" + name.replace("_", "-"), value, "no value with --cluster (the file sets it)"
            )


def output_path(path: Path, field: str, suffixes: Iterable[str] = ()) -> Path:
    """``path`` if a file can be written there: not a directory, its parent an existing writable
    directory, and (with ``suffixes``, lower-case without the dot) its suffix one of them.
    Checked before any work, so that a bad path fails at once instead of after a simulation."""
    allowed = sorted(suffixes)
    if allowed and path.suffix.lower().lstrip(".") not in allowed:
        raise HwtuneInputError(field, str(path), f"a file name ending in .{', .'.join(allowed)}")
    if path.is_dir():
        raise HwtuneInputError(field, str(path), "a file path, not a directory")
    parent = path.parent
    if not parent.is_dir():
        raise HwtuneInputError(field, str(path), f"a path in an existing directory ({parent})")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise HwtuneInputError(field, str(path), "a writable file (permission denied)")
    return path


def plot_suffixes() -> frozenset[str]:
    """The file suffixes matplotlib can save a figure as (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return frozenset(FigureCanvasBase.get_supported_filetypes())
