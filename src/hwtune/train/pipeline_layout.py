"""How the layers split over pipeline chunks (`Strategy.pipeline_split`), including
Megatron-Core's custom layouts (``--pipeline-model-parallel-layout``).

A split is one of:

- ``layers``: even, the remainder to the first chunks;
- ``layers+embedding+loss``: Megatron-Core's ``--account-for-embedding-in-pipeline-split
  --account-for-loss-in-pipeline-split``, the embedding and the loss counting as one layer each
  (arguments.py:962-998 at d98e8a64, which asserts the slots divide over pp x vpp);
- a layout string in Megatron-Core's grammar (``pipeline_parallel_layer_layout.py``
  ``parse_str_to_list`` at d98e8a64): ``E`` the embedding, ``t`` a transformer layer, ``m`` a
  multi-token-prediction layer, ``L`` the loss, ``|`` between chunks in model order,
  ``(...)*n`` and ``x*n`` for repeats, commas cosmetic. ``"Et|(tt|)*30mL"`` is Megatron-Bridge's
  DeepSeek-V3 H100 layout (``scripts/performance``, v0.1.0rc3 to v0.3.0): 32 chunks, the first
  holding the embedding and one layer, 30 of two layers, the last the MTP layer and the loss.
  Chunk c goes to pipeline rank ``c % pp``, as in Megatron's interleaved assignment, so the
  chunk count sets the virtual stages per rank.

The layout checks are Megatron-Core's ``validate_layer_layout``: the embedding first and the loss
last, once each, as many ``t`` as the model has layers, as many ``m`` as `Strategy.mtp_layers`,
after every ``t``, all in one chunk of its rank's last virtual stage. Without a layout,
Megatron-Core builds the multi-token-prediction layers on the last stage; the estimator's
internal key for that is the named split with a ``+mtpN`` suffix (`split_key`).
"""

from __future__ import annotations

import functools
import re

from hwtune.errors import HwtuneInputError
from hwtune.model.spec import MAX_LAYERS

SPLITS: tuple[str, ...] = ("layers", "layers+embedding+loss")
"""The named splits; any other value is read as a layout."""

LAYOUT_SYMBOLS = {"E": "the embedding", "t": "a transformer layer", "m": "an MTP layer",
                  "L": "the loss"}  # fmt: skip

_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_REPEAT = re.compile(r"(.)\*(\d+)")


_MTP_SUFFIX = "+mtp"

MAX_LAYOUT_SYMBOLS = 10 * MAX_LAYERS
"""The most symbols a layout may unroll to: ten times the layers a model file may hold
(`hwtune.model.spec.MAX_LAYERS`), so a typo'd repeat count is refused instead of filling
memory."""


def _named(split: str) -> tuple[str, int]:
    """A named split and the MTP layers its key carries (`split_key`)."""
    base, sep, n = split.partition(_MTP_SUFFIX)
    return (base, int(n)) if sep and base in SPLITS and n.isdigit() else (split, 0)


def is_layout(split: str) -> bool:
    """Whether ``split`` is a layout string rather than a named split (or its `split_key`)."""
    return _named(split)[0] not in SPLITS


def split_key(split: str, mtp_layers: int) -> str:
    """The split the estimator prices: a layout places its own ``m``; a named split with
    multi-token prediction gets the ``+mtpN`` suffix, the layers on the last chunk, where
    Megatron-Core builds them without a layout (``MultiTokenPredictionBlock`` on the last
    pipeline stage)."""
    return split if mtp_layers == 0 or is_layout(split) else f"{split}{_MTP_SUFFIX}{mtp_layers}"


def chunk_mtp(split: str, chunks: int) -> list[int]:
    """Multi-token-prediction layers of each chunk in model order (`split_key`)."""
    if is_layout(split):
        parsed = parse_layout(split)
        if chunks == 1:
            return [sum(c.count("m") for c in parsed)]
        return [c.count("m") for c in parsed]
    return [0] * (chunks - 1) + [_named(split)[1]]


