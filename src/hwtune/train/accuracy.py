"""How far `hwtune estimate` has been from published runs of the same kind of software.

Every estimate carries the throughput error that `benchmarks/validate_training.py` measured on
the published runs (`../shared/validation/training_published.jsonl`) whose software runs the
same kernels as the estimate's strategy, so a reader sees the tool's track record next to the
number. The figures live in ``accuracy.json`` beside this module, written by that benchmark
(and checked against a fresh run by ``tests/train/test_accuracy.py``); nothing here is fitted
or applied to the estimate.

Software classes (from the strategy's kernel fields, `hwtune.train.frameworks`):

- ``megatron``: fused attention at the device's best kernel and fused elementwise ops
  (Megatron-Core, NeMo, Megatron-Bridge with Transformer Engine).
- ``pytorch``: FlashAttention-2-class attention or eager elementwise ops (torchtitan,
  llm-foundry, Hugging Face).
- ``pre-flash``: the attention scores materialized (``flash_attention`` off): the 2019-2022
  Megatron-LM and DeepSpeed runs.

The shared rows ran on V100, A100 and H100 GPUs (`COVERED_ARCHITECTURES`). An architecture with a
record of its own (``by_architecture`` in ``accuracy.json``: Megatron-Bridge's Blackwell rows,
written by `benchmarks/validate_training_blackwell.py`; the AMD MI350X and MI355X MLPerf rows,
written by `benchmarks/validate_training_mlperf.py`) shows that record instead; any other
architecture shows the shared record with a ``scope`` saying no run of it was compared.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from hwtune.train.strategy import Strategy

ACCURACY_FILE = Path(__file__).with_name("accuracy.json")

CLASSES: dict[str, str] = {
    "megatron": "Megatron-class software (Megatron-Core, NeMo, Megatron-Bridge)",
    "pytorch": "PyTorch-native software (torchtitan, llm-foundry)",
    "pre-flash": "2019-2022 Megatron-LM and DeepSpeed code (attention scores materialized)",
}


COVERED_ARCHITECTURES: tuple[str, ...] = ("volta", "ampere", "hopper")
"""The architectures of the GPUs of the shared validation rows (V100, A100, H100)."""

ARCHITECTURE_RECORDS: dict[str, str] = {
    "blackwell": "Megatron-Bridge on Blackwell (B200, B300, GB200, GB300)",
    "cdna4": "NeMo on AMD CDNA4 (MI350X, MI355X: MLPerf Training v5.1 Llama 3.1 8B)",
}
"""Architecture families with a record of their own, and what that record covers."""


def record_family(architecture: str) -> str:
    """The record family of a device architecture (Blackwell Ultra counts as Blackwell)."""
    return "blackwell" if architecture.startswith("blackwell") else architecture


def software_class(st: Strategy) -> str:
    """The class of software whose published runs `st`'s kernels resemble (see module doc)."""
    if not st.flash_attention:
        return "pre-flash"
    if st.attention_kernel == "best" and st.fused_elementwise:
        return "megatron"
    return "pytorch"


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        return json.loads(ACCURACY_FILE.read_text())
    except FileNotFoundError:  # a source tree before the benchmark first ran
        return {}


def accuracy_for(st: Strategy, architecture: str | None = None) -> dict[str, Any] | None:
    """The measured throughput error on published runs of `st`'s software class: ``class``,
    ``description``, ``rows``, ``median_abs_error``, ``p90_abs_error``, ``signed_median``
    (positive: predicted faster than measured) and ``source``; None when no row of the class
    was expressible. With the device's ``architecture``: its own record where it has one
    (key ``architecture`` names it), else the shared one with a ``scope`` when none of the
    shared rows ran on it."""
    table = _table()
    key = software_class(st)
    if architecture is not None:
        family = record_family(architecture)
        own = table.get("by_architecture", {}).get(family, {})
        entry = own.get("classes", {}).get(key)
        if entry:
            return {"class": key, "description": ARCHITECTURE_RECORDS[family], **entry,
                    "source": own.get("source", ""), "architecture": family}  # fmt: skip
    entry = table.get("classes", {}).get(key)
    if not entry:
        return None
    out = {"class": key, "description": CLASSES[key], **entry, "source": table.get("source", "")}
    if architecture is not None and record_family(architecture) not in COVERED_ARCHITECTURES:
        out["scope"] = f"measured on V100, A100 and H100 runs; none on {architecture}"
    return out


def accuracy_line(acc: dict[str, Any]) -> str:
    """One readable line of `accuracy_for`'s result."""
    bias = acc["signed_median"]
    lean = "faster" if bias > 0 else "slower"
    scope = f"; {acc['scope']}" if acc.get("scope") else ""
    return (
        f"track record: on {acc['rows']} published runs of {acc['description']}, throughput "
        f"median error {acc['median_abs_error']:.1%} (p90 {acc['p90_abs_error']:.0%}), "
        f"predicted {abs(bias):.1%} {lean} than measured at the median (VALIDATION.md){scope}"
    )


__all__ = [
    "ACCURACY_FILE",
    "ARCHITECTURE_RECORDS",
    "CLASSES",
    "COVERED_ARCHITECTURES",
    "accuracy_for",
    "accuracy_line",
    "record_family",
    "software_class",
]
