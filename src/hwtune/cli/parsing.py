"""Parsing of option values shared by the commands."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from hwtune.errors import HwtuneInputError


def positive_ints(text: str, field: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``; anything else names ``field`` in the error."""
    try:
        out = [int(x) for x in text.split(",")]  # an empty item ("8,,32") is an error too
    except ValueError:
        out = []
    if not out or any(x <= 0 for x in out):
        raise HwtuneInputError(field, text, "positive integers separated by commas, e.g. 8,16,32")
    return out


ESTIMATE_FLAGS = {
    "global_batch": "--global-batch", "micro_batch": "--micro-batch", "seq": "--seq",
    "vpp": "--vpp", "moe_imbalance": "--moe-imbalance", "sequence_parallel": "--sequence-parallel",
    "overlap_moe_a2a": "--overlap-a2a", "fp8_recipe": "--fp8-recipe", "moe_dispatch": "--moe-dispatch",
    "precision": "--precision", "cluster.n_gpus": "--gpus",
}  # fmt: skip
"""The strategy's (and the cluster's GPU count's) fields that the flags of `estimate` and
`energy step` spell otherwise. Not ``attention_kernel``, which a ``--framework`` preset also
sets; ``cluster.n_gpus`` only where no ``--cluster`` file gave it."""


def flag_error(e: HwtuneInputError, flags: Mapping[str, str]) -> HwtuneInputError:
    """``e`` naming the flag the user typed instead of the Python field that a check below the
    CLI named (the strategy's, the search's and the scaling sweep's checks name the API's
    fields): ``flags`` maps a field, bare or under pydantic's ``strategy.`` prefix, to the
    command's option that set it (``global_batch`` -> ``--global-batch``). Each command passes
    only its own options; any other error comes back unchanged."""
    flag = flags.get(e.field.removeprefix("strategy."))
    return e if flag is None else HwtuneInputError(flag, e.value, e.expected)


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