@functools.lru_cache(maxsize=256)
def parse_layout(text: str) -> tuple[str, ...]:
    """The chunks of a layout in model order, each a string of its symbols (``(..)*n`` groups
    unrolled first, then ``x*n``, as Megatron-Core does); a one-line error on a symbol outside
    ``E t m L``."""

    def unroll(g: re.Match[str]) -> str:
        if len(g.group(1)) * int(g.group(2)) > MAX_LAYOUT_SYMBOLS:
            raise HwtuneInputError("pipeline_split", text, f"a layout of at most "
                                   f"{MAX_LAYOUT_SYMBOLS:,} symbols unrolled ({g.group(0)!r} "
                                   "repeats past it)")  # fmt: skip
        return g.group(1) * int(g.group(2))

    s = _GROUP.sub(unroll, text.replace(",", ""))
    s = _REPEAT.sub(unroll, s)
    if len(s) > MAX_LAYOUT_SYMBOLS:
        raise HwtuneInputError("pipeline_split", text, f"a layout of at most "
                               f"{MAX_LAYOUT_SYMBOLS:,} symbols unrolled")  # fmt: skip
    chunks = tuple(s.split("|"))
    bad = sorted(set("".join(chunks)) - set(LAYOUT_SYMBOLS))
    if bad or not text.strip():
        what = f"{''.join(bad)!r}" if bad else "an empty layout"
        raise HwtuneInputError(
            "pipeline_split", text, "layers, layers+embedding+loss or a Megatron-Core layout of "
            f"E, t, m, L split by '|' with (..)*n and x*n repeats (not {what})",
        )  # fmt: skip
    return chunks


def split_slots(n_layers: int, split: str) -> int:
    """The pipeline slots ``n_layers`` fill under a named split (the embedding and the loss
    count as one layer each under ``layers+embedding+loss``)."""
    return n_layers + 2 if split == "layers+embedding+loss" else n_layers


def split_error(split: str, n_layers: int, pp: int, v: int, mtp_layers: int = 0) -> str | None:
    """What is wrong with ``split`` for ``n_layers`` and ``mtp_layers`` over ``pp`` ranks of
    ``v`` chunks each, as the expected value of a one-line error; None if Megatron-Core builds
    it."""
    if not is_layout(split):
        split = _named(split)[0]
        slots = split_slots(n_layers, split)
        if split != "layers" and pp > 1 and slots % (pp * v):
            return (f"layers unless n_layers + 2 (= {slots}) is divisible by pp x vpp "
                    f"(= {pp * v}), as Megatron-Core requires")  # fmt: skip
        return None
    chunks = parse_layout(split)
    flat = "".join(chunks)
    if len(chunks) != pp * v:
        return (f"a layout of pp x vpp = {pp * v} chunks (it has {len(chunks)}; Megatron-Core "
                "takes the virtual stages from the chunk count)")  # fmt: skip
    if not flat.startswith("E") or flat.count("E") != 1:
        return "a layout with the embedding (E) once, first"
    if not flat.endswith("L") or flat.count("L") != 1:
        return "a layout with the loss (L) once, last"
    if flat.count("t") != n_layers:
        return f"a layout of the model's {n_layers} transformer layers (it has {flat.count('t')})"
    if flat.count("m") != mtp_layers:
        return (f"a layout with as many m as the multi-token-prediction layers (mtp_layers = "
                f"{mtp_layers}; it has {flat.count('m')})")  # fmt: skip
    if mtp_layers:
        where = [c for c, ch in enumerate(chunks) if "m" in ch]
        if "t" in flat[flat.index("m") :]:
            return "a layout with the m layers after every transformer layer"
        if len(where) > 1 or where[0] < (v - 1) * pp:
            return ("a layout with all m in one chunk of its rank's last virtual stage "
                    "(Megatron-Core's restriction)")  # fmt: skip
    return None


def chunk_layers(split: str, n_layers: int, chunks: int) -> list[int]:
    """Transformer layers of each of the ``chunks`` chunks in model order. ``layers``: even, the
    remainder to the first chunks; ``layers+embedding+loss``: the first and last chunk build one
    layer fewer (``get_num_layers_to_build`` / ``get_transformer_layer_offset`` of
    ``transformer_block.py`` / ``transformer_layer.py``); a layout: its ``t`` per chunk. One
    chunk (no pipeline) holds every layer whatever the split."""
    if chunks == 1:
        return [n_layers]
    if is_layout(split):
        return [c.count("t") for c in parse_layout(split)]
    split = _named(split)[0]
    if split == "layers+embedding+loss":
        per = split_slots(n_layers, split) // chunks
        sizes = [per] * chunks
        sizes[0] -= 1
        sizes[-1] -= 1
        return sizes
    base, extra = divmod(n_layers, chunks)
    return [base + (1 if c < extra else 0) for c in range(chunks)]


__all__ = [
    "LAYOUT_SYMBOLS",
    "SPLITS",
    "chunk_layers",
    "chunk_mtp",
    "split_key",
    "is_layout",
    "parse_layout",
    "split_error",
    "split_slots",
]
