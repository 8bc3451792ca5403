"""How far `hwtune serve` has been from published serving measurements.

Every simulation carries the TTFT and TPOT errors that `benchmarks/serve_validation.py`
measured on the published Hopper rows (`../shared/validation/serving_measured.csv`: vLLM,
SGLang and TensorRT-LLM at fixed concurrency) for its mode, aggregated or disaggregated, so a
reader sees the simulator's track record next to its numbers. The figures live in
``accuracy.json`` beside this module, written by that benchmark's ``--write-accuracy`` from a
full tier-1 run; nothing here is fitted or applied to a simulation.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

ACCURACY_FILE = Path(__file__).with_name("accuracy.json")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        return json.loads(ACCURACY_FILE.read_text())
    except FileNotFoundError:  # a source tree before the benchmark first wrote it
        return {}


def accuracy_for(disaggregated: bool) -> dict[str, Any] | None:
    """The measured error of the published rows of this mode: ``mode``, ``rows``, ``backends``
    and, for ``ttft`` and ``tpot``, ``median_abs_error``, ``p90_abs_error`` and
    ``pred_over_meas`` (the median ratio: below 1 = predicted faster), plus ``source``; None
    without such rows."""
    table = _table()
    mode = "disagg" if disaggregated else "agg"
    entry = table.get("modes", {}).get(mode)
    if not entry:
        return None
    return {"mode": mode, **entry, "source": table.get("source", "")}


def accuracy_line(acc: dict[str, Any]) -> str:
    """One readable line of `accuracy_for`'s result."""
    kind = "disaggregated" if acc["mode"] == "disagg" else "aggregated"
    t, p = acc["ttft"], acc["tpot"]
    engines = ", ".join(ENGINE_NAMES.get(b, b) for b in acc.get("backends", []))
    return (
        f"track record (tier 1): on {acc['rows']} published {kind} Hopper runs ({engines}), "
        f"TTFT median error {t['median_abs_error']:.0%} (predicted "
        f"{t['pred_over_meas']:.2f}x measured), TPOT {p['median_abs_error']:.0%} "
        f"({p['pred_over_meas']:.2f}x) (VALIDATION.md)"
    )


__all__ = ["ACCURACY_FILE", "accuracy_for", "accuracy_line"]
