"""How far `hwtune serve` has been from published serving measurements.

Every simulation carries the TTFT and TPOT errors that `benchmarks/serve_validation.py`
measured on the published Hopper rows (`../shared/validation/serving_measured.csv`: vLLM,
SGLang and TensorRT-LLM at fixed concurrency) for its mode, aggregated or disaggregated, so a
reader sees the simulator's track record next to its numbers. The error differs a lot between
situations (dense models at 1-128 clients are within ~14%, MoE models at 1-8 clients are predicted
at ~0.7x of the measured TTFT; VALIDATION.md, 2026-11-30), so a simulation also gets the record of
the published runs nearest to it:
same mode, same model kind (dense or MoE) and the same band of closed-loop clients
(`CONCURRENCY_BANDS`), when that cell holds at least `MIN_CELL_ROWS` runs. The figures live in
``accuracy.json`` beside this module, written by that benchmark's ``--write-accuracy`` from a
full tier-1 run; nothing here is fitted or applied to a simulation.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

ACCURACY_FILE = Path(__file__).with_name("accuracy.json")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
CONCURRENCY_BANDS: tuple[tuple[int, int | None], ...] = ((1, 8), (9, 32), (33, 128), (129, None))
"""Bands of closed-loop clients the record is split by (inclusive; None: no upper end). Where
the published TTFT errors change regime: a lone prefill plus per-request engine costs at the low
end, queueing behind other prompts in between, front-end and admission limits at the top."""
VALIDATION_TARGETS: dict[str, float] = {"ttft": 0.15, "tpot": 0.12}
"""The accuracy the serving simulator is held to against the published runs: median relative
error of TTFT at most 15% and of TPOT at most 12% (issue 4, "Accuracy and speed"; for context,
KernelSight-LM reports 15.4% / 12.8% across GPU generations, REFERENCES.md)."""


def relative_errors(pred: Any, meas: Any) -> np.ndarray:
    """|predicted - measured| / measured, element-wise: the error every table of
    `benchmarks/serve_validation.py` and this module's record is made of."""
    m = np.asarray(meas, float)
    return np.abs(np.asarray(pred, float) - m) / m


MIN_CELL_ROWS = 10
"""Fewest published runs a (mode, model kind, band) cell needs before it is shown on its own."""


def concurrency_band(clients: int) -> str:
    """The `CONCURRENCY_BANDS` label (``"1-8"``, ..., ``">128"``) that holds ``clients`` >= 1."""
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    for lo, hi in CONCURRENCY_BANDS:
        if hi is None:
            return f">{lo - 1}"
        if clients <= hi:
            return f"{lo}-{hi}"
    raise AssertionError("the last band is open-ended")


def clients_per_replica(mode: str, concurrency: int, replicas: int) -> int | None:
    """A closed loop's clients per replica, which picks the nearest published cell (open loops
    and traces: None, the mode's record)."""
    return -(-concurrency // replicas) if mode == "closed" else None


def cell_key(mode: str, moe: bool, clients: int) -> str:
    """Key of a cell of ``accuracy.json``'s ``cells``: ``mode/kind/band``."""
    return f"{mode}/{'moe' if moe else 'dense'}/{concurrency_band(clients)}"


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        return json.loads(ACCURACY_FILE.read_text())
    except FileNotFoundError:  # a source tree before the benchmark first wrote it
        return {}


def accuracy_for(
    disaggregated: bool,
    moe: bool | None = None,
    clients: int | None = None,
    engine: str | None = None,
) -> dict[str, Any] | None:
    """The measured error of the published rows of this mode: ``mode``, ``rows``, ``backends``
    and, for ``ttft`` and ``tpot``, ``median_abs_error``, ``p90_abs_error`` and
    ``pred_over_meas`` (the median ratio: below 1 = predicted faster), plus ``source``; None
    without such rows. With ``moe`` (the model is a mixture of experts) and ``clients`` (a closed
    loop's concurrency) it adds ``nearest``: the same fields over the published runs of the
    same mode, model kind and `concurrency_band`, with ``kind`` and ``band``, when that cell has
    at least `MIN_CELL_ROWS` runs (open loops and traces have no band: mode only). With
    ``engine`` ("vllm", "sglang" or "trtllm") it adds ``engine``: the same fields over that
    engine's published runs of the mode, with ``name``, when there are any."""
    table = _table()
    mode = "disagg" if disaggregated else "agg"
    entry = table.get("modes", {}).get(mode)
    if not entry:
        return None
    out = {"mode": mode, **entry, "source": table.get("source", "")}
    if moe is not None and clients is not None:
        cell = table.get("cells", {}).get(cell_key(mode, moe, clients))
        if cell and cell["rows"] >= MIN_CELL_ROWS:
            out["nearest"] = {"kind": "moe" if moe else "dense",
                              "band": concurrency_band(clients), **cell}  # fmt: skip
    if engine is not None:
        rec = table.get("engines", {}).get(mode, {}).get(engine)
        if rec and rec["rows"]:
            out["engine"] = {"name": engine, **rec}
    return out


LIKELY_COVERAGE = 0.8
"""Share of the published runs of a deployment outside the record that `likely_range`'s band is
meant to hold. ``measured_over_predicted_80`` is a cell's 10th-90th percentile of
measured/predicted (80% of its own runs), both ends moved out by ``likely_widening`` (one factor
per metric in `ACCURACY_FILE`), the factor that makes the band hold this share of the runs of
an engine and model left out of it (`benchmarks/serve_validation.py`'s ``band_widening``,
measured by its ``--band-coverage``)."""


def likely_range(acc: dict[str, Any], ttft_s: float, tpot_s: float) -> dict[str, Any] | None:
    """Where the measured mean TTFT and TPOT of a simulated run are likely to fall, from the track
    record: the predicted means ``ttft_s`` and ``tpot_s`` times the band of measured/predicted
    of the nearest cell (`accuracy_for`'s ``nearest``), else of the mode
    (``measured_over_predicted_80``: its runs' 10th-90th percentile, widened until it held
    `LIKELY_COVERAGE` of the runs of engines and models left out of it). An empirical band of
    past errors, not a confidence interval of this simulation: ``ttft_mean_s`` and ``tpot_mean_s``
    as [low, high] seconds, ``factors`` (the two bands), ``runs`` and ``basis`` (which
    record). None when the record has no band (a table written before it had them)."""
    rec, basis = acc, f"{acc['mode']} runs"
    near = acc.get("nearest")
    if near:
        kind = "MoE" if near["kind"] == "moe" else "dense"
        rec, basis = near, f"{acc['mode']} runs of {kind} models at {near['band']} clients"
    bands = {m: rec[m].get("measured_over_predicted_80") for m in ("ttft", "tpot")}
    if not all(bands.values()):
        return None
    return {
        "coverage": LIKELY_COVERAGE,
        "runs": rec["rows"],
        "basis": basis,
        "factors": bands,
        "ttft_mean_s": [ttft_s * f for f in bands["ttft"]],
        "tpot_mean_s": [tpot_s * f for f in bands["tpot"]],
    }


def likely_margin(
    disaggregated: bool, moe: bool | None = None, clients: int | None = None
) -> dict[str, Any] | None:
    """The upper ends of `likely_range`'s band for a deployment (mode, model kind, clients per
    replica as `accuracy_for` takes them): ``ttft`` and ``tpot``, the factors by which measured
    means have exceeded the prediction in all but the top tenth of published runs (widened to
    hold `LIKELY_COVERAGE` of deployments left out), with ``runs`` and ``basis``. What `hwtune
    serve plan --margin likely` multiplies the simulated latencies by before checking the SLOs.
    None without a record (or one without bands)."""
    acc = accuracy_for(disaggregated, moe, clients)
    likely = likely_range(acc, 1.0, 1.0) if acc else None
    if likely is None:
        return None
    f = likely["factors"]
    return {"ttft": f["ttft"][1], "tpot": f["tpot"][1], "runs": likely["runs"],
            "basis": likely["basis"]}  # fmt: skip


def likely_line(likely: dict[str, Any]) -> str:
    """One readable line of `likely_range`'s result."""
    t, p = likely["factors"]["ttft"], likely["factors"]["tpot"]

    def ms(v: list[float]) -> str:
        if not all(math.isfinite(x) for x in v):  # TPOT of one-token outputs: undefined
            return "n/a"
        if v[1] >= 1.0:  # seconds from 1 s: "305-2.27e+03 ms" reads badly
            return f"{v[0]:.3g}-{v[1]:.3g} s"
        return f"{v[0] * 1e3:.3g}-{v[1] * 1e3:.3g} ms"

    return (
        f"likely measured: mean TTFT {ms(likely['ttft_mean_s'])}, mean TPOT "
        f"{ms(likely['tpot_mean_s'])} ({t[0]:.2f}-{t[1]:.2f}x the predicted TTFT and "
        f"{p[0]:.2f}-{p[1]:.2f}x the TPOT, from the {likely['runs']} published {likely['basis']}; "
        f"such a band held {likely['coverage']:.0%} of the runs of engines and models left out "
        f"of it)"
    )


RECORD_ARCHITECTURE = "hopper"
"""The architecture of every published run the record was measured on (H100 and H200)."""


def record_scope(tier: int, architecture: str) -> str | None:
    """What the record does not cover in a prediction of ``tier`` on a device of
    ``architecture``, as a clause to print beside it; None when it covers it. The record holds
    tier-1 (spec-sheet) predictions of Hopper runs: a tier-2 prediction is priced from another
    source (its own errors on the published rows are in VALIDATION.md, "Tier 2 on the published
    rows"), and another architecture was never measured against it."""
    gaps = []
    if tier != 1:
        gaps.append(f"this prediction is tier {tier}")
    if architecture != RECORD_ARCHITECTURE:
        gaps.append(f"this device is {architecture or 'of no named architecture'}")
    if not gaps:
        return None
    return f"the record is of tier-1 predictions on Hopper; {' and '.join(gaps)}"


def accuracy_line(acc: dict[str, Any]) -> str:
    """One readable line of `accuracy_for`'s result."""
    kind = "disaggregated" if acc["mode"] == "disagg" else "aggregated"
    t, p = acc["ttft"], acc["tpot"]
    engines = ", ".join(ENGINE_NAMES.get(b, b) for b in acc.get("backends", []))
    own = acc.get("engine")
    scope = f"; {acc['scope']}" if acc.get("scope") else ""
    mine = ""
    if own:
        mine = (
            f"; on {ENGINE_NAMES.get(own['name'], own['name'])}'s {own['rows']}: TTFT "
            f"{own['ttft']['median_abs_error']:.0%} ({own['ttft']['pred_over_meas']:.2f}x), "
            f"TPOT {own['tpot']['median_abs_error']:.0%}"
        )
    near = acc.get("nearest")
    if near:
        nt, np_ = near["ttft"], near["tpot"]
        models = "MoE" if near["kind"] == "moe" else "dense"
        return (
            f"track record (tier 1): on the {near['rows']} published {kind} Hopper runs of "
            f"{models} models at {near['band']} clients, TTFT median error "
            f"{nt['median_abs_error']:.0%} (predicted {nt['pred_over_meas']:.2f}x measured), "
            f"TPOT {np_['median_abs_error']:.0%} ({np_['pred_over_meas']:.2f}x); over all "
            f"{acc['rows']} ({engines}): TTFT {t['median_abs_error']:.0%}, TPOT "
            f"{p['median_abs_error']:.0%}{mine} (VALIDATION.md){scope}"
        )
    return (
        f"track record (tier 1): on {acc['rows']} published {kind} Hopper runs ({engines}), "
        f"TTFT median error {t['median_abs_error']:.0%} (predicted "
        f"{t['pred_over_meas']:.2f}x measured), TPOT {p['median_abs_error']:.0%} "
        f"({p['pred_over_meas']:.2f}x){mine} (VALIDATION.md){scope}"
    )


__all__ = [
    "ACCURACY_FILE",
    "CONCURRENCY_BANDS",
    "MIN_CELL_ROWS",
    "LIKELY_COVERAGE",
    "RECORD_ARCHITECTURE",
    "accuracy_for",
    "accuracy_line",
    "cell_key",
    "clients_per_replica",
    "concurrency_band",
    "likely_line",
    "likely_margin",
    "likely_range",
    "record_scope",
]
